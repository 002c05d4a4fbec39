//! SIGTERM drains the proxy: it stops accepting connections, the requests already at the upstream
//! finish and get their answers (stored: after a restart on the same store their retries replay
//! them), an idle kept-alive connection does not hold it up, and the process exits 0 within
//! `--drain-timeout` (plus a margin for a loaded machine). A request still at the upstream when
//! the drain times out is given up without running twice: after a restart its key answers
//! `upstream-outcome-unknown` (502, stored and replayed; a 409 first, until its lease ends, if the
//! proxy could not store it before exiting), never a second forward.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::harness::{pause, read_response, routes_file, Proxy, Req, Store, Upstream};

fn pay(i: usize) -> Req {
    Req::post("/payments")
        .key(&format!("k{i}"))
        .json(&format!("acct-{i}"), 1)
        .header("X-Delay-After-Ms", "3000")
}

#[test]
fn sigterm_lets_in_flight_requests_finish() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let store = Store::Db(dir.path().join("store"));
    let mut proxy = Proxy::start(&upstream.url(), &store, &["--drain-timeout", "10s"]);
    let at = proxy.addr;

    // An idle kept-alive connection: one request answered, then nothing.
    let mut idle = TcpStream::connect(at).expect("connect to the proxy");
    idle.write_all(format!("GET /_idemdb/health HTTP/1.1\r\nHost: {at}\r\n\r\n").as_bytes())
        .unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (status, ..) = read_response(&mut BufReader::new(&idle)).expect("the health answer");
    assert_eq!(status, 200);

    let answers = std::thread::scope(|s| {
        let clients: Vec<_> = (0..3).map(|i| s.spawn(move || pay(i).send(at))).collect();
        upstream.wait_for_effects(3, "the three in-flight payments at the upstream");
        let terminated = Instant::now();
        proxy.terminate();
        // It stops accepting: a connection is refused (within 10 s; connections accepted in the
        // meantime are closed unused).
        loop {
            match TcpStream::connect(at) {
                Err(_) => break,
                Ok(c) => drop(c),
            }
            assert!(
                terminated.elapsed() < Duration::from_secs(10),
                "the proxy still accepts connections 10 s after SIGTERM"
            );
            pause(20);
        }
        let in_flight = clients.iter().filter(|c| !c.is_finished()).count();
        println!(
            "connections refused {:?} after SIGTERM, {in_flight} of 3 requests still in flight",
            terminated.elapsed()
        );
        clients
            .into_iter()
            .map(|c| c.join().unwrap())
            .collect::<Vec<_>>()
    });
    for (i, got) in answers.iter().enumerate() {
        assert_eq!(got.status, 201, "in-flight k{i} finished: {got}");
        assert!(!got.replayed(), "{got}");
    }
    let status = proxy.wait_exit(Duration::from_secs(10 + 20), "draining after SIGTERM");
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM: {status:?}"
    );
    drop(idle);

    let proxy = Proxy::start(&upstream.url(), &store, &[]);
    for (i, first) in answers.iter().enumerate() {
        let got = pay(i).send(proxy.addr);
        assert!(
            got.status == 201 && got.replayed(),
            "k{i} after the restart: {got}"
        );
        assert_eq!(
            got.body, first.body,
            "k{i}'s answer was stored before the exit"
        );
    }
    assert_eq!(upstream.effects().len(), 3, "each payment ran once");
}

#[test]
fn a_drain_that_times_out_never_runs_a_payment_twice() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let store = Store::Db(dir.path().join("store"));
    let routes = routes_file(dir.path(), "routes", "POST,PATCH /** soft lease=2s\n");
    let routes = ["--routes", routes.to_str().unwrap()];
    let mut args = routes.to_vec();
    args.extend(["--drain-timeout", "1s"]);
    let mut proxy = Proxy::start(&upstream.url(), &store, &args);
    let at = proxy.addr;
    let slow = || {
        Req::post("/payments")
            .key("slow")
            .json("acct-slow", 1)
            .header("X-Delay-After-Ms", "5000")
    };

    let given_up = std::thread::scope(|s| {
        let client = s.spawn(|| slow().try_send(at));
        upstream.wait_for_effects(1, "the slow payment at the upstream");
        proxy.terminate();
        let status = proxy.wait_exit(Duration::from_secs(1 + 20), "a drain of 1s");
        assert_eq!(
            status.code(),
            Some(0),
            "exit status after SIGTERM: {status:?}"
        );
        client.join().unwrap()
    });
    match &given_up {
        Ok(got) => println!("the request given up got: {got}"),
        Err(e) => println!("the request given up lost its connection: {e}"),
    }

    let proxy = Proxy::start(&upstream.url(), &store, &routes);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut answers = Vec::new();
    let outcome = loop {
        let got = slow().send(proxy.addr);
        answers.push(got.status);
        if got.status != 409 {
            break got;
        }
        assert!(
            Instant::now() < deadline,
            "still 409 60 s after the restart (lease 2s): {got}"
        );
        pause(100);
    };
    println!("after the restart: {answers:?}");
    assert_eq!(
        (outcome.status, outcome.problem().as_deref()),
        (502, Some("upstream-outcome-unknown")),
        "the given-up request's outcome is unknown, and kept: {outcome}"
    );
    let replay = slow().send(proxy.addr);
    assert!(
        replay.status == 502 && replay.replayed() && replay.body == outcome.body,
        "{replay}"
    );
    assert_eq!(upstream.payments_of("acct-slow").len(), 1, "it ran once");
}
