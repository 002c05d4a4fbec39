//! Fleet mode: several instances (processes) of the payment service share one store on
//! PostgreSQL; clients send each payment to a random instance, retry it at random instances (a
//! lost reply, a proxy duplicating it, an instance gone), while instances are SIGKILLed and
//! restarted. The charges are kept at a bank outside the store (a PostgreSQL table), and the run
//! checks, from the bank's own rows:
//! - every payment was charged exactly once, and every client got that charge's receipt;
//! - the handler ran again for a payment only after the instance that ran it first was killed
//!   (a kill between the charge and the store's completion cannot be told from a crash before
//!   the charge: the retry runs the handler again once the lease runs out, and the bank's own
//!   reference, the idempotency key passed down, keeps that run from charging twice; fleet mode
//!   part 2's transactional commit removes that window);
//! - no payment waited much past a lease: a killed instance's claim blocks its key for at most
//!   one lease.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemdb::http::IdempotencyLayer;
use idemdb::{Config, RecordState};
use tokio::io::AsyncBufReadExt;
use tokio::sync::RwLock;

use super::{post_payment, HttpClient};

/// The size of a run.
pub struct Plan {
    pub instances: usize,
    pub payments: u64,
    pub kills: u64,
    pub lease: Duration,
    /// The instances reach the store through this URL (a pooler in transaction mode, user
    /// [`POOLER_ROLE`], e.g. `postgres://idemdb_fleet@127.0.0.1:6432/test?statement_mode=unnamed`)
    /// instead of the server's; the bank and the checks stay on the server's.
    pub pooler: Option<String>,
}

/// The role the instances log in as through a pooler: the pooler drops the startup option that
/// sets the schema, so the role carries its `search_path`.
pub const POOLER_ROLE: &str = "idemdb_fleet";

const SCHEMA: &str = "axum_payments_fleet";
/// Concurrent clients.
const CLIENTS: u64 = 32;

/// SplitMix64, seeded per client.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `url` with `search_path` set to `schema`.
fn in_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("PostgreSQL at {url} cannot be reached: {e}"))?;
    tokio::spawn(conn);
    Ok(client)
}

/// Empties (drops and creates) `schema` at `url`; the URL of a store in it.
pub async fn fresh_schema(url: &str, schema: &str) -> Result<String, String> {
    connect(url)
        .await?
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .map_err(|e| e.to_string())?;
    Ok(in_schema(url, schema))
}

/// One instance process, and its address.
struct Instance {
    child: tokio::process::Child,
    addr: SocketAddr,
}

/// An instance whose store is at `url` and whose bank at `bank_url`.
async fn start(url: &str, bank_url: &str, lease: Duration) -> Result<Instance, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(exe)
        .args([
            "serve",
            "--postgres",
            url,
            "--bank",
            "--bank-postgres",
            bank_url,
            "--addr",
            "127.0.0.1:0",
        ])
        .args(["--lease-ms", &lease.as_millis().to_string()])
        // Each instance keeps finished records in memory (8 MiB): a retry that lands on an
        // instance that already answered the payment is replayed without a database round trip.
        .args(["--replay-tier", &(8usize << 20).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("start an instance: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .map_err(|_| "an instance did not start within 20 s".to_owned())?
        .map_err(|e| e.to_string())?
        .ok_or("an instance exited before listening")?;
    let addr = line
        .strip_prefix("listening ")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("unexpected first line from an instance: {line:?}"))?;
    Ok(Instance { child, addr })
}

/// Sends a payment to random instances until one answers 201 (an instance gone, a 409 while
/// another instance runs it, or a 503, is retried after a pause). The status and body.
async fn pay_until_done(
    c: &HttpClient,
    addrs: &RwLock<Vec<SocketAddr>>,
    rng: &mut Rng,
    user: &str,
    key: &str,
    amount: u64,
) -> Result<(bool, Vec<u8>), String> {
    let started = Instant::now();
    loop {
        let addr = {
            let a = addrs.read().await;
            a[rng.below(a.len() as u64) as usize]
        };
        match post_payment(c, addr, user, key, amount).await {
            Ok((201, replayed, body)) => return Ok((replayed, body)),
            Ok((409 | 503, ..)) | Err(_) => {
                if started.elapsed() > Duration::from_secs(60) {
                    return Err(format!("{key}: not done after 60 s"));
                }
                tokio::time::sleep(Duration::from_millis(20 + rng.below(80))).await;
            }
            Ok((status, _, body)) => {
                return Err(format!(
                    "{key}: {status} {}",
                    String::from_utf8_lossy(&body)
                ))
            }
        }
    }
}

pub async fn run(url: &str, plan: Plan) -> Result<(), String> {
    let store_url = fresh_schema(url, SCHEMA).await?;
    // The schema is applied once, before the instances race to open it.
    Config::postgres(store_url.clone())
        .migrate_schema(None)
        .await
        .map_err(|e| e.to_string())?;
    let instance_url = match &plan.pooler {
        None => store_url.clone(),
        Some(pooled) => {
            let admin = connect(url).await?;
            admin
                .batch_execute(&format!(
                    "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = \
                     '{POOLER_ROLE}') THEN CREATE ROLE {POOLER_ROLE} LOGIN; END IF; END $$;
                     ALTER ROLE {POOLER_ROLE} SET search_path = {SCHEMA};
                     GRANT ALL ON SCHEMA {SCHEMA} TO {POOLER_ROLE};
                     GRANT ALL ON ALL TABLES IN SCHEMA {SCHEMA} TO {POOLER_ROLE};
                     GRANT ALL ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO {POOLER_ROLE};
                     GRANT ALL ON ALL FUNCTIONS IN SCHEMA {SCHEMA} TO {POOLER_ROLE};"
                ))
                .await
                .map_err(|e| format!("set up the pooler's role {POOLER_ROLE}: {e}"))?;
            pooled.clone()
        }
    };
    let mut instances = Vec::new();
    for _ in 0..plan.instances {
        instances.push(start(&instance_url, &store_url, plan.lease).await?);
    }
    let addrs = Arc::new(RwLock::new(
        instances.iter().map(|i| i.addr).collect::<Vec<_>>(),
    ));
    let started = Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));

    let mut clients = Vec::new();
    let client: HttpClient =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(Duration::from_millis(500))
            .build_http();
    for t in 0..CLIENTS {
        let (c, addrs, done) = (client.clone(), addrs.clone(), done.clone());
        let payments = plan.payments;
        clients.push(tokio::spawn(async move {
            let mut rng = Rng(t + 1);
            let (mut sent, mut slowest) = (0u64, Duration::ZERO);
            let mut receipts = Vec::new();
            for p in (t..payments).step_by(CLIENTS as usize) {
                let (user, key, amount) = (format!("user{}", p % 7), format!("pay-{p}"), 100 + p);
                let t0 = Instant::now();
                let mut got = Vec::new();
                if rng.below(10) == 0 {
                    // A proxy delivers it twice at once, to two instances.
                    let (mut r1, mut r2) = (Rng(rng.next()), Rng(rng.next()));
                    let (a, b) = tokio::join!(
                        pay_until_done(&c, &addrs, &mut r1, &user, &key, amount),
                        pay_until_done(&c, &addrs, &mut r2, &user, &key, amount)
                    );
                    got.push(a?);
                    got.push(b?);
                    sent += 2;
                } else {
                    got.push(pay_until_done(&c, &addrs, &mut rng, &user, &key, amount).await?);
                    sent += 1;
                }
                if rng.below(10) < 3 {
                    // The reply was lost: retried later, at a random instance.
                    got.push(pay_until_done(&c, &addrs, &mut rng, &user, &key, amount).await?);
                    sent += 1;
                }
                slowest = slowest.max(t0.elapsed());
                if got.iter().any(|g| g.1 != got[0].1) {
                    return Err(format!("{key}: clients got different receipts"));
                }
                receipts.push((user, key, got.swap_remove(0).1));
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok::<_, String>((sent, slowest, receipts))
        }));
    }

    // The killer: SIGKILLs a random instance at evenly spread moments of the run (by progress),
    // and starts a new one in its place.
    let mut killed_pids = Vec::new();
    let mut rng = Rng(0xf1ee7);
    for k in 1..=plan.kills {
        let at = plan.payments * k / (plan.kills + 1);
        while done.load(std::sync::atomic::Ordering::Relaxed) < at {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let i = rng.below(instances.len() as u64) as usize;
        let pid = instances[i]
            .child
            .id()
            .ok_or("an instance already exited")?;
        instances[i]
            .child
            .start_kill()
            .map_err(|e| format!("SIGKILL: {e}"))?;
        let _ = instances[i].child.wait().await;
        killed_pids.push(pid as i32);
        // Clients keep sending to the dead address (refused, retried elsewhere) until the new
        // instance listens.
        instances[i] = start(&instance_url, &store_url, plan.lease).await?;
        addrs.write().await[i] = instances[i].addr;
    }

    let (mut sent, mut slowest, mut receipts) = (0, Duration::ZERO, Vec::new());
    for c in clients {
        let (s, w, r) = c.await.map_err(|e| e.to_string())??;
        sent += s;
        slowest = slowest.max(w);
        receipts.extend(r);
    }
    let elapsed = started.elapsed();
    // The replay tiers of the instances alive at the end (a killed instance's counts are lost).
    let (mut tier_hits, mut tier_misses) = (0u64, 0u64);
    {
        let c: HttpClient =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        for i in &instances {
            let text = super::get_text(&c, &format!("http://{}/tier", i.addr)).await?;
            let mut words = text.split_whitespace();
            if let (Some("hits"), Some(h), Some("misses"), Some(m)) =
                (words.next(), words.next(), words.next(), words.next())
            {
                tier_hits += h.parse::<u64>().unwrap_or(0);
                tier_misses += m.parse::<u64>().unwrap_or(0);
            }
        }
    }
    for i in &mut instances {
        let _ = i.child.start_kill();
        let _ = i.child.wait().await;
    }

    // The bank's view, independent of the store.
    let bank = connect(&in_schema(url, SCHEMA)).await?;
    let q = |sql: &'static str| {
        let bank = &bank;
        async move { bank.query(sql, &[]).await.map_err(|e| e.to_string()) }
    };
    let charges: i64 = q("SELECT count(*) FROM demo_charges").await?[0].get(0);
    let attempts: i64 = q("SELECT count(*) FROM demo_attempts").await?[0].get(0);
    if charges as u64 != plan.payments {
        return Err(format!("{} payments but {charges} charges", plan.payments));
    }
    for (user, key, body) in &receipts {
        let quoted = format!("\"{key}\"");
        let row = bank
            .query_one(
                "SELECT id FROM demo_charges WHERE user_name = $1 AND key = $2",
                &[user, &quoted],
            )
            .await
            .map_err(|e| format!("{key}: no charge: {e}"))?;
        let id: i64 = row.get(0);
        let expected = format!("{{\"payment\":{id},");
        if !body.starts_with(expected.as_bytes()) {
            return Err(format!(
                "{key}: receipt {} is not charge {id}",
                String::from_utf8_lossy(body)
            ));
        }
    }
    // A payment whose handler ran more than once: every run but the last was by a killed
    // instance.
    let reruns = q("SELECT key, array_agg(pid ORDER BY at) FROM demo_attempts
                    GROUP BY user_name, key HAVING count(*) > 1")
    .await?;
    for r in &reruns {
        let (key, pids): (String, Vec<i32>) = (r.get(0), r.get(1));
        if let Some(alive) = pids[..pids.len() - 1]
            .iter()
            .find(|p| !killed_pids.contains(p))
        {
            return Err(format!(
                "{key}: the handler ran again although instance {alive}, which ran it first, \
                 was never killed (runs by {pids:?})"
            ));
        }
    }
    // Every key is completed in the store.
    let store = Config::postgres(store_url)
        .open_async()
        .await
        .map_err(|e| e.to_string())?;
    let layer = IdempotencyLayer::new(store.clone());
    for (user, key, _) in &receipts {
        let tenant = layer.tenant_of(user).ok_or("no tenant")?;
        match store.get(&tenant, key).await.map_err(|e| e.to_string())? {
            Some(info) if matches!(info.state, RecordState::Completed(_)) => {}
            other => return Err(format!("{key}: stored as {other:?}")),
        }
    }
    if slowest > plan.lease * 3 + Duration::from_secs(10) {
        return Err(format!(
            "a payment took {slowest:?}, more than three leases ({:?}) and a restart",
            plan.lease
        ));
    }
    println!(
        "axum_payments fleet: {} instances on one PostgreSQL, {} payments, {sent} deliveries \
         (retries and twins sent to random instances), {} instances SIGKILLed and restarted, \
         {:.1} s: {charges} charges, each payment charged exactly once and every client given \
         its receipt; {attempts} handler runs reached the bank, {} payments ran again after \
         their instance was killed mid-request (the bank's reference absorbed them); slowest \
         payment {:.2} s (lease {:.1} s); every key completed in the store; replay tiers of the \
         instances alive at the end: {tier_hits} hits, {tier_misses} misses ({:.1} % of the \
         claims they looked up)",
        plan.instances,
        plan.payments,
        plan.kills,
        elapsed.as_secs_f64(),
        reruns.len(),
        slowest.as_secs_f64(),
        plan.lease.as_secs_f64(),
        100.0 * tier_hits as f64 / (tier_hits + tier_misses).max(1) as f64,
    );
    Ok(())
}
