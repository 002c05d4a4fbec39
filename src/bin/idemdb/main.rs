//! The `idemdb` command: the payment-service demo, and operator commands against a store
//! directory (`--db DIR`) or a fleet's store on PostgreSQL (`--postgres URL`, fleet.rs).
//! Arguments are parsed by clap (derive): `--help` for the binary and every command, `--version`,
//! exit status 2 on a usage error. docs/cli.md holds every `--help` output (scripts/cli-help
//! writes it; the `operating` tests check that it matches), so the help text here is the
//! reference of the commands.

mod demo;
mod fleet;
mod inspect;
#[cfg(feature = "proxy")]
mod proxy;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, ColorChoice, CommandFactory, FromArgMatches, Parser, Subcommand};
use idemdb::{Config, DataKind, RecordState, Store};

/// The PostgreSQL URL's environment variable (`--postgres`).
const POSTGRES_ENV: &str = "IDEMDB_POSTGRES_URL";

/// The idemdb operator tool.
#[derive(Parser)]
#[command(
    name = "idemdb",
    bin_name = "idemdb",
    version,
    about = "The idemdb operator tool: a payment-service demo, and commands on an embedded store \
             (--db DIR)\nor on a fleet's store in PostgreSQL (--postgres URL, like \
             postgres://user@host:5432/db).",
    // The help is the same on every terminal (docs/cli.md is a copy of it).
    term_width = 100,
    color = ColorChoice::Never,
    after_help = "Exit status: 0 done; 1 nothing found (inspect) or a failed demo check; 2 a usage \
                  error or a\nfailed command. Every command's flags: idemdb help <COMMAND>, or \
                  docs/cli.md."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the payment-service demo under retries, duplicates and crashes; check its ledger
    Demo(DemoArgs),
    /// Print the store's sizes and sweep lag (an embedded store is opened read-only)
    Stats(StatsArgs),
    /// List what is stored: records, messages, entities, reservations, offsets and more
    Inspect(InspectArgs),
    /// Delete the expired records
    Sweep(SweepArgs),
    /// Remove a request record, a consumer message (--consumer) or a reservation (--reservation)
    Forget(ForgetArgs),
    /// Apply the PostgreSQL schema, move it to a version (--to), or list its steps (--status)
    Migrate(MigrateArgs),
    /// Put the idempotency layer in front of an HTTP service in any language (a reverse proxy)
    #[cfg(feature = "proxy")]
    Proxy(ProxyArgs),
}

// Where a command finds its store: an embedded store's directory or a fleet's PostgreSQL, exactly
// one. The URL may come from the environment; a --db given on the command line wins over it
// (resolved by `StoreArgs::resolve`: clap counts a value from the environment as given, so its
// conflict check would refuse the pair).
#[derive(Args)]
#[group(id = "store", required = true, multiple = true)]
struct StoreArgs {
    /// The embedded store's directory; wins over IDEMDB_POSTGRES_URL
    #[arg(long, value_name = "DIR")]
    db: Option<PathBuf>,
    /// The fleet's PostgreSQL URL; or from the env var
    #[arg(long, value_name = "URL", env = POSTGRES_ENV, hide_env_values = true)]
    postgres: Option<String>,
}

#[derive(Args)]
struct DemoArgs {
    /// Keep the store in DIR (default: a temporary directory, removed at the end)
    #[arg(long, value_name = "DIR")]
    db: Option<PathBuf>,
    /// How many payments the clients send
    #[arg(long, value_name = "N", default_value_t = 4000)]
    payments: usize,
    /// How many client threads send them concurrently
    #[arg(long, value_name = "N", default_value_t = 32)]
    clients: usize,
    /// Durability::Buffered writes (no sync per write) instead of Durability::Synced
    #[arg(long)]
    buffered: bool,
}

#[derive(Args)]
struct StatsArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print again every second, until interrupted
    #[arg(long)]
    watch: bool,
    /// Print a JSON object instead of lines (with --watch: one per second)
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(
    after_help = "KINDS: records, messages, entities, causal, vectors, reservations, offsets; \
                  several separated by\ncommas, or all.\n\
                  SCOPE is the tenant, consumer group or index; KEY the idempotency key, message \
                  id, entity id, the\nreservation's value (its first part) or the offsets' topic. \
                  Without KEY: all of SCOPE; without\nSCOPE: everything of the kind. An embedded \
                  store is opened read-only: this works on a store in use.\n\
                  With --postgres: the request record of TENANT KEY (give both; --kind, --prefix, \
                  --limit and\n--json list an embedded store). Exit status 1 when nothing matched."
)]
struct InspectArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Kinds to list, comma-separated, or all (KINDS below)
    #[arg(
        long,
        value_name = "KINDS",
        default_value = "records",
        value_parser = parse_kinds
    )]
    kind: Kinds,
    /// List the keys that start with KEY, not only KEY itself
    #[arg(long)]
    prefix: bool,
    /// List at most N items of each kind
    #[arg(long, value_name = "N", default_value_t = 1000)]
    limit: usize,
    /// Print a JSON array of the items instead of a table
    #[arg(long)]
    json: bool,
    /// The tenant, consumer group or index (default: every scope)
    #[arg(value_name = "SCOPE")]
    scope: Option<String>,
    /// The key (or message id, entity id, reservation value, offsets' topic) in SCOPE
    #[arg(value_name = "KEY")]
    key: Option<String>,
}

/// `--kind`'s value: one kind, several separated by commas, or `all` (`inspect::kinds`).
#[derive(Clone)]
struct Kinds(Vec<DataKind>);

fn parse_kinds(arg: &str) -> Result<Kinds, String> {
    // clap names the flag and its value in front of this message already.
    inspect::kinds(Some(arg))
        .map(Kinds)
        .map_err(|e| e.strip_prefix("--kind ").unwrap_or(&e).to_owned())
}

#[derive(Args)]
struct SweepArgs {
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Args)]
#[command(
    override_usage = "idemdb forget <--db <DIR>|--postgres <URL>> <TENANT> <KEY>
       idemdb forget <--db <DIR>|--postgres <URL>> --consumer <GROUP> <MESSAGE_ID>
       idemdb forget <--db <DIR>|--postgres <URL>> --reservation <INDEX> <VALUE>"
)]
struct ForgetArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Forget a consumer message: the arguments are GROUP MESSAGE_ID
    #[arg(long, conflicts_with = "reservation")]
    consumer: bool,
    /// Forget a unique reservation: the arguments are INDEX VALUE
    #[arg(long)]
    reservation: bool,
    /// The tenant; with --consumer the consumer group, with --reservation the index
    #[arg(value_name = "TENANT")]
    scope: String,
    /// The idempotency key; with --consumer the message id, with --reservation the value
    #[arg(value_name = "KEY")]
    key: String,
}

#[derive(Args)]
struct MigrateArgs {
    /// The fleet's PostgreSQL URL; or from the env var
    #[arg(long, value_name = "URL", env = POSTGRES_ENV, hide_env_values = true)]
    postgres: String,
    /// Move the schema to VERSION, not the latest (0: drop every idemdb table)
    #[arg(long, value_name = "VERSION", conflicts_with = "status")]
    to: Option<i32>,
    /// List the schema steps and when each was applied; change nothing
    #[arg(long)]
    status: bool,
}

#[cfg(feature = "proxy")]
#[derive(Args)]
#[command(
    override_usage = "idemdb proxy --listen <ADDR> --upstream <URL> <--db <DIR>|--postgres <URL>> \
                      [OPTIONS]
       idemdb proxy --inventory [--routes <FILE>]",
    after_help = "The proxy prints `idemdb proxy: listening on ADDR` when ready (--listen with \
                  port 0: a free port).\n\
                  Proxies on one PostgreSQL act as one. --upstream-timeout also bounds the wait \
                  between parts of\nthe upstream's body; --request-timeout bounds a request's \
                  headers and its whole body.\n\
                  --durability synced: each stored answer is synced before it is sent (survives \
                  a machine crash);\nbuffered: survives a crash of the proxy only.\n\
                  --claims buffered: a new key's claim is made durable by its answer's commit \
                  (one flush per request);\nflushed: each claim is flushed before the upstream \
                  is called (a database crash or failover never\nlets a retry reach the upstream \
                  while the first call may still run).\n\
                  --log: a level, or target=level pairs (idemdb::http=info: a line per request).\n\
                  \n\
                  ROUTES FILE (the idempotency inventory): one route per line, `#` comments:\n  \
                  METHODS PATH LEVEL [OPTION=VALUE ...]\n  \
                  POST        /payments     hard  principal=header:x-api-key lease=10s\n  \
                  POST,PATCH  /orders/*     soft  principal=jwt-sub:authorization \
                  jwt-key=jwks:/etc/jwks.json\n  \
                  *           /internal/**  none\n  \
                  POST        /hooks/stripe webhook scheme=stripe \
                  secret=file:/etc/idemdb/stripe.secret\n\
                  METHODS: upper-case names separated by commas, or * (a keyed * route keys \
                  POST, PUT, PATCH,\nDELETE). PATH: `*` or `{id}` one segment, `**` \
                  (last) any rest. LEVEL: hard\n(Idempotency-Key required), soft (keyed when \
                  sent), none (passed through),\nwebhook (signed deliveries: the signature \
                  verified first, 401 otherwise; the event id is\nthe key). OPTIONS and \
                  defaults:\n  \
                  principal=anonymous|header:NAME|jwt-sub:NAME|jwt-sub-unverified:NAME   whose \
                  keys (default\n    anonymous: one scope); jwt-sub needs jwt-key=secret:FILE|pem:FILE|\
                  jwks:FILE, and takes\n    jwt-iss=A,B jwt-aud=A,B jwt-leeway=30s; a token that \
                  does not verify is 401, nothing stored\n  \
                  scope-headers=NAME,NAME (their values, hashed, scope the key too and are \
                  fingerprinted)\n  \
                  lease=30s  retention=24h  max-body=1MiB  wait=0s (a duplicate's wait, then \
                  409)\n  \
                  fingerprint=content-type (headers besides method, path, query, body; or none)\n  \
                  on-unknown=fail|release (default fail: an answer lost at the upstream is \
                  stored, never resent)\n\
                  A webhook route takes lease, retention, max-body, wait, on-unknown, and:\n  \
                  scheme=standard|stripe|github  secret=file:PATH|env:VAR (one secret per line, \
                  several while\n    rotating; a file is read again when it changes)  \
                  endpoint=NAME (default the route's path:\n    its events are its own)  \
                  tolerance=5m\n  \
                  Only a 2xx answer is stored; any other lets the provider's retry reach the \
                  upstream again.\n\
                  The first matching route decides, on the path's normal form (/payments/, \
                  //payments and /%70ayments\nare /payments); an unmatched request passes \
                  through. Without --routes:\nPOST,PATCH /** soft. The proxy answers GET /_idemdb/health \
                  and /_idemdb/metrics itself.\n\
                  A bad routes file stops the proxy at start, naming the line (exit status 2).\n\
                  A key's tenant (for idemdb inspect and forget) is `p` + its principal \
                  (`panonymous`), or `h` +\nits hash when over 63 bytes; a webhook route's is `w` + scheme:endpoint (`wstripe:/hooks/stripe`)."
)]
struct ProxyArgs {
    /// The address to listen on, like 127.0.0.1:8080
    #[arg(long, value_name = "ADDR", required_unless_present = "inventory")]
    listen: Option<std::net::SocketAddr>,
    /// The service behind the proxy, like http://127.0.0.1:8000
    #[arg(long, value_name = "URL", required_unless_present = "inventory")]
    upstream: Option<String>,
    /// The embedded store's directory; wins over IDEMDB_POSTGRES_URL
    #[arg(long, value_name = "DIR")]
    db: Option<PathBuf>,
    /// The fleet's PostgreSQL URL
    #[arg(long, value_name = "URL", env = POSTGRES_ENV, hide_env_values = true)]
    postgres: Option<String>,
    /// The routes file [default: POST,PATCH /** soft]
    #[arg(long, value_name = "FILE")]
    routes: Option<PathBuf>,
    /// Print the routes as a table and exit
    #[arg(long)]
    inventory: bool,
    /// Client connections served at once (more wait)
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_connections: usize,
    /// The upstream's time to answer (then 504)
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = proxy::parse_duration)]
    upstream_timeout: std::time::Duration,
    /// A client's time to send a request
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = proxy::parse_duration)]
    request_timeout: std::time::Duration,
    /// On SIGTERM, the time requests in flight get
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = proxy::parse_duration)]
    drain_timeout: std::time::Duration,
    /// Threads serving requests (1: the least CPU per request)
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// With --db: synced or buffered [default: synced]
    #[arg(long, value_name = "MODE", value_parser = ["synced", "buffered"], requires = "db",
          hide_possible_values = true)]
    durability: Option<String>,
    /// With --postgres: buffered or flushed [default: buffered]
    #[arg(long, value_name = "MODE", value_parser = ["buffered", "flushed"],
          requires = "postgres", hide_possible_values = true)]
    claims: Option<String>,
    /// What to log on stderr
    #[arg(long, value_name = "FILTER", default_value = "warn")]
    log: String,
}

/// What `forget` removes.
#[derive(Clone, Copy)]
pub(crate) enum Forget {
    /// A request record: TENANT KEY.
    Record,
    /// A consumer message: GROUP MESSAGE_ID.
    Message,
    /// A unique reservation: INDEX VALUE.
    Reservation,
}

impl ForgetArgs {
    fn what(&self) -> Forget {
        if self.consumer {
            Forget::Message
        } else if self.reservation {
            Forget::Reservation
        } else {
            Forget::Record
        }
    }
}

/// The store a command works on, once `--db` and `--postgres` are resolved.
enum Target {
    Db(PathBuf),
    Postgres(String),
}

impl StoreArgs {
    /// The one store named: `--db` wins over a URL from the environment; both on the command
    /// line is a usage error (clap's group already refused neither).
    fn resolve(self, command: &str, matches: &ArgMatches) -> Target {
        match (self.db, self.postgres) {
            (Some(db), None) => Target::Db(db),
            (None, Some(url)) => Target::Postgres(url),
            (Some(db), Some(_))
                if matches.value_source("postgres") == Some(ValueSource::EnvVariable) =>
            {
                Target::Db(db)
            }
            (Some(_), Some(_)) => usage_error(
                command,
                ErrorKind::ArgumentConflict,
                "the argument '--db <DIR>' cannot be used with '--postgres <URL>'",
            ),
            (None, None) => usage_error(
                command,
                ErrorKind::MissingRequiredArgument,
                "the following required arguments were not provided:\n  <--db <DIR>|--postgres <URL>>",
            ),
        }
    }
}

/// Reports a usage error found after parsing the way clap reports its own (the command's usage,
/// exit status 2).
fn usage_error(command: &str, kind: ErrorKind, message: &str) -> ! {
    let mut cli = Cli::command();
    cli.build();
    let sub = cli
        .find_subcommand_mut(command)
        .expect("a command of the binary");
    sub.error(kind, message).exit()
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli =
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut Cli::command()).exit());
    let sub = matches
        .subcommand()
        .map(|(_, m)| m)
        .expect("clap requires a command");
    match run(cli.command, sub) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idemdb: {e}");
            ExitCode::from(2)
        }
    }
}

/// Opens the store at `--db` to change it (sweep, forget). A store another process holds open
/// cannot be: RocksDB locks the directory for its one writer.
fn open_existing(db: PathBuf) -> Result<Store, String> {
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
fn open_follower(db: PathBuf) -> Result<Store, String> {
    Config::new(db)
        .read_only(true)
        .sweep_interval(None)
        .open()
        .map_err(|e| e.to_string())
}

fn run(command: Command, matches: &ArgMatches) -> Result<ExitCode, String> {
    match command {
        Command::Demo(a) => {
            let opts = demo::Options {
                db: a.db,
                payments: a.payments,
                clients: a.clients,
                buffered: a.buffered,
            };
            let ok = demo::run(&opts).map_err(|e| e.to_string())?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Stats(a) => match a.store.resolve("stats", matches) {
            Target::Postgres(url) => fleet::run(
                &url,
                fleet::Fleet::Stats {
                    watch: a.watch,
                    json: a.json,
                },
            ),
            Target::Db(db) => stats_db(db, a.watch, a.json),
        },
        Command::Inspect(a) => match a.store.resolve("inspect", matches) {
            Target::Postgres(url) => {
                let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
                if ["kind", "prefix", "limit", "json"].into_iter().any(given) {
                    usage_error(
                        "inspect",
                        ErrorKind::ArgumentConflict,
                        "--kind, --prefix, --limit and --json list an embedded store (--db); \
                         inspect --postgres shows the request record of TENANT KEY",
                    );
                }
                let (Some(tenant), Some(key)) = (a.scope, a.key) else {
                    usage_error(
                        "inspect",
                        ErrorKind::MissingRequiredArgument,
                        "inspect --postgres needs TENANT KEY (the request record of that key)",
                    );
                };
                fleet::run(&url, fleet::Fleet::Inspect { tenant, key })
            }
            Target::Db(db) => inspect_db(
                db,
                &a.kind.0,
                a.scope.as_deref(),
                a.key.as_deref(),
                a.prefix,
                a.limit,
                a.json,
            ),
        },
        Command::Sweep(a) => match a.store.resolve("sweep", matches) {
            Target::Postgres(url) => fleet::run(&url, fleet::Fleet::Sweep),
            Target::Db(db) => {
                let store = open_existing(db)?;
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
        },
        Command::Forget(a) => {
            let what = a.what();
            match a.store.resolve("forget", matches) {
                Target::Postgres(url) => fleet::run(
                    &url,
                    fleet::Fleet::Forget {
                        what,
                        scope: a.scope,
                        key: a.key,
                    },
                ),
                Target::Db(db) => {
                    let (t, k) = (a.scope, a.key);
                    let store = open_existing(db)?;
                    let found = match what {
                        Forget::Message => store.forget_message(&t, &k),
                        Forget::Reservation => store.forget_reservation(&t, &[k.as_bytes()]),
                        Forget::Record => store.forget(&t, &k),
                    }
                    .map_err(|e| e.to_string())?;
                    println!("{}", if found { "forgotten" } else { "no such record" });
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
        #[cfg(feature = "proxy")]
        Command::Proxy(a) => {
            if a.inventory {
                return proxy::inventory(a.routes);
            }
            let store = StoreArgs {
                db: a.db,
                postgres: a.postgres,
            }
            .resolve("proxy", matches);
            let (Some(listen), Some(upstream)) = (a.listen, a.upstream) else {
                unreachable!("clap requires --listen and --upstream without --inventory")
            };
            proxy::run(proxy::Options {
                listen,
                upstream,
                store,
                routes: a.routes,
                max_connections: a.max_connections,
                upstream_timeout: a.upstream_timeout,
                request_timeout: a.request_timeout,
                drain_timeout: a.drain_timeout,
                log: a.log,
                buffered: a.durability.as_deref() == Some("buffered"),
                flushed_claims: a.claims.as_deref() == Some("flushed"),
                threads: a.threads,
            })
        }
        Command::Migrate(a) => fleet::run(
            &a.postgres,
            fleet::Fleet::Migrate {
                to: a.to,
                status: a.status,
            },
        ),
    }
}

/// `idemdb stats --db DIR`: the embedded store's sizes, once or every second.
fn stats_db(db: PathBuf, watch: bool, as_json: bool) -> Result<ExitCode, String> {
    let store = open_follower(db)?;
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

/// `idemdb inspect --db DIR`: the items of each kind in `scope` whose key is `key` (or starts
/// with it, with `prefix`), as a table or as JSON. Exit status 1 when nothing matched.
fn inspect_db(
    db: PathBuf,
    kinds: &[DataKind],
    scope: Option<&str>,
    key: Option<&str>,
    prefix: bool,
    limit: usize,
    as_json: bool,
) -> Result<ExitCode, String> {
    let store = open_follower(db)?;
    let mut items = Vec::new();
    for &kind in kinds {
        let start = key.unwrap_or_default().as_bytes();
        let found = store
            .scan(kind, scope.map(str::as_bytes), start, limit)
            .map_err(|e| e.to_string())?;
        let exact = key.is_some() && !prefix;
        items.extend(
            found
                .into_iter()
                .filter(|i| !exact || inspect::matches(i, start)),
        );
    }
    if as_json {
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
