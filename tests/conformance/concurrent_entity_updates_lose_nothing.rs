//! Many tasks incrementing one counter entity through `update_entity` lose no increment, whether
//! they stay optimistic (compare-and-swap with back-off) or escalate to holding the entity; and
//! racing creators of one entity: exactly one `Expect::Absent` write wins.

use idemdb::{Error, Expect, UpdateOptions};

use crate::harness::Harness;

fn increment(cur: Option<&[u8]>) -> Option<Vec<u8>> {
    let n: u64 = cur.map_or(0, |c| std::str::from_utf8(c).unwrap().parse().unwrap());
    Some((n + 1).to_string().into_bytes())
}

async fn check(h: &Harness) {
    let optimistic = UpdateOptions {
        max_attempts: 10_000,
        escalate_after: None,
        ..UpdateOptions::default()
    };
    let escalating = UpdateOptions {
        escalate_after: Some(1),
        ..UpdateOptions::default()
    };
    for (name, opts) in [("optimistic", optimistic), ("escalating", escalating)] {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let s = h.store.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..25 {
                    s.update_entity("t", name, opts, increment).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let got = h.store.get_entity("t", name).await.unwrap().unwrap();
        assert_eq!(got.value, b"200", "{name}");
        assert_eq!(got.version, 200, "{name}: one version per write");
    }

    // One attempt and no escalation: a conflict is `Error::Contention`, and writes nothing.
    let s = &h.store;
    let once = UpdateOptions {
        max_attempts: 1,
        escalate_after: None,
        ..UpdateOptions::default()
    };
    let writer = s.clone();
    let r = s
        .update_entity("t", "contended", once, move |cur| {
            // Another writer changes the entity between this read and the write.
            let w = writer.clone();
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(w.put_entity("t", "contended", Expect::Any, "other"))
                    .unwrap()
                    .unwrap()
            })
            .join()
            .unwrap();
            Some(cur.unwrap_or_default().to_vec())
        })
        .await;
    assert!(matches!(r, Err(Error::Contention { attempts: 1 })), "{r:?}");
    let got = s.get_entity("t", "contended").await.unwrap().unwrap();
    assert_eq!((got.value.as_slice(), got.version), (&b"other"[..], 1));

    for round in 0..5 {
        let id = format!("created-{round}");
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (s, id) = (h.store.clone(), id.clone());
            tasks.push(tokio::spawn(async move {
                s.put_entity("t", &id, Expect::Absent, format!("{i}"))
                    .await
                    .unwrap()
                    .is_ok()
            }));
        }
        let mut won = 0;
        for t in tasks {
            won += u32::from(t.await.unwrap());
        }
        assert_eq!(won, 1, "round {round}");
    }
}

on_both_backends!(check);
