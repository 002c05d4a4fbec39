//! The operator commands against a store on PostgreSQL: `idemdb migrate --postgres URL` applies
//! the schema (and `--status` lists it), `inspect` shows a record, `forget` deletes it, `sweep`
//! deletes expired records, and `migrate --to 0` removes every idemdb table.

use std::process::Command;
use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Config, Response};

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
    assert!(ok && out.contains("ran schema steps [1, 2, 3]"), "{out}");
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
    let (ok, out) = idemdb(&["forget", "--postgres", &url, "acme", "k1"]);
    assert!(ok && out.contains("forgotten"), "{out}");
    let (ok, out) = idemdb(&["inspect", "--postgres", &url, "acme", "k1"]);
    assert!(!ok && out.contains("no live record"), "{out}");
    let (ok, out) = idemdb(&["sweep", "--postgres", &url]);
    assert!(ok && out.contains("swept 0 expired records"), "{out}");
    drop(store);

    let (ok, out) = idemdb(&["migrate", "--postgres", &url, "--to", "0"]);
    assert!(ok && out.contains("ran schema steps [3, 2, 1]"), "{out}");
    let (ok, out) = idemdb(&["inspect", "--postgres", &url, "acme", "k1"]);
    assert!(
        !ok && out.contains("idemdb migrate --postgres URL"),
        "{out}"
    );
    drop_schema(&schema).await;
}
