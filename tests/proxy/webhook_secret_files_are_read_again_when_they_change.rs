//! A `webhook` route's `secret=file:PATH` is read again when the file changes, so a secret is
//! rotated without restarting the proxy: a secret added to the file verifies within seconds, one
//! removed is refused (401, nothing forwarded), and a file that cannot be used (a secret that is
//! not a Standard Webhooks secret) keeps the secrets in use, with a warning that shows no secret.

use crate::harness::{routes_file, wait_until, webhook_delivery, Proxy, Store, Upstream};

const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NEW: &str = "whsec_bmV3IHNpZ25pbmcgc2VjcmV0IGZvciB0ZXN0cw==";

fn body(account: &str) -> String {
    format!("{{\"account\":\"{account}\",\"amount\":1}}")
}

#[test]
fn rotated_secrets_apply_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, format!("{OLD}\n")).unwrap();
    let routes = routes_file(
        dir.path(),
        "routes",
        &format!(
            "POST /payments webhook scheme=standard secret=file:{}\n",
            secret.display()
        ),
    );
    let upstream = Upstream::start(dir.path());
    let proxy = Proxy::start(
        &upstream.url(),
        &Store::Db(dir.path().join("store")),
        &[
            "--routes",
            routes.to_str().unwrap(),
            "--log",
            "idemdb::proxy=info",
        ],
    );
    let within = std::time::Duration::from_secs(60);

    let got = webhook_delivery("msg_new", &body("rot-new"), NEW, 0).send(proxy.addr);
    assert_eq!(got.status, 401, "a secret not in the file yet: {got}");

    // Both secrets while the provider switches: the new one verifies once the file is read again
    // (a refused delivery stores nothing, so the same event is delivered until it is taken).
    std::fs::write(&secret, format!("{OLD}\n{NEW}\n")).unwrap();
    wait_until(within, "the added secret to verify", || {
        let got = webhook_delivery("msg_new", &body("rot-new"), NEW, 0).send(proxy.addr);
        assert!(got.status == 201 || got.status == 401, "{got}");
        (got.status == 201).then_some(())
    });
    let got = webhook_delivery("msg_old", &body("rot-old"), OLD, 0).send(proxy.addr);
    assert_eq!(got.status, 201, "the old secret still verifies: {got}");

    // A file that cannot be used keeps both secrets, and says so without printing one.
    std::fs::write(&secret, "whsec_not base64 at all!\n").unwrap();
    wait_until(within, "the warning about the unusable file", || {
        proxy
            .stderr()
            .contains("webhook secrets not read again")
            .then_some(())
    });
    for (id, account, key) in [
        ("msg_kept_old", "rot-kept-old", OLD),
        ("msg_kept_new", "rot-kept-new", NEW),
    ] {
        let got = webhook_delivery(id, &body(account), key, 0).send(proxy.addr);
        assert_eq!(got.status, 201, "{account}: {got}");
    }

    // The new secret alone: the old one is refused once the file is read again, and a refused
    // delivery reaches nothing.
    std::fs::write(&secret, format!("{NEW}\n")).unwrap();
    let mut n = 0;
    wait_until(within, "the removed secret to be refused", || {
        n += 1;
        let account = format!("rot-gone-{n}");
        let got =
            webhook_delivery(&format!("msg_gone_{n}"), &body(&account), OLD, 0).send(proxy.addr);
        assert!(got.status == 201 || got.status == 401, "{got}");
        (got.status == 401).then_some(account)
    });
    let refused = format!("rot-gone-{n}");
    assert!(
        upstream.payments_of(&refused).is_empty(),
        "{refused} was forwarded"
    );
    let got = webhook_delivery("msg_after", &body("rot-after"), NEW, 0).send(proxy.addr);
    assert_eq!(got.status, 201, "{got}");

    // Each event taken reached the upstream once; no secret was ever logged.
    for account in [
        "rot-new",
        "rot-old",
        "rot-kept-old",
        "rot-kept-new",
        "rot-after",
    ] {
        assert_eq!(upstream.payments_of(account).len(), 1, "{account}");
    }
    let log = proxy.stderr();
    for s in [OLD, NEW, "not base64 at all"] {
        assert!(!log.contains(s), "the log shows a secret: {log}");
    }
}
