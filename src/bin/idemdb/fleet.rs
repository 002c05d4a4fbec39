//! The operator commands against a store on PostgreSQL (`--postgres URL`): migrate, stats,
//! sweep, inspect, forget (a request record, or with `--consumer` a consumer message, or with
//! `--reservation` a unique reservation).

use std::process::ExitCode;

type Flags = [(String, Option<String>)];

#[cfg(not(feature = "postgres"))]
pub(crate) fn run(
    _cmd: &str,
    _url: &str,
    _flags: &Flags,
    _pair: Result<(String, String), String>,
) -> Result<ExitCode, String> {
    Err(
        "this idemdb was built without the `postgres` feature; rebuild it with \
         `cargo build --release --features postgres`"
            .into(),
    )
}

#[cfg(feature = "postgres")]
pub(crate) fn run(
    cmd: &str,
    url: &str,
    flags: &Flags,
    pair: Result<(String, String), String>,
) -> Result<ExitCode, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    rt.block_on(run_async(cmd, url, flags, pair))
}

#[cfg(feature = "postgres")]
async fn run_async(
    cmd: &str,
    url: &str,
    flags: &Flags,
    pair: Result<(String, String), String>,
) -> Result<ExitCode, String> {
    use idemdb::Config;
    let err = |e: idemdb::Error| e.to_string();
    let cfg = Config::postgres(url).sweep_interval(None);
    let flag = |name: &str| flags.iter().find(|(f, _)| f == name);
    match cmd {
        "migrate" if flag("--status").is_some() => {
            for step in cfg.schema_status().await.map_err(err)? {
                let when = step.applied_at.as_deref().unwrap_or("not applied");
                println!("{:>4}  {:<48}  {when}", step.version, step.name);
            }
            Ok(ExitCode::SUCCESS)
        }
        "migrate" => {
            let to = match flag("--to").and_then(|(_, v)| v.as_deref()) {
                None => None,
                Some(v) => Some(v.parse().map_err(|_| format!("--to {v}: not a version"))?),
            };
            let changed = cfg.migrate_schema(to).await.map_err(err)?;
            if changed.is_empty() {
                println!("the schema is already at the requested version");
            } else {
                println!("ran schema steps {changed:?}");
            }
            Ok(ExitCode::SUCCESS)
        }
        "sweep" => {
            let store = cfg.migrate_on_open(false).open_async().await.map_err(err)?;
            let mut total = 0;
            loop {
                let n = store.sweep(1_000).await.map_err(err)?;
                total += n;
                if n < 1_000 {
                    break;
                }
            }
            println!("swept {total} expired records");
            Ok(ExitCode::SUCCESS)
        }
        "inspect" => {
            let (t, k) = pair?;
            let store = cfg.migrate_on_open(false).open_async().await.map_err(err)?;
            match store.get(&t, &k).await.map_err(err)? {
                None => {
                    println!("no live record for tenant {t:?} key {k:?}");
                    Ok(ExitCode::FAILURE)
                }
                Some(r) => {
                    crate::print_record(&r);
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
        "stats" => {
            let store = cfg.migrate_on_open(false).open_async().await.map_err(err)?;
            let watch = flag("--watch").is_some();
            loop {
                let s = store.postgres_stats().await.map_err(err)?;
                let rows = [
                    ("requests pending", s.requests_pending),
                    ("requests released", s.requests_released),
                    ("requests completed", s.requests_completed),
                    ("requests failed", s.requests_failed),
                    ("messages pending", s.messages_pending),
                    ("messages released", s.messages_released),
                    ("messages completed", s.messages_completed),
                    ("messages failed", s.messages_failed),
                    ("expired awaiting sweep", s.expired_awaiting_sweep),
                    ("entities", s.entities),
                    ("entity tombstones", s.entity_tombstones),
                    ("reservations", s.reservations),
                    ("offset windows", s.offset_windows),
                    ("causal entities", s.causal),
                    ("table bytes", s.table_bytes),
                ];
                if flag("--json").is_some() {
                    let obj: serde_json::Map<String, serde_json::Value> = rows
                        .iter()
                        .map(|(name, v)| (name.replace(' ', "_"), (*v).into()))
                        .collect();
                    println!("{}", serde_json::Value::Object(obj));
                } else {
                    if watch {
                        println!("--- {}", store.now().await.map_err(err)?);
                    }
                    for (name, v) in rows {
                        println!("{name:<24} {v}");
                    }
                }
                if !watch {
                    return Ok(ExitCode::SUCCESS);
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
        "forget" => {
            let (t, k) = pair?;
            let store = cfg.migrate_on_open(false).open_async().await.map_err(err)?;
            let found = if flag("--consumer").is_some() {
                store.forget_message(&t, &k).await
            } else if flag("--reservation").is_some() {
                store.forget_reservation(&t, &[k.as_bytes()]).await
            } else {
                store.forget(&t, &k).await
            }
            .map_err(err)?;
            println!("{}", if found { "forgotten" } else { "no such record" });
            Ok(ExitCode::SUCCESS)
        }
        other => Err(format!(
            "{other} does not take --postgres (migrate, stats, sweep, inspect and forget do)"
        )),
    }
}
