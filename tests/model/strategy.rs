//! The proptest strategy of the model's operation sequences, for the tests that draw them (the
//! fuzz target decodes its own from bytes: `Op::decode_all`). Weighted so that every outcome is
//! reached within a run's cases.

use proptest::prelude::*;

use super::model::{Op, MAX_LEASE_S};

/// One operation: with `rewrites`, compactions and reopens too (the embedded `Store`, which has
/// them), one in 22 steps.
pub fn op(rewrites: bool) -> BoxedStrategy<Op> {
    if rewrites {
        prop_oneof![
            42 => portable(),
            1 => Just(Op::Compact),
            1 => Just(Op::Reopen),
        ]
        .boxed()
    } else {
        portable().boxed()
    }
}

/// The operations every store has.
fn portable() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, 0..3usize, 0..2usize, 1..40u64, 20..120u64, 0..4u8).prop_map(|(t, k, fp, lease_s, ret_s, d)| {
            Op::Claim { t, k, fp, lease_s: lease_s.min(ret_s), ret_s, durable: d == 0 }
        }),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(lease, body)| Op::Complete { lease, body }),
        1 => any::<usize>().prop_map(|lease| Op::FailRetry { lease }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(lease, body)| Op::FailTerminal { lease, body }),
        1 => (any::<usize>(), 1..MAX_LEASE_S).prop_map(|(lease, s)| Op::Renew { lease, s }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(lease, phase)| Op::Checkpoint { lease, phase }),
        1 => (0..2usize, 0..3usize).prop_map(|(t, k)| Op::Forget { t, k }),
        4 => (1..60u64).prop_map(|s| Op::Advance { s }),
        1 => (1..4usize).prop_map(|limit| Op::Sweep { limit }),
        2 => (0..2usize, 0..3usize, 0..4u8, any::<u8>()).prop_map(|(t, k, expect, val)| Op::EntityPut { t, k, expect, val }),
        1 => (0..2usize, 0..3usize, 0..4u8).prop_map(|(t, k, expect)| Op::EntityDelete { t, k, expect }),
        2 => (any::<usize>(), 0..2usize, 0..3usize, 0..4u8, any::<u8>()).prop_map(|(lease, t, k, expect, val)| Op::CommitPutComplete { lease, t, k, expect, val }),
        4 => (0..2usize, 0..2usize).prop_map(|(g, k)| Op::Begin { g, k }),
        3 => any::<usize>().prop_map(|lease| Op::FailMessage { lease }),
        3 => (0..2u8, 0..8u8).prop_map(|(v, o)| Op::Reserve { v, o }),
        3 => (any::<usize>(), 0..2u8).prop_map(|(lease, v)| Op::ReserveFor { lease, v }),
        2 => (0..2u8, 0..8u8).prop_map(|(v, o)| Op::Release { v, o }),
        2 => (0..2u32, 0..12u64).prop_map(|(p, offset)| Op::MarkProcessed { p, offset }),
        1 => (0..2u32, 0..12u64).prop_map(|(p, offset)| Op::CommitWatermark { p, offset }),
    ]
}
