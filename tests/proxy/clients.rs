//! Clients that send payments through one or more proxies and retry them the way real clients
//! do, and the check of what they got against what the upstream did. Shared by the
//! `retries_through_*` tests.
//!
//! Payment `i` has the key `pay-i`, the account `acct-i` and the amount `i + 1`, and is sent in
//! one of four ways (`i % 4`):
//! - a duplicate: sent, answered, then sent again to the next proxy;
//! - twins: sent at the same moment to two proxies (or twice to one);
//! - a slow payment (`X-Delay-Ms: 300` at the upstream) whose first request is still running while
//!   the client retries it, alternating between the proxies;
//! - a lost reply: the first request is sent and its connection closed before any answer
//!   (`X-Delay-Ms: 100`), then the client retries, alternating between the proxies.
//!
//! A client retries after a 409 (50 ms later) and stops at any other answer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{pause, Got, Req, Upstream};

/// One payment and every answer any of its requests got.
pub struct Payment {
    pub i: usize,
    pub key: String,
    pub account: String,
    pub answers: Vec<Got>,
}

/// How long one payment may go on getting 409 before the test fails.
const ANSWERED_WITHIN: Duration = Duration::from_secs(120);

fn request(i: usize) -> Req {
    let req = Req::post("/payments")
        .key(&format!("pay-{i}"))
        .json(&format!("acct-{i}"), i as u64 + 1);
    match i % 4 {
        2 => req.header("X-Delay-Ms", "300"),
        3 => req.header("X-Delay-Ms", "100"),
        _ => req,
    }
}

/// Sends `req` to `proxies[start]`, `proxies[start + 1]`, ... in turn until an answer is not 409;
/// every answer goes to `log`. A connection that ends without an answer fails the test.
fn until_answered(req: &Req, proxies: &[SocketAddr], start: usize, log: &Mutex<Vec<Got>>) -> Got {
    let deadline = Instant::now() + ANSWERED_WITHIN;
    for attempt in start.. {
        let got = req.send(proxies[attempt % proxies.len()]);
        log.lock().unwrap().push(got.clone());
        if got.status != 409 {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{} {} key {:?}: still 409 after retrying for {ANSWERED_WITHIN:?}: {got}",
            req.method,
            req.path,
            req.headers[0]
        );
        pause(50);
    }
    unreachable!()
}

/// Sends payments `0..n` through `proxies` from `workers` clients at a time, each in its way (see
/// the module's doc); returns every payment with its answers.
pub fn send_payments(proxies: &[SocketAddr], n: usize, workers: usize) -> Vec<Payment> {
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    return;
                }
                let log = Mutex::new(Vec::new());
                send_one(i, proxies, &log);
                done.lock().unwrap().push(Payment {
                    i,
                    key: format!("pay-{i}"),
                    account: format!("acct-{i}"),
                    answers: log.into_inner().unwrap(),
                });
            });
        }
    });
    let mut payments = done.into_inner().unwrap();
    payments.sort_by_key(|p| p.i);
    let requests: usize = payments.iter().map(|p| p.answers.len()).sum();
    println!(
        "{n} payments, {requests} answered requests through {} proxies in {:?}",
        proxies.len(),
        started.elapsed()
    );
    payments
}

fn send_one(i: usize, proxies: &[SocketAddr], log: &Mutex<Vec<Got>>) {
    let req = request(i);
    let len = proxies.len();
    match i % 4 {
        0 => {
            let first = until_answered(&req, proxies, i % len, log);
            if first.is_success() {
                let again = req.send(proxies[(i + 1) % len]);
                log.lock().unwrap().push(again);
            }
        }
        1 => {
            let barrier = Barrier::new(2);
            std::thread::scope(|s| {
                for twin in 0..2 {
                    let (req, barrier) = (&req, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        until_answered(req, proxies, i + twin, log);
                    });
                }
            });
        }
        2 => {
            std::thread::scope(|s| {
                s.spawn(|| until_answered(&req, proxies, i % len, log));
                until_answered(&req, proxies, i % len + 1, log);
            });
        }
        _ => {
            req.send_and_hang_up(proxies[i % len]);
            until_answered(&req, proxies, i % len + 1, log);
        }
    }
}

/// Checks the payments against the upstream's effects: each payment ran exactly once; every
/// answer is a 201 or a 409; every 201 of a payment is the same answer byte for byte (the first
/// one's, with `Idempotent-Replayed: true` on the replays) and names its one effect; a 409 came
/// only while the payment's first execution was running (never for a request sent after a 201 of
/// that payment had come back); and the upstream did nothing else.
pub fn check_each_ran_once(payments: &[Payment], upstream: &Upstream) {
    let effects = upstream.effects();
    let mut by_account: HashMap<&str, Vec<u64>> = HashMap::new();
    for e in &effects {
        assert_eq!(e.kind, "payment", "only payments ran: {}", e.line);
        by_account.entry(e.what.as_str()).or_default().push(e.n);
    }
    let mut conflicts = 0;
    let mut replays = 0;
    for p in payments {
        let ran = by_account
            .get(p.account.as_str())
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            ran.len(),
            1,
            "payment {} ({}) ran {} times at the upstream (effects {ran:?}); its answers:\n{}",
            p.i,
            p.key,
            ran.len(),
            show(&p.answers)
        );
        for a in &p.answers {
            assert!(
                a.status == 201 || a.status == 409,
                "payment {}: an answer other than 201 or 409: {a}\nall its answers:\n{}",
                p.i,
                show(&p.answers)
            );
            if a.status == 409 {
                assert_eq!(a.code(), "idempotency-key-in-progress", "{a}");
                assert!(
                    a.header("retry-after").is_some(),
                    "409 without Retry-After: {a}"
                );
            }
        }
        let ok: Vec<&Got> = p.answers.iter().filter(|a| a.status == 201).collect();
        let first = ok
            .first()
            .unwrap_or_else(|| panic!("payment {} never got a 201:\n{}", p.i, show(&p.answers)));
        let originals = ok.iter().filter(|a| !a.replayed()).count();
        assert!(
            originals <= 1,
            "payment {}: {originals} answers without Idempotent-Replayed: true:\n{}",
            p.i,
            show(&p.answers)
        );
        for a in &ok {
            assert_eq!(
                a.body,
                first.body,
                "payment {}: every 201 is the first answer byte for byte:\n{}",
                p.i,
                show(&p.answers)
            );
            assert_eq!(a.header("location"), first.header("location"), "{a}");
            assert_eq!(
                a.header("content-type"),
                Some("application/json"),
                "the upstream's Content-Type is replayed: {a}"
            );
        }
        replays += ok.len() - originals;
        let body = first.json();
        assert_eq!(
            body["id"].as_u64(),
            Some(ran[0]),
            "payment {}'s answer names its effect: {first}",
            p.i
        );
        assert_eq!(body["account"].as_str(), Some(p.account.as_str()));
        assert_eq!(
            first.header("location"),
            Some(&*format!("/payments/{}", ran[0]))
        );
        let done = ok.iter().map(|a| a.received).min().unwrap();
        for a in p.answers.iter().filter(|a| a.status == 409) {
            conflicts += 1;
            assert!(
                a.sent < done,
                "payment {}: a request sent {:?} after a 201 had come back got 409: {a}",
                p.i,
                a.sent - done
            );
        }
    }
    assert_eq!(
        effects.len(),
        payments.len(),
        "the upstream ran exactly the payments"
    );
    println!("{replays} replays, {conflicts} answers 409 while the first request ran");
}

fn show(answers: &[Got]) -> String {
    let t0 = answers.iter().map(|a| a.sent).min();
    answers
        .iter()
        .map(|a| {
            format!(
                "  sent +{:?}, answered +{:?}: {a}\n",
                a.sent - t0.unwrap(),
                a.received - t0.unwrap()
            )
        })
        .collect()
}
