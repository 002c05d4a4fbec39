//! Churn: keys expire as fast as new ones arrive. On a manual clock, every simulated minute
//! claims and completes a batch of new keys with a 1-hour retention, the background compaction
//! filter and a sweep every 10 minutes reclaim expired ones; the run lasts 6 retention periods and
//! prints the on-disk size over time. Bounded disk is the claim being checked: the size after the
//! first retention period must not keep growing.
//!
//! Run: `cargo run --release --example churn` (`-- --per-minute N --hours H`).

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Config, Durability, ManualClock, Response};

fn dir_bytes(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p)
        .map(|it| {
            it.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> idemdb::Result<()> {
    let per_minute = arg("--per-minute", 2_000);
    let hours = arg("--hours", 6);
    let dir = std::env::temp_dir().join(format!(
        "idemdb-churn-{}",
        idemdb::mint_key(&idemdb::SystemClock)
    ));
    let clock = ManualClock::default();
    let store = Config::new(&dir)
        .clock(clock.clone())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .write_buffer_bytes(8 << 20)
        .open()?;
    let opts = ClaimOptions::default()
        .retention(Duration::from_secs(3600))
        .lease(Duration::from_secs(30));
    let body = vec![7u8; 256];
    println!(
        "churn: {per_minute} new keys per simulated minute, retention 1 h, {hours} h simulated"
    );
    println!("| hour | keys written | records on disk | index entries | directory bytes |");
    println!("|---:|---:|---:|---:|---:|");
    let mut written = 0u64;
    let mut sizes = Vec::new();
    for minute in 1..=hours * 60 {
        for _ in 0..per_minute {
            let key = format!("k{written}");
            written += 1;
            if let Claim::Acquired(l) = store.claim("churn", &key, b"", opts)? {
                let _ = store.complete(&l, Response::new(body.clone()))?;
            }
        }
        clock.advance(Duration::from_secs(60));
        if minute % 10 == 0 {
            while store.sweep(100_000)? == 100_000 {}
        }
        if minute % 30 == 0 {
            let (records, index) = store.physical_counts()?;
            let bytes = dir_bytes(&dir);
            sizes.push((bytes, records));
            println!(
                "| {:.1} | {written} | {records} | {index} | {bytes} |",
                minute as f64 / 60.0
            );
        }
    }
    let stats = store.stats()?;
    println!(
        "swept {} records, compaction filter dropped {}",
        stats.counters.swept, stats.counters.compaction_dropped
    );
    // Bounded: once the first retention period is over, the second half of the run never needs
    // more than 1.5x the largest size of the first half (the size oscillates as memtables flush,
    // WAL files roll and compactions run), and the record count stays within one retention period plus one sweep interval
    // period's worth of keys.
    let samples: Vec<(u64, u64)> = sizes;
    let half = samples.len() / 2;
    let first = samples
        .iter()
        .skip(2)
        .take(half.saturating_sub(2))
        .map(|s| s.0)
        .max()
        .unwrap_or(1);
    let second = samples.iter().skip(half).map(|s| s.0).max().unwrap_or(0);
    let max_records = samples.iter().skip(2).map(|s| s.1).max().unwrap_or(0);
    let bounded = second as f64 <= first as f64 * 1.5 && max_records <= per_minute * 75;
    println!(
        "disk bounded: {} (largest size after 1 h in the first half {first} bytes, in the second \
         half {second} bytes; most records on disk {max_records} for {} live)",
        if bounded { "yes" } else { "NO" },
        per_minute * 60
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    if bounded {
        Ok(())
    } else {
        Err(idemdb::Error::Engine(
            "disk size kept growing under churn".into(),
        ))
    }
}
