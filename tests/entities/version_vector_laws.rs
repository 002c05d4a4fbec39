//! Version vectors: merge is commutative, associative and idempotent; the comparison is a partial
//! order consistent with merge (a ⊔ b dominates or equals both; a ≤ b iff a ⊔ b = b).
use idemdb::{Causality, VersionVector};
use proptest::prelude::*;

fn vv() -> impl Strategy<Value = VersionVector> {
    proptest::collection::vec((0..4u8, 0..6u64), 0..6).prop_map(|events| {
        let mut v = VersionVector::new();
        for (actor, n) in events {
            v.observe(&format!("r{actor}"), n);
        }
        v
    })
}

proptest! {
    #[test]
    fn merge_is_a_semilattice(a in vv(), b in vv(), c in vv()) {
        prop_assert_eq!(a.merged(&b), b.merged(&a));
        prop_assert_eq!(a.merged(&b).merged(&c), a.merged(&b.merged(&c)));
        prop_assert_eq!(a.merged(&a), a.clone());
    }

    #[test]
    fn comparison_is_a_partial_order_consistent_with_merge(a in vv(), b in vv(), c in vv()) {
        let m = a.merged(&b);
        prop_assert!(m.descends(&a) && m.descends(&b));
        prop_assert_eq!(a.descends(&b), a.merged(&b) == a);
        // Antisymmetry and transitivity.
        if a.descends(&b) && b.descends(&a) { prop_assert_eq!(&a, &b); }
        if a.descends(&b) && b.descends(&c) { prop_assert!(a.descends(&c)); }
        let expected = match (a.descends(&b), b.descends(&a)) {
            (true, true) => Causality::Equal,
            (true, false) => Causality::Dominates,
            (false, true) => Causality::DominatedBy,
            (false, false) => Causality::Concurrent,
        };
        prop_assert_eq!(a.compare(&b), expected);
        prop_assert_eq!(a.partial_cmp(&b).map(|o| o.reverse()), b.partial_cmp(&a));
    }
}
