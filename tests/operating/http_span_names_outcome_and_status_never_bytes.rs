//! The HTTP layer's span of each request carries the route, the principal's hash, the key's hash
//! (the same as the store's spans), the outcome and the status: executed then replayed for a
//! retry, 422 for a changed body, 400 for a missing key; never the principal, key or body bytes.

use idemdb::Durability;

use crate::http_common::{client, req, serve};
use crate::spans::{assert_absent, Capture};

const USER: &str = "user-bob@example.com";
const KEY: &str = "checkout-77-aa";

#[test]
fn http_request_spans() {
    let _serial = crate::serial();
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.subscriber());
    // One thread: the spans of the server's tasks reach this thread's subscriber.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let srv = serve(Durability::Buffered, 1 << 20, |l| l.require_key(true)).await;
        let c = client();
        let pay = |key: Option<&str>, body: &str| {
            let r = req(srv.addr, "POST", "/pay").user(USER).body(body);
            match key {
                Some(k) => r.key(k),
                None => r,
            }
        };
        assert_eq!(pay(Some(KEY), "amount=100").send(&c).await.status, 201);
        assert_eq!(pay(Some(KEY), "amount=100").send(&c).await.status, 201);
        assert_eq!(pay(Some(KEY), "amount=999").send(&c).await.status, 422);
        assert_eq!(pay(None, "amount=1").send(&c).await.status, 400);
    });
    let spans: Vec<_> = capture
        .spans()
        .into_iter()
        .filter(|s| s.name == "idemdb.http")
        .collect();
    let seen: Vec<(&str, &str)> = spans
        .iter()
        .map(|s| (s.field("outcome").unwrap(), s.field("status").unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("executed", "201"),
            ("replayed", "201"),
            ("mismatched", "422"),
            ("refused", "400")
        ]
    );
    for s in &spans {
        assert_eq!(s.field("route"), Some("/pay"), "{s:?}");
        assert!(s.field("duration_us").is_some(), "{s:?}");
    }
    // The key's hash is the store's: a request's span and its store spans join on it.
    let first = &spans[0];
    let principal = first.field("principal_hash").expect("a principal hash");
    assert_eq!(principal.len(), 16);
    let key_hash = first.field("key_hash").expect("a key hash");
    let claims: Vec<_> = capture
        .spans()
        .into_iter()
        .filter(|s| s.name == "idemdb.claim")
        .collect();
    assert!(
        claims.iter().any(|c| c.field("key_hash") == Some(key_hash)),
        "{claims:?}"
    );
    let all = capture.spans();
    for secret in [USER, KEY, "amount=100", "amount=999"] {
        assert_absent(&all, secret);
    }
}
