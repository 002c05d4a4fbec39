//! Two replicas write concurrently: both values are kept as siblings with one merged context; a
//! later write with that context resolves them into one value. No concurrent write is lost.
use idemdb::{ManualClock, VersionVector};

use crate::common;

#[test]
fn concurrent_writes_become_siblings_then_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let start = store.causal_get("t", "cart").unwrap();
    assert!(start.values.is_empty());
    let s1 = store
        .causal_put("t", "cart", "eu", &start.context, "milk")
        .unwrap();
    assert_eq!(s1.values.len(), 1);
    // Both replicas read s1, then write without seeing each other.
    let ctx = s1.context.clone();
    store
        .causal_put("t", "cart", "eu", &ctx, "milk,eggs")
        .unwrap();
    let both = store
        .causal_put("t", "cart", "us", &ctx, "milk,bread")
        .unwrap();
    let mut vals: Vec<_> = both.values.iter().map(|s| s.value.clone()).collect();
    vals.sort();
    assert_eq!(vals, vec![b"milk,bread".to_vec(), b"milk,eggs".to_vec()]);
    assert_eq!(store.causal_get("t", "cart").unwrap(), both);
    // A stale writer (empty context) adds a sibling rather than overwriting anything.
    let stale = store
        .causal_put("t", "cart", "ap", &VersionVector::new(), "tea")
        .unwrap();
    assert_eq!(stale.values.len(), 3);
    // The resolver read everything: its write replaces all siblings.
    let resolved = store
        .causal_put("t", "cart", "eu", &stale.context, "milk,eggs,bread,tea")
        .unwrap();
    assert_eq!(resolved.values.len(), 1);
    assert_eq!(resolved.values[0].value, b"milk,eggs,bread,tea");
    assert!(resolved.context.descends(&stale.context));
    store.close().unwrap();
    let store = common::open(dir.path(), &clock);
    assert_eq!(store.causal_get("t", "cart").unwrap(), resolved);
}
