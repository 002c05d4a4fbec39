//! The operator commands against a store on PostgreSQL (`--postgres URL`): migrate, stats,
//! sweep, inspect, forget (a request record, or with `--consumer` a consumer message, or with
//! `--reservation` a unique reservation).

use std::process::ExitCode;

use crate::Forget;

/// A command on a fleet's store, with its arguments (parsed in main.rs).
pub(crate) enum Fleet {
    /// `--status`: list the schema steps; else move the schema to `to` (`None`: the latest).
    Migrate {
        to: Option<i32>,
        status: bool,
    },
    Stats {
        watch: bool,
        json: bool,
    },
    Sweep,
    /// The request record of `tenant` `key`.
    Inspect {
        tenant: String,
        key: String,
    },
    Forget {
        what: Forget,
        scope: String,
        key: String,
    },
}

#[cfg(not(feature = "postgres"))]
pub(crate) fn run(_url: &str, _cmd: Fleet) -> Result<ExitCode, String> {
    Err(
        "this idemdb was built without the `postgres` feature; rebuild it with \
         `cargo build --release --features postgres`"
            .into(),
    )
}

#[cfg(feature = "postgres")]
pub(crate) fn run(url: &str, cmd: Fleet) -> Result<ExitCode, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    rt.block_on(run_async(url, cmd))
}

#[cfg(feature = "postgres")]
async fn run_async(url: &str, cmd: Fleet) -> Result<ExitCode, String> {
    use idemdb::Config;
    let err = |e: idemdb::Error| e.to_string();
    let cfg = Config::postgres(url).sweep_interval(None);
    match cmd {
        Fleet::Migrate { status: true, .. } => {
            for step in cfg.schema_status().await.map_err(err)? {
                let when = step.applied_at.as_deref().unwrap_or("not applied");
                println!("{:>4}  {:<48}  {when}", step.version, step.name);
            }
            Ok(ExitCode::SUCCESS)
        }
        Fleet::Migrate { to, .. } => {
            let changed = cfg.migrate_schema(to).await.map_err(err)?;
            if changed.is_empty() {
                println!("the schema is already at the requested version");
            } else {
                println!("ran schema steps {changed:?}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Fleet::Sweep => {
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
        Fleet::Inspect { tenant: t, key: k } => {
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
        Fleet::Stats { watch, json } => {
            let store = cfg.migrate_on_open(false).open_async().await.map_err(err)?;
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
                if json {
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
        Fleet::Forget {
            what,
            scope: t,
            key: k,
        } => {
            let store = cfg.migrate_on_open(false).open_async().await.map_err(err)?;
            let found = match what {
                Forget::Message => store.forget_message(&t, &k).await,
                Forget::Reservation => store.forget_reservation(&t, &[k.as_bytes()]).await,
                Forget::Record => store.forget(&t, &k).await,
            }
            .map_err(err)?;
            println!("{}", if found { "forgotten" } else { "no such record" });
            Ok(ExitCode::SUCCESS)
        }
    }
}
