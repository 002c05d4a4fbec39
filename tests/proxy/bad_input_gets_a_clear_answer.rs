//! Bad input gets a clear answer and changes nothing: a malformed `Idempotency-Key` (sent twice,
//! empty, not ASCII, over 255 bytes, unterminated) gets 400 `idempotency-key-invalid`, a body over
//! the route's `max-body` (with a Content-Length or chunked) 413 `request-too-large`, and none of
//! them reaches the upstream or uses up its key (a response too large to store:
//! `a_response_too_large_to_store_never_runs_twice`); a client that sends its
//! headers or its body too slowly is cut off (closed, or 408/400) within `--request-timeout`,
//! nothing is forwarded or stored, and the proxy goes on serving; a malformed routes file makes
//! `--inventory` and the proxy exit 2 naming the line, and so does an unknown command-line option.

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::harness::{
    proxy_command, read_response, routes_file, run, Got, Proxy, Req, Store, Upstream,
};

const ROUTES: &str = "\
POST /payments soft max-body=1KiB
POST /big soft
";

fn start(dir: &std::path::Path, upstream: &Upstream) -> Proxy {
    let routes = routes_file(dir, "routes", ROUTES);
    Proxy::start(
        &upstream.url(),
        &Store::Db(dir.join("store")),
        &[
            "--routes",
            routes.to_str().unwrap(),
            "--request-timeout",
            "1s",
        ],
    )
}

fn pay(account: &str) -> Req {
    Req::post("/payments").json(account, 1)
}

#[test]
fn malformed_requests_get_a_problem_and_reach_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let proxy = start(dir.path(), &upstream);
    let at = proxy.addr;

    let long = "k".repeat(256);
    let quoted_long = format!("\"{long}\"");
    let bad: Vec<(&str, Vec<&[u8]>)> = vec![
        ("sent twice", vec![b"\"a\"".as_slice(), b"\"b\"".as_slice()]),
        (
            "sent twice alike",
            vec![b"\"a\"".as_slice(), b"\"a\"".as_slice()],
        ),
        ("an empty string", vec![b"\"\"".as_slice()]),
        ("empty", vec![b"".as_slice()]),
        ("not ASCII", vec!["\"café\"".as_bytes()]),
        ("256 bytes", vec![long.as_bytes()]),
        ("256 bytes quoted", vec![quoted_long.as_bytes()]),
        ("unterminated", vec![b"\"open".as_slice()]),
    ];
    for (what, values) in &bad {
        let mut req = pay("acct-bad");
        for v in values {
            req = req.raw_header("Idempotency-Key", v);
        }
        let got = req.send(at);
        assert_eq!(got.status, 400, "a key {what}: {got}");
        assert_eq!(got.code(), "idempotency-key-invalid", "a key {what}");
    }
    assert!(upstream.effects().is_empty(), "no refused request ran");

    // 255 bytes is a key.
    let longest = "k".repeat(255);
    let got = pay("acct-255")
        .raw_header("Idempotency-Key", longest.as_bytes())
        .send(at);
    assert_eq!(got.status, 201, "a 255-byte key: {got}");
    let again = pay("acct-255")
        .raw_header("Idempotency-Key", longest.as_bytes())
        .send(at);
    assert!(again.replayed(), "{again}");
    let quoted = pay("acct-255-quoted").key(&"q".repeat(255)).send(at);
    assert_eq!(quoted.status, 201, "a 255-byte key, quoted: {quoted}");
    assert_eq!(upstream.effects().len(), 2);

    // Exactly max-body (1 KiB) is within it.
    let head = r#"{"account":"acct-1024","amount":1,"pad":""#;
    let exact = format!("{head}{}\"}}", "x".repeat(1024 - head.len() - 2));
    assert_eq!(exact.len(), 1024);
    let got = Req::post("/payments")
        .key("exact")
        .header("Content-Type", "application/json")
        .body(exact)
        .send(at);
    assert_eq!(got.status, 201, "a body of exactly max-body: {got}");
    assert_eq!(upstream.effects().len(), 3);

    // Over max-body (1 KiB): refused before the upstream, whether its length is declared or not.
    let padding = "x".repeat(2048);
    let big_body = format!("{{\"account\":\"acct-big\",\"amount\":1,\"pad\":\"{padding}\"}}");
    let declared = Req::post("/payments")
        .key("too-big")
        .header("Content-Type", "application/json")
        .body(big_body.clone())
        .send(at);
    assert_eq!(declared.status, 413, "{declared}");
    assert_eq!(declared.code(), "request-too-large");
    let chunked_body = in_chunks(big_body.as_bytes(), 700);
    let chunked = Req::post("/payments")
        .key("too-big-chunked")
        .header("Content-Type", "application/json")
        .header("Transfer-Encoding", "chunked")
        .body(chunked_body)
        .send(at);
    assert_eq!(chunked.status, 413, "chunked: {chunked}");
    assert_eq!(chunked.code(), "request-too-large");
    assert_eq!(upstream.effects().len(), 3, "no oversized request ran");
    // Neither used up its key.
    for key in ["too-big", "too-big-chunked"] {
        let got = pay("acct-small").key(key).send(at);
        assert_eq!(got.status, 201, "{key} with a small body: {got}");
        assert!(!got.replayed(), "{got}");
    }
    assert_eq!(upstream.effects().len(), 5);
    // A chunked body within the limit reaches the upstream whole.
    let small = br#"{"account":"acct-chunked","amount":7}"#;
    let chunked_body = in_chunks(small, 10);
    let got = Req::post("/payments")
        .key("chunked")
        .header("Content-Type", "application/json")
        .header("Transfer-Encoding", "chunked")
        .body(chunked_body)
        .send(at);
    assert_eq!(got.status, 201, "a small chunked body: {got}");
    assert_eq!(got.json()["amount"], 7, "{got}");
    assert_eq!(upstream.payments_of("acct-chunked").len(), 1);
}

/// Sends `reqs` one after another on kept-alive connections (a new one only when the proxy
/// closed the last), and returns each answer: a refusal must leave the connection in step (its
/// unread body never parsed as the next request) or close it.
fn on_one_connection(at: SocketAddr, reqs: &[Req]) -> Vec<Got> {
    let mut answers = Vec::new();
    let mut conn: Option<BufReader<TcpStream>> = None;
    let mut connections = 0;
    for req in reqs {
        let mut bytes = req.bytes(at);
        // Keep the connection alive: drop the `Connection: close` that Req::bytes adds.
        let close = b"Connection: close\r\n";
        let at_close = bytes
            .windows(close.len())
            .position(|w| w == close)
            .expect("Req::bytes writes Connection: close");
        bytes.drain(at_close..at_close + close.len());
        let mut attempt = 0;
        let got = loop {
            attempt += 1;
            let c = conn.get_or_insert_with(|| {
                connections += 1;
                let s = TcpStream::connect(at).expect("connect to the proxy");
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                BufReader::new(s)
            });
            let sent = Instant::now();
            let answer = c.get_mut().write_all(&bytes).and_then(|_| read_response(c));
            match answer {
                Ok((status, headers, body)) => {
                    break Got {
                        status,
                        headers,
                        body,
                        sent,
                        received: Instant::now(),
                    };
                }
                Err(e) => {
                    // Closed after the last answer: a client sends again on a new connection.
                    assert!(
                        attempt == 1,
                        "{} {} on a new connection: {e}",
                        req.method,
                        req.path
                    );
                    conn = None;
                }
            }
        };
        if got
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"))
        {
            conn = None;
        }
        answers.push(got);
    }
    println!("{} requests on {connections} connections", reqs.len());
    answers
}

#[test]
fn refusals_keep_a_kept_alive_connection_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let proxy = start(dir.path(), &upstream);
    let oversized = format!(
        "{{\"account\":\"acct-x\",\"amount\":1,\"pad\":\"{}\"}}",
        // A body that reads as requests if the proxy parsed it as the next one.
        "GET /_idemdb/health HTTP/1.1\r\nHost: x\r\n\r\n".repeat(40)
    );
    let reqs = [
        Req::post("/payments")
            .key("ka-big")
            .header("Content-Type", "application/json")
            .body(oversized.clone()),
        pay("acct-ka")
            .raw_header("Idempotency-Key", b"\"a\"")
            .raw_header("Idempotency-Key", b"\"b\""),
        pay("acct-ka").key("ka"),
        pay("acct-ka").key("ka"),
        pay("acct-other").key("ka"),
        Req::get("/_idemdb/health"),
        pay("acct-ka2").key("ka2"),
    ];
    let answers = on_one_connection(proxy.addr, &reqs);
    let show: String = answers.iter().map(|a| format!("  {a}\n")).collect();
    let got: Vec<(u16, Option<String>, bool)> = answers
        .iter()
        .map(|a| (a.status, a.problem(), a.replayed()))
        .collect();
    let code = |c: &str| Some(c.to_owned());
    assert_eq!(
        got,
        [
            (413, code("request-too-large"), false),
            (400, code("idempotency-key-invalid"), false),
            (201, None, false),
            (201, None, true),
            (422, code("idempotency-key-reused"), false),
            (200, None, false),
            (201, None, false),
        ],
        "each request got its own answer, in order:\n{show}"
    );
    assert_eq!(upstream.effects().len(), 2, "only the two payments ran");
}

/// Trickles `rest` one byte every 100 ms after `head` until the proxy closes the connection or
/// answers; returns the status of an answer. Fails the test if the proxy is still reading after
/// 30 s.
fn trickle_until_cut(at: SocketAddr, head: &[u8], what: &str) -> Option<u16> {
    let mut s = TcpStream::connect(at).unwrap_or_else(|e| panic!("connect to the proxy: {e}"));
    s.write_all(head).expect("send the head");
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    loop {
        if s.write_all(b"a").is_err() {
            return None;
        }
        let mut buf = [0u8; 1024];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return None, // reset
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: the proxy (--request-timeout 1s) still reads a request trickled for 30 s"
        );
    }
    println!("{what}: cut off after {:?}", started.elapsed());
    if answer.is_empty() {
        return None;
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{what}: not an HTTP answer: {text:?}"));
    Some(status)
}

#[test]
fn slow_clients_are_cut_off_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let proxy = start(dir.path(), &upstream);
    let at = proxy.addr;

    let headers = format!(
        "POST /payments HTTP/1.1\r\nHost: {at}\r\nIdempotency-Key: \"slow-headers\"\r\n\
         Content-Type: application/json\r\nX-Pad: "
    );
    let got = trickle_until_cut(at, headers.as_bytes(), "headers trickled");
    assert!(
        matches!(got, None | Some(400) | Some(408)),
        "slow headers: closed or 408/400, got {got:?}"
    );
    let body = format!(
        "POST /payments HTTP/1.1\r\nHost: {at}\r\nIdempotency-Key: \"slow-body\"\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"account\":"
    );
    let got = trickle_until_cut(at, body.as_bytes(), "body trickled");
    assert!(
        matches!(got, None | Some(400) | Some(408)),
        "slow body: closed or 408/400, got {got:?}"
    );
    assert!(upstream.effects().is_empty(), "nothing was forwarded");

    // Nothing was stored: both keys are new, and the proxy serves as before.
    for key in ["slow-headers", "slow-body", "fresh"] {
        let got = pay(&format!("acct-{key}")).key(key).send(at);
        assert_eq!(got.status, 201, "{key}: {got}");
        assert!(!got.replayed(), "{key}: {got}");
    }
    assert_eq!(upstream.effects().len(), 3);
}

/// `stderr` names line `n` (and not a longer number starting with it).
fn names_line(stderr: &str, n: usize) -> bool {
    let needle = format!("line {n}");
    stderr.match_indices(&needle).any(|(i, _)| {
        !stderr[i + needle.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

#[test]
fn malformed_routes_files_exit_2_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, usize); 10] = [
        ("no level", "POST /payments\n", 1),
        (
            "an unknown level",
            "# comment\n\nPOST /payments hard\nPOST /refunds medium\n",
            4,
        ),
        (
            "an unknown option",
            "POST /payments hard\nPOST /refunds soft colour=red\n",
            2,
        ),
        (
            "a bad duration",
            "\n\n\nPOST /payments soft lease=forever\n",
            4,
        ),
        ("** not last", "POST /a/**/b soft\n", 1),
        ("a bad size", "POST /payments soft max-body=lots\n", 1),
        (
            "an unknown principal",
            "POST /payments soft principal=cookie:sid\n",
            1,
        ),
        (
            "an unknown on-unknown",
            "# a\n# b\nPOST /payments soft on-unknown=retry\n",
            3,
        ),
        (
            "an option without a value",
            "POST /x soft\nPOST /y soft wait\n",
            2,
        ),
        (
            "a retention shorter than the (default) lease",
            "POST /x soft\nPOST /y soft retention=1s\n",
            2,
        ),
    ];
    for (i, (what, text, line)) in cases.iter().enumerate() {
        let routes = routes_file(dir.path(), &format!("routes-{i}"), text);
        let routes = routes.display().to_string();
        let inventory = vec!["--inventory".into(), "--routes".into(), routes.clone()];
        let serve = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--upstream".into(),
            "http://127.0.0.1:9".into(),
            "--db".into(),
            dir.path().join(format!("store-{i}")).display().to_string(),
            "--routes".into(),
            routes,
        ];
        for (command, args) in [
            ("idemdb proxy --inventory", inventory),
            ("idemdb proxy", serve),
        ] {
            let (status, out, err) = run(command, proxy_command(&args));
            assert_eq!(
                status.code(),
                Some(2),
                "{command} with {what}: stdout:\n{out}\nstderr:\n{err}"
            );
            assert!(
                names_line(&err, *line),
                "{command} with {what}: stderr names line {line}:\n{err}"
            );
            assert!(!out.contains("listening"), "it never listened: {out}");
        }
    }

    let (status, out, err) = run(
        "idemdb proxy --frobnicate",
        proxy_command(&[
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--upstream".into(),
            "http://127.0.0.1:9".into(),
            "--db".into(),
            dir.path().join("store").display().to_string(),
            "--frobnicate".into(),
        ]),
    );
    assert_eq!(status.code(), Some(2), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains("--frobnicate"),
        "stderr names the option:\n{err}"
    );
}

/// `body` in HTTP/1.1 chunked encoding, in chunks of `size` bytes.
fn in_chunks(body: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in body.chunks(size) {
        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}
