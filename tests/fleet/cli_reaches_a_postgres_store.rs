//! The operator commands against a store on PostgreSQL: `idemdb migrate --postgres URL` applies
//! the schema (and `--status` lists it), `inspect` shows a record, `forget` deletes it, `sweep`
//! deletes expired records, and `migrate --to 0` removes every idemdb table.

use std::process::Command;
use std::time::Duration;

use idemdb::{
    Begin, Claim, ClaimOptions, Config, ConsumerOptions, Expect, MessageFailed, Reservation,
    Response,
};

use crate::harness::{drop_schema, fresh_schema, in_schema};

fn idemdb(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idemdb"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    let url = in_schema(&schema);
    let (ok, out) = idemdb(&["migrate", "--postgres", &url, "--status"]);
    assert!(ok && out.contains("not applied"), "{out}");
    let (ok, out) = idemdb(&["migrate", "--postgres", &url]);
    assert!(
        ok && out.contains("ran schema steps [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"),
        "{out}"
    );
    let (ok, out) = idemdb(&["migrate", "--postgres", &url, "--status"]);
    assert!(ok && !out.contains("not applied"), "{out}");

    let store = Config::postgres(&url)
        .migrate_on_open(false)
        .open_async()
        .await
        .unwrap();
    let o = ClaimOptions::default().retention(Duration::from_secs(60));
    let Claim::Acquired(l) = store.claim("acme", "k1", b"fp", o).await.unwrap() else {
        panic!("acquires");
    };
    store
        .complete(&l, Response::new(b"receipt".to_vec()).with_status(201))
        .await
        .unwrap()
        .unwrap();
    let (ok, out) = idemdb(&["inspect", "--postgres", &url, "acme", "k1"]);
    assert!(
        ok && out.contains("completed at") && out.contains("7 body bytes"),
        "{out}"
    );
    // stats counts every kind of row; forget --consumer clears a consumer message.
    let Begin::Process(m) = store
        .begin("orders", "m1", ConsumerOptions::default())
        .await
        .unwrap()
    else {
        panic!("a new message");
    };
    let poisoned = store
        .fail_message(&m, ConsumerOptions::default().max_attempts(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(poisoned, MessageFailed::Poisoned { attempts: 1 });
    store
        .put_entity("acme", "e1", Expect::Absent, "v")
        .await
        .unwrap()
        .unwrap();
    store
        .put_entity("acme", "e2", Expect::Absent, "v")
        .await
        .unwrap()
        .unwrap();
    store
        .delete_entity("acme", "e2", Expect::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.reserve("email", &[b"a@x"], "u1").await.unwrap(),
        Reservation::Reserved
    );
    store.mark_processed("g", "topic", 0, 5).await.unwrap();
    let (ok, out) = idemdb(&["stats", "--postgres", &url]);
    let line = |name: &str| -> String {
        out.lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().last().unwrap_or("").to_owned())
            .unwrap_or_default()
    };
    assert!(ok, "{out}");
    assert_eq!(line("requests completed"), "1", "{out}");
    assert_eq!(line("messages failed"), "1", "{out}");
    assert_eq!(line("entities "), "1", "{out}");
    assert_eq!(line("entity tombstones"), "1", "{out}");
    assert_eq!(line("reservations"), "1", "{out}");
    assert_eq!(line("offset windows"), "1", "{out}");
    assert!(line("table bytes").parse::<u64>().unwrap() > 0, "{out}");
    let (ok, out) = idemdb(&["forget", "--postgres", &url, "--consumer", "orders", "m1"]);
    assert!(ok && out.contains("forgotten"), "{out}");
    assert!(matches!(
        store
            .begin("orders", "m1", ConsumerOptions::default())
            .await
            .unwrap(),
        Begin::Process(_)
    ));
    let (ok, out) = idemdb(&["forget", "--postgres", &url, "acme", "k1"]);
    assert!(ok && out.contains("forgotten"), "{out}");
    let (ok, out) = idemdb(&["inspect", "--postgres", &url, "acme", "k1"]);
    assert!(!ok && out.contains("no live record"), "{out}");
    let (ok, out) = idemdb(&["sweep", "--postgres", &url]);
    assert!(ok && out.contains("swept 0 expired records"), "{out}");
    drop(store);

    let (ok, out) = idemdb(&["migrate", "--postgres", &url, "--to", "0"]);
    assert!(
        ok && out.contains("ran schema steps [10, 9, 8, 7, 6, 5, 4, 3, 2, 1]"),
        "{out}"
    );
    let (ok, out) = idemdb(&["inspect", "--postgres", &url, "acme", "k1"]);
    assert!(
        !ok && out.contains("idemdb migrate --postgres URL"),
        "{out}"
    );
    drop_schema(&schema).await;
}
