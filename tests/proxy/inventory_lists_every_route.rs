//! `idemdb proxy --inventory --routes FILE` prints the routes as a table, exits 0 and starts
//! nothing: a header row (ROUTE, METHODS, LEVEL, KEY, SCOPE, LEASE, RETENTION, MAX BODY), one row
//! per route line in the file's order with its options or their defaults (lease 30s, retention
//! 24h, max body 1MiB), then a last row for unmatched requests, which pass through (`none`); on
//! stderr, a warning for each keyed route whose keys every caller shares. A `webhook` route is
//! listed with its scheme, its endpoint and where its secrets come from, never the secrets.

use crate::harness::{proxy_command, routes_file, run};

const ROUTES: &str = "\
# The inventory test's routes.
POST /payments hard principal=header:x-api-key lease=2s retention=1h max-body=64KiB

POST,PATCH /orders/* soft fingerprint=content-type,x-tenant wait=5s
* /admin/** none
POST /transfers soft principal=jwt-sub:authorization jwt-key=jwks:/etc/idemdb/jwks.json on-unknown=release
POST /small soft max-body=512B
POST /kilo soft max-body=1024
";

const COLUMNS: [&str; 8] = [
    "ROUTE",
    "METHODS",
    "LEVEL",
    "KEY",
    "SCOPE",
    "LEASE",
    "RETENTION",
    "MAX BODY",
];

/// The header's columns: each name (words separated by single spaces) and where it starts.
fn columns(header: &str) -> Vec<(String, usize)> {
    let mut cols: Vec<(String, usize)> = Vec::new();
    let mut gap = 2;
    for (i, ch) in header.char_indices() {
        if ch == ' ' {
            gap += 1;
        } else {
            if gap >= 2 {
                cols.push((String::new(), i));
            } else if gap == 1 {
                cols.last_mut().unwrap().0.push(' ');
            }
            cols.last_mut().unwrap().0.push(ch);
            gap = 0;
        }
    }
    cols
}

/// A row's cells under [`COLUMNS`] (the table may have more columns): each whitespace-separated
/// word goes to the column whose header starts at or before it (so left- and right-aligned
/// columns both read back).
fn cells(header: &str, row: &str) -> Vec<String> {
    let cols = columns(header);
    let mut all = vec![String::new(); cols.len()];
    let mut word_start = None;
    for (i, ch) in row.char_indices().chain([(row.len(), ' ')]) {
        match (ch.is_whitespace(), word_start) {
            (false, None) => word_start = Some(i),
            (true, Some(s)) => {
                let col = cols.iter().rposition(|c| c.1 <= s).unwrap_or(0);
                if !all[col].is_empty() {
                    all[col].push(' ');
                }
                all[col].push_str(&row[s..i]);
                word_start = None;
            }
            _ => {}
        }
    }
    COLUMNS
        .iter()
        .map(|name| {
            let at = cols
                .iter()
                .position(|c| c.0 == *name)
                .unwrap_or_else(|| panic!("no column {name} in {header:?}"));
            all[at].clone()
        })
        .collect()
}

/// `cell` with its spaces removed is one of `spellings`.
fn one_of(row: &[String], col: usize, spellings: &[&str], table: &str) {
    let compact: String = row[col].chars().filter(|c| !c.is_whitespace()).collect();
    assert!(
        spellings.contains(&compact.as_str()),
        "{} is {:?}, expected one of {spellings:?}; the table:\n{table}",
        COLUMNS[col],
        row[col]
    );
}

#[test]
fn inventory_lists_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("hook.secret");
    std::fs::write(&secret, "never-printed-secret\n").unwrap();
    let text = format!(
        "{ROUTES}POST /hooks/github webhook scheme=github secret=file:{} endpoint=repo\n",
        secret.display()
    );
    let routes = routes_file(dir.path(), "routes", &text);
    let (status, out, err) = run(
        "idemdb proxy --inventory",
        proxy_command(&[
            "--inventory".into(),
            "--routes".into(),
            routes.display().to_string(),
        ]),
    );
    assert_eq!(status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !l.chars().all(|c| "-=+| ".contains(c)))
        .collect();
    let header_at = lines
        .iter()
        .position(|l| COLUMNS.iter().all(|c| l.contains(c)))
        .unwrap_or_else(|| panic!("no header row naming {COLUMNS:?}:\n{out}"));
    let header = lines[header_at];
    let names: Vec<String> = columns(header).into_iter().map(|c| c.0).collect();
    let order: Vec<usize> = COLUMNS
        .iter()
        .map(|c| names.iter().position(|n| n == c).expect("column"))
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "the columns are in the order {COLUMNS:?}: {names:?}"
    );
    let rows: Vec<Vec<String>> = lines[header_at + 1..]
        .iter()
        .map(|r| cells(header, r))
        .collect();
    assert_eq!(
        rows.len(),
        8,
        "one row per route line (7) and one for unmatched requests:\n{out}"
    );
    let (route, methods, level, key, scope, lease, retention, max_body) = (0, 1, 2, 3, 4, 5, 6, 7);

    let payments = &rows[0];
    assert_eq!(payments[route], "/payments", "{out}");
    assert_eq!(payments[methods], "POST", "{out}");
    assert_eq!(payments[level], "hard", "{out}");
    assert!(payments[scope].contains("x-api-key"), "{out}");
    one_of(payments, lease, &["2s", "2000ms"], &out);
    one_of(payments, retention, &["1h", "60m", "3600s"], &out);
    one_of(payments, max_body, &["64KiB", "65536", "65536B"], &out);

    let orders = &rows[1];
    assert_eq!(orders[route], "/orders/*", "{out}");
    assert!(
        orders[methods].contains("POST") && orders[methods].contains("PATCH"),
        "{out}"
    );
    assert_eq!(orders[level], "soft", "{out}");
    one_of(orders, lease, &["30s"], &out);
    one_of(orders, retention, &["24h", "1d", "86400s"], &out);
    one_of(
        orders,
        max_body,
        &["1MiB", "1024KiB", "1048576", "1048576B"],
        &out,
    );

    let admin = &rows[2];
    assert_eq!(admin[route], "/admin/**", "{out}");
    assert_eq!(admin[level], "none", "{out}");

    let transfers = &rows[3];
    assert_eq!(transfers[route], "/transfers", "{out}");
    assert_eq!(transfers[level], "soft", "{out}");
    assert!(transfers[scope].contains("authorization"), "{out}");
    assert!(transfers[scope].contains("verified"), "{out}");

    one_of(&rows[4], max_body, &["512B", "512"], &out);
    one_of(&rows[5], max_body, &["1KiB", "1024", "1024B"], &out);

    let hook = &rows[6];
    assert_eq!(hook[route], "/hooks/github", "{out}");
    assert_eq!(hook[level], "webhook", "{out}");
    assert!(hook[key].contains("github signature"), "{out}");
    assert!(
        hook[key].contains(&format!("file:{}", secret.display())),
        "{out}"
    );
    assert!(hook[scope].contains("endpoint repo"), "{out}");
    assert!(!out.contains("never-printed-secret") && !err.contains("never-printed-secret"));

    let unmatched = &rows[7];
    assert_eq!(
        unmatched[level], "none",
        "unmatched requests pass through:\n{out}"
    );
    assert!(
        !ROUTES.contains(&format!(" {} ", unmatched[route])),
        "the last row is for unmatched requests, not a route of the file:\n{out}"
    );
    let warned: Vec<&str> = err.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(
        warned.len(),
        3,
        "the anonymous keyed routes (lines 4, 7, 8) are warned of:\n{err}"
    );
    for line in [4, 7, 8] {
        assert!(
            warned
                .iter()
                .any(|w| w.starts_with(&format!("warning: line {line} "))),
            "line {line}:\n{err}"
        );
    }
}
