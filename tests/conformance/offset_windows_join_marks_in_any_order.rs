//! Offset windows alike on both backends: offsets marked in any order close into a watermark, a
//! watermark only moves up, marks below it change nothing, a mark past the window's limit is
//! refused and writes nothing, the last offset (`u64::MAX`) is kept without overflowing, and
//! groups, topics and partitions are separate windows; concurrent marks lose none.

use idemdb::{Error, InvalidInput};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let w = s.offset_window("g", "orders", 0).await.unwrap();
    assert_eq!((w.watermark(), w.out_of_order_len()), (None, 0));
    assert!(!s.is_processed("g", "orders", 0, 0).await.unwrap());

    for o in [3, 1] {
        s.mark_processed("g", "orders", 0, o).await.unwrap();
    }
    let w = s.offset_window("g", "orders", 0).await.unwrap();
    assert_eq!((w.watermark(), w.out_of_order_len()), (None, 2));
    s.mark_processed("g", "orders", 0, 0).await.unwrap();
    let w = s.offset_window("g", "orders", 0).await.unwrap();
    assert_eq!((w.watermark(), w.out_of_order_len()), (Some(1), 1));
    assert!(w.contains(3) && !w.contains(2));
    s.mark_processed("g", "orders", 0, 2).await.unwrap();
    s.mark_processed("g", "orders", 0, 2).await.unwrap();
    let w = s.offset_window("g", "orders", 0).await.unwrap();
    assert_eq!((w.watermark(), w.out_of_order_len()), (Some(3), 0));

    s.commit_watermark("g", "orders", 0, 10).await.unwrap();
    s.commit_watermark("g", "orders", 0, 5).await.unwrap();
    s.mark_processed("g", "orders", 0, 7).await.unwrap();
    let w = s.offset_window("g", "orders", 0).await.unwrap();
    assert_eq!((w.watermark(), w.out_of_order_len()), (Some(10), 0));

    // The limit (3 here): a fourth offset above the watermark is refused and writes nothing.
    for o in [20, 21, 22] {
        s.mark_processed("g", "orders", 0, o).await.unwrap();
    }
    let r = s.mark_processed("g", "orders", 0, 23).await;
    assert!(
        matches!(
            r,
            Err(Error::InvalidInput(InvalidInput::LimitReached {
                limit: 3,
                ..
            }))
        ),
        "{r:?}"
    );
    let w = s.offset_window("g", "orders", 0).await.unwrap();
    assert_eq!((w.watermark(), w.out_of_order_len()), (Some(10), 3));
    assert!(!w.contains(23));
    // Marking what is already there is no change, even at the limit.
    s.mark_processed("g", "orders", 0, 21).await.unwrap();
    s.commit_watermark("g", "orders", 0, 21).await.unwrap();
    let w = s.offset_window("g", "orders", 0).await.unwrap();
    assert_eq!((w.watermark(), w.out_of_order_len()), (Some(22), 0));

    // The last offset.
    s.mark_processed("g", "orders", 1, u64::MAX).await.unwrap();
    let w = s.offset_window("g", "orders", 1).await.unwrap();
    assert!(w.contains(u64::MAX) && !w.contains(0));
    s.commit_watermark("g", "orders", 1, u64::MAX)
        .await
        .unwrap();
    let w = s.offset_window("g", "orders", 1).await.unwrap();
    assert!(w.contains(u64::MAX) && w.contains(u64::MAX - 1) && w.contains(0));
    assert_eq!(w.watermark(), Some(u64::MAX - 1));
    s.commit_watermark("g", "orders", 2, u64::MAX)
        .await
        .unwrap();
    assert_eq!(s.offset_window("g", "orders", 2).await.unwrap(), w);

    // Other windows are untouched.
    for (g, t, p) in [("g", "orders", 3), ("g", "other", 0), ("h", "orders", 0)] {
        assert_eq!(s.offset_window(g, t, p).await.unwrap().watermark(), None);
    }

    // Eight tasks mark 0..200 between them, interleaved: the watermark reaches 199. A task
    // that runs ahead of the others meets the limit and waits for them, as a consumer would.
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for o in (t..200).step_by(8) {
                loop {
                    match s.mark_processed("g", "race", 0, o).await {
                        Ok(()) => break,
                        Err(Error::InvalidInput(InvalidInput::LimitReached { .. })) => {
                            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let w = s.offset_window("g", "race", 0).await.unwrap();
    assert_eq!((w.watermark(), w.out_of_order_len()), (Some(199), 0));
}

on_both_backends!(check, |c| c.max_offset_gaps(3));
