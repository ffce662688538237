//! Tidy: reads the source tree and fails with a list of every file that breaks the layout
//! the README's code map states: each `src` file opens with a `//!` paragraph, and no module
//! imports what its row says it never touches (axum outside `src/http/`, SQL outside
//! `src/store/`, the agent reaching HTTP, SQL or candle, and so on).
//!
//! Paths are found in `use` trees (braces expanded, `self`/`super` resolved against the
//! file's module) and as qualified paths anywhere in the code; comments and string literals
//! are blanked out first, so prose that names a crate is not a use of it.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::util::repo;

/// One forbidden-import rule: files under `src/` whose path starts with one of `inside` and
/// with none of `except` must not name a path that starts with one of `forbidden`.
struct Rule {
    inside: &'static [&'static str],
    except: &'static [&'static str],
    forbidden: &'static [&'static str],
    why: &'static str,
}

const CANDLE: [&str; 3] = ["candle_core", "candle_nn", "candle_transformers"];

const RULES: &[Rule] = &[
    Rule {
        inside: &[""],
        except: &["http/"],
        forbidden: &["axum"],
        why: "axum belongs to src/http/ (the router, extractors and responses)",
    },
    Rule {
        inside: &[""],
        except: &["store/"],
        forbidden: &["rusqlite"],
        why: "all SQL lives in src/store/",
    },
    Rule {
        inside: &["agent/"],
        except: &[],
        forbidden: &[
            "crate::http",
            "axum",
            "rusqlite",
            CANDLE[0],
            CANDLE[1],
            CANDLE[2],
        ],
        why: "the agent never touches HTTP, SQL or candle",
    },
    Rule {
        inside: &["engine/"],
        except: &[],
        forbidden: &["crate::store"],
        why: "the engine never touches the store",
    },
    Rule {
        inside: &["retrieval/"],
        except: &[],
        forbidden: &["axum"],
        why: "retrieval never touches axum",
    },
];

#[test]
fn source_tree_is_tidy() {
    let src = repo().join("src");
    let mut files = Vec::new();
    collect_rust_files(&src, &mut files);
    assert!(files.len() > 20, "found only {} files in src/", files.len());
    let mut problems = Vec::new();
    for path in &files {
        let relative = path
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(path).expect("source file is UTF-8");
        problems.extend(check_file(&relative, &text));
    }
    let mut report = String::new();
    for problem in &problems {
        let _ = writeln!(report, "  {problem}");
    }
    assert!(
        problems.is_empty(),
        "{} tidy problem(s) in src/:\n{report}",
        problems.len()
    );
}

/// Each case: a file's path under `src/`, its text, and the problems expected (as
/// substrings, in order); an empty list means the file is clean.
#[test]
fn checker_finds_what_it_should_and_nothing_else() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, &[&str])] = &[
        ("agent/a.rs", "//! Doc.\nuse std::fmt;\n", &[]),
        ("agent/a.rs", "fn f() {}\n", &["agent/a.rs:1: does not start with"]),
        ("agent/a.rs", "\n//! Late doc.\n", &["agent/a.rs:1: does not start"]),
        ("agent/a.rs", "/// Item doc.\nfn f() {}\n", &["does not start"]),
        // Forbidden paths, in their several spellings.
        ("agent/a.rs", "//! D.\nuse axum::Router;\n", &["agent/a.rs:2: `axum::Router`"]),
        (
            "agent/a.rs",
            "//! D.\nuse crate::{\n    store,\n    http::{self, Json},\n};\n",
            &["`crate::http`", "`crate::http::Json`"],
        ),
        ("agent/a.rs", "//! D.\nuse super::super::http::X;\n", &["`crate::http::X`"]),
        ("agent/mod.rs", "//! D.\nuse super::http;\n", &["`crate::http`"]),
        (
            "agent/a.rs",
            "//! D.\nfn f() { crate::http::serve(); }\n",
            &["a.rs:2: `crate::http::serve`: the agent"],
        ),
        (
            "agent/a.rs",
            "//! D.\nfn f() -> ::rusqlite::Result<()> {}\n",
            &["`::rusqlite::Result`: all SQL lives in src/store/; the agent"],
        ),
        ("agent/a.rs", "//! D.\nuse candle_core as c;\n", &["`candle_core`"]),
        ("agent/a.rs", "//! D.\npub(crate) use rusqlite;\n", &["`rusqlite`"]),
        ("agent/a.rs", "//! D.\nextern crate axum;\n", &["`axum`"]),
        ("agent/a.rs", "//! D.\nlet t: Vec<axum :: Json<u8>>;\n", &["`axum::Json`"]),
        (
            "engine/a.rs",
            "//! D.\nuse crate::store::Store;\n",
            &["engine/a.rs:2: `crate::store::Store`"],
        ),
        ("retrieval/x/y.rs", "//! D.\nuse axum::Json;\n", &["retrieval never"]),
        ("cli/serve.rs", "//! D.\nuse axum::serve;\n", &["cli/serve.rs:2: `axum::serve`"]),
        ("http/x.rs", "//! D.\nuse rusqlite::Connection;\n", &["all SQL lives"]),
        (
            "knowledge.rs",
            "//! D.\nfn f() { rusqlite::Connection::open(\"x\"); }\n",
            &["knowledge.rs:2"],
        ),
        // Allowed: the owners themselves, comments, strings and look-alike names.
        ("http/x.rs", "//! D.\nuse axum::Router;\nuse crate::store::Store;\n", &[]),
        ("store/x.rs", "//! D.\nuse rusqlite::Connection;\n", &[]),
        ("engine/x.rs", "//! D.\nuse candle_core::Tensor;\nuse crate::engine::store::X;\n", &[]),
        ("agent/a.rs", "//! Never imports axum::Router.\n// use axum::Router;\n", &[]),
        ("agent/a.rs", "//! D.\n/* use axum::X; /* nested */ rusqlite::Y */\n", &[]),
        ("agent/a.rs", "//! D.\nconst S: &str = \"axum::Router, \\\"rusqlite::Row\";\n", &[]),
        ("agent/a.rs", "//! D.\nconst S: &str = r#\"use axum::X; \"q\"\"#;\n", &[]),
        ("agent/a.rs", "//! D.\nconst C: [char; 2] = ['\"', '\\'']; use std::io;\n", &[]),
        ("agent/a.rs", "//! D.\nfn f<'a>(x: &'a str) -> &'a str { x }\n", &[]),
        ("agent/a.rs", "//! D.\nuse crate::agent::http::X;\nuse self::http::Y;\n", &[]),
        ("agent/a.rs", "//! D.\nuse my_axum::X;\nuse axumite::Y;\nlet t = x.axum::<u8>();\n", &[]),
        ("agent/a.rs", "//! D.\nuse crate::engine::{candle_core::X};\n", &[]),
    ];
    let mut failures = String::new();
    for (path, text, expected) in cases {
        let found = check_file(path, text);
        let matches = found.len() == expected.len()
            && found
                .iter()
                .zip(expected.iter())
                .all(|(f, e)| f.contains(e));
        if !matches {
            let _ = writeln!(
                failures,
                "{path} {text:?}\n  expected {expected:?}\n  found {found:?}"
            );
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

/// Problems in one file, `relative` being its path under `src/` with `/` separators.
fn check_file(relative: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !text.starts_with("//!") {
        problems.push(format!(
            "src/{relative}:1: does not start with a `//!` paragraph saying what it owns"
        ));
    }
    let code = blank_comments_and_strings(text);
    let module = module_path(relative);
    for (line, path) in paths_named(&code, &module) {
        let reasons: Vec<&str> = RULES
            .iter()
            .filter(|rule| rule_covers(rule, relative))
            .filter(|rule| rule.forbidden.iter().any(|f| path_starts_with(&path, f)))
            .map(|rule| rule.why)
            .collect();
        if !reasons.is_empty() {
            problems.push(format!(
                "src/{relative}:{line}: `{path}`: {}",
                reasons.join("; ")
            ));
        }
    }
    problems
}

fn rule_covers(rule: &Rule, relative: &str) -> bool {
    rule.inside.iter().any(|p| relative.starts_with(p))
        && !rule.except.iter().any(|p| relative.starts_with(p))
}

/// Whether `path` is `prefix` or lies inside it, segment-wise (`axum` covers `axum::Json`
/// and `::axum::Json` but not `axumite`).
fn path_starts_with(path: &str, prefix: &str) -> bool {
    let path = path.trim_start_matches("::");
    path == prefix || path.starts_with(&format!("{prefix}::"))
}

/// The module a file defines, as `crate::…` segments: `agent/mod.rs` → crate::agent,
/// `agent/safety.rs` → crate::agent::safety, `lib.rs` → crate.
fn module_path(relative: &str) -> Vec<String> {
    let mut segments = vec!["crate".to_string()];
    let without_ext = relative.trim_end_matches(".rs");
    for part in without_ext.split('/') {
        if !matches!(part, "mod" | "lib" | "main") {
            segments.push(part.to_string());
        }
    }
    segments
}

static USE_ITEM: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(?:use|extern\s+crate)\s+([^;]*);").expect("use regex"));
static QUALIFIED_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:::\s*)?[A-Za-z_][A-Za-z0-9_]*(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+")
        .expect("path regex")
});
static SPACE_AROUND_PUNCTUATION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\s*(::|\{|\}|,)\s*").expect("space regex"));

/// Every path the code names, with its 1-based line: each leaf of each `use` tree (and
/// `extern crate`), and each other qualified path `a::b` not preceded by `.` or an
/// identifier character. Paths starting with `self` or `super` are resolved to `crate::…`
/// against the file's module (an inline `mod` inside the file is not tracked, which can
/// only misplace `super` in a test module, never hide a `crate::` path).
fn paths_named(code: &str, module: &[String]) -> Vec<(usize, String)> {
    let line_of = |offset: usize| code[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut use_spans = Vec::new();
    for item in USE_ITEM.captures_iter(code) {
        let (Some(whole), Some(tree)) = (item.get(0), item.get(1)) else {
            continue;
        };
        use_spans.push(whole.range());
        let tree = SPACE_AROUND_PUNCTUATION.replace_all(tree.as_str().trim(), "$1");
        let mut leaves = Vec::new();
        expand_use_tree(&tree, "", &mut leaves);
        for leaf in leaves {
            found.push((line_of(whole.start()), resolve(&leaf, module)));
        }
    }
    for path in QUALIFIED_PATH.find_iter(code) {
        if use_spans.iter().any(|span| span.contains(&path.start())) {
            continue;
        }
        let before = code[..path.start()].chars().next_back();
        if before.is_some_and(|c| c == '.' || c == '_' || c.is_alphanumeric()) {
            continue;
        }
        let text = path.as_str().replace(char::is_whitespace, "");
        found.push((line_of(path.start()), resolve(&text, module)));
    }
    found
}

/// Expands a `use` tree such as `crate::{a, b::{self, C as D}}` (whitespace around `::`,
/// braces and commas already removed) into its leaf paths, renames dropped.
fn expand_use_tree(tree: &str, prefix: &str, leaves: &mut Vec<String>) {
    let join = |tail: &str| match (prefix.is_empty(), tail) {
        (true, _) => tail.to_string(),
        (false, "self") => prefix.to_string(),
        (false, _) => format!("{prefix}::{tail}"),
    };
    let Some(open) = tree.find('{') else {
        if let Some(name) = tree.split_whitespace().next() {
            leaves.push(join(name));
        }
        return;
    };
    let head = join(tree[..open].trim_end_matches("::"));
    let inner = tree[open + 1..]
        .strip_suffix('}')
        .unwrap_or(&tree[open + 1..]);
    for part in split_top_level(inner) {
        expand_use_tree(part, &head, leaves);
    }
}

/// Splits `a, b::{c, d}, e` at the commas that are not inside braces.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Turns `self::x`, `super::super::x` into `crate::…` using the file's module path.
fn resolve(path: &str, module: &[String]) -> String {
    let mut segments: Vec<&str> = path.split("::").collect();
    let mut base: Vec<&str> = module.iter().map(String::as_str).collect();
    match segments.first() {
        Some(&"self") => {
            segments.remove(0);
        }
        Some(&"super") => {
            while segments.first() == Some(&"super") {
                segments.remove(0);
                if base.len() > 1 {
                    base.pop();
                }
            }
        }
        _ => return path.to_string(),
    }
    base.extend(segments);
    base.join("::")
}

/// Replaces the text of comments (line, nested block, doc) and of string and char
/// literals (plain, byte, raw) with spaces, keeping newlines so offsets keep their lines.
fn blank_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // r"…", r#"…"#, br#"…"#: ends at a quote followed by the same number of #.
            let open = chars[i..].iter().position(|&c| c == '"').unwrap_or(0) + i;
            for _ in i..=open {
                out.push(' ');
            }
            i = open + 1;
            while i < chars.len() {
                let closes =
                    chars[i] == '"' && (0..hashes).all(|k| chars.get(i + 1 + k) == Some(&'#'));
                if closes {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    blank(&mut out, c);
                }
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && char_literal_len(&chars, i) > 0 {
            for _ in 0..char_literal_len(&chars, i) {
                out.push(' ');
            }
            i += char_literal_len(&chars, i);
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// When a raw string literal (`r"`, `r#"`, `br##"` …) starts at `i`, its number of `#`.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    (chars.get(j + hashes) == Some(&'"')).then_some(hashes)
}

/// The length of a char literal (`'x'`, `'\n'`, `'\u{1F600}'`) starting at `i`, or 0 when
/// the quote starts a lifetime or label instead.
fn char_literal_len(chars: &[char], i: usize) -> usize {
    match chars.get(i + 1) {
        Some('\\') => chars
            .get(i + 3..)
            .and_then(|rest| rest.iter().position(|&c| c == '\''))
            .map_or(0, |end| end + 4),
        Some(_) if chars.get(i + 2) == Some(&'\'') => 3,
        _ => 0,
    }
}

fn collect_rust_files(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("read src/");
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
}
