//! `idemdb inspect --json` and `idemdb stats --json` read a store that another process holds open
//! (a read-only follower beside the writer), and find every kind of data it wrote: request
//! records, consumer messages, entities, causal entities, replica vectors, reservations and
//! offset windows; an exact key, a prefix, a damaged value shown rather than failing the
//! listing. `idemdb forget` on the same directory is refused, naming the other process.

use std::io::BufRead;
use std::process::Command;
use std::time::Duration;

use idemdb::{
    Begin, ClaimOptions, Config, ConsumerOptions, Durability, Expect, Response, VersionVector,
};
use serde_json::Value;

use crate::common::spawn_child;

const CHILD: &str = "inspect_reads_every_kind_from_a_store_in_use::writer_holds_the_store";

fn idemdb(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idemdb"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The writer process, killed when the test ends (passed or failed).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The child: writes one of every kind, says READY, and keeps the store open until killed.
#[test]
#[ignore = "run by the parent test, in a process of its own"]
fn writer_holds_the_store() {
    let dir = std::env::var("IDEMDB_INSPECT_DIR").unwrap();
    let store = Config::new(&dir)
        .durability(Durability::Synced)
        .open()
        .unwrap();
    let o = ClaimOptions::default().retention(Duration::from_secs(3600));
    let idemdb::Claim::Acquired(l) = store.claim("acme", "order-1", b"fp", o).unwrap() else {
        panic!("acquires");
    };
    store
        .complete(&l, Response::new(b"receipt-1".to_vec()).with_status(201))
        .unwrap()
        .unwrap();
    let idemdb::Claim::Acquired(_held) = store
        .claim("acme", "order-2", b"fp", o.durable_pending(true))
        .unwrap()
    else {
        panic!("acquires");
    };
    let Begin::Process(m) = store
        .begin("billing", "msg-1", ConsumerOptions::default())
        .unwrap()
    else {
        panic!("a new message");
    };
    store
        .complete(&m, Response::new(Vec::new()))
        .unwrap()
        .unwrap();
    store
        .put_entity("acme", "cart-1", Expect::Absent, b"{\"items\":2}".to_vec())
        .unwrap()
        .unwrap();
    store
        .causal_put(
            "acme",
            "doc-1",
            "replica-a",
            &VersionVector::new(),
            b"draft".to_vec(),
        )
        .unwrap();
    let mut vv = VersionVector::new();
    vv.observe("replica-a", 7);
    store.merge_replica_vector("acme", "rep-1", &vv).unwrap();
    let r = store
        .reserve("emails", &[b"bob@example.com"], "user-7")
        .unwrap();
    assert_eq!(r, idemdb::Reservation::Reserved);
    for offset in [0, 1, 2, 5] {
        store
            .mark_processed("billing", "invoices", 3, offset)
            .unwrap();
    }
    println!("READY 0 0");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn inspect_and_stats_beside_the_writer() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_owned();
    let mut child = KillOnDrop(spawn_child(CHILD, &[("IDEMDB_INSPECT_DIR", path.clone())]));
    let stdout = child.0.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    // The test harness prints its own words first, on the same line.
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("READY"));
    assert!(ready.is_some(), "the writer ended before it was ready");

    let (ok, out, err) = idemdb(&["inspect", "--db", &path, "--kind", "all", "--json"]);
    assert!(ok, "{out}{err}");
    let items: Vec<Value> = serde_json::from_str(&out).unwrap();
    let find = |kind: &str, key: &str| {
        items
            .iter()
            .find(|i| i["kind"] == kind && i["key"] == key)
            .unwrap_or_else(|| panic!("no {kind} {key} in {out}"))
            .clone()
    };
    let rec = find("records", "order-1");
    assert_eq!(rec["scope"], "acme");
    assert_eq!(rec["state"], "completed");
    assert_eq!(rec["response"]["body"], "receipt-1");
    assert_eq!(rec["response"]["meta"]["status"], "201");
    assert_eq!(find("records", "order-2")["state"], "pending");
    let msg = find("messages", "msg-1");
    assert_eq!(
        (msg["scope"].clone(), msg["state"].clone()),
        ("billing".into(), "completed".into())
    );
    let cart = find("entities", "cart-1");
    assert_eq!(
        (cart["version"].clone(), cart["value"].clone()),
        (1.into(), "{\"items\":2}".into())
    );
    let doc = find("causal", "doc-1");
    assert_eq!(doc["siblings"][0]["value"], "draft");
    assert_eq!(doc["siblings"][0]["actor"], "replica-a");
    assert_eq!(find("vectors", "rep-1")["vector"]["replica-a"], 7);
    let email = find("reservations", "bob@example.com");
    assert_eq!(
        (email["scope"].clone(), email["owner"].clone()),
        ("emails".into(), "user-7".into())
    );
    assert_eq!(email["live"], true);
    let window = find("offsets", "invoices");
    assert_eq!(window["partition"], 3);
    assert_eq!(window["watermark"], 2);
    assert_eq!(window["processed_above"], serde_json::json!([5]));
    assert_eq!(items.len(), 8, "{out}");

    // An exact key, a prefix, and a key that is not there.
    let (ok, out, _) = idemdb(&["inspect", "--db", &path, "--json", "acme", "order-1"]);
    let one: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert!(ok && one.len() == 1 && one[0]["key"] == "order-1", "{out}");
    let (ok, out, _) = idemdb(&[
        "inspect", "--db", &path, "--json", "--prefix", "acme", "order-",
    ]);
    let both: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert!(ok && both.len() == 2, "{out}");
    let (ok, out, _) = idemdb(&["inspect", "--db", &path, "acme", "order-9"]);
    assert!(!ok && out.contains("nothing stored"), "{out}");
    // The human table names the state.
    let (ok, out, _) = idemdb(&["inspect", "--db", &path, "--kind", "records", "acme"]);
    assert!(
        ok && out.contains("completed at") && out.contains("pending"),
        "{out}"
    );

    // stats reads it too; forget needs the writer's lock and says so.
    let (ok, out, err) = idemdb(&["stats", "--db", &path, "--json"]);
    let stats: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert!(ok && stats["estimated_records"].as_u64().is_some(), "{out}");
    let (ok, out, err) = idemdb(&["forget", "--db", &path, "acme", "order-1"]);
    assert!(!ok && err.contains("another process"), "{out}{err}");

    drop(child);
    // The writer is gone: what it wrote is unchanged (the follower wrote nothing).
    let (ok, out, _) = idemdb(&["inspect", "--db", &path, "--json", "acme", "order-1"]);
    assert!(ok && out.contains("receipt-1"), "{out}");
}
