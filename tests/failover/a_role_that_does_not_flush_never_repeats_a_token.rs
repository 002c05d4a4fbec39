//! A server set not to flush commits (`synchronous_commit = off` for the role, the database or
//! the whole server, as some managed services offer for speed) still never hands a fencing token
//! out twice (regression, issue 43 item 5). A token is unique across a crash only if the
//! sequence record that covers it reached the WAL on disk before the token was handed out: the
//! statements that draw tokens (a buffered store's block, a claim that draws its own) make their
//! commit wait for the flush (`local`) when the session's setting is `off`; before the fix they
//! committed as the server said, and a crash lost the record.
//!
//! The primary of a pair is set `synchronous_commit = off` for every session and made to write
//! async commits' WAL only every 10 s (`wal_writer_delay`: until then a commit's WAL stays in
//! the server's memory unless a full WAL page makes the WAL writer write it), and the server is
//! SIGKILLed (every process) and started again on the same data directory right after a
//! statement that drew tokens, twice:
//! - a buffered store (its tokens from a block) draws a new block: its first block is a second
//!   old (`fences.rs`'s `MAX_AGE`), so its next claim draws one;
//! - a store without buffered claims (each claim draws its own token) claims until its claim's
//!   `nextval` wrote the sequence's record (the sequence's `log_cnt` is back at 32).
//!
//! After each restart, new stores of both kinds claim keys: no token handed out after a crash was
//! handed out before it, and each store's tokens increase.

use std::collections::BTreeMap;
use std::time::Duration;

use idemdb::{AsyncStore, Claim, ClaimOptions};

use crate::lab::{self, until_answered, Lab, Role};

const TENANT: &str = "unflushed";
const LONG: Duration = Duration::from_secs(120);
const AFTER: usize = 40;

async fn acquire(store: &AsyncStore, key: &str) -> u64 {
    let opts = ClaimOptions::default().lease(LONG);
    match until_answered("a claim", || store.claim(TENANT, key, "fp", opts)).await {
        Claim::Acquired(l) => l.fence(),
        other => panic!("the claim of {key} answered {other:?}, not Acquired"),
    }
}

/// Tokens handed out, and by whom: every token must be new.
#[derive(Default)]
struct Tokens {
    seen: BTreeMap<u64, String>,
    repeated: Vec<String>,
}

impl Tokens {
    fn note(&mut self, who: &str, t: u64) {
        if let Some(first) = self.seen.insert(t, who.to_string()) {
            self.repeated.push(format!(
                "{who} handed out {t}, which {first} had handed out"
            ));
        }
    }
}

/// The SIGKILL and crash recovery, then new stores of both kinds claiming `AFTER` keys each.
async fn crash_then_claim(lab: &Lab, url: &str, round: &str, tokens: &mut Tokens) {
    lab.blocking(|l| {
        l.kill_primary();
        l.start_primary();
    })
    .await;
    let buffered = lab::open_buffered(url, 2, LONG).await;
    let drawing = lab::open(url, 2, LONG).await;
    for (who, store) in [("buffered", &buffered), ("drawing", &drawing)] {
        let mut last = 0;
        for j in 0..AFTER {
            let t = acquire(store, &format!("{round}-after-{who}-{j}")).await;
            assert!(t > last, "a {who} store handed out {t} after {last}");
            last = t;
            tokens.note(&format!("a {who} store opened after crash {round}"), t);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_does_not_flush_never_repeats_a_token() {
    let lab = tokio::task::spawn_blocking(|| Lab::pair(false))
        .await
        .unwrap();
    lab.blocking(|l| {
        l.psql(Role::Primary, "ALTER SYSTEM SET wal_writer_delay = '10s'");
        l.psql(Role::Primary, "ALTER SYSTEM SET synchronous_commit = off");
        l.psql(Role::Primary, "SELECT pg_reload_conf()");
    })
    .await;
    let url = lab.primary_url().to_string();
    let mut tokens = Tokens::default();

    // 1. A buffered store draws a block, and the server crashes right after.
    let buffered = lab::open_buffered(&url, 2, LONG).await;
    for j in 0..5 {
        let t = acquire(&buffered, &format!("first-block-{j}")).await;
        tokens.note("the buffered store", t);
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let t = acquire(&buffered, "second-block").await;
    tokens.note("the buffered store (a new block)", t);
    crash_then_claim(&lab, &url, "1", &mut tokens).await;

    // 2. A claim draws its own token and writes the sequence's record; the server crashes.
    let drawing = lab::open(&url, 2, LONG).await;
    let mut logged = false;
    for j in 0..200 {
        let t = acquire(&drawing, &format!("drawn-{j}")).await;
        tokens.note("the drawing store", t);
        let log_cnt = lab
            .blocking(|l| l.psql(Role::Primary, "SELECT log_cnt FROM idemdb_fence"))
            .await;
        if log_cnt == "32" {
            logged = true;
            break;
        }
    }
    assert!(
        logged,
        "no claim of the drawing store wrote the sequence's record in 200 claims"
    );
    crash_then_claim(&lab, &url, "2", &mut tokens).await;

    println!(
        "synchronous_commit off: {} tokens handed out around two crashes, {} of them twice",
        tokens.seen.len(),
        tokens.repeated.len()
    );
    assert!(
        tokens.repeated.is_empty(),
        "tokens handed out twice (a sequence record the crash lost covered them): {:?}",
        tokens.repeated
    );
}
