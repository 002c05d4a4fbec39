//! PostgreSQL connections terminated while calls wait on them (every 15 ms the table is locked for
//! 20 ms, then `pg_terminate_backend` ends every connection of the store) while 8 tasks process
//! 200 keys (each effect takes 10 ms): a call that loses its connection fails with
//! `Error::Unavailable` and nothing is acquired or replayed from it; the tasks retry. Afterwards
//! every key is completed, every effect ran exactly once (an effect runs only under an acquired
//! claim, and a completion whose answer was lost is retried: `Finished` then means it was
//! stored), and no key stayed blocked past its lease: each finished within a bound of leases.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemdb::{AsyncStore, Claim, ClaimOptions, Config, Error, LeaseLost, Response};
use parking_lot::Mutex;

use crate::harness::{admin, drop_schema, fresh_schema, in_schema};

const KEYS: usize = 200;
const LEASE: Duration = Duration::from_millis(1_500);

async fn process(s: &AsyncStore, key: String, effects: &Mutex<HashMap<String, u32>>) -> u32 {
    let o = ClaimOptions::default().lease(LEASE);
    let mut unavailable = 0;
    loop {
        match s.claim("t", &key, b"fp", o).await {
            Err(Error::Unavailable { .. }) => unavailable += 1,
            Err(e) => panic!("{key}: {e}"),
            Ok(Claim::Completed(r)) => {
                assert_eq!(r.response.body, key.as_bytes());
                return unavailable;
            }
            Ok(Claim::InProgress { retry_after }) => {
                tokio::time::sleep(retry_after.min(Duration::from_millis(200))).await;
            }
            Ok(Claim::Acquired(lease)) => {
                *effects.lock().entry(key.clone()).or_default() += 1;
                // The effect takes a while, so terminations also land between claim and complete.
                tokio::time::sleep(Duration::from_millis(10)).await;
                loop {
                    match s
                        .complete(&lease, Response::new(key.clone().into_bytes()))
                        .await
                    {
                        Ok(Ok(())) | Ok(Err(LeaseLost::Finished)) => return unavailable,
                        Err(Error::Unavailable { .. }) => unavailable += 1,
                        other => panic!("{key}: completing gave {other:?}"),
                    }
                }
            }
            Ok(other) => panic!("{key}: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    // Short: PostgreSQL keeps 63 bytes of an application name.
    let app = format!("idemdb-faults-{}", std::process::id());
    let store = Config::postgres(format!("{}&application_name={app}", in_schema(&schema)))
        .pool_size(8)
        .connect_timeout(Duration::from_secs(2))
        .open_async()
        .await
        .unwrap();
    let effects = Arc::new(Mutex::new(HashMap::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (done, app, schema) = (done.clone(), app.clone(), schema.clone());
        tokio::spawn(async move {
            let mut killed = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(15)).await;
                // Lock the table for a moment, so that calls are in flight (waiting on the lock)
                // when their connections are terminated, then terminate every connection of the
                // store: the waiting calls lose their answer, the idle ones are replaced.
                let sql = format!(
                    "BEGIN; LOCK TABLE {schema}.idemdb_requests IN ACCESS EXCLUSIVE MODE; \
                     SELECT pg_sleep(0.02); \
                     SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = '{app}'; COMMIT"
                );
                admin(&sql).await;
                killed += 1;
            }
            killed
        })
    };
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (s, effects) = (store.clone(), effects.clone());
        tasks.push(tokio::spawn(async move {
            let mut unavailable = 0;
            for k in (t..KEYS).step_by(8) {
                let t0 = Instant::now();
                unavailable += process(&s, format!("k{k}"), &effects).await;
                // A key never waits for more than a few leases: one lost claim blocks it for at
                // most one lease.
                assert!(t0.elapsed() < LEASE * 8, "k{k} took {:?}", t0.elapsed());
            }
            unavailable
        }));
    }
    let mut unavailable = 0;
    for t in tasks {
        unavailable += t.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = killer.await.unwrap();
    let effects = effects.lock().clone();
    assert_eq!(effects.len(), KEYS);
    assert!(effects.values().all(|&n| n == 1), "{effects:?}");
    assert!(
        unavailable > 0,
        "the faults must have hit some calls ({rounds} rounds of terminations in {:?})",
        start.elapsed()
    );
    for k in 0..KEYS {
        // A pooled connection the last round terminated answers once with `Unavailable` (the
        // pool drops it then): the store recovers by itself, so ask again.
        let mut tries = 0;
        let info = loop {
            match store.get("t", format!("k{k}")).await {
                Err(idemdb::Error::Unavailable { .. }) if tries < 5 => tries += 1,
                other => break other.unwrap().unwrap(),
            }
        };
        assert!(matches!(info.state, idemdb::RecordState::Completed(_)));
    }
    drop(store);
    drop_schema(&schema).await;
}
