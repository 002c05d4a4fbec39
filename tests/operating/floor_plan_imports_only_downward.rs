//! The floor plan of `src/` (docs/design.md, "Architecture") holds: every `crate::` and `super::`
//! path in the library's code names a module on its own floor or below, the two backends never
//! name each other, and no two rooms import each other, directly or around a circle.
//!
//! A room is a file at the top of `src/` (the shared vocabulary: `record.rs`, `requests.rs`, ...)
//! or a folder there (`config/`, `format/`, `telemetry/`, `embedded/`, `postgres/`,
//! `async_store/`, `http/`, `grpc/`); inside a folder files may name each other freely. `lib.rs` (the
//! table of contents) and `bin/` (which sees only the public API) are not rooms. Comment lines are
//! not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floor of a room: 1 the shared vocabulary (and telemetry, which every floor may use),
/// 2 the backends, 3 the async API over both, 4 the HTTP layer, 5 the gRPC layer on it.
fn floor(room: &str) -> u8 {
    match room {
        "embedded" | "postgres" => 2,
        "async_store" => 3,
        "http" => 4,
        "grpc" => 5,
        _ => 1,
    }
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src/` (`src/postgres/mod.rs` is `["postgres"]`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// Every path a `crate::` or `super::` prefix starts in `code`, braces of `use` trees expanded,
/// as (root, segments): root 0 for `crate`, n for n times `super`.
fn paths_in(code: &str) -> Vec<(usize, Vec<String>)> {
    let bytes: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let at_word_start = i == 0 || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_');
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        if at_word_start && (rest.starts_with("crate::") || rest.starts_with("super::")) {
            let (mut root, mut j) = (0, i);
            if rest.starts_with("crate::") {
                j += 7;
            } else {
                while bytes[j..].iter().take(7).collect::<String>() == "super::" {
                    root += 1;
                    j += 7;
                }
            }
            j = tree(&bytes, j, Vec::new(), root, &mut out);
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Parses a path or use tree at `j` below `prefix`; returns where it ends.
fn tree(
    s: &[char],
    mut j: usize,
    mut prefix: Vec<String>,
    root: usize,
    out: &mut Vec<(usize, Vec<String>)>,
) -> usize {
    loop {
        while j < s.len() && s[j].is_whitespace() {
            j += 1;
        }
        if j < s.len() && s[j] == '{' {
            j += 1;
            loop {
                j = tree(s, j, prefix.clone(), root, out);
                while j < s.len() && (s[j].is_whitespace() || s[j] == ',') {
                    j += 1;
                }
                if j >= s.len() || s[j] == '}' {
                    return j + 1;
                }
            }
        }
        let start = j;
        while j < s.len() && (s[j].is_alphanumeric() || s[j] == '_') {
            j += 1;
        }
        if j == start {
            out.push((root, prefix));
            return j;
        }
        prefix.push(s[start..j].iter().collect());
        if s.get(j) == Some(&':') && s.get(j + 1) == Some(&':') {
            j += 2;
        } else {
            out.push((root, prefix));
            return j;
        }
    }
}

#[test]
fn floor_plan_imports_only_downward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).unwrap();
            let top = rel.iter().next().unwrap().to_string_lossy();
            (top != "bin" && top != "lib.rs").then(|| (module_of(rel), rel.to_path_buf()))
        })
        .collect();
    let room = |m: &[String]| m.first().cloned().unwrap_or_default();
    let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
    for (module, rel) in &modules {
        let code: String = std::fs::read_to_string(src.join(rel))
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for (root, segs) in paths_in(&code) {
            let mut full: Vec<String> = if root == 0 {
                Vec::new()
            } else {
                // `super` of `postgres/fences.rs` is `postgres`; of `embedded/engine/mod.rs`
                // (module `embedded::engine`) it is `embedded`.
                module[..module.len().saturating_sub(root)].to_vec()
            };
            full.extend(segs);
            // The longest prefix that is a module of a file.
            let Some(target) = (1..=full.len())
                .rev()
                .map(|n| &full[..n])
                .find(|p| modules.contains_key(*p))
            else {
                continue;
            };
            let (from, to) = (room(module), room(target));
            if from != to && !from.is_empty() && !to.is_empty() {
                edges
                    .entry((from, to))
                    .or_insert_with(|| format!("src/{} names {}", rel.display(), full.join("::")));
            }
        }
    }
    let mut wrong = Vec::new();
    for ((from, to), example) in &edges {
        let (f, t) = (floor(from), floor(to));
        if t > f || (t == f && f > 1) {
            wrong.push(format!(
                "{from} (floor {f}) imports {to} (floor {t}): {example}"
            ));
        }
    }
    // Circles: a room that reaches itself.
    let rooms: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
    for start in &rooms {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(&String, Vec<&String>)> = vec![(*start, vec![*start])];
        while let Some((at, path)) = stack.pop() {
            for ((a, b), _) in edges.range((at.clone(), String::new())..) {
                if a != at {
                    break;
                }
                if b == *start {
                    let circle: Vec<&str> = path.iter().map(|s| s.as_str()).collect();
                    wrong.push(format!("circle: {} -> {start}", circle.join(" -> ")));
                } else if seen.insert(b) {
                    let mut next = path.clone();
                    next.push(b);
                    stack.push((b, next));
                }
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "the floor plan (docs/design.md, \"Architecture\") is broken:\n{}\nevery arrow:\n{}",
        wrong.join("\n"),
        edges
            .iter()
            .map(|((a, b), e)| format!("  {a} -> {b}  ({e})"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
