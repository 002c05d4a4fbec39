//! Regression tests of the correctness and security fixes: one behaviour per module, each named for
//! what it proves, each failing on the code before its fix.

mod common;

/// Changes, with a raw RocksDB handle, the first value of column family `cf` whose key `pick`s,
/// as `damage` says (the store must be closed).
fn damage_first(
    dir: &std::path::Path,
    cf: &str,
    pick: impl Fn(&[u8]) -> bool,
    damage: impl Fn(&mut Vec<u8>),
) {
    let db = common::raw_open(dir);
    let cf = db.cf_handle(cf).unwrap();
    let (key, mut value) = db
        .iterator_cf(cf, rocksdb::IteratorMode::Start)
        .map(|kv| kv.unwrap())
        .find(|(k, _)| pick(k))
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .expect("a value to damage");
    damage(&mut value);
    db.put_cf(cf, &key, &value).unwrap();
}

/// A reservation bound to a lease belongs to the whole lease identity (namespace, tenant, key):
/// tenant B's lease on the same key string, a consumer message with that id, or a plain owner that
/// spells the key can neither take, re-bind nor release it.
mod reservation_bound_to_a_lease_is_owned_by_its_whole_identity {
    use idemdb::{Begin, ConsumerOptions, LeaseLost, ManualClock, Released, Reservation, Response};

    use super::common;

    #[test]
    fn other_tenants_messages_and_plain_owners_cannot_take_it() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = common::open(dir.path(), &clock);
        let value: &[&[u8]] = &[b"alice@example.com"];
        let taken = Reservation::Taken { owner: Vec::new() };

        let a = common::acquire(&store, "tenant-a", "k1", b"fp");
        assert_eq!(
            store.reserve_for(&a, "email", value).unwrap(),
            Ok(Reservation::Reserved)
        );
        let b = common::acquire(&store, "tenant-b", "k1", b"fp");
        assert_eq!(
            store.reserve_for(&b, "email", value).unwrap(),
            Ok(taken.clone()),
            "another tenant's lease on the same key string took the value"
        );
        let Begin::Process(m) = store
            .begin("tenant-a", "k1", ConsumerOptions::default())
            .unwrap()
        else {
            panic!("a new message is processed");
        };
        assert_eq!(
            store.reserve_for(&m, "email", value).unwrap(),
            Ok(taken.clone())
        );
        assert_eq!(store.reserve("email", value, "k1").unwrap(), taken);
        assert_eq!(
            store.release_reservation("email", value, "k1").unwrap(),
            Released::NotOwner { owner: Vec::new() }
        );
        assert_eq!(
            store.reservation_owner("email", value).unwrap(),
            Some(Vec::new())
        );
        // The holder itself re-binds; once it completes, the value is free.
        assert_eq!(
            store.reserve_for(&a, "email", value).unwrap(),
            Ok(Reservation::Reserved)
        );
        store.complete(&a, Response::new("ok")).unwrap().unwrap();
        assert_eq!(
            store.reserve_for(&b, "email", value).unwrap(),
            Ok(Reservation::Reserved)
        );
        store.complete(&b, Response::new("ok")).unwrap().unwrap();
        assert_eq!(
            store.reserve_for(&b, "email", value).unwrap(),
            Err(LeaseLost::Finished)
        );
    }
}

/// A clock stepped back before a reopen (NTP correction, VM snapshot restore) neither replays an
/// expired record nor revives a lease that ran out: the store's time is persisted.
mod clock_stepped_back_before_a_reopen_changes_nothing {
    use std::time::Duration;

    use idemdb::{Claim, ClaimOptions, Config, Durability, ManualClock, Response, Store};

    use super::common;

    const DAY: u64 = 24 * 3600 * 1000;

    #[test]
    fn expired_records_stay_expired_and_run_out_leases_stay_run_out() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let t0 = clock_now(&clock);
        let store = common::open(dir.path(), &clock);
        let done = common::acquire(&store, "t", "done", b"fp");
        store.complete(&done, Response::new("r")).unwrap().unwrap();
        clock.advance(Duration::from_secs(2 * 3600)); // past the 1 h retention
        let running = common::acquire_durable(&store, "t", "running", b"fp");
        clock.advance(Duration::from_secs(60)); // past the 10 s lease
        assert!(store.get("t", "done").unwrap().is_none());
        let seen = store.now();
        store.close().unwrap();

        clock.set(t0 - DAY);
        let store = common::open(dir.path(), &clock);
        assert!(
            store.now() >= seen,
            "store time went back across the reopen"
        );
        assert!(store.get("t", "done").unwrap().is_none());
        assert!(matches!(
            store
                .claim("t", "done", b"fp", ClaimOptions::default())
                .unwrap(),
            Claim::Acquired(_)
        ));
        match store
            .claim("t", "running", b"fp", ClaimOptions::default())
            .unwrap()
        {
            Claim::Acquired(l) => assert!(l.is_takeover() && l.fence() > running.fence()),
            other => panic!("a lease that ran out is taken over, got {other:?}"),
        }
    }

    fn clock_now(clock: &ManualClock) -> u64 {
        use idemdb::Clock;
        clock.now_millis()
    }

    /// The child: completes a record with a 1-minute retention, moves its clock a day ahead (the
    /// record expires, and the store uses that time), says so, and waits to be killed.
    #[test]
    #[ignore = "child process of killed_store_keeps_its_time"]
    fn child_uses_a_later_time_then_waits() {
        let dir = std::env::var("IDEMDB_TIME_DIR").unwrap();
        let clock = ManualClock::new(system_now());
        let store = Config::new(&dir)
            .clock(clock.clone())
            .durability(Durability::Synced)
            .sweep_interval(None)
            .open()
            .unwrap();
        let opts = ClaimOptions::default().retention(Duration::from_secs(60));
        let Claim::Acquired(l) = store.claim("t", "k", b"fp", opts).unwrap() else {
            panic!("a new key is acquired");
        };
        store.complete(&l, Response::new("r")).unwrap().unwrap();
        clock.advance(Duration::from_millis(DAY));
        assert!(store.get("t", "k").unwrap().is_none());
        println!("ACK {} 0", store.now());
        std::thread::sleep(Duration::from_secs(600));
    }

    /// SIGKILL after the store used a time a day ahead of the system clock: reopened on the
    /// system clock (a day "back"), it resumes at or after that time, and the record that expired
    /// at that time stays expired.
    #[test]
    fn killed_store_keeps_its_time() {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap().to_owned();
        let mut child = common::spawn_child(
            "clock_stepped_back_before_a_reopen_changes_nothing::child_uses_a_later_time_then_waits",
            &[("IDEMDB_TIME_DIR", path.clone())],
        );
        let stdout = child.stdout.take().expect("piped stdout");
        let used: u64 = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // The harness prints "test <name> ... " first, on the same line.
            .find_map(|l| l.split("ACK ").nth(1)?.split(' ').next()?.parse().ok())
            .expect("the child reports the time its store used");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let store: Store = Config::new(&path)
            .durability(Durability::Synced)
            .sweep_interval(None)
            .open()
            .unwrap();
        let now = store.now();
        assert!(
            now >= used,
            "store time {now} is before {used}, used before the kill"
        );
        assert!(
            now <= used + 1_000,
            "store time jumped more than the reserved second"
        );
        assert!(
            store.get("t", "k").unwrap().is_none(),
            "expired record is back"
        );
    }

    fn system_now() -> u64 {
        use idemdb::Clock;
        idemdb::SystemClock.now_millis()
    }
}

/// A merge over an offset window that does not decode keeps it (reads report it as corrupted)
/// instead of resetting it to empty, which would report processed offsets as new.
mod merge_over_an_unreadable_value_keeps_it {
    use idemdb::{Error, ManualClock};

    use super::common;

    #[test]
    fn damaged_window_is_reported_not_reset() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = common::open(dir.path(), &clock);
        store.commit_watermark("g", "topic", 0, 41).unwrap();
        store.mark_processed("g", "topic", 0, 50).unwrap();
        store.close().unwrap();
        // The window (kind byte 4) loses its checksum.
        super::damage_first(
            dir.path(),
            "versions",
            |k| k.first() == Some(&4),
            |v| v[1] ^= 0x55,
        );
        let store = common::open(dir.path(), &clock);
        // A blind merge lands on the damaged value; the read must not say "not processed".
        store.commit_watermark("g", "topic", 0, 7).unwrap();
        for offset in [3, 41, 50] {
            match store.is_processed("g", "topic", 0, offset) {
                Err(Error::Corrupted { .. }) => {}
                other => panic!("offset {offset}: expected corrupted, got {other:?}"),
            }
        }
        assert!(matches!(
            store.mark_processed("g", "topic", 0, 60),
            Err(Error::Corrupted { .. })
        ));
        // Compaction keeps it too.
        store.compact().unwrap();
        assert!(matches!(
            store.offset_window("g", "topic", 0),
            Err(Error::Corrupted { .. })
        ));
    }
}

/// An offset window is bounded at write time: the mark that would keep more than
/// `Config::max_offset_gaps` offsets above the watermark is refused, and the window stays readable.
mod offset_window_is_bounded_at_write_time {
    use idemdb::{InvalidInput, ManualClock};

    use super::common;

    #[test]
    fn mark_past_the_bound_is_refused() {
        const GAPS: u64 = 200;
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = common::config(dir.path(), &clock)
            .max_offset_gaps(GAPS as usize)
            .open()
            .unwrap();
        // Offset 0 never arrives: every mark stays above the watermark.
        for offset in 1..=GAPS {
            store.mark_processed("g", "t", 0, offset).unwrap();
        }
        assert!(matches!(
            common::invalid(store.mark_processed("g", "t", 0, GAPS + 1)),
            InvalidInput::LimitReached { limit: 200, .. }
        ));
        let w = store.offset_window("g", "t", 0).unwrap();
        assert_eq!(w.out_of_order_len(), GAPS as usize);
        assert!(!w.contains(GAPS + 1));
        // A mark already in the window, and the missing offset, are still accepted.
        store.mark_processed("g", "t", 0, 5).unwrap();
        store.mark_processed("g", "t", 0, 0).unwrap();
        let w = store.offset_window("g", "t", 0).unwrap();
        assert_eq!(w.watermark(), Some(GAPS));
        store.mark_processed("g", "t", 0, GAPS + 1).unwrap();
    }
}

/// A causal entity is bounded in total size (every sibling counted) and can be deleted.
mod causal_entity_is_bounded_and_can_be_deleted {
    use idemdb::{InvalidInput, ManualClock, VersionVector};

    use super::common;

    #[test]
    fn concurrent_siblings_cannot_pass_the_value_limit() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = common::config(dir.path(), &clock)
            .max_response_bytes(1_000)
            .open()
            .unwrap();
        let blind = VersionVector::new();
        let mut refused = None;
        for i in 0..20 {
            match store.causal_put("t", "cart", &format!("w{i}"), &blind, vec![7u8; 300]) {
                Ok(s) => assert_eq!(s.values.len(), i + 1),
                Err(e) => {
                    refused = Some((i, e));
                    break;
                }
            }
        }
        let (kept, e) = refused.expect("concurrent blind writes were never refused");
        assert!(matches!(
            common::invalid::<()>(Err(e)),
            InvalidInput::LimitReached { .. }
        ));
        let state = store.causal_get("t", "cart").unwrap();
        assert_eq!(
            state.values.len(),
            kept,
            "the refused write changed the entity"
        );
        // Writing with the merged context replaces every sibling.
        let s = store
            .causal_put("t", "cart", "w0", &state.context, vec![1u8; 10])
            .unwrap();
        assert_eq!(s.values.len(), 1);
        // A delete with a context that has seen everything removes the entity.
        let left = store.causal_delete("t", "cart", &s.context).unwrap();
        assert!(left.values.is_empty());
        assert!(store.causal_get("t", "cart").unwrap().values.is_empty());
        // A delete with an older context keeps the sibling written since.
        let s1 = store
            .causal_put("t", "cart", "a", &VersionVector::new(), vec![1])
            .unwrap();
        let s2 = store
            .causal_put("t", "cart", "b", &VersionVector::new(), vec![2])
            .unwrap();
        assert_eq!(s2.values.len(), 2);
        let left = store.causal_delete("t", "cart", &s1.context).unwrap();
        assert_eq!(left.values.len(), 1);
        assert_eq!(left.values[0].value, vec![2]);
    }
}

/// The response limit counts what is stored: each metadata entry's length prefixes too, so a
/// response within the limit always stores and reads back, and one over it is refused.
mod response_limit_counts_what_is_stored {
    use idemdb::{Claim, ClaimOptions, InvalidInput, ManualClock, Response};

    use super::common;

    #[test]
    fn many_small_metadata_entries_are_counted_with_their_overhead() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = common::config(dir.path(), &clock)
            .max_response_bytes(1_000)
            .open()
            .unwrap();
        // 300 entries of a 3-byte key and an empty value: 900 bytes of text, 1,500 stored.
        let mut big = Response::new(Vec::new());
        for i in 0..300 {
            big.meta.insert(format!("{i:03}"), String::new());
        }
        assert!(big.size() > 1_000);
        let lease = common::acquire(&store, "t", "k", b"fp");
        assert!(matches!(
            common::invalid(store.complete(&lease, big)),
            InvalidInput::TooLarge { .. }
        ));
        // Exactly at the limit: stored and replayed byte for byte.
        let mut fits = Response::new(Vec::new());
        for i in 0..198 {
            fits.meta.insert(format!("{i:03}"), String::new());
        }
        fits.body = vec![1; 1_000 - fits.size()];
        assert_eq!(fits.size(), 1_000);
        store.complete(&lease, fits.clone()).unwrap().unwrap();
        match store
            .claim("t", "k", b"fp", ClaimOptions::default())
            .unwrap()
        {
            Claim::Completed(r) => assert_eq!(r.response, fits),
            other => panic!("expected the replay, got {other:?}"),
        }
    }
}

/// A consumer message whose record is damaged can be cleared with `forget_message`, after which
/// the message is processed again.
mod corrupted_consumer_record_can_be_forgotten {
    use idemdb::{Begin, ConsumerOptions, Error, ManualClock, Response};

    use super::common;

    #[test]
    fn forget_message_clears_a_damaged_message() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = common::open(dir.path(), &clock);
        let opts = ConsumerOptions::default();
        let Begin::Process(l) = store.begin("group", "m1", opts).unwrap() else {
            panic!("a new message is processed");
        };
        store.complete(&l, Response::new("done")).unwrap().unwrap();
        store.close().unwrap();
        // A byte of the message's body flips: the checksum no longer holds.
        super::damage_first(
            dir.path(),
            "records",
            |_| true,
            |v| {
                let last = v.len() - 6;
                v[last] ^= 0xFF;
            },
        );
        let store = common::open(dir.path(), &clock);
        assert!(matches!(
            store.begin("group", "m1", opts),
            Err(Error::Corrupted { .. })
        ));
        assert!(!store.forget("group", "m1").unwrap(), "requests are apart");
        assert!(store.forget_message("group", "m1").unwrap());
        assert!(matches!(
            store.begin("group", "m1", opts).unwrap(),
            Begin::Process(_)
        ));
    }
}

/// `close` refuses while other handles keep the database open, with a typed error, and the others
/// keep working; once they are gone the directory reopens.
mod close_refuses_while_other_handles_are_alive {
    use idemdb::{Error, ManualClock};

    use super::common;

    #[test]
    fn close_with_a_live_clone_is_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = common::open(dir.path(), &clock);
        let clone = store.clone();
        assert_eq!(store.close(), Err(Error::InUse { other_handles: 1 }));
        let l = common::acquire_durable(&clone, "t", "k", b"fp");
        drop(l);
        clone.close().unwrap();
        let again = common::open(dir.path(), &clock);
        assert!(again.get("t", "k").unwrap().is_some());
    }
}

/// An entity key and a lease's record key that happen to be equal bytes (possible with tenants of
/// 256 bytes and more) are different keys: a commit naming both is not refused as a duplicate.
mod commit_compares_keys_per_column_family {
    use idemdb::{Expect, ManualClock, Response};

    use super::common;

    #[test]
    fn equal_bytes_in_different_column_families_commit() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = common::config(dir.path(), &clock)
            .max_tenant_len(300)
            .max_key_len(300)
            .open()
            .unwrap();
        // Entity key [1][0,1]["a"][1,1][id] equals the record key [1,0][tenant: 256 bytes][0,3]["key"].
        let mut id = vec![b'x'; 252];
        id.extend_from_slice(&[0, 3]);
        id.extend_from_slice(b"key");
        let mut tenant = vec![1, b'a', 1, 1];
        tenant.extend_from_slice(&[b'x'; 252]);
        assert_eq!(tenant.len(), 256);
        let lease = common::acquire(&store, std::str::from_utf8(&tenant).unwrap(), "key", b"fp");
        let committed = store
            .commit()
            .put("a", &id, Expect::Absent, b"v".to_vec())
            .complete(&lease, Response::new("done"))
            .apply()
            .expect("not refused as naming one key twice");
        assert!(committed.is_ok());
    }
}

/// An expiry past the ULID timestamp range (2^48 ms) is indexed at the end of the range, the
/// bound's own rule, instead of wrapping to an early time that a sweep would take for expired.
mod expiry_past_the_ulid_range_is_clamped_not_wrapped {
    use std::time::Duration;

    use idemdb::{ClaimOptions, ManualClock, Response};

    use super::common;

    #[test]
    fn sweep_keeps_the_index_entry_of_a_live_record() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new((1 << 48) - 60_000);
        let store = common::open(dir.path(), &clock);
        let opts = ClaimOptions::default().retention(Duration::from_secs(3600));
        let lease = match store.claim("t", "k", b"fp", opts).unwrap() {
            idemdb::Claim::Acquired(l) => l,
            other => panic!("{other:?}"),
        };
        store.complete(&lease, Response::new("r")).unwrap().unwrap();
        assert_eq!(store.sweep(100).unwrap(), 0);
        assert_eq!(
            store.physical_counts().unwrap(),
            (1, 1),
            "index entry swept"
        );
        clock.advance(Duration::from_secs(2 * 3600));
        assert_eq!(store.sweep(100).unwrap(), 1);
        assert_eq!(store.physical_counts().unwrap(), (0, 0));
    }
}

/// The demo's verdict does not depend on which client thread runs first (issue 28): a key is
/// reused for another amount only after its first request was answered, so the reuse always
/// meets a finished record and is refused; before, the reuse was a work item of its own right
/// behind the original, another thread could send it first, and about one run in five failed
/// with "storage engine error: unexpected mismatch". A small loop of both durabilities; each
/// run must pass all three checks, and a failed check of the demo must never be reported as the
/// store's error. (`docs/verification.md` records the 420-run loop at default sizes.)
mod demo_verdict_holds_whatever_order_the_clients_run_in {
    #[test]
    fn loop_of_demo_runs() {
        for run in 0..12 {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_idemdb"));
            cmd.args(["demo", "--payments", "800", "--clients", "32"]);
            if run % 2 == 1 {
                cmd.arg("--buffered");
            }
            let out = cmd.output().expect("run idemdb demo");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "run {run}: the demo failed:\n{text}");
            assert_eq!(text.matches("PASS").count(), 3, "run {run}:\n{text}");
            assert!(!text.contains("storage engine error"), "run {run}:\n{text}");
        }
    }
}

/// Errors keep their cause (issue 44 item 4): an operating-system failure is `Error::Io` with
/// the `std::io::Error` itself as its `source()` (its kind matchable, not recovered from text),
/// a database that cannot be reached is `Error::Unavailable` with the client's error as its
/// source, and a call the backend cannot make is `Error::Unsupported`, not invalid input.
mod errors_keep_their_cause {
    use std::error::Error as _;

    use idemdb::{Config, Error};

    #[test]
    fn an_io_failure_carries_the_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"not a directory").unwrap();
        let err = Config::new(file.join("store")).open().unwrap_err();
        let Error::Io { kind, .. } = &err else {
            panic!("opening a store under a file: {err:?}, not Error::Io");
        };
        let source = err.source().expect("an I/O error has its source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("the source is the std::io::Error itself");
        assert_eq!(io.kind(), *kind);
        assert!(!err.is_transient());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_database_carries_the_client_error() {
        // A port nothing listens on (bound, then closed).
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("postgres://postgres@127.0.0.1:{port}/test");
        let Err(err) = Config::postgres(&url)
            .connect_timeout(std::time::Duration::from_secs(2))
            .open_async()
            .await
        else {
            panic!("opened a store on {url}, where nothing listens");
        };
        assert!(
            matches!(err, Error::Unavailable { .. }),
            "a refused connection: {err:?}"
        );
        assert!(err.is_transient());
        assert!(
            err.source().is_some(),
            "the client's error is the source: {err:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_the_backend_lacks_is_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let store = Config::new(dir.path()).open_async().await.unwrap();
        let err = store.postgres_stats().await.unwrap_err();
        assert!(
            matches!(err, Error::Unsupported { .. }),
            "postgres_stats on the embedded store: {err:?}"
        );
        let Err(err) = store.transaction().await else {
            panic!("the embedded store opened an SQL transaction");
        };
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    }
}
