//! A claim → complete → replay sequence on the embedded store gives three spans that name the
//! decision (acquired, completed, replayed), the fencing token and the key's hash, and hold no
//! key, tenant or response bytes; asked for (`trace_keys`, `TraceTenants::Plain`), the key and
//! tenant appear, response bytes still never.

use idemdb::{trace_key_hash, Claim, ClaimOptions, Config, Durability, Response, TraceTenants};

use crate::spans::{assert_absent, Capture};

const TENANT: &str = "tenant-alice@example.com";
const KEY: &str = "payment-key-4242";
const BODY: &str = "receipt-body-9f3e";

fn run(cfg: Config) -> Vec<crate::spans::Closed> {
    let capture = Capture::default();
    tracing::subscriber::with_default(capture.subscriber(), || {
        let store = cfg.open().unwrap();
        let Claim::Acquired(lease) = store
            .claim(TENANT, KEY, b"fp", ClaimOptions::default())
            .unwrap()
        else {
            panic!("acquires");
        };
        store
            .complete(&lease, Response::new(BODY.as_bytes().to_vec()))
            .unwrap()
            .unwrap();
        match store
            .claim(TENANT, KEY, b"fp", ClaimOptions::default())
            .unwrap()
        {
            Claim::Completed(r) => assert_eq!(r.response.body, BODY.as_bytes()),
            other => panic!("expected a replay, got {other:?}"),
        }
        assert_eq!(
            store
                .claim(TENANT, KEY, b"other", ClaimOptions::default())
                .unwrap(),
            Claim::Mismatch
        );
    });
    capture
        .spans()
        .into_iter()
        .filter(|s| s.name.starts_with("idemdb."))
        .collect()
}

#[test]
fn by_default() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let spans = run(Config::new(dir.path())
        .durability(Durability::Buffered)
        .sweep_interval(None));
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "idemdb.claim",
            "idemdb.complete",
            "idemdb.claim",
            "idemdb.claim"
        ]
    );
    let outcomes: Vec<_> = spans.iter().map(|s| s.field("outcome").unwrap()).collect();
    assert_eq!(outcomes, ["acquired", "completed", "replayed", "mismatch"]);
    let hash = trace_key_hash(TENANT.as_bytes(), KEY.as_bytes());
    for s in &spans {
        assert_eq!(s.field("key_hash"), Some(hash.as_str()), "{s:?}");
        assert_eq!(s.field("tenant").map(str::len), Some(16), "a hash: {s:?}");
        assert!(s.field("duration_us").is_some(), "{s:?}");
        assert_eq!(s.field("key"), None, "{s:?}");
    }
    // The acquiring claim and the completion carry the same fencing token.
    let fence = spans[0].field("fence").expect("the acquired fence");
    assert_eq!(spans[1].field("fence"), Some(fence));
    for secret in [TENANT, KEY, BODY] {
        assert_absent(&spans, secret);
    }
}

#[test]
fn when_asked_for() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let spans = run(Config::new(dir.path())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .trace_keys(true)
        .trace_tenants(TraceTenants::Plain));
    assert_eq!(spans[0].field("key"), Some(KEY));
    assert_eq!(spans[0].field("tenant"), Some(TENANT));
    assert_absent(&spans, BODY);

    let dir = tempfile::tempdir().unwrap();
    let spans = run(Config::new(dir.path())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .trace_tenants(TraceTenants::Omitted));
    assert!(spans.iter().all(|s| s.field("tenant").is_none()));
}
