//! Diagnostic: a claim + complete pair of SQL statements (from files) driven through
//! tokio-postgres with the library's parameter types, N tasks, one connection each; prints the
//! median latency, the server's CPU per key (when given a cgroup's `cpuacct.usage` that holds
//! the PostgreSQL server) and this process's. `benches/peers/sql/run` runs it over the steps from
//! the hand-written recipe to idemdb's own statements (docs/benchmarks.md).
//!
//! ```text
//! sqlbench --schema S --claim FILE --complete FILE [--mode idem|hand] [--tasks 16]
//!          [--keys 6000] [--cgroup PATH] [--replay] [--buffered] [--schema-sql SQL]
//! ```
//!
//! Schema `S` is created anew (dropped first) and dropped at the end: idemdb's tables by the
//! library's own migrations, the recipe's table from `sql/recipe_table.sql` (the fleet
//! harness's), so every run measures a table of its own, filled by it alone, and idemdb's is the
//! one the library would create.
//!
//! `idem` mode binds the library's parameters (claim: ns, tenant, key, fingerprint, lease ms,
//! retention ms, test clock `NULL`; complete: ns, tenant, key, fence, test clock, body,
//! metadata), reading the fence from the claim's `fence` column; `hand` mode binds the recipe's
//! (claim: key text, fingerprint; complete: key, body). `--replay` first claims and completes
//! every key, then measures a replay of each.

use std::sync::Arc;
use std::time::Instant;

#[path = "../fleet_common.rs"]
mod fleet_common;
use fleet_common::{pg_client, pg_err, quantile, run_main, PG_URL, R};

struct S {
    schema: String,
    claim: String,
    complete: String,
    hand: bool,
    tasks: usize,
    keys: usize,
    cgroup: Option<String>,
    replay: bool,
    /// `--buffered`: idemdb's claims carry a token of the server's timeline (as from a store's
    /// block) and ask to be buffered, as the library's default does.
    buffered: bool,
    /// `--schema-sql SQL`: run in the schema after it is made (an experiment on idemdb's table:
    /// an index or a trigger dropped, say).
    schema_sql: Option<String>,
}

fn parse() -> R<S> {
    let mut s = S {
        schema: String::new(),
        claim: String::new(),
        complete: String::new(),
        hand: false,
        tasks: 16,
        keys: 6000,
        cgroup: None,
        replay: false,
        buffered: false,
        schema_sql: None,
    };
    let mut a = std::env::args().skip(1);
    while let Some(k) = a.next() {
        let mut v = || a.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--schema" => s.schema = v()?,
            "--claim" => s.claim = std::fs::read_to_string(v()?).map_err(|e| e.to_string())?,
            "--complete" => {
                s.complete = std::fs::read_to_string(v()?).map_err(|e| e.to_string())?
            }
            "--mode" => s.hand = v()? == "hand",
            "--tasks" => s.tasks = v()?.parse().map_err(|e| format!("{e}"))?,
            "--keys" => s.keys = v()?.parse().map_err(|e| format!("{e}"))?,
            "--cgroup" => s.cgroup = Some(v()?),
            "--replay" => s.replay = true,
            "--buffered" => s.buffered = true,
            "--schema-sql" => s.schema_sql = Some(v()?),
            o => return Err(format!("unknown argument {o}")),
        }
    }
    Ok(s)
}

/// What every task reads.
struct Shared {
    s: Arc<S>,
    clients: Vec<(
        tokio_postgres::Client,
        tokio_postgres::Statement,
        tokio_postgres::Statement,
    )>,
    body: Vec<u8>,
    meta: Vec<String>,
    run_id: String,
    /// The server's timeline (`--buffered` tokens carry it above bit 47).
    timeline: i64,
}

fn cpu_ns(cg: &Option<String>) -> u64 {
    cg.as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

fn self_cpu_us() -> u64 {
    let t = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = t
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) * 10_000
}

/// Schema `schema`, new: idemdb's tables as its migrations make them, and the recipe's.
async fn fresh_schema(schema: &str) -> R<()> {
    pg_client(None)
        .await?
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .map_err(pg_err)?;
    idemdb::Config::postgres(format!("{PG_URL}?options=-c%20search_path%3D{schema}"))
        .migrate_schema(None)
        .await
        .map_err(|e| e.to_string())?;
    pg_client(Some(schema))
        .await?
        .batch_execute(include_str!("../../sql/recipe_table.sql"))
        .await
        .map_err(pg_err)
}

async fn main_async(s: S) -> R<()> {
    fresh_schema(&s.schema).await?;
    if let Some(sql) = &s.schema_sql {
        pg_client(Some(&s.schema))
            .await?
            .batch_execute(sql)
            .await
            .map_err(pg_err)?;
    }
    let s = Arc::new(s);
    let run_id = format!("{:x}", std::process::id());
    let mut clients = Vec::new();
    for _ in 0..s.tasks {
        let c = pg_client(Some(&s.schema)).await?;
        let cl = c.prepare(&s.claim).await.map_err(pg_err)?;
        let co = c.prepare(&s.complete).await.map_err(pg_err)?;
        clients.push((c, cl, co));
    }
    const FP: [u8; 32] = [7u8; 32];
    let timeline: i64 = pg_client(None)
        .await?
        .query_one(
            "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint",
            &[],
        )
        .await
        .map_err(pg_err)?
        .get(0);
    let shared = Arc::new(Shared {
        timeline,
        s: s.clone(),
        clients,
        body: vec![42u8; 256],
        meta: Vec::new(),
        run_id,
    });
    let phase = |replay: bool| {
        let shared = shared.clone();
        async move {
            let mut hs = Vec::new();
            for t in 0..shared.s.tasks {
                let shared = shared.clone();
                hs.push(tokio::spawn(async move {
                    let Shared {
                        s,
                        clients,
                        body,
                        meta,
                        run_id,
                        timeline,
                    } = &*shared;
                    let (c, cl, co) = &clients[t];
                    let mut lat = Vec::new();
                    for k in (t..s.keys).step_by(s.tasks) {
                        let key = format!("{run_id}-{k}");
                        let start = Instant::now();
                        if s.hand {
                            let row = c.query_one(cl, &[&key, &&FP[..]]).await.map_err(pg_err)?;
                            if !replay {
                                let _: bool = row.get(0);
                                c.execute(co, &[&key, body]).await.map_err(pg_err)?;
                            }
                        } else {
                            let (ns, tenant, kb, lease, ret, now) = (
                                0i16,
                                &b"t"[..],
                                key.as_bytes(),
                                30_000i64,
                                86_400_000i64,
                                None::<i64>,
                            );
                            // idemdb's claim takes three more parameters, a token from the
                            // store's block, whether it is buffered and the claim's nonce:
                            // `NULL`, false and the key's number here, a claim drawing its own
                            // token and flushed (its server work as before).
                            let nonce = i64::try_from(k).unwrap_or(0);
                            // With `--buffered`: a token of the server's timeline, buffered.
                            let (token, buffered) = match s.buffered {
                                true => (Some((*timeline << 47) | nonce), true),
                                false => (None, false),
                            };
                            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 10] = [
                                &ns,
                                &tenant,
                                &kb,
                                &&FP[..],
                                &lease,
                                &ret,
                                &now,
                                &token,
                                &buffered,
                                &nonce,
                            ];
                            let row = c
                                .query_one(cl, &params[..cl.params().len().min(10)])
                                .await
                                .map_err(pg_err)?;
                            if !replay {
                                let fence: i64 = row.get("fence");
                                c.query_opt(co, &[&ns, &tenant, &kb, &fence, &now, body, meta])
                                    .await
                                    .map_err(pg_err)?
                                    .ok_or("complete applied to nothing")?;
                            }
                        }
                        lat.push(start.elapsed().as_micros() as u64);
                    }
                    Ok::<_, String>(lat)
                }));
            }
            let mut all = Vec::new();
            for h in hs {
                all.extend(h.await.map_err(|e| e.to_string())??);
            }
            Ok::<_, String>(all)
        }
    };
    if s.replay {
        phase(false).await?;
    }
    let (c0, u0, t0) = (cpu_ns(&s.cgroup), self_cpu_us(), Instant::now());
    let mut all = phase(s.replay).await?;
    let wall = t0.elapsed();
    let (c1, u1) = (cpu_ns(&s.cgroup), self_cpu_us());
    all.sort_unstable();
    let n = s.keys as f64;
    let server = match s.cgroup {
        Some(_) => format!("{:.0} µs/key", (c1 - c0) as f64 / 1000.0 / n),
        None => "not read".into(),
    };
    println!(
        "p50 {} µs, p99 {} µs, {:.0} keys/s, server CPU {server}, this process's CPU {:.0} µs/key",
        quantile(&all, 0.5),
        quantile(&all, 0.99),
        n / wall.as_secs_f64(),
        (u1 - u0) as f64 / n
    );
    pg_client(None)
        .await?
        .batch_execute(&format!("DROP SCHEMA {} CASCADE", s.schema))
        .await
        .map_err(pg_err)
}

fn main() -> std::process::ExitCode {
    run_main("sqlbench", parse, main_async)
}
