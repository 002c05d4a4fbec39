//! The application's own transaction on PostgreSQL (the transactional inbox): its statements
//! and idemdb's commit (a consumer message processed, a lease completed) commit together or not
//! at all; a lease lost to a takeover rolls back the application's rows too; a transaction
//! dropped unfinished, or rolled back, leaves nothing and does not hand the pool a connection
//! inside a transaction; values cross in both directions with their types. The embedded store
//! refuses a SQL transaction with a message that says what to do instead.

use std::time::Duration;

use idemdb::{Begin, CommitConflict, ConsumerOptions, Error, LeaseLost, Response, SqlValue};

use crate::harness::Harness;

async fn orders(h: &Harness) -> Vec<Vec<SqlValue>> {
    let mut tx = h.store.transaction().await.unwrap();
    let rows = tx
        .query("SELECT id, amount FROM orders ORDER BY id", &[])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    rows
}

fn order(id: &str, amount: i64) -> Vec<SqlValue> {
    vec![id.into(), amount.into()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let h = Harness::postgres(module_path!(), |c| c).await;
    let s = &h.store;
    let mut tx = s.transaction().await.unwrap();
    tx.execute(
        "CREATE TABLE orders (id text NOT NULL, amount integer NOT NULL, note text, data bytea)",
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let opts = ConsumerOptions::default().lease(Duration::from_secs(10));
    // Processed once: the order row and the message's mark commit together.
    let Begin::Process(lease) = s.begin("orders", "m1", opts).await.unwrap() else {
        panic!("new message");
    };
    let mut tx = s.transaction().await.unwrap();
    let n = tx
        .execute(
            "INSERT INTO orders (id, amount, note, data) VALUES ($1, $2, $3, $4)",
            &[
                "m1".into(),
                250.into(),
                SqlValue::Null,
                b"\x00\xff".as_slice().into(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let done = tx
        .commit_with(
            s.commit()
                .complete(&lease, Response::new(b"placed".to_vec())),
        )
        .await
        .unwrap();
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(orders(&h).await, vec![order("m1", 250)]);
    assert!(matches!(
        s.begin("orders", "m1", opts).await.unwrap(),
        Begin::Completed(r) if r.response.body == b"placed"
    ));

    // A worker whose lease was taken over: its order row is rolled back with its mark.
    let Begin::Process(stale) = s.begin("orders", "m2", opts).await.unwrap() else {
        panic!("new message");
    };
    h.advance(Duration::from_secs(11));
    let Begin::Process(current) = s.begin("orders", "m2", opts).await.unwrap() else {
        panic!("taken over");
    };
    let mut tx = s.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO orders (id, amount) VALUES ($1, $2)",
        &["m2".into(), 1.into()],
    )
    .await
    .unwrap();
    let r = tx
        .commit_with(s.commit().complete(&stale, Response::new(Vec::new())))
        .await
        .unwrap();
    assert!(
        matches!(
            r,
            Err(CommitConflict::Lease {
                op: 0,
                lost: LeaseLost::TakenOver { .. }
            })
        ),
        "{r:?}"
    );
    assert_eq!(orders(&h).await, vec![order("m1", 250)]);
    let mut tx = s.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO orders (id, amount) VALUES ($1, $2)",
        &["m2".into(), 2.into()],
    )
    .await
    .unwrap();
    tx.commit_with(s.commit().complete(&current, Response::new(Vec::new())))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(orders(&h).await, vec![order("m1", 250), order("m2", 2)]);

    // Dropped unfinished or rolled back: nothing stays, and the pool keeps working (more
    // transactions than connections in the pool).
    for i in 0..20 {
        let mut tx = s.transaction().await.unwrap();
        tx.execute(
            "INSERT INTO orders (id, amount) VALUES ($1, $2)",
            &[format!("gone-{i}").into(), 0.into()],
        )
        .await
        .unwrap();
        if i % 2 == 0 {
            drop(tx);
        } else {
            tx.rollback().await.unwrap();
        }
    }
    assert_eq!(orders(&h).await.len(), 2);

    // Values both ways; a type SqlValue does not hold is a typed error naming the cast.
    let mut tx = s.transaction().await.unwrap();
    let rows = tx
        .query(
            "SELECT note, data, amount::bigint, amount::smallint, true, 1.5::float8 FROM orders \
             WHERE id = $1",
            &["m1".into()],
        )
        .await
        .unwrap();
    assert_eq!(
        rows,
        vec![vec![
            SqlValue::Null,
            SqlValue::Bytes(vec![0, 255]),
            SqlValue::Int(250),
            SqlValue::Int(250),
            SqlValue::Bool(true),
            SqlValue::Float(1.5)
        ]]
    );
    let r = tx.query("SELECT now()", &[]).await;
    assert!(
        matches!(&r, Err(e @ Error::Misuse { message }) if message.contains("cast") && !e.is_transient()),
        "{r:?}"
    );
    drop(tx);
    // An integer too large for the column's type is refused, not truncated.
    let mut tx = s.transaction().await.unwrap();
    let r = tx
        .execute(
            "INSERT INTO orders (id, amount) VALUES ($1, $2)",
            &["big".into(), SqlValue::Int(1 << 40)],
        )
        .await;
    assert!(r.is_err(), "{r:?}");
    drop(tx);
    assert_eq!(orders(&h).await.len(), 2);
    h.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded() {
    let h = Harness::embedded(|c| c).await;
    let r = h.store.transaction().await;
    assert!(
        matches!(&r, Err(Error::Unsupported { hint, .. }) if hint.contains("PostgreSQL")),
        "{r:?}"
    );
}
