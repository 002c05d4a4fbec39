//! Atomic commits alike on both backends: entity writes, lease endings (requests and consumer
//! messages) and reservations apply together or not at all; the conflict reported is the first
//! failing operation in the order added; a check of an absent entity shifts no version; naming a
//! key twice is refused; and concurrent commits over the same entities in opposite orders never
//! deadlock and lose nothing.

use idemdb::{
    Begin, Claim, ClaimOptions, CommitConflict, ConsumerOptions, Error, Expect, FailKind,
    InvalidInput, LeaseLost, Response, Versioned,
};

use crate::harness::Harness;

async fn acquire(h: &Harness, key: &str) -> idemdb::Lease {
    match h
        .store
        .claim("t", key, b"fp", ClaimOptions::default())
        .await
        .unwrap()
    {
        Claim::Acquired(l) => l,
        other => panic!("{other:?}"),
    }
}

fn v(value: &[u8], version: u64) -> Versioned {
    Versioned {
        value: value.to_vec(),
        version,
    }
}

async fn check(h: &Harness) {
    let s = &h.store;
    let lease = acquire(h, "k1").await;
    let receipt = Response::new(b"ok".to_vec()).with_status(201);
    let done = s
        .commit()
        .put("t", "e1", Expect::Absent, "a")
        .complete(&lease, receipt.clone())
        .reserve("email", &[b"a@x"], "u1")
        .apply()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.versions, vec![Some(1), None, None]);
    assert_eq!(s.get_entity("t", "e1").await.unwrap(), Some(v(b"a", 1)));
    match s
        .claim("t", "k1", b"fp", ClaimOptions::default())
        .await
        .unwrap()
    {
        Claim::Completed(r) => assert_eq!(r.response, receipt),
        other => panic!("the commit completed the lease, got {other:?}"),
    }
    assert_eq!(
        s.reservation_owner("email", &[b"a@x"]).await.unwrap(),
        Some(b"u1".to_vec())
    );

    // A failed condition writes nothing.
    let r = s
        .commit()
        .put("t", "e1", Expect::Absent, "b")
        .put("t", "e2", Expect::Absent, "b")
        .apply()
        .await
        .unwrap();
    assert_eq!(
        r,
        Err(CommitConflict::Condition {
            op: 0,
            current: Some(v(b"a", 1))
        })
    );
    assert_eq!(s.get_entity("t", "e2").await.unwrap(), None);

    // Several failures: the first in the order added is reported, whatever order runs them.
    let r = s
        .commit()
        .reserve("email", &[b"a@x"], "u2")
        .check("t", "e1", Expect::Version(9))
        .put("t", "e2", Expect::Absent, "c")
        .apply()
        .await
        .unwrap();
    assert_eq!(
        r,
        Err(CommitConflict::Taken {
            op: 0,
            owner: b"u1".to_vec()
        })
    );
    let r = s
        .commit()
        .put("t", "e2", Expect::Absent, "c")
        .check("t", "e1", Expect::Version(9))
        .reserve("email", &[b"a@x"], "u2")
        .apply()
        .await
        .unwrap();
    assert!(
        matches!(r, Err(CommitConflict::Condition { op: 1, .. })),
        "{r:?}"
    );
    assert_eq!(s.get_entity("t", "e2").await.unwrap(), None);

    // A lease no longer held fails the commit, and nothing else is written.
    let r = s
        .commit()
        .put("t", "e3", Expect::Any, "x")
        .complete(&lease, Response::new(Vec::new()))
        .apply()
        .await
        .unwrap();
    assert_eq!(
        r,
        Err(CommitConflict::Lease {
            op: 1,
            lost: LeaseLost::Finished
        })
    );
    assert_eq!(s.get_entity("t", "e3").await.unwrap(), None);

    // Checks: an absent entity's check shifts no version; a check answers the live version.
    let done = s
        .commit()
        .check("t", "e9", Expect::Absent)
        .check("t", "e1", Expect::Version(1))
        .put("t", "e10", Expect::Absent, "x")
        .apply()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.versions, vec![None, Some(1), Some(1)]);
    assert_eq!(s.get_entity("t", "e9").await.unwrap(), None);
    assert_eq!(
        s.put_entity("t", "e9", Expect::Absent, "y").await.unwrap(),
        Ok(1)
    );

    // A delete in a commit leaves a tombstone: the next write continues the versions.
    let done = s
        .commit()
        .delete("t", "e1", Expect::Version(1))
        .apply()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.versions, vec![None]);
    assert_eq!(s.get_entity("t", "e1").await.unwrap(), None);
    assert_eq!(
        s.put_entity("t", "e1", Expect::Absent, "z").await.unwrap(),
        Ok(3)
    );

    // The same key twice is refused.
    let r = s
        .commit()
        .put("t", "e5", Expect::Any, "1")
        .check("t", "e5", Expect::Any)
        .apply()
        .await;
    assert!(
        matches!(r, Err(Error::InvalidInput(InvalidInput::NamedTwice))),
        "{r:?}"
    );

    // A retryable failure in a commit releases the lease for the next attempt.
    let l2 = acquire(h, "k2").await;
    s.commit()
        .put("t", "e6", Expect::Any, "x")
        .fail(&l2, FailKind::Retryable)
        .apply()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(acquire(h, "k2").await.attempt(), 2);

    // A consumer message marked processed with the business write.
    let opts = ConsumerOptions::default();
    let Begin::Process(m) = s.begin("orders", "msg-1", opts).await.unwrap() else {
        panic!("a new message is processed");
    };
    s.commit()
        .put("t", "order-1", Expect::Absent, "placed")
        .complete(&m, Response::new(Vec::new()))
        .apply()
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        s.begin("orders", "msg-1", opts).await.unwrap(),
        Begin::Completed(_)
    ));

    // Transfers between two accounts in both directions at once: no deadlock, nothing lost.
    s.put_entity("t", "acct-a", Expect::Absent, "1000")
        .await
        .unwrap()
        .unwrap();
    s.put_entity("t", "acct-b", Expect::Absent, "1000")
        .await
        .unwrap()
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let (from, to) = if i % 2 == 0 {
                ("acct-a", "acct-b")
            } else {
                ("acct-b", "acct-a")
            };
            let mut done = 0;
            while done < 10 {
                let f = s.get_entity("t", from).await.unwrap().unwrap();
                let t = s.get_entity("t", to).await.unwrap().unwrap();
                let n = |x: &Versioned| -> i64 {
                    std::str::from_utf8(&x.value).unwrap().parse().unwrap()
                };
                let r = s
                    .commit()
                    .put(
                        "t",
                        from,
                        Expect::Version(f.version),
                        (n(&f) - 1).to_string(),
                    )
                    .put("t", to, Expect::Version(t.version), (n(&t) + 1).to_string())
                    .apply()
                    .await
                    .unwrap();
                if r.is_ok() {
                    done += 1;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let a = s.get_entity("t", "acct-a").await.unwrap().unwrap();
    let b = s.get_entity("t", "acct-b").await.unwrap().unwrap();
    assert_eq!(
        (a.value.as_slice(), b.value.as_slice()),
        (&b"1000"[..], &b"1000"[..])
    );
    assert_eq!(
        (a.version, b.version),
        (81, 81),
        "80 transfers touched each account"
    );
}

on_both_backends!(check);
