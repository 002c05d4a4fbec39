//! The `idemdb` command: the payment-service demo, and operator commands against a store directory.

mod demo;
mod fleet;
mod inspect;

use std::path::PathBuf;
use std::process::ExitCode;

use idemdb::{Config, RecordState, Store};

const USAGE: &str = "usage:
  idemdb demo [--db DIR] [--payments N] [--clients N] [--buffered]
  idemdb stats   --db DIR [--watch] [--json]
  idemdb inspect --db DIR [--kind KIND[,KIND..]|all] [--prefix] [--limit N] [--json] [SCOPE [KEY]]
      KIND: records (default), messages, entities, causal, vectors, reservations, offsets.
      SCOPE is the tenant, consumer group or index; KEY the key, message id, entity id, the
      reservation's value (its first part) or the offsets' topic; --prefix matches keys that
      start with KEY. stats and inspect open the store read-only: they work on a store another
      process has open.
  idemdb sweep   --db DIR
  idemdb forget  --db DIR TENANT KEY
  idemdb forget  --db DIR --consumer GROUP MESSAGE_ID
  idemdb forget  --db DIR --reservation INDEX VALUE
PostgreSQL (fleet mode; URL like postgres://user@host:5432/db):
  idemdb migrate --postgres URL [--to VERSION]   apply the schema (or undo it down to VERSION; 0: all)
  idemdb migrate --postgres URL --status         list the schema steps and when each was applied
  idemdb stats   --postgres URL                  count the records, messages, entities and more
  idemdb sweep   --postgres URL                  delete expired records in batches
  idemdb inspect --postgres URL TENANT KEY
  idemdb forget  --postgres URL TENANT KEY
  idemdb forget  --postgres URL --consumer GROUP MESSAGE_ID
  idemdb forget  --postgres URL --reservation INDEX VALUE
  idemdb stats   --postgres URL [--watch] [--json]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idemdb: {e}");
            ExitCode::from(2)
        }
    }
}

/// Splits `--flag value` pairs and bare flags from positional arguments.
struct Args {
    db: Option<PathBuf>,
    postgres: Option<String>,
    flags: Vec<(String, Option<String>)>,
    positional: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut out = Args {
        db: None,
        postgres: None,
        flags: Vec::new(),
        positional: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--db" => out.db = Some(it.next().ok_or("--db needs a directory")?.into()),
            "--postgres" => out.postgres = Some(it.next().ok_or("--postgres needs a URL")?.clone()),
            "--payments" | "--clients" | "--to" | "--limit" | "--kind" => {
                let v = it.next().ok_or(format!("{a} needs a value"))?;
                out.flags.push((a.clone(), Some(v.clone())));
            }
            "--buffered" | "--consumer" | "--status" | "--reservation" | "--watch" | "--json"
            | "--prefix" => out.flags.push((a.clone(), None)),
            f if f.starts_with("--") => return Err(format!("unknown flag {f}\n{USAGE}")),
            _ => out.positional.push(a.clone()),
        }
    }
    Ok(out)
}

impl Args {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|(f, _)| f == flag)
    }

    fn value(&self, flag: &str) -> Option<&str> {
        self.flags
            .iter()
            .find(|(f, _)| f == flag)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// Opens the store at `--db` to change it (sweep, forget). A store another process holds open
/// cannot be: RocksDB locks the directory for its one writer.
fn open_existing(db: Option<PathBuf>) -> Result<Store, String> {
    let db = db.ok_or(format!("this command needs --db DIR\n{USAGE}"))?;
    if !db.join("CURRENT").exists() {
        return Err(format!("{} holds no store", db.display()));
    }
    Config::new(&db).sweep_interval(None).open().map_err(|e| {
        let text = e.to_string();
        if text.contains("lock") {
            format!(
                "{text}\n{} is open in another process (RocksDB allows one writer): stop it, or \
                 make this change through it; `idemdb inspect` and `idemdb stats` read a store \
                 in use",
                db.display()
            )
        } else {
            text
        }
    })
}

/// Opens the store at `--db` read-only, beside a process that may hold it open.
fn open_follower(db: Option<PathBuf>) -> Result<Store, String> {
    let db = db.ok_or(format!("this command needs --db DIR\n{USAGE}"))?;
    Config::new(db)
        .read_only(true)
        .sweep_interval(None)
        .open()
        .map_err(|e| e.to_string())
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let Some(cmd) = args.first() else {
        return Err(USAGE.into());
    };
    let a = parse(&args[1..])?;
    let two = |a: &Args| -> Result<(String, String), String> {
        match a.positional.as_slice() {
            [t, k] => Ok((t.clone(), k.clone())),
            _ => Err(format!("{cmd} needs TENANT KEY\n{USAGE}")),
        }
    };
    if let Some(url) = &a.postgres {
        let pair = if cmd == "stats" || cmd == "migrate" {
            Ok((String::new(), String::new()))
        } else {
            two(&a)
        };
        return fleet::run(cmd, url, &a.flags, pair);
    }
    match cmd.as_str() {
        "demo" => {
            let num = |name: &str, default: usize| -> Result<usize, String> {
                a.flags
                    .iter()
                    .find(|(f, _)| f == name)
                    .and_then(|(_, v)| v.as_deref())
                    .map_or(Ok(default), |v| {
                        v.parse().map_err(|_| format!("{name}: not a number"))
                    })
            };
            let opts = demo::Options {
                db: a.db.clone(),
                payments: num("--payments", 4000)?,
                clients: num("--clients", 32)?,
                buffered: a.flags.iter().any(|(f, _)| f == "--buffered"),
            };
            let ok = demo::run(&opts).map_err(|e| e.to_string())?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        "stats" => {
            let (watch, as_json) = (a.has("--watch"), a.has("--json"));
            let store = open_follower(a.db.clone())?;
            loop {
                store.catch_up().map_err(|e| e.to_string())?;
                let s = store.stats().map_err(|e| e.to_string())?;
                if as_json {
                    println!("{}", inspect::stats_json(&s));
                } else {
                    if watch {
                        println!("--- {}", store.now());
                    }
                    for line in inspect::stats_lines(&s) {
                        println!("{line}");
                    }
                }
                if !watch {
                    return Ok(ExitCode::SUCCESS);
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        "inspect" => {
            let kinds = inspect::kinds(a.value("--kind"))?;
            let limit = match a.value("--limit") {
                None => 1000,
                Some(v) => v
                    .parse()
                    .map_err(|_| format!("--limit {v}: not a number"))?,
            };
            let (scope, key) = match a.positional.as_slice() {
                [] => (None, None),
                [s] => (Some(s.clone()), None),
                [s, k] => (Some(s.clone()), Some(k.clone())),
                _ => return Err(format!("inspect takes at most SCOPE KEY\n{USAGE}")),
            };
            let store = open_follower(a.db.clone())?;
            let mut items = Vec::new();
            for kind in kinds {
                let prefix = key.as_deref().unwrap_or_default().as_bytes();
                let found = store
                    .scan(kind, scope.as_deref().map(str::as_bytes), prefix, limit)
                    .map_err(|e| e.to_string())?;
                let exact = key.is_some() && !a.has("--prefix");
                items.extend(
                    found
                        .into_iter()
                        .filter(|i| !exact || inspect::matches(i, prefix)),
                );
            }
            if a.has("--json") {
                let all: Vec<_> = items.iter().map(inspect::item_json).collect();
                println!("{}", serde_json::Value::Array(all));
            } else if items.is_empty() {
                println!("nothing stored there");
            } else {
                for item in &items {
                    println!("{}", inspect::item_line(item));
                }
            }
            Ok(if items.is_empty() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        "sweep" => {
            let store = open_existing(a.db)?;
            let mut total = 0;
            loop {
                let n = store.sweep(10_000).map_err(|e| e.to_string())?;
                total += n;
                if n < 10_000 {
                    break;
                }
            }
            println!("swept {total} expired records");
            Ok(ExitCode::SUCCESS)
        }
        "forget" => {
            let (t, k) = two(&a)?;
            let store = open_existing(a.db.clone())?;
            let found = if a.has("--consumer") {
                store.forget_message(&t, &k)
            } else if a.has("--reservation") {
                store.forget_reservation(&t, &[k.as_bytes()])
            } else {
                store.forget(&t, &k)
            }
            .map_err(|e| e.to_string())?;
            println!("{}", if found { "forgotten" } else { "no such record" });
            Ok(ExitCode::SUCCESS)
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(format!("unknown command {other}\n{USAGE}")),
    }
}

/// Prints an operator's view of one record.
pub(crate) fn print_record(r: &idemdb::RecordInfo) {
    let state = match &r.state {
        RecordState::Pending { lease_until } => format!("pending (lease until {lease_until})"),
        RecordState::Released => "released for retry".into(),
        RecordState::Completed(rep) => format!(
            "completed at {}: {} body bytes, meta {:?}",
            rep.finished_at,
            rep.response.body.len(),
            rep.response.meta
        ),
        RecordState::Failed(rep) => format!(
            "failed at {}: {} body bytes, meta {:?}",
            rep.finished_at,
            rep.response.body.len(),
            rep.response.meta
        ),
        other => format!("{other:?}"),
    };
    println!("state        {state}");
    println!("created_at   {}", r.created_at);
    println!("expires_at   {}", r.expires_at);
    println!("fence        {}", r.fence);
    println!("attempts     {}", r.attempts);
    println!("takeovers    {}", r.takeovers);
    if let Some(cp) = &r.checkpoint {
        println!("checkpoint   {} ({} bytes)", cp.phase, cp.state.len());
    }
}
