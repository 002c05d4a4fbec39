//! Scale: claim+complete throughput as the number of live keys grows to 10 million, and the
//! process's memory against the configured cache budget. Prints a row per milestone.
//!
//! Run: `cargo run --release --example scale` (`-- --keys N --cache-mb M`).

use std::io::Write;
use std::time::{Duration, Instant};

use idemdb::{Claim, ClaimOptions, Config, Durability, Response};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> idemdb::Result<()> {
    let keys = arg("--keys", 10_000_000);
    let cache_mb = arg("--cache-mb", 64);
    let dir = std::env::temp_dir().join(format!(
        "idemdb-scale-{}",
        idemdb::mint_key(&idemdb::SystemClock)
    ));
    let store = Config::new(&dir)
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .cache_bytes(usize::try_from(cache_mb << 20).unwrap_or(64 << 20))
        .open()?;
    let opts = ClaimOptions::default().retention(Duration::from_secs(7 * 24 * 3600));
    let body = vec![7u8; 256];
    let fp = [9u8; 32];
    let window = 100_000u64;
    println!("scale: {keys} keys, claim+complete (32-byte fingerprint, 256-byte response), buffered, block cache {cache_mb} MiB");
    println!(
        "| live keys | claim+complete ops/s (last {window}) | RSS MiB | memtables MiB | SST MiB |"
    );
    println!("|---:|---:|---:|---:|---:|");
    let mut started = Instant::now();
    let mut first_rate = 0.0;
    let mut last_rate = 0.0;
    for i in 0..keys {
        let key = format!("key-{i:010}");
        if let Claim::Acquired(l) = store.claim("scale", &key, fp, opts)? {
            let _ = store.complete(&l, Response::new(body.clone()))?;
        }
        let n = i + 1;
        if n % window == 0 {
            let rate = window as f64 / started.elapsed().as_secs_f64();
            if n == window {
                first_rate = rate;
            }
            last_rate = rate;
            let milestone = n == window || n % (keys / 10).max(window) == 0 || n == keys;
            if milestone {
                let s = store.stats()?;
                println!(
                    "| {n} | {rate:.0} | {} | {} | {} |",
                    status_kib("VmRSS:") / 1024,
                    s.memtable_bytes >> 20,
                    s.live_sst_bytes >> 20
                );
                let _ = std::io::stdout().flush();
            }
            started = Instant::now();
        }
    }
    println!(
        "throughput at {keys} keys is {:.2}x the throughput at {window} keys; peak RSS {} MiB",
        last_rate / first_rate.max(1.0),
        status_kib("VmHWM:") / 1024
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
