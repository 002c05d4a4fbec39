//! The upstream is SIGKILLed while 30 payments are inside it (20 with their effect done, waiting
//! to reply; 10 before their effect), then 10 more are sent while it is down, then it restarts on
//! the same port and the clients retry every payment. No payment runs twice; a key whose request
//! was cut off at the upstream keeps `upstream-outcome-unknown` (502) as its outcome, replayed to
//! every retry and never forwarded again (default `on-unknown=fail`); a key refused while the
//! upstream was down (502 `upstream-unreachable`) was released and runs once after the restart;
//! and every key ends answered, none stuck in 409 past its lease (`lease=5s`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::harness::{pause, routes_file, Got, Proxy, Req, Store, Upstream};

const CUT: usize = 30;
const WHILE_DOWN: usize = 10;

fn payment(i: usize) -> Req {
    let req = Req::post("/payments")
        .key(&format!("k{i}"))
        .json(&format!("acct-{i}"), i as u64 + 1);
    if i >= CUT {
        req
    } else if i % 3 == 2 {
        req.header("X-Delay-Ms", "2000")
    } else {
        req.header("X-Delay-After-Ms", "2000")
    }
}

fn show(answers: &[Got]) -> String {
    answers.iter().map(|a| format!("  {a}\n")).collect()
}

#[test]
fn upstream_killed_mid_run_never_runs_a_payment_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut upstream = Upstream::start(dir.path());
    let routes = routes_file(dir.path(), "routes", "POST,PATCH /** soft lease=5s\n");
    let proxy = Proxy::start(
        &upstream.url(),
        &Store::Db(dir.path().join("store")),
        &["--routes", routes.to_str().unwrap()],
    );
    let at = proxy.addr;
    let n = CUT + WHILE_DOWN;
    let logs: Vec<Mutex<Vec<Got>>> = (0..n).map(|_| Mutex::new(Vec::new())).collect();

    // 30 payments go in; once 20 effects are done, the upstream is killed under all of them.
    std::thread::scope(|s| {
        for (i, log) in logs.iter().enumerate().take(CUT) {
            s.spawn(move || {
                let got = payment(i).send(at);
                log.lock().unwrap().push(got);
            });
        }
        upstream.wait_for_effects(CUT * 2 / 3, "the payments sent before the kill");
        upstream.kill();
    });
    // While it is down: refused at the door, released.
    for (i, log) in logs.iter().enumerate().skip(CUT) {
        let got = payment(i).send(at);
        assert_eq!(got.status, 502, "k{i} while the upstream is down: {got}");
        assert_eq!(got.code(), "upstream-unreachable", "k{i}");
        log.lock().unwrap().push(got);
    }

    upstream.restart();
    let deadline = Instant::now() + Duration::from_secs(60);
    std::thread::scope(|s| {
        for (i, log) in logs.iter().enumerate() {
            s.spawn(move || loop {
                let got = payment(i).send(at);
                let again = got.status == 409
                    || (got.status == 502
                        && got.problem().as_deref() == Some("upstream-unreachable"));
                log.lock().unwrap().push(got);
                if !again {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "k{i} still not answered 60 s after the restart (lease 5s):\n{}",
                    show(&log.lock().unwrap())
                );
                pause(100);
            });
        }
    });
    // One more retry of every key: the outcome each ended with is stored.
    for (i, log) in logs.iter().enumerate() {
        let got = payment(i).send(at);
        log.lock().unwrap().push(got);
    }

    let effects = upstream.effects();
    let (mut paid, mut unknown, mut unknown_with_effect) = (0, 0, 0);
    for (i, log) in logs.iter().enumerate() {
        let answers = log.lock().unwrap();
        let ran: Vec<u64> = effects
            .iter()
            .filter(|e| e.what == format!("acct-{i}"))
            .map(|e| e.n)
            .collect();
        assert!(
            ran.len() <= 1,
            "k{i} ran {} times at the upstream (effects {ran:?}); its answers:\n{}",
            ran.len(),
            show(&answers)
        );
        // From the first final answer on (a 201 or a stored unknown outcome), every answer is it.
        let settled = answers.iter().position(|a| {
            a.status == 201
                || matches!(
                    a.problem().as_deref(),
                    Some("upstream-outcome-unknown" | "upstream-timeout")
                )
        });
        let Some(first) = settled else {
            panic!("k{i} never got a final answer:\n{}", show(&answers));
        };
        let outcome = &answers[first];
        for later in &answers[first + 1..] {
            assert!(
                later.status == outcome.status && later.body == outcome.body && later.replayed(),
                "k{i}: after {outcome}\na later answer is not its replay: {later}\nall:\n{}",
                show(&answers)
            );
        }
        if outcome.status == 201 {
            paid += 1;
            assert_eq!(
                ran.len(),
                1,
                "k{i} got 201: it ran once:\n{}",
                show(&answers)
            );
            assert_eq!(outcome.json()["id"].as_u64(), Some(ran[0]), "{outcome}");
        } else {
            assert_eq!(outcome.status, 502, "k{i}: {outcome}");
            assert!(
                i < CUT,
                "k{i} was sent while the upstream was down:\n{}",
                show(&answers)
            );
            unknown += 1;
            unknown_with_effect += ran.len();
        }
    }
    println!(
        "{paid} keys paid, {unknown} kept their unknown outcome ({unknown_with_effect} of them \
         with the effect done)"
    );
    assert!(
        unknown_with_effect > 0,
        "requests cut off after their effect keep the unknown outcome"
    );
}
