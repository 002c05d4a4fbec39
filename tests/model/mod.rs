//! The one reference model of the public API, and the runner that drives a store and the model
//! with one operation sequence. Every store takes the same runner: the embedded `Store` in the
//! proptest test (`tests/model_records_match_reference.rs`, on disk, with compactions and
//! reopens) and the `model` fuzz target (`fuzz/`, which includes this folder by path, in memory),
//! and the `AsyncStore` of both backends in the conformance suite
//! (`tests/conformance/records_match_the_model.rs`). Keep it small and obviously right.
//!
//! - `reference`: the model (plain maps and sets, the rules of docs/design.md);
//! - `watch`: the claim/CAS invariants over what a store reports, independently of the model;
//! - `runner`: [`Target`] (a store under test) and [`run_on`], the one runner;
//! - `embedded`: the embedded `Store` as a target ([`run`], [`Backend`], [`Session`]).
//!
//! The key space is deliberately tiny (2 tenants × 3 keys × 2 fingerprints, 2 entities per
//! tenant-key pair, 2 consumer groups × 2 message ids, 2 reservation values held by 4 plain owners,
//! three of them equal to lease keys, or bound to leases of every tenant and namespace, 2 offset
//! partitions of offsets 0-11) so that conflicts, takeovers, mismatches and expiries happen all the
//! time, and leases of different tenants or namespaces share a key string. Every outcome is
//! compared with the model, and after every step the observable state of every key must equal the
//! model's, whether or not compaction, sweeps or reopen ran in between. Independently of the model,
//! `watch::Watch` asserts the claim/CAS invariants over what the store reports.
#![allow(dead_code)]

mod embedded;
mod reference;
mod runner;
mod watch;

// Each crate that includes the model uses part of this list (the fuzz target and the model test
// the embedded runner, the conformance suite the targets' runner).
#[allow(unused_imports)]
pub use embedded::{run, Backend, Session};
#[allow(unused_imports)]
pub use reference::Fences;
#[allow(unused_imports)]
pub use runner::{run_on, Names, Target};

pub const KEYS: [&str; 3] = ["k0", "k1", "k2"];
pub const FPS: [&[u8]; 2] = [b"fp0", b"fp1"];
pub const MAX_LEASE_S: u64 = 100;
/// Consumer messages live at `(g + CONSUMER, k)` in the model's map (requests at `(t, k)`).
const CONSUMER: usize = 10;
/// A message is poisoned when a delivery would begin its third attempt.
const MSG_MAX_ATTEMPTS: u32 = 2;

#[derive(Debug, Clone)]
pub enum Op {
    Claim {
        t: usize,
        k: usize,
        fp: usize,
        lease_s: u64,
        ret_s: u64,
        /// The pending record is written at the claim: `ClaimOptions::durable_pending` for keys
        /// of even index, `written_pending` (no sync of its own) for odd ones. The model holds
        /// them alike: a reopen (the process ends, the WAL stays) keeps both.
        durable: bool,
    },
    Complete {
        lease: usize,
        body: u8,
    },
    FailRetry {
        lease: usize,
    },
    FailTerminal {
        lease: usize,
        body: u8,
    },
    Renew {
        lease: usize,
        s: u64,
    },
    Checkpoint {
        lease: usize,
        phase: u8,
    },
    Forget {
        t: usize,
        k: usize,
    },
    Advance {
        s: u64,
    },
    Sweep {
        limit: usize,
    },
    Compact,
    Reopen,
    /// Unique constraint ops on value `v` of one index, by plain owner `OWNERS[o]` or, for `o`
    /// past them, the current holder (`Model::owner_for`).
    Reserve {
        v: u8,
        o: u8,
    },
    ReserveFor {
        lease: usize,
        v: u8,
    },
    Release {
        v: u8,
        o: u8,
    },
    /// A consumer delivery of message `k` to group `g` (the consumer namespace).
    Begin {
        g: usize,
        k: usize,
    },
    /// A failed processing attempt of the lease (retry, or poison at the limit).
    FailMessage {
        lease: usize,
    },
    /// One commit: an entity write and the completion of a lease, all or nothing.
    CommitPutComplete {
        lease: usize,
        t: usize,
        k: usize,
        expect: u8,
        val: u8,
    },
    EntityPut {
        t: usize,
        k: usize,
        expect: u8,
        val: u8,
    },
    EntityDelete {
        t: usize,
        k: usize,
        expect: u8,
    },
    /// Offset `offset` of partition `p` (group "g", topic "t") processed out of order.
    MarkProcessed {
        p: u32,
        offset: u64,
    },
    /// Every offset of partition `p` up to `offset` processed.
    CommitWatermark {
        p: u32,
        offset: u64,
    },
}

impl Op {
    /// Decodes fuzzer bytes into at most `max_ops` operations. One byte selects the operation
    /// (weighted like the proptest strategy: 41 slots, except that compaction and reopen take a
    /// second byte, below 64, and are four times rarer), the following bytes its parameters,
    /// reduced modulo the tiny key space; a missing parameter byte reads as zero. Every byte
    /// string decodes, so the fuzzer never wastes an input.
    pub fn decode_all(data: &[u8], max_ops: usize) -> Vec<Op> {
        let mut it = data.iter().copied();
        let mut ops = Vec::new();
        while ops.len() < max_ops {
            let Some(sel) = it.next() else { break };
            let mut p = || it.next().unwrap_or(0);
            let op = match sel % 41 {
                0..=5 => {
                    let (t, k, fp) = (
                        usize::from(p() % 2),
                        usize::from(p() % 3),
                        usize::from(p() % 2),
                    );
                    let ret_s = 20 + u64::from(p() % 100);
                    let lease_s = (1 + u64::from(p() % 39)).min(ret_s);
                    Op::Claim {
                        t,
                        k,
                        fp,
                        lease_s,
                        ret_s,
                        durable: p() % 4 == 0,
                    }
                }
                6..=8 => Op::Complete {
                    lease: usize::from(p()),
                    body: p(),
                },
                9 => Op::FailRetry {
                    lease: usize::from(p()),
                },
                10 => Op::FailTerminal {
                    lease: usize::from(p()),
                    body: p(),
                },
                11 => Op::Renew {
                    lease: usize::from(p()),
                    s: 1 + u64::from(p()) % (MAX_LEASE_S - 1),
                },
                12 => Op::Checkpoint {
                    lease: usize::from(p()),
                    phase: p(),
                },
                13 => Op::Forget {
                    t: usize::from(p() % 2),
                    k: usize::from(p() % 3),
                },
                14..=17 => Op::Advance {
                    s: 1 + u64::from(p() % 59),
                },
                18 => Op::Sweep {
                    limit: 1 + usize::from(p() % 3),
                },
                19..=20 => {
                    let (t, k, expect) = (usize::from(p() % 2), usize::from(p() % 3), p() % 4);
                    Op::EntityPut {
                        t,
                        k,
                        expect,
                        val: p(),
                    }
                }
                21 => Op::EntityDelete {
                    t: usize::from(p() % 2),
                    k: usize::from(p() % 3),
                    expect: p() % 4,
                },
                22..=23 => {
                    let lease = usize::from(p());
                    let (t, k, expect) = (usize::from(p() % 2), usize::from(p() % 3), p() % 4);
                    Op::CommitPutComplete {
                        lease,
                        t,
                        k,
                        expect,
                        val: p(),
                    }
                }
                24..=27 => Op::Begin {
                    g: usize::from(p() % 2),
                    k: usize::from(p() % 2),
                },
                28..=30 => Op::FailMessage {
                    lease: usize::from(p()),
                },
                31..=32 => Op::Reserve {
                    v: p() % 2,
                    o: p() % 8,
                },
                33..=34 => Op::ReserveFor {
                    lease: usize::from(p()),
                    v: p() % 2,
                },
                35 => Op::Release {
                    v: p() % 2,
                    o: p() % 8,
                },
                // Compaction and reopen cost a hundred steps each (a reopen writes and parses
                // RocksDB's options file): one in four of their selector bytes takes them, the
                // rest decode as a sweep, so an input holds a few of them, not dozens.
                36 | 37 if p() >= 64 => Op::Sweep { limit: 3 },
                36 => Op::Compact,
                37 => Op::Reopen,
                38..=39 => Op::MarkProcessed {
                    p: u32::from(p() % 2),
                    offset: u64::from(p() % 12),
                },
                _ => Op::CommitWatermark {
                    p: u32::from(p() % 2),
                    offset: u64::from(p() % 12),
                },
            };
            ops.push(op);
        }
        ops
    }
}
