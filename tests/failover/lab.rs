//! A Rust wrapper of `scripts/pg-lab pair`: a primary and a streaming standby on loopback in a
//! fresh directory of their own, stopped (and the directory removed) when the last handle is
//! dropped. Every method runs the script and blocks until it is done: from an async test call
//! them through [`Lab::blocking`] (tokio's blocking pool), so that the stores' tasks keep their
//! two worker threads. A pg-lab command that fails panics with its stderr. Also the few store
//! helpers the tests share: a fleet instance opened on the pair's URL, a call bounded by an outer
//! timeout that fails the test as a hang, and the pool tests' unit of work.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Which cluster of the pair a command is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Standby,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Standby => "standby",
        }
    }
}

/// A pair of clusters (cheap to clone; clones share it).
#[derive(Clone)]
pub struct Lab(Arc<Inner>);

struct Inner {
    dir: PathBuf,
    /// The `key=value` lines `pg-lab pair` printed.
    values: HashMap<String, String>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Stops whatever runs under the directory, in any state (frozen included), and removes
        // it; always exits 0, so its output is of no interest.
        let _ = Command::new(script()).arg("stop").arg(&self.dir).output();
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-lab")
}

/// Runs pg-lab with `args`; its stdout. Panics with its stderr if it fails.
fn pg_lab(args: &[&str]) -> String {
    let out = Command::new(script())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script().display()));
    if !out.status.success() {
        panic!(
            "pg-lab {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `key=value` lines of a pg-lab answer.
fn values(stdout: &str) -> HashMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A directory name no other test (of this or another process) uses.
fn fresh_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "idemdb-failover-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

impl Lab {
    /// `pg-lab pair DIR --sync` (`sync`) or `--async` in a fresh directory.
    pub fn pair(sync: bool) -> Lab {
        let dir = fresh_dir();
        let mode = if sync { "--sync" } else { "--async" };
        let dir_s = dir
            .to_str()
            .expect("a UTF-8 temporary directory")
            .to_string();
        // From here on the directory may exist: a failed set-up is stopped by the guard too.
        let mut inner = Inner {
            dir,
            values: HashMap::new(),
        };
        let out = pg_lab(&["pair", &dir_s, mode]);
        inner.values = values(&out);
        let lab = Lab(Arc::new(inner));
        for key in [
            "url",
            "primary_url",
            "standby_url",
            "primary_pid",
            "standby_pid",
        ] {
            assert!(
                lab.0.values.contains_key(key),
                "pg-lab pair printed no {key}: {out}"
            );
        }
        lab
    }

    /// Runs `f` with this lab on tokio's blocking pool (the worker threads stay free).
    pub async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Lab) -> T + Send + 'static,
    ) -> T {
        let lab = self.clone();
        tokio::task::spawn_blocking(move || f(&lab))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    fn dir(&self) -> &str {
        self.0.dir.to_str().expect("a UTF-8 directory")
    }

    /// A value `pg-lab pair` printed.
    pub fn value(&self, key: &str) -> &str {
        self.0
            .values
            .get(key)
            .unwrap_or_else(|| panic!("pg-lab pair printed no {key}"))
    }

    /// The multi-host URL (primary, then standby; `target_session_attrs=read-write`).
    pub fn url(&self) -> &str {
        self.value("url")
    }

    #[allow(dead_code)]
    pub fn primary_url(&self) -> &str {
        self.value("primary_url")
    }

    #[allow(dead_code)]
    pub fn standby_url(&self) -> &str {
        self.value("standby_url")
    }

    pub fn primary_pid(&self) -> u32 {
        self.value("primary_pid").parse().expect("a pid")
    }

    #[allow(dead_code)]
    pub fn standby_pid(&self) -> u32 {
        self.value("standby_pid").parse().expect("a pid")
    }

    /// `pg-lab kill DIR primary`: a real crash (SIGKILL of every process), returns once the
    /// processes are gone and the port is closed.
    pub fn kill_primary(&self) {
        pg_lab(&["kill", self.dir(), "primary"]);
    }

    /// `pg-lab start DIR primary`: starts the killed primary again on its port (crash recovery
    /// first), as a primary; returns once it answers.
    pub fn start_primary(&self) {
        pg_lab(&["start", self.dir(), "primary"]);
    }

    /// `pg-lab promote DIR`: returns `promoted_at` (epoch milliseconds, when the standby was
    /// seen out of recovery).
    pub fn promote(&self) -> u64 {
        let out = pg_lab(&["promote", self.dir()]);
        values(&out)
            .get("promoted_at")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("pg-lab promote printed no promoted_at: {out}"))
    }

    /// `pg-lab freeze DIR primary`: SIGSTOP of every process of the primary.
    pub fn freeze_primary(&self) {
        pg_lab(&["freeze", self.dir(), "primary"]);
    }

    /// `pg-lab thaw DIR primary`: SIGCONT, then waits until it answers.
    pub fn thaw_primary(&self) {
        pg_lab(&["thaw", self.dir(), "primary"]);
    }

    /// `pg-lab readonly DIR primary`: it refuses writes like a demoted primary.
    pub fn readonly_primary(&self) {
        pg_lab(&["readonly", self.dir(), "primary"]);
    }

    /// One SQL statement on database `test` of that cluster; its rows as psql prints them
    /// (`-tA`), trimmed.
    pub fn psql(&self, role: Role, sql: &str) -> String {
        pg_lab(&["psql", self.dir(), role.name(), sql])
            .trim()
            .to_string()
    }

    /// Polls `psql(role, sql)` every 200 ms until it prints `want`, for at most `bound`; panics
    /// naming `what` was waited for.
    pub fn wait_for_psql(&self, role: Role, sql: &str, want: &str, bound: Duration, what: &str) {
        let start = Instant::now();
        loop {
            let got = self.psql(role, sql);
            if got == want {
                return;
            }
            assert!(
                start.elapsed() < bound,
                "waited {bound:?} for {what}: `{sql}` on the {} still prints {got:?}, not {want:?}",
                role.name()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The primary's WAL sender (the process that ships its WAL to the standby).
    pub fn primary_walsender_pid(&self) -> u32 {
        let out = Command::new("pgrep")
            .args(["-P", &self.primary_pid().to_string(), "-f", "walsender"])
            .output()
            .expect("pgrep runs");
        let pids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        assert_eq!(
            pids.len(),
            1,
            "expected exactly one walsender child of the primary's postmaster {}, found {pids:?}",
            self.primary_pid()
        );
        pids[0]
    }
}

/// Sends `signal` (`STOP`, `CONT`, ...) to `pid` with kill(1); panics if it fails.
pub fn signal(pid: u32, signal: &str) {
    let out = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .output()
        .expect("kill runs");
    assert!(
        out.status.success(),
        "kill -{signal} {pid} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A size for the full run from the environment variable `var`, else `default`.
pub fn size(var: &str, default: usize) -> usize {
    match std::env::var(var) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// Awaits `fut` for at most `bound`; panics as a hang naming `what` otherwise (a store call must
/// fail closed, never hang).
pub async fn bounded<T>(
    bound: Duration,
    what: &str,
    fut: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(bound, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what} hung: no answer within {bound:?}"),
    }
}

/// A fencing token as `(timeline, sequence value)`: the high bits from 47 up and the low 47.
pub fn split_fence(fence: u64) -> (u64, u64) {
    (fence >> 47, fence & ((1 << 47) - 1))
}

/// A fleet instance as the tests configure it: a store on `url` (the multi-host URL) with a
/// pool of `pool` connections, connect and statement timeouts of 2 s, default lease `lease`, no
/// background sweeper, and flushed claims (`Config::buffered_claims(false)`: the mode in which a
/// synchronous failover never lets an operation run twice; [`open_buffered`] opens the default). Opening is
/// retried while it fails transiently (for at most 60 s).
pub async fn open(url: &str, pool: usize, lease: Duration) -> idemdb::AsyncStore {
    let two = Duration::from_secs(2);
    open_with(url, pool, lease, two, two).await
}

/// As [`open`], with these connect and statement timeouts.
pub async fn open_with(
    url: &str,
    pool: usize,
    lease: Duration,
    connect_timeout: Duration,
    statement_timeout: Duration,
) -> idemdb::AsyncStore {
    open_tuned(url, pool, lease, connect_timeout, statement_timeout, |c| {
        c.buffered_claims(false)
    })
    .await
}

/// Retries `call` (each bounded at 30 s, past which it is a hang) while it fails transiently,
/// for at most 90 s (a server restarting or being promoted); its answer.
#[allow(dead_code)]
pub async fn until_answered<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = idemdb::Result<T>>,
{
    let start = Instant::now();
    loop {
        match bounded(Duration::from_secs(30), what, call()).await {
            Ok(v) => return v,
            Err(e) if e.is_transient() && start.elapsed() < Duration::from_secs(90) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{what} failed (after {:?}): {e}", start.elapsed()),
        }
    }
}

/// As [`open`], with buffered claims (`Config::buffered_claims`, the default).
#[allow(dead_code)]
pub async fn open_buffered(url: &str, pool: usize, lease: Duration) -> idemdb::AsyncStore {
    let two = Duration::from_secs(2);
    open_tuned(url, pool, lease, two, two, |c| c).await
}

/// As [`open_with`], the configuration changed by `tune` last.
async fn open_tuned(
    url: &str,
    pool: usize,
    lease: Duration,
    connect_timeout: Duration,
    statement_timeout: Duration,
    tune: impl Fn(idemdb::Config<idemdb::OnPostgres>) -> idemdb::Config<idemdb::OnPostgres>,
) -> idemdb::AsyncStore {
    let start = Instant::now();
    loop {
        let opened = tune(
            idemdb::Config::postgres(url)
                .pool_size(pool)
                .connect_timeout(connect_timeout)
                .statement_timeout(statement_timeout)
                .lease(lease)
                .sweep_interval(None),
        )
        .open_async();
        match bounded(Duration::from_secs(60), "opening a store", opened).await {
            Ok(store) => return store,
            Err(e) if e.is_transient() && start.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!(
                "opening a store on {url} failed (waited {:?}): {e}",
                start.elapsed()
            ),
        }
    }
}

/// Milliseconds since the epoch by this machine's clock (the database servers' clock too: they
/// run here).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The tenant of the pool tests' keys.
pub const HEAL_TENANT: &str = "heal";

/// One unit of work of the pool tests: claims the new key `key` and completes it. `Ok` if both
/// succeeded; the error of the call that failed (a failed claim acquired nothing; a failed
/// completion leaves the lease pending); a claim of a new key that does not acquire, or a
/// completion refused as a lost lease, fails the test.
pub async fn claim_and_complete(store: &idemdb::AsyncStore, key: &str) -> idemdb::Result<()> {
    let call = Duration::from_secs(30);
    let claim = bounded(
        call,
        "a claim",
        store.claim(HEAL_TENANT, key, b"fp", idemdb::ClaimOptions::default()),
    )
    .await?;
    let idemdb::Claim::Acquired(lease) = claim else {
        panic!("the claim of the new key {key} answered {claim:?}");
    };
    let done = bounded(
        call,
        "a completion",
        store.complete(&lease, idemdb::Response::new(key.as_bytes().to_vec())),
    )
    .await;
    match done {
        Ok(Ok(())) => Ok(()),
        Err(e) => Err(e),
        Ok(Err(lost)) => panic!("the completion of {key}, right after its claim, lost: {lost:?}"),
    }
}

/// Opens `pool` connections in `store`'s pool: `2 * pool` units of work at once, all of which
/// must succeed.
pub async fn warm(store: &idemdb::AsyncStore, pool: usize) {
    let mut tasks = Vec::new();
    for i in 0..2 * pool {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            claim_and_complete(&store, &format!("warm-{i}")).await
        }));
    }
    for t in tasks {
        t.await
            .unwrap()
            .unwrap_or_else(|e| panic!("warming the pool: {e}"));
    }
}

/// How many connections named `idemdb` (the store's application name) the cluster serves.
pub const STORE_CONNECTIONS: &str =
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'idemdb'";

/// Waits until the standby replayed everything the primary has written so far.
pub async fn standby_caught_up(lab: &Lab) {
    let lsn = lab
        .blocking(|l| l.psql(Role::Primary, "SELECT pg_current_wal_lsn()"))
        .await;
    lab.blocking(move |l| {
        l.wait_for_psql(
            Role::Standby,
            &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"),
            "t",
            Duration::from_secs(60),
            "the standby to replay what the primary wrote",
        )
    })
    .await;
}

/// Completed records of the pool tests whose key starts with `prefix`, as `role` holds them.
pub fn completed_with_prefix(lab: &Lab, role: Role, prefix: &str) -> usize {
    let sql = format!(
        "SELECT count(*) FROM idemdb_requests WHERE tenant = '{HEAL_TENANT}' AND state = 2 \
         AND substring(key FROM 1 FOR {}) = '{prefix}'",
        prefix.len()
    );
    lab.psql(role, &sql).parse().expect("a count")
}

/// Distinct messages with how often each occurred, for failures printed in bulk.
pub fn tally(messages: &[String]) -> Vec<(usize, &str)> {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for m in messages {
        *counts.entry(m).or_default() += 1;
    }
    counts.into_iter().map(|(m, n)| (n, m)).collect()
}
