//! `idemdb --help` and `idemdb <command> --help` exit 0, name every flag of the command, and are
//! exactly what docs/cli.md shows (scripts/cli-help writes it from the binary), so the usage in
//! the documents cannot drift from the binary; `idemdb help <command>` prints the same. A usage
//! error (an unknown flag or command, a missing argument, --db with --postgres) exits 2 naming
//! the problem, as does a failed command; `--version` prints the package's version; the
//! PostgreSQL URL is read from IDEMDB_POSTGRES_URL, and a `--db` on the command line wins over it.

use std::process::{Command, Output};

const ENV: &str = "IDEMDB_POSTGRES_URL";
/// Nothing listens on port 1 of the loopback: connecting fails at once.
const UNREACHABLE: &str = "postgres://postgres@127.0.0.1:1/test";

/// Every command (`""`: the binary itself) and what its `--help` must name.
const COMMANDS: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "demo",
            "stats",
            "inspect",
            "sweep",
            "forget",
            "migrate",
            "proxy",
            "help",
            "--help",
            "--version",
        ],
    ),
    (
        "demo",
        &[
            "--db <DIR>",
            "--payments <N>",
            "--clients <N>",
            "--buffered",
            "--help",
        ],
    ),
    (
        "stats",
        &[
            "--db <DIR>",
            "--postgres <URL>",
            "--watch",
            "--json",
            "--help",
        ],
    ),
    (
        "inspect",
        &[
            "--db <DIR>",
            "--postgres <URL>",
            "--kind <KINDS>",
            "--prefix",
            "--limit <N>",
            "--json",
            "--help",
            "[SCOPE]",
            "[KEY]",
            "records",
            "messages",
            "entities",
            "causal",
            "vectors",
            "reservations",
            "offsets",
            "all",
        ],
    ),
    ("sweep", &["--db <DIR>", "--postgres <URL>", "--help"]),
    (
        "forget",
        &[
            "--db <DIR>",
            "--postgres <URL>",
            "--consumer",
            "--reservation",
            "--help",
            "<TENANT> <KEY>",
            "<GROUP> <MESSAGE_ID>",
            "<INDEX> <VALUE>",
        ],
    ),
    (
        "migrate",
        &["--postgres <URL>", "--to <VERSION>", "--status", "--help"],
    ),
    (
        "proxy",
        &[
            "--listen <ADDR>",
            "--upstream <URL>",
            "--db <DIR>",
            "--postgres <URL>",
            "--routes <FILE>",
            "--inventory",
            "--max-connections <N>",
            "--upstream-timeout <DUR>",
            "--request-timeout <DUR>",
            "--drain-timeout <DUR>",
            "--threads <N>",
            "--durability <MODE>",
            "--claims <MODE>",
            "--log <FILTER>",
            "--help",
            "ROUTES FILE",
            "on-unknown=fail|release",
        ],
    ),
];

/// Runs the binary with `args`, without IDEMDB_POSTGRES_URL from the test's environment (and
/// with it set to `env` when given).
fn idemdb(args: &[&str], env: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemdb"));
    cmd.args(args).env_remove(ENV);
    if let Some(url) = env {
        cmd.env(ENV, url);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The fenced block under the heading `## idemdb <command>` of docs/cli.md, with its last newline.
fn documented(doc: &str, command: &str) -> Option<String> {
    let heading = if command.is_empty() {
        "## idemdb\n".to_owned()
    } else {
        format!("## idemdb {command}\n")
    };
    let at = doc
        .match_indices(&heading)
        .find(|(i, _)| *i == 0 || doc[..*i].ends_with('\n'))?
        .0;
    let rest = &doc[at + heading.len()..];
    let body = rest.trim_start_matches('\n').strip_prefix("```text\n")?;
    let end = body.find("\n```\n")?;
    Some(format!("{}\n", &body[..end]))
}

#[test]
fn every_command_has_help_naming_its_flags_as_docs_cli_md_shows() {
    let _serial = crate::serial();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md");
    let doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    for (command, names) in COMMANDS {
        let args: Vec<&str> = [*command, "--help"]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let out = idemdb(&args, None);
        let help = text(&out.stdout);
        assert!(
            out.status.success(),
            "idemdb {command} --help: {:?}\n{help}{}",
            out.status,
            text(&out.stderr)
        );
        for name in *names {
            assert!(
                help.contains(name),
                "idemdb {command} --help does not name {name}:\n{help}"
            );
        }
        if !command.is_empty() {
            // Every flag's line says what it does.
            for line in help.lines().filter(|l| l.starts_with("  -")) {
                assert!(
                    line.trim().contains("  "),
                    "idemdb {command} --help: a flag without its explanation: {line}"
                );
            }
            assert!(help.contains("IDEMDB_POSTGRES_URL") == names.contains(&"--postgres <URL>"));
            let same = idemdb(&["help", command], None);
            assert!(same.status.success());
            assert_eq!(text(&same.stdout), help, "idemdb help {command}");
        }
        assert!(
            help.lines().all(|l| l.len() <= 100),
            "idemdb {command} --help: a line wider than 100 columns:\n{help}"
        );
        match documented(&doc, command) {
            Some(block) if block == help => {}
            Some(block) => panic!(
                "docs/cli.md differs from `idemdb {command} --help`: run scripts/cli-help\n\
                 --- docs/cli.md\n{block}--- idemdb {command} --help\n{help}"
            ),
            None => panic!(
                "docs/cli.md has no `## idemdb {command}` with a ```text block: run scripts/cli-help"
            ),
        }
    }
}

#[test]
fn usage_errors_and_failed_commands_exit_2_naming_the_problem() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().to_str().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["stats", "--db", db, "--bogus"],
            &["unexpected argument '--bogus'"],
        ),
        (&["frob"], &["unrecognized subcommand 'frob'"]),
        (&[], &["Usage: idemdb <COMMAND>"]),
        (&["forget", "--db", db, "acme"], &["required", "<KEY>"]),
        (&["stats"], &["required", "<--db <DIR>|--postgres <URL>>"]),
        (&["migrate"], &["required", "--postgres <URL>"]),
        (
            &["demo", "--payments", "many"],
            &["invalid value 'many'", "--payments"],
        ),
        (
            &["inspect", "--db", db, "--kind", "records,nope"],
            &["nope: not one of"],
        ),
        (
            &["stats", "--db", db, "--postgres", UNREACHABLE],
            &["'--db <DIR>' cannot be used with '--postgres <URL>'"],
        ),
        (
            &[
                "forget",
                "--db",
                db,
                "--consumer",
                "--reservation",
                "g",
                "m",
            ],
            &["'--consumer' cannot be used with '--reservation'"],
        ),
        (
            &["inspect", "--postgres", UNREACHABLE, "acme"],
            &["needs TENANT KEY"],
        ),
        (
            &["inspect", "--postgres", UNREACHABLE, "--json", "acme", "k"],
            &["--json list an embedded store"],
        ),
        // A proxy setting of the other backend is refused, not ignored.
        (
            &[
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "http://127.0.0.1:9",
                "--db",
                db,
                "--claims",
                "flushed",
            ],
            &["required", "--postgres <URL>"],
        ),
        (
            &[
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "http://127.0.0.1:9",
                "--postgres",
                UNREACHABLE,
                "--claims",
                "sometimes",
            ],
            &["invalid value 'sometimes'", "--claims"],
        ),
        // Not a usage error, a failed command: the same status, its own message.
        (&["sweep", "--db", db], &["idemdb: ", "holds no store"]),
    ];
    for (args, needles) in cases {
        let out = idemdb(args, None);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "idemdb {args:?}: {err}");
        for needle in *needles {
            assert!(
                err.contains(needle),
                "idemdb {args:?}: no {needle:?} in {err}"
            );
        }
    }
}

#[test]
fn version_prints_the_package_version() {
    let _serial = crate::serial();
    let out = idemdb(&["--version"], None);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout),
        format!("idemdb {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn postgres_url_from_the_environment_and_db_wins_over_it() {
    let _serial = crate::serial();
    // The URL from the environment is used: the command fails reaching PostgreSQL, not asking
    // for --db or --postgres.
    for args in [&["stats"][..], &["sweep"], &["migrate", "--status"]] {
        let out = idemdb(args, Some(UNREACHABLE));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "idemdb {args:?}: {err}");
        assert!(
            err.contains("PostgreSQL") && !err.contains("required"),
            "idemdb {args:?} with {ENV} set: {err}"
        );
    }
    // A --db on the command line wins over the variable (no conflict reported).
    let dir = tempfile::tempdir().unwrap();
    idemdb::Config::new(dir.path())
        .open()
        .unwrap()
        .close()
        .unwrap();
    let db = dir.path().to_str().unwrap();
    let out = idemdb(&["stats", "--db", db, "--json"], Some(UNREACHABLE));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert!(out.status.success() && stats["estimated_records"].is_u64());
    let out = idemdb(&["inspect", "--db", db, "acme"], Some(UNREACHABLE));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("nothing stored there"));
    let out = idemdb(&["sweep", "--db", db], Some(UNREACHABLE));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "swept 0 expired records\n");
}
