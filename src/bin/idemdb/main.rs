//! The `idemdb` command: the payment-service demo, and operator commands against a store directory.

mod demo;
mod fleet;

use std::path::PathBuf;
use std::process::ExitCode;

use idemdb::{Config, RecordState, Store};

const USAGE: &str = "usage:
  idemdb demo [--db DIR] [--payments N] [--clients N] [--buffered]
  idemdb stats   --db DIR
  idemdb inspect --db DIR TENANT KEY
  idemdb sweep   --db DIR
  idemdb forget  --db DIR TENANT KEY
  idemdb forget  --db DIR --consumer GROUP MESSAGE_ID
PostgreSQL (fleet mode; URL like postgres://user@host:5432/db):
  idemdb migrate --postgres URL [--to VERSION]   apply the schema (or undo it down to VERSION; 0: all)
  idemdb migrate --postgres URL --status         list the schema steps and when each was applied
  idemdb stats   --postgres URL                  count the records, messages, entities and more
  idemdb sweep   --postgres URL                  delete expired records in batches
  idemdb inspect --postgres URL TENANT KEY
  idemdb forget  --postgres URL TENANT KEY
  idemdb forget  --postgres URL --consumer GROUP MESSAGE_ID";

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
            "--payments" | "--clients" | "--to" => {
                let v = it.next().ok_or(format!("{a} needs a number"))?;
                out.flags.push((a.clone(), Some(v.clone())));
            }
            "--buffered" | "--consumer" | "--status" => out.flags.push((a.clone(), None)),
            f if f.starts_with("--") => return Err(format!("unknown flag {f}\n{USAGE}")),
            _ => out.positional.push(a.clone()),
        }
    }
    Ok(out)
}

fn open_existing(db: Option<PathBuf>) -> Result<Store, String> {
    let db = db.ok_or(format!("this command needs --db DIR\n{USAGE}"))?;
    if !db.join("CURRENT").exists() {
        return Err(format!("{} holds no store", db.display()));
    }
    Config::new(db)
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
        let pair = if cmd == "stats" {
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
            let s = open_existing(a.db)?.stats().map_err(|e| e.to_string())?;
            println!("estimated records        {}", s.estimated_records);
            println!("estimated index entries  {}", s.estimated_index_entries);
            println!("live SST bytes           {}", s.live_sst_bytes);
            println!("memtable bytes           {}", s.memtable_bytes);
            println!("pending in memory        {}", s.pending_in_memory);
            Ok(ExitCode::SUCCESS)
        }
        "inspect" => {
            let (t, k) = two(&a)?;
            let store = open_existing(a.db)?;
            match store.get(&t, &k).map_err(|e| e.to_string())? {
                None => {
                    println!("no live record for tenant {t:?} key {k:?}");
                    Ok(ExitCode::FAILURE)
                }
                Some(r) => {
                    print_record(&r);
                    Ok(ExitCode::SUCCESS)
                }
            }
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
            let store = open_existing(a.db)?;
            let consumer = a.flags.iter().any(|(f, _)| f == "--consumer");
            let found = if consumer {
                store.forget_message(&t, &k)
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
