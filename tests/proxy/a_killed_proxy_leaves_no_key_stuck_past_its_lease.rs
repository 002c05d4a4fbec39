//! The proxy is SIGKILLed while 12 payments are at the upstream (6 with their effect done, 6
//! before it), and restarted on the same store (`--db` on the same directory; PostgreSQL on the
//! same schema). Retrying clients get 409 while the dead proxy's leases (`lease=2s`) last, then
//! the stored `upstream-outcome-unknown` (502), replayed from then on: no key is stuck past its
//! lease, and none is forwarded a second time, so no payment runs twice (each runs once at the
//! upstream, which goes on without the proxy, if the proxy had forwarded it before it died).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::harness::{pause, routes_file, Got, Proxy, Req, Store, Upstream};

const N: usize = 12;

fn payment(i: usize) -> Req {
    let req = Req::post("/payments")
        .key(&format!("k{i}"))
        .json(&format!("acct-{i}"), i as u64 + 1);
    if i.is_multiple_of(2) {
        req.header("X-Delay-After-Ms", "3000")
    } else {
        req.header("X-Delay-Ms", "3000")
    }
}

fn show(answers: &[Got]) -> String {
    answers.iter().map(|a| format!("  {a}\n")).collect()
}

fn check(dir: &std::path::Path, store: Store) {
    let upstream = Upstream::start(dir);
    let routes = routes_file(dir, "routes", "POST,PATCH /** soft lease=2s\n");
    let args = ["--routes", routes.to_str().unwrap()];
    let mut proxy = Proxy::start(&upstream.url(), &store, &args);
    let at = proxy.addr;

    std::thread::scope(|s| {
        let clients: Vec<_> = (0..N)
            .map(|i| s.spawn(move || payment(i).try_send(at)))
            .collect();
        upstream.wait_for_effects(N / 2, "the payments with no delay before their effect");
        proxy.kill();
        for (i, c) in clients.into_iter().enumerate() {
            if let Ok(got) = c.join().unwrap() {
                println!("k{i} was answered before the kill: {got}");
            }
        }
    });

    let proxy = Proxy::start(&upstream.url(), &store, &args);
    let at = proxy.addr;
    let logs: Vec<Mutex<Vec<Got>>> = (0..N).map(|_| Mutex::new(Vec::new())).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    std::thread::scope(|s| {
        for (i, log) in logs.iter().enumerate() {
            s.spawn(move || loop {
                let got = payment(i).send(at);
                let conflict = got.status == 409;
                log.lock().unwrap().push(got);
                if !conflict {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "k{i} still 409 60 s after the restart (lease 2s):\n{}",
                    show(&log.lock().unwrap())
                );
                pause(100);
            });
        }
    });
    // The upstream finishes what it was sent (a request the proxy had not forwarded yet when it
    // was killed never runs: so wait for all N, but at most 20 s).
    let settled = Instant::now() + Duration::from_secs(20);
    while upstream.effects().len() < N && Instant::now() < settled {
        pause(50);
    }
    let effects = upstream.effects();
    println!("{} of {N} payments reached the upstream", effects.len());
    for (i, log) in logs.iter().enumerate() {
        let mut answers = log.lock().unwrap();
        answers.push(payment(i).send(at));
        let ran = effects
            .iter()
            .filter(|e| e.what == format!("acct-{i}"))
            .count();
        assert!(
            ran <= 1,
            "k{i} ran {ran} times at the upstream; its answers after the restart:\n{}",
            show(&answers)
        );
        let last = answers.len() - 1;
        let outcome = &answers[last - 1];
        assert_eq!(
            (outcome.status, outcome.problem().as_deref()),
            (502, Some("upstream-outcome-unknown")),
            "k{i}: the dead proxy's request has an unknown outcome:\n{}",
            show(&answers)
        );
        for a in &answers[..last - 1] {
            assert_eq!(
                a.status,
                409,
                "k{i}: only 409 before the outcome:\n{}",
                show(&answers)
            );
            assert_eq!(a.code(), "idempotency-key-in-progress");
        }
        let replay = &answers[last];
        assert!(
            replay.status == 502 && replay.replayed() && replay.body == outcome.body,
            "k{i}: the unknown outcome is stored and replayed: {replay}"
        );
    }
    let conflicts: usize = logs
        .iter()
        .map(|l| l.lock().unwrap().iter().filter(|a| a.status == 409).count())
        .sum();
    println!("{conflicts} answers 409 before the dead proxy's leases ended");
    assert_eq!(
        upstream.effects().len(),
        effects.len(),
        "nothing ran after that"
    );
}

on_both_stores!();
