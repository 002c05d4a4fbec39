//! Comments and documents name only what exists (issue 44 item 5): every `*.rs` file that a
//! comment (`//`, `//!`, `///`, `/* */`) or a markdown document names is a file of the repository,
//! and every `crate::` or `idemdb::` path one of them names resolves to a module or an item. Files
//! are moved and renamed; a comment that still names the old place sends its reader nowhere.
//!
//! Read at run time: every `.rs` file under `src/`, `tests/`, `benches/`, `examples/` and `fuzz/`
//! (no `target/`), `docs/*.md`, `README.md` and `tests/README.md`; of a `.rs` file only its
//! comments (code and string literals are the compiler's to check). A bare name (`fences.rs`) must
//! be the name of some file; a path (`postgres/fences.rs`, `../common/mod.rs`) must end the path
//! of one. `docs.rs` (the documentation site) and anything in a URL are not file names. A module
//! path resolves segment by segment from its crate's root file (the library's `src/lib.rs` for
//! `idemdb::` and for every document; for a comment's `crate::`, the nearest folder above the file
//! with a `lib.rs` or `main.rs`): a `mod` declaration (its file by the usual rules or by
//! `#[path]`, or inline), else an item the module defines at module level (`fn`, `struct`,
//! `enum`, `trait`, `type`, `const`, `static`, `union`, `macro_rules!`; a method in an `impl` is
//! not a module's item) or imports (`use`); what follows an item (a method, a variant, a field)
//! must be an identifier somewhere in the repository's code. A path ending in `!` names a macro,
//! which must be defined by `macro_rules!` in its crate. A name that is history ("until issue 14
//! the harness was ...") is written without the `.rs` or the path, so that it is not read as a
//! place.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Every file under `dir`, leaving out `target/` and hidden folders (`.git`).
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                walk(&path, out);
            }
        } else {
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A Rust file split in two: its code, comments left out (each line kept, so line numbers
/// agree), with the `{`, `}` and `;` inside string and character literals blanked; and its
/// comments (`//`, `//!`, `///`, and each line of a `/* */`), each with its line number.
fn split(text: &str) -> (String, Vec<(usize, String)>) {
    let c: Vec<char> = text.chars().collect();
    let (mut code, mut comments, mut line, mut i) = (String::new(), Vec::new(), 1, 0);
    // A literal's characters, from `from` up to (not including) `to`, blanked and counted.
    let literal = |code: &mut String, line: &mut usize, from: usize, to: usize| {
        for &ch in &c[from..to.min(c.len())] {
            *line += usize::from(ch == '\n');
            code.push(if matches!(ch, '{' | '}' | ';') {
                ' '
            } else {
                ch
            });
        }
    };
    while i < c.len() {
        let (ch, next) = (c[i], c.get(i + 1).copied());
        if ch == '/' && next == Some('/') {
            let end = c[i..]
                .iter()
                .position(|&x| x == '\n')
                .map_or(c.len(), |p| i + p);
            comments.push((line, c[i..end].iter().collect()));
            i = end;
        } else if ch == '/' && next == Some('*') {
            let (mut depth, mut j, mut said) = (0, i, String::new());
            while j < c.len() {
                let pair = (c[j], c.get(j + 1).copied());
                if pair == ('/', Some('*')) {
                    depth += 1;
                } else if pair == ('*', Some('/')) {
                    depth -= 1;
                    if depth == 0 {
                        j += 2;
                        break;
                    }
                } else if c[j] == '\n' {
                    comments.push((line, std::mem::take(&mut said)));
                    code.push('\n');
                    line += 1;
                    j += 1;
                    continue;
                }
                said.push(c[j]);
                j += 1;
            }
            comments.push((line, said));
            i = j;
        } else if ch == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            literal(&mut code, &mut line, i, j + 1);
            i = j + 1;
        } else if ch == 'r' && raw_string_at(&c, i) {
            // A raw string: `r"..."`, `r#"..."#`, `br"..."`.
            let hashes = c[i + 1..].iter().take_while(|&&x| x == '#').count();
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body = i + 2 + hashes;
            let end = (body..c.len())
                .find(|&j| c[j..].starts_with(&close))
                .map_or(c.len(), |j| j + close.len());
            literal(&mut code, &mut line, i, end);
            i = end;
        } else if ch == '\'' && next == Some('\\') {
            // A character literal with an escape: up to its closing quote.
            let end = (i + 3..c.len())
                .find(|&j| c[j] == '\'')
                .map_or(c.len(), |j| j + 1);
            literal(&mut code, &mut line, i, end);
            i = end;
        } else if ch == '\'' && c.get(i + 2) == Some(&'\'') {
            literal(&mut code, &mut line, i, i + 3);
            i += 3;
        } else {
            line += usize::from(ch == '\n');
            code.push(ch);
            i += 1;
        }
    }
    (code, comments)
}

/// Whether a raw string (`r"`, `r#"`, `br"`) starts at the `r` at `i`.
fn raw_string_at(c: &[char], i: usize) -> bool {
    let word_start = |at: usize| at == 0 || !is_ident(c[at - 1]);
    let prefix = word_start(i) || (c[i - 1] == 'b' && word_start(i - 1));
    let hashes = c[i + 1..].iter().take_while(|&&x| x == '#').count();
    prefix && c.get(i + 1 + hashes) == Some(&'"')
}

/// The `*.rs` names in `text`: a run of path characters ending in `.rs` and then no identifier
/// character. Left out: globs (`*.rs`), host names (`docs.rs`, or any name a `/` follows) and
/// URLs (a name right after a `:`, as in `https://`).
fn rs_names(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let path_char = |c: char| is_ident(c) || matches!(c, '.' | '/' | '-');
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 <= chars.len() {
        let ends_here = chars[i..i + 3] == ['.', 'r', 's']
            && chars.get(i + 3).is_none_or(|&c| !is_ident(c) && c != '/');
        if !ends_here {
            i += 1;
            continue;
        }
        let mut start = i;
        while start > 0 && path_char(chars[start - 1]) {
            start -= 1;
        }
        let name: String = chars[start..i + 3].iter().collect();
        let after_colon = start > 0 && chars[start - 1] == ':';
        let stem_ok = start < i && chars[i - 1] != '/' && chars[i - 1] != '.';
        if stem_ok && !after_colon && name != "docs.rs" {
            out.push(name);
        }
        i += 3;
    }
    out
}

/// The `crate::` and `idemdb::` paths in `text`, as (root, segments, names a macro).
fn module_paths(text: &str) -> Vec<(String, Vec<String>, bool)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let free = i == 0 || !(is_ident(chars[i - 1]) || matches!(chars[i - 1], ':' | '$'));
        let rest: String = chars[i..chars.len().min(i + 8)].iter().collect();
        let root = ["crate::", "idemdb::"]
            .into_iter()
            .find(|r| rest.starts_with(r));
        let (Some(root), true) = (root, free) else {
            i += 1;
            continue;
        };
        let mut j = i + root.len();
        let mut segments = Vec::new();
        loop {
            let start = j;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            if j == start {
                break;
            }
            segments.push(chars[start..j].iter().collect::<String>());
            if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
                j += 2;
            } else {
                break;
            }
        }
        let is_macro = chars.get(j) == Some(&'!');
        if !segments.is_empty() {
            out.push((root.trim_end_matches(':').to_string(), segments, is_macro));
        }
        i = j.max(i + 1);
    }
    out
}

/// The identifiers, `;`, `{` and `}` of some code, in order.
fn tokens(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (at, c) in code.char_indices() {
        match (is_ident(c), start) {
            (true, None) => start = Some(at),
            (false, Some(s)) => {
                out.push(&code[s..at]);
                start = None;
            }
            _ => {}
        }
        if let Some(at) = c.is_ascii_punctuation().then_some(at) {
            if matches!(c, ';' | '{' | '}') {
                out.push(&code[at..at + 1]);
            }
        }
    }
    if let Some(s) = start {
        out.push(&code[s..]);
    }
    out
}

/// A module: the file its items are written in, and the folder of its children's files.
#[derive(Clone, Debug)]
struct Module {
    file: PathBuf,
    dir: PathBuf,
}

/// The repository's files, their code (comments left out) read once.
struct Repo {
    root: PathBuf,
    files: Vec<PathBuf>,
    code: HashMap<PathBuf, String>,
    identifiers: BTreeSet<String>,
}

impl Repo {
    fn code(&mut self, file: &Path) -> &str {
        self.code
            .entry(file.to_path_buf())
            .or_insert_with(|| split(&std::fs::read_to_string(file).unwrap_or_default()).0)
    }

    /// Whether some file's path is `name` or ends with `/name` (`./` and `../` dropped first).
    fn has_file(&self, name: &str) -> bool {
        let mut name = name;
        while let Some(rest) = name.strip_prefix("../").or_else(|| name.strip_prefix("./")) {
            name = rest;
        }
        let name = name.trim_start_matches('/');
        self.files.iter().any(|f| {
            let rel = f.strip_prefix(&self.root).unwrap().to_string_lossy();
            rel == name || rel.ends_with(&format!("/{name}"))
        })
    }

    /// The crate a comment in `file` means by `crate::`: the nearest folder above it with a
    /// `lib.rs` or `main.rs`, else the file itself.
    fn crate_of(&self, file: &Path) -> Module {
        let mut dir = file.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&self.root)) {
            for root in ["lib.rs", "main.rs"] {
                if d.join(root).is_file() {
                    return Module {
                        file: d.join(root),
                        dir: d.to_path_buf(),
                    };
                }
            }
            dir = d.parent();
        }
        Module {
            file: file.to_path_buf(),
            dir: file.parent().unwrap().to_path_buf(),
        }
    }

    /// The child module `name` of `m`, if `m` declares it.
    fn child(&mut self, m: &Module, name: &str) -> Option<Module> {
        let code = self.code(&m.file).to_string();
        let mut path_attr: Option<String> = None;
        for line in code.lines() {
            let mut t = line.trim();
            // Attributes before the item, on its line or the lines above; `#[path]` is kept.
            while t.starts_with("#[") {
                let mut depth = 0;
                let end = t.char_indices().find_map(|(at, c)| {
                    depth += match c {
                        '[' => 1,
                        ']' => -1,
                        _ => 0,
                    };
                    (depth == 0).then_some(at)
                });
                let Some(end) = end else { break };
                if let Some(p) = t[..end].strip_prefix("#[path = \"") {
                    path_attr = Some(p.trim_end_matches('"').to_string());
                }
                t = t[end + 1..].trim_start();
            }
            if t.is_empty() {
                continue;
            }
            let declared = t
                .strip_prefix("pub")
                .map(|r| match r.strip_prefix('(') {
                    Some(r) => r.split_once(')').map_or(r, |(_, after)| after),
                    None => r,
                })
                .unwrap_or(t)
                .trim_start();
            let attr = path_attr.take();
            let Some(rest) = declared.strip_prefix("mod ") else {
                continue;
            };
            let rest = rest.trim_start();
            let ident: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if ident != name {
                continue;
            }
            if rest[ident.len()..].trim_start().starts_with('{') {
                return Some(Module {
                    file: m.file.clone(),
                    dir: m.dir.join(name),
                });
            }
            let file = match attr {
                Some(p) => m.file.parent().unwrap().join(p),
                None => [
                    m.dir.join(format!("{name}.rs")),
                    m.dir.join(name).join("mod.rs"),
                ]
                .into_iter()
                .find(|f| f.is_file())?,
            };
            let dir = if file.file_name().is_some_and(|n| n == "mod.rs") {
                file.parent().unwrap().to_path_buf()
            } else {
                file.with_extension("")
            };
            return file.is_file().then_some(Module { file, dir });
        }
        None
    }

    /// Whether `m`'s file defines an item `name` or imports it with a `use`, at the level of its
    /// modules (not inside an `impl`, a function or a type: a method is not a module's item).
    fn has_item(&mut self, m: &Module, name: &str) -> bool {
        const KINDS: [&str; 9] = [
            "fn",
            "struct",
            "enum",
            "trait",
            "type",
            "const",
            "static",
            "union",
            "macro_rules",
        ];
        let code = self.code(&m.file).to_string();
        // Whether each open block is a module's; the tokens since the last `;`, `{` or `}`.
        let (mut blocks, mut statement): (Vec<bool>, Vec<&str>) = (Vec::new(), Vec::new());
        for t in tokens(&code) {
            let module_level = blocks.iter().all(|&is_mod| is_mod);
            // The braces of a `use` tree open no block.
            let in_use = statement.contains(&"use");
            match t {
                "{" | "}" if in_use => {}
                "{" => {
                    blocks.push(statement.contains(&"mod"));
                    statement.clear();
                }
                "}" => {
                    blocks.pop();
                    statement.clear();
                }
                ";" => {
                    if module_level && in_use && statement.contains(&name) {
                        return true;
                    }
                    statement.clear();
                }
                _ => {
                    if module_level
                        && statement.last().is_some_and(|k| KINDS.contains(k))
                        && t == name
                    {
                        return true;
                    }
                    statement.push(t);
                }
            }
        }
        false
    }

    /// Whether some `.rs` file under `dir` defines the macro `name`.
    fn has_macro(&mut self, dir: &Path, name: &str) -> bool {
        let files: Vec<PathBuf> = self
            .files
            .iter()
            .filter(|f| f.starts_with(dir) && f.extension().is_some_and(|e| e == "rs"))
            .cloned()
            .collect();
        files.iter().any(|f| {
            tokens(self.code(f))
                .windows(2)
                .any(|w| w[0] == "macro_rules" && w[1] == name)
        })
    }

    /// Whether `segments` resolve from the crate root `m`.
    fn resolves(&mut self, mut m: Module, segments: &[String], is_macro: bool) -> bool {
        if is_macro && segments.len() == 1 {
            let dir = m.dir.clone();
            return self.has_macro(&dir, &segments[0]);
        }
        for (i, segment) in segments.iter().enumerate() {
            if let Some(child) = self.child(&m, segment) {
                m = child;
                continue;
            }
            if !self.has_item(&m, segment) {
                return false;
            }
            // A method, variant, field or associated item: named somewhere in the code.
            return segments[i + 1..]
                .iter()
                .all(|s| self.identifiers.contains(s));
        }
        true
    }
}

#[test]
fn comments_and_docs_name_only_what_exists() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    let mut repo = Repo {
        root: root.clone(),
        files: files.clone(),
        code: HashMap::new(),
        identifiers: BTreeSet::new(),
    };
    let sources: Vec<PathBuf> = files
        .iter()
        .filter(|f| {
            let rel = f.strip_prefix(&root).unwrap();
            let top = rel.iter().next().unwrap().to_string_lossy();
            ["src", "tests", "benches", "examples", "fuzz"].contains(&top.as_ref())
                && f.extension().is_some_and(|e| e == "rs")
        })
        .cloned()
        .collect();
    let documents: Vec<PathBuf> = files
        .iter()
        .filter(|f| {
            let rel = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            rel == "README.md"
                || rel == "tests/README.md"
                || (rel.starts_with("docs/") && rel.ends_with(".md") && !rel[5..].contains('/'))
        })
        .cloned()
        .collect();
    for f in &sources {
        let words: Vec<String> = tokens(repo.code(f))
            .into_iter()
            .map(str::to_string)
            .collect();
        repo.identifiers.extend(words);
    }
    let library = Module {
        file: root.join("src/lib.rs"),
        dir: root.join("src"),
    };

    let mut wrong = Vec::new();
    let (mut names, mut paths) = (0, 0);
    for f in sources.iter().chain(&documents) {
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        let is_doc = f.extension().is_some_and(|e| e == "md");
        let text = std::fs::read_to_string(f).unwrap();
        // What a document says is all of it; what a source file says, its comments.
        let said: Vec<(usize, String)> = match is_doc {
            true => (1..).zip(text.lines().map(str::to_string)).collect(),
            false => split(&text).1,
        };
        for (n, said) in &said {
            for name in rs_names(said) {
                names += 1;
                if !repo.has_file(&name) {
                    wrong.push(format!("{rel}:{n}: `{name}`: no such file"));
                }
            }
            for (from, segments, is_macro) in module_paths(said) {
                paths += 1;
                let start = match (from.as_str(), is_doc) {
                    ("crate", false) => repo.crate_of(f),
                    _ => library.clone(),
                };
                if !repo.resolves(start, &segments, is_macro) {
                    let bang = if is_macro { "!" } else { "" };
                    wrong.push(format!(
                        "{rel}:{n}: `{from}::{}{bang}`: no such module or item",
                        segments.join("::")
                    ));
                }
            }
        }
    }
    println!(
        "{} files and {} documents read: {names} file names and {paths} module paths checked",
        sources.len(),
        documents.len()
    );
    assert!(
        names > 100 && paths > 100,
        "too few names found ({names} file names, {paths} paths): the reader is broken"
    );
    assert!(
        wrong.is_empty(),
        "comments and documents name {} things that do not exist (rename them to what is there \
         now):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_name_readers_find_what_they_should() {
    assert_eq!(
        rs_names("see `postgres/fences.rs` and ../common/mod.rs, not *.rs"),
        ["postgres/fences.rs", "../common/mod.rs"]
    );
    assert!(rs_names("https://docs.rs/idemdb/x.rs on docs.rs, a.rsx, docs.rs/idemdb").is_empty());
    assert_eq!(
        module_paths(
            "[`crate::Store::get`], idemdb::http::Layer, $crate::x, not_crate::y, crate::m!"
        ),
        [
            (
                "crate".to_string(),
                vec!["Store".to_string(), "get".to_string()],
                false
            ),
            (
                "idemdb".to_string(),
                vec!["http".to_string(), "Layer".to_string()],
                false
            ),
            ("crate".to_string(), vec!["m".to_string()], true),
        ]
    );
    let (code, comments) = split(
        "let u = \"http://x {\"; // a.rs\n/* b\n c */ let q = '\\'';\nlet r = r#\"//\"#; // d\n",
    );
    let comments: Vec<(usize, &str)> = comments.iter().map(|(n, c)| (*n, c.as_str())).collect();
    assert_eq!(
        comments,
        [(1, "// a.rs"), (2, "/* b"), (3, " c "), (4, "// d")]
    );
    assert_eq!(code.lines().count(), 4);
    assert!(!code.contains('{') && code.contains("let q") && code.contains("let r"));
}
