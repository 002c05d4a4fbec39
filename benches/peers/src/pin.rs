//! Where the fleet benchmark (`src/bin/fleet.rs`) runs: PostgreSQL and the harness pinned to
//! cores of their own (`--pin`), as a server with its own cores runs in production.

use crate::fleet_common::{pg_client, pg_err, R};

/// `--pin SERVER:HARNESS` (cores as `taskset -c` takes them, e.g. `0:1`): the PostgreSQL server
/// (its postmaster and every backend, which inherit the postmaster's affinity) on the first
/// cores, this process (every thread) on the second, so that the server has cores of its own as
/// in production. Restored to every core when dropped. Needs `taskset` and the right to change
/// the server's processes (root, or the server's user).
pub struct Pinned {
    server: Vec<u32>,
    /// Every online core (`/sys/devices/system/cpu/online`, e.g. `0-15`), restored on drop.
    online: String,
    pub server_cores: String,
    pub harness_cores: String,
}

impl Pinned {
    pub async fn new(spec: &str) -> R<Pinned> {
        let (server_cores, harness_cores) = spec.split_once(':').ok_or(format!(
            "--pin {spec}: expected SERVER_CORES:HARNESS_CORES, e.g. 0:1"
        ))?;
        let dir: String = pg_client(None)
            .await?
            .query_one("SHOW data_directory", &[])
            .await
            .map_err(pg_err)?
            .get(0);
        let pid_file = format!("{dir}/postmaster.pid");
        let postmaster: u32 = std::fs::read_to_string(&pid_file)
            .map_err(|e| format!("--pin: cannot read {pid_file}: {e}"))?
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or(format!("--pin: {pid_file} names no process"))?;
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .map_err(|e| format!("--pin: cannot read the online cores: {e}"))?
            .trim()
            .to_string();
        let mut server = vec![postmaster];
        let children = std::process::Command::new("pgrep")
            .args(["-P", &postmaster.to_string()])
            .output()
            .map_err(|e| format!("--pin: pgrep: {e}"))?;
        server.extend(
            String::from_utf8_lossy(&children.stdout)
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok()),
        );
        let pinned = Pinned {
            server,
            online,
            server_cores: server_cores.into(),
            harness_cores: harness_cores.into(),
        };
        for pid in &pinned.server {
            taskset(server_cores, *pid)?;
        }
        taskset(harness_cores, std::process::id())?;
        Ok(pinned)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let all = self.online.clone();
        // Best effort: a process that ended (a backend that closed) needs nothing.
        for pid in &self.server {
            let _ = taskset(&all, *pid);
        }
        if let Ok(children) = std::process::Command::new("pgrep")
            .args(["-P", &self.server[0].to_string()])
            .output()
        {
            for pid in String::from_utf8_lossy(&children.stdout).lines() {
                if let Ok(pid) = pid.trim().parse() {
                    let _ = taskset(&all, pid);
                }
            }
        }
    }
}

/// Sets the cores of every thread of process `pid`.
fn taskset(cores: &str, pid: u32) -> R<()> {
    let out = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cores, &pid.to_string()])
        .output()
        .map_err(|e| format!("--pin: taskset: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "--pin: taskset -a -p -c {cores} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
