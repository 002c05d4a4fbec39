//! Every token a store hands out after a failover is greater than every token handed out before
//! it, by any store, even while a store still holds a block of tokens drawn on the old timeline
//! (regression, issue 43 item 5). Buffered claims take their tokens from blocks a store drew
//! earlier (`fences.rs`); before the fix a store used such a block for up to a second after the
//! draw, on whatever server it then reached, so after an asynchronous failover it could acquire
//! a key with a token below that key's lost holder's (a resource that fences with "greater than"
//! would then take the lost holder's late writes over the new holder's).
//!
//! An asynchronous pair. Instance A reaches the primary through a TCP relay (its URL: the relay,
//! then the standby, `target_session_attrs=read-write`); instance B reaches it directly. The
//! standby is promoted while the old primary still runs (the split brain of a failover whose old
//! primary has not yet been fenced); on the old primary A draws a block (its first claim), then
//! B draws a later one and acquires `contested` with a token above all of A's block. The relay
//! is cut (A's old primary gone) and A claims `contested` at once, well within its block's
//! second: the key has no row on the new primary (B's claim never reached it), so A acquires it,
//! and its token must be above B's, of the new timeline; so must every token A hands out after.

use std::time::Duration;

use idemdb::{AsyncStore, Claim, ClaimOptions};

use crate::lab::{self, split_fence, until_answered, Lab};
use crate::relay::{self, Relay};

const TENANT: &str = "blocks";
const LEASE: Duration = Duration::from_secs(60);
const AFTER: usize = 20;

async fn acquire(store: &AsyncStore, key: &str) -> u64 {
    let got = until_answered("a claim", || {
        store.claim(TENANT, key, "fp", ClaimOptions::default().lease(LEASE))
    })
    .await;
    match got {
        Claim::Acquired(l) => l.fence(),
        other => panic!("the claim of {key} answered {other:?}, not Acquired"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_block_from_before_a_failover_is_never_used_after() {
    let lab = tokio::task::spawn_blocking(|| Lab::pair(false))
        .await
        .unwrap();
    let primary = relay::server_addr(lab.primary_url());
    let standby = relay::server_addr(lab.standby_url());
    let relay = Relay::start(primary);
    let through_relay = format!(
        "postgres://postgres@127.0.0.1:{},{standby}/test?target_session_attrs=read-write",
        relay.port
    );
    let a = lab::open_buffered(&through_relay, 2, LEASE).await;
    let b = lab::open_buffered(lab.primary_url(), 2, LEASE).await;

    let promoted_at = lab.blocking(|l| l.promote()).await;
    // On the old primary (timeline 1): A's block, then B's, whose first token is above A's block.
    let a_first = acquire(&a, "a-first").await;
    let held = acquire(&b, "contested").await;
    assert!(
        held > a_first,
        "B drew its block after A ({held} after {a_first})"
    );
    let old_timeline = split_fence(held).0;

    relay.down();
    let taken = acquire(&a, "contested").await;
    println!(
        "promoted at {promoted_at}; A's block from {a_first}, B holds `contested` with {held} \
         ({:?}); A acquired it after the failover with {taken} ({:?})",
        split_fence(held),
        split_fence(taken)
    );
    assert!(
        split_fence(taken).0 > old_timeline,
        "A acquired `contested` on the new primary with a token of the old timeline ({:?}): a \
         block drawn before the failover was used after it",
        split_fence(taken)
    );
    assert!(
        taken > held,
        "A acquired `contested` with {taken}, below the token its lost holder B has ({held})"
    );
    for j in 0..AFTER {
        let t = acquire(&a, &format!("after-{j}")).await;
        assert!(
            t > held,
            "A handed out {t} after the failover, not above {held} handed out before it"
        );
    }
}
