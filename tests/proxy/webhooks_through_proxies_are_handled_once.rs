//! A `webhook` route receives each signed event once, through one embedded proxy or two proxies
//! on one PostgreSQL schema: a sender that redelivers the way providers do (a duplicate to the
//! other proxy, twins on both at once, redeliveries while the first still runs, a redelivery
//! after a lost reply; each signed anew) reaches the upstream once per event, and every 2xx it
//! got is the first answer byte for byte; forged, tampered and stale deliveries are 401 and reach
//! nothing.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Mutex;

use crate::harness::{
    pause, routes_file, webhook_delivery as delivery, Got, Proxy, Req, Store, Upstream,
};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const EVENTS: usize = 24;

fn event(i: usize) -> (String, String) {
    (
        format!("msg_{i}"),
        format!("{{\"account\":\"hook-{i}\",\"amount\":{}}}", i + 1),
    )
}

/// Delivers event `i` (signed anew each time) to `proxies[start]`, then the next, until an answer
/// is not 409; every answer goes to `log`.
fn until_answered(i: usize, proxies: &[SocketAddr], start: usize, log: &Mutex<Vec<Got>>) {
    let (id, body) = event(i);
    for attempt in start..start + 2_000 {
        let mut req = delivery(&id, &body, SECRET, 0);
        if i % 4 == 2 {
            req = req.header("X-Delay-Ms", "300");
        }
        let got = req.send(proxies[attempt % proxies.len()]);
        let status = got.status;
        log.lock().unwrap().push(got);
        if status != 409 {
            return;
        }
        pause(50);
    }
    panic!("event {i}: still 409 after 2,000 deliveries");
}

fn check(dir: &Path, store: Store) {
    std::fs::write(
        dir.join("secret"),
        format!("whsec_b2xkIHNlY3JldCBrZXk=\n{SECRET}\n"),
    )
    .unwrap();
    let routes = routes_file(
        dir,
        "routes",
        &format!(
            "POST /payments webhook scheme=standard secret=file:{} endpoint=shop\n",
            dir.join("secret").display()
        ),
    );
    let upstream = Upstream::start(dir);
    let routes = routes.display().to_string();
    let extra = ["--routes", routes.as_str()];
    let mut proxies = vec![Proxy::start(&upstream.url(), &store, &extra)];
    if matches!(store, Store::Postgres(_)) {
        proxies.push(Proxy::start(&upstream.url(), &store, &extra));
    }
    let addrs: Vec<SocketAddr> = proxies.iter().map(|p| p.addr).collect();

    let logs: Vec<Mutex<Vec<Got>>> = (0..EVENTS).map(|_| Mutex::new(Vec::new())).collect();
    std::thread::scope(|s| {
        for (i, log) in logs.iter().enumerate() {
            let addrs = &addrs;
            s.spawn(move || match i % 4 {
                // A duplicate, to the other proxy once answered.
                0 => {
                    until_answered(i, addrs, 0, log);
                    until_answered(i, addrs, 1, log);
                }
                // Twins on both proxies (or twice on one) at once.
                1 => std::thread::scope(|t| {
                    t.spawn(|| until_answered(i, addrs, 0, log));
                    t.spawn(|| until_answered(i, addrs, 1, log));
                }),
                // Redeliveries while the first (300 ms at the upstream) still runs.
                2 => {
                    let first = s.spawn(move || until_answered(i, addrs, 0, log));
                    pause(100);
                    until_answered(i, addrs, 1, log);
                    first.join().unwrap();
                }
                // The first delivery's reply is lost; the provider delivers again.
                _ => {
                    let (id, body) = event(i);
                    delivery(&id, &body, SECRET, 0)
                        .header("X-Delay-Ms", "100")
                        .send_and_hang_up(addrs[0]);
                    until_answered(i, addrs, 1, log);
                }
            });
        }
    });

    for (i, log) in logs.iter().enumerate() {
        let answers = log.lock().unwrap();
        let ok: Vec<&Got> = answers.iter().filter(|g| g.status != 409).collect();
        assert!(!ok.is_empty(), "event {i}: no answer");
        for g in &ok {
            assert_eq!(g.status, 201, "event {i}: {g}");
            assert_eq!(
                g.body, ok[0].body,
                "event {i}: every 2xx is the first answer"
            );
        }
        let effects = upstream.payments_of(&format!("hook-{i}"));
        assert_eq!(
            effects.len(),
            1,
            "event {i} reached the upstream {} times",
            effects.len()
        );
    }

    // Refused before anything is claimed or forwarded: another secret, a tampered body, a
    // delivery signed ten minutes ago (a captured one replayed), one from the future.
    let (id, body) = ("msg_forged", r#"{"account":"forged","amount":1}"#);
    let other = "whsec_Zm9yZ2VkIGJ5IGFuIGF0dGFja2Vy";
    let refused = [
        ("another secret", delivery(id, body, other, 0)),
        (
            "tampered",
            delivery(id, r#"{"account":"victim","amount":1}"#, SECRET, 0).body(body),
        ),
        ("stale", delivery(id, body, SECRET, 600)),
        ("from the future", delivery(id, body, SECRET, -600)),
        (
            "unsigned",
            Req::post("/payments")
                .header("Content-Type", "application/json")
                .body(body),
        ),
    ];
    for (what, req) in refused {
        for addr in &addrs {
            let got = req.send(*addr);
            assert_eq!(got.status, 401, "{what}: {got}");
            assert!(
                got.text().contains("webhook-signature-invalid"),
                "{what}: {got}"
            );
        }
    }
    assert!(upstream.payments_of("forged").is_empty());
    assert!(upstream.payments_of("victim").is_empty());
    // The genuine delivery of that event id was not blocked by the forgeries.
    let got = delivery(id, body, SECRET, 0).send(addrs[0]);
    assert_eq!(got.status, 201, "{got}");
    assert_eq!(upstream.payments_of("forged").len(), 1);
}

on_both_stores!();
