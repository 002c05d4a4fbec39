//! The CPU time the PostgreSQL server on this machine has used: what the fleet benchmarks
//! (`src/bin/fleet.rs`, `src/bin/fleet_wait.rs`) read before and after a measurement. Every
//! process named `postgres` counts (the postmaster, its backends and background workers, and a
//! standby's on the same machine); a backend that exits between two readings takes its time
//! with it, so the benchmarks pool their connections across a measurement.

/// CPU time (user and system, in clock ticks: 100 a second on Linux) of every process named
/// `postgres` on this machine.
pub fn postgres_cpu_ticks() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut ticks = 0;
    for e in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if !head.ends_with("(postgres") {
            continue;
        }
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 of stat (utime, stime); `rest` starts at field 3.
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks += n(11) + n(12);
    }
    ticks
}

/// Microseconds per clock tick (`USER_HZ` is 100 on Linux).
pub const TICK_US: f64 = 10_000.0;
