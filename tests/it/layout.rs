//! Checks of the code's shape that keep the house easy to change: no import
//! cycle between the crate's top-level modules, nor between its files
//! (inside a folder either: a folder's shared types live in leaf modules,
//! and a child never imports from its parent file while the parent uses
//! it), and no function in `src/` longer than [`MAX_FN_LINES`] lines (tests
//! aside). They read the source text; a failure names the cycle or the
//! function.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest function body allowed in `src/`, signature and braces included.
const MAX_FN_LINES: usize = 80;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The top-level module a file belongs to (`sink/call.rs` → `sink`).
fn module_of(rel: &str) -> String {
    rel.split('/')
        .next()
        .unwrap()
        .trim_end_matches(".rs")
        .to_string()
}

/// The code of a file before its inline test module (`#[cfg(test)]` then
/// `mod tests {`), if any; a `#[cfg(test)] mod tests;` declaration is
/// skipped over, not taken for the end of the code.
fn non_test_code(text: &str) -> &str {
    let mut from = 0;
    while let Some(i) = text[from..].find("#[cfg(test)]") {
        let at = from + i;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        let is_inline_mod = rest
            .strip_prefix("mod ")
            .map(|r| r.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_'))
            .is_some_and(|r| r.trim_start().starts_with('{'));
        if is_inline_mod {
            return &text[..at];
        }
        from = at + 1;
    }
    text
}

/// `text` with comments, string and character literals blanked out, so
/// that only code is searched for paths.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'/' && next == Some(b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && next == Some(b'*') {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 4 + e);
            i = end;
        } else if c == b'"' || ((c == b'r' || c == b'b') && raw_start(&b[i..]).is_some()) {
            i = string_end(b, i);
            out.push_str("\"\"");
        } else if c == b'\'' && (i == 0 || !ident(b[i - 1])) {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            match (next, b.get(i + 2)) {
                (Some(b'\\'), _) => {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                }
                (Some(_), Some(b'\'')) => i += 3,
                _ => {
                    let len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    if text[i + 1 + len..].starts_with('\'') {
                        i += len + 2;
                    } else {
                        out.push('\'');
                        i += 1;
                    }
                }
            }
        } else {
            let len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + len]);
            i += len;
        }
    }
    out
}

/// For `r"`, `r#"`, `br##"`...: the number of `#`s of a raw string that
/// starts here.
fn raw_start(b: &[u8]) -> Option<usize> {
    let rest = b.strip_prefix(b"b").unwrap_or(b);
    let rest = rest.strip_prefix(b"r")?;
    let hashes = rest.iter().take_while(|&&c| c == b'#').count();
    (rest.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// The index just past the string literal starting at `i`.
fn string_end(b: &[u8], i: usize) -> usize {
    if let Some(hashes) = raw_start(&b[i..]) {
        let open = i + b[i..].iter().position(|&c| c == b'"').unwrap() + 1;
        let close: Vec<u8> = std::iter::once(b'"')
            .chain(std::iter::repeat_n(b'#', hashes))
            .collect();
        return b[open..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map_or(b.len(), |p| open + p + close.len());
    }
    let mut j = i + 1;
    while j < b.len() && b[j] != b'"' {
        j += if b[j] == b'\\' { 2 } else { 1 };
    }
    j + 1
}

/// The paths of a `use` tree (`super::{a, b::{C, D as E}}` → `super::a`,
/// `super::b::C`, `super::b::D as E`).
fn expand_use(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let close = tree.rfind('}').unwrap_or(tree.len());
    let prefix = &tree[..open];
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for ch in tree[open + 1..close].chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    parts.push(cur);
    parts
        .iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand_use(p))
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

/// Every `use` tree of `code` (after `use `, up to `;`), and with it
/// whether it is a re-export (`pub use`, `pub(crate) use`...).
fn use_trees(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("use ") {
        let before = code[..i].trim_end();
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        if let Some(end) = code[i..].find(';') {
            out.push((public, code[i + 4..i + end].to_string()));
        }
    }
    out
}

/// Every path of two or more segments written in `code` (`a::b::C`).
fn inline_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        if !ident(b[i]) || (i > 0 && (ident(b[i - 1]) || b[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i;
        loop {
            while end < b.len() && ident(b[end]) {
                end += 1;
            }
            if code[end..].starts_with("::") && b.get(end + 2).is_some_and(|&c| ident(c)) {
                end += 2;
            } else {
                break;
            }
        }
        // `a::b::{..}` is the prefix of a `use` tree, read by `use_trees`.
        if code[start..end].contains("::") && !code[end..].starts_with("::{") {
            out.push(code[start..end].to_string());
        }
        i = end.max(i + 1);
    }
    out
}

/// The module path of a source file (`sink/call.rs` → `sink::call`,
/// `reader.rs` and `reader/mod.rs` → `reader`, `lib.rs` → the root).
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    parts
}

/// Which file a path written in module `cur` names: the deepest module of
/// the path that is a file of the crate, or, when the path goes on to an
/// item that module re-exports, the file the item comes from.
struct Resolver {
    files: BTreeMap<ModulePath, String>,
    /// (module, name) → the module a `pub use` there brings `name` from,
    /// and the item's name there.
    reexports: BTreeMap<(ModulePath, String), (ModulePath, Option<String>)>,
}

/// A module's path from the crate root (`["sink", "call"]`).
type ModulePath = Vec<String>;

impl Resolver {
    fn new(sources: &[(String, String)]) -> Resolver {
        let files = sources
            .iter()
            .map(|(rel, _)| (module_path(rel), rel.clone()))
            .collect();
        let mut r = Resolver {
            files,
            reexports: BTreeMap::new(),
        };
        for (rel, text) in sources {
            let cur = module_path(rel);
            for (public, tree) in use_trees(&code_only(non_test_code(text))) {
                for path in expand_use(&tree).into_iter().filter(|_| public) {
                    let (path, alias) = match path.split_once(" as ") {
                        Some((p, a)) => (p.to_string(), Some(a.trim().to_string())),
                        None => (path, None),
                    };
                    let segs = segments(&path);
                    let name = alias.or_else(|| segs.last().cloned());
                    if let (Some(name), Some((from, rest))) = (name, r.locate(&cur, &segs))
                        && name != "*"
                        && from != cur
                    {
                        let item = rest.first().cloned();
                        r.reexports.insert((cur.clone(), name), (from, item));
                    }
                }
            }
        }
        r
    }

    /// The deepest module of the crate a path reaches (re-exports not
    /// followed), and the segments after it.
    fn locate(&self, cur: &[String], segs: &[String]) -> Option<(Vec<String>, Vec<String>)> {
        let (mut m, rest): (Vec<String>, &[String]) = match segs.first()?.as_str() {
            "crate" => (Vec::new(), &segs[1..]),
            "self" => (cur.to_vec(), &segs[1..]),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                (cur[..cur.len().checked_sub(ups)?].to_vec(), &segs[ups..])
            }
            first => {
                // A bare path names a child module, or nothing of the crate.
                let mut child = cur.to_vec();
                child.push(first.to_string());
                if !self.files.contains_key(&child) {
                    return None;
                }
                (cur.to_vec(), segs)
            }
        };
        let mut taken = 0;
        for s in rest {
            m.push(s.clone());
            if !self.files.contains_key(&m) {
                m.pop();
                break;
            }
            taken += 1;
        }
        Some((m, rest[taken..].to_vec()))
    }

    /// The file a path names (re-exports followed), if one of the crate's.
    fn file(&self, cur: &[String], path: &str) -> Option<&String> {
        let segs = segments(path.split(" as ").next().unwrap_or(path));
        let (mut m, rest) = self.locate(cur, &segs)?;
        let mut item = rest.first().cloned();
        // A re-export of a re-export is followed too, a few steps at most.
        for _ in 0..8 {
            let Some(name) = &item else { break };
            let Some((from, original)) = self.reexports.get(&(m.clone(), name.clone())) else {
                break;
            };
            m = from.clone();
            item = original.clone();
        }
        self.files.get(&m)
    }
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Which files of `sources` each file names, outside comments and tests
/// (files named `*tests.rs` are test modules and left out).
fn file_graph(sources: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let resolver = Resolver::new(sources);
    let mut graph = BTreeMap::new();
    for (rel, text) in sources {
        if rel.ends_with("tests.rs") || module_path(rel).is_empty() {
            continue;
        }
        let cur = module_path(rel);
        let code = code_only(non_test_code(text));
        let mut paths: Vec<String> = use_trees(&code)
            .iter()
            .flat_map(|(_, t)| expand_use(t))
            .collect();
        paths.extend(inline_paths(&code));
        let deps: BTreeSet<String> = paths
            .iter()
            .filter_map(|p| resolver.file(&cur, p))
            .filter(|f| *f != rel && !module_path(f).is_empty())
            .cloned()
            .collect();
        graph.insert(rel.clone(), deps);
    }
    graph
}

/// Top-level modules each module names, from the file graph.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, deps) in file_graph(&src_files()) {
        let from = module_of(&file);
        let to = graph.entry(from.clone()).or_default();
        to.extend(deps.iter().map(|d| module_of(d)).filter(|m| *m != from));
    }
    graph
}

fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn top_level_modules_import_each_other_without_cycles() {
    let graph = module_graph();
    assert!(graph.len() >= 10, "found only {:?}", graph.keys());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle between modules: {}", cycle.join(" -> "));
    }
    println!(
        "verified: {} modules, {} module imports, no cycle",
        graph.len(),
        graph.values().map(BTreeSet::len).sum::<usize>()
    );
}

#[test]
fn files_import_each_other_without_cycles() {
    let graph = file_graph(&src_files());
    assert!(graph.len() > 80, "found only {} files", graph.len());
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import cycle between files (move what they share into a leaf module): {}",
            cycle.join(" -> ")
        );
    }
    println!(
        "verified: {} files, {} file imports, no cycle (inside folders too)",
        graph.len(),
        graph.values().map(BTreeSet::len).sum::<usize>()
    );
}

fn set(files: &[&str]) -> BTreeSet<String> {
    files.iter().map(|f| f.to_string()).collect()
}

/// The file graph on a small made-up crate: re-exports lead to the file
/// an item comes from; comments, strings and test modules do not count;
/// a child naming its parent's item while the parent names the child is
/// a cycle.
#[test]
fn the_file_graph_follows_reexports_and_finds_a_parent_child_cycle() {
    let src = |rel: &str, text: &str| (rel.to_string(), text.to_string());
    let mut sources = vec![
        src("lib.rs", "pub mod a;\npub mod b;\n"),
        src(
            "a/mod.rs",
            "mod kinds;\nmod model;\npub use kinds::Kind;\nuse model::Board;\n",
        ),
        src("a/kinds.rs", "pub enum Kind { X }\n"),
        src(
            "a/model.rs",
            "use super::Kind;\n// use crate::b::Z;\nconst S: &str = \"crate::b::Z\";\nconst C: char = '\"';\npub struct Board<'a>(&'a str);\n#[cfg(test)]\nmod tests {\n    use crate::b::Z;\n}\n",
        ),
        src(
            "b.rs",
            "pub struct Z(crate::a::Kind);\n#[cfg(test)]\nmod tests;\nfn f() { let _ = crate::a::model::Board; }\n",
        ),
    ];
    let g = file_graph(&sources);
    assert_eq!(g["a/model.rs"], set(&["a/kinds.rs"]));
    assert_eq!(g["a/mod.rs"], set(&["a/kinds.rs", "a/model.rs"]));
    assert_eq!(g["b.rs"], set(&["a/kinds.rs", "a/model.rs"]));
    assert!(!g.contains_key("lib.rs"));
    assert_eq!(find_cycle(&g), None);
    sources[1].1.push_str("pub struct Shared;\n");
    sources[3].1 = "use super::{Kind, Shared};\n".into();
    let g = file_graph(&sources);
    assert_eq!(g["a/model.rs"], set(&["a/kinds.rs", "a/mod.rs"]));
    assert!(find_cycle(&g).is_some_and(|c| c.contains(&"a/mod.rs".to_string())));
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    graph.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&graph), None);
}

/// (lines, file, function) of every function in `text` longer than `max`.
fn long_functions(rel: &str, text: &str, max: usize) -> Vec<(usize, String, String)> {
    let lines: Vec<&str> = non_test_code(text).lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = fn_name(lines[i]) else {
            i += 1;
            continue;
        };
        // From the signature to the line where its braces balance again.
        let (mut depth, mut opened, mut j) = (0i64, false, i);
        while j < lines.len() {
            let code = lines[j].split("//").next().unwrap_or("");
            if lines[j].trim_end().ends_with(';') && !opened && code.contains("fn ") {
                break; // a declaration without a body (trait method)
            }
            depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
            opened |= code.contains('{');
            if opened && depth <= 0 {
                break;
            }
            j += 1;
        }
        let len = j - i + 1;
        if opened && len > max {
            found.push((len, rel.to_string(), name));
        }
        i = j + 1;
    }
    found
}

fn fn_name(line: &str) -> Option<String> {
    let t = line.trim_start();
    let t = t
        .strip_prefix("pub(crate) ")
        .or_else(|| t.strip_prefix("pub(super) "))
        .or_else(|| t.strip_prefix("pub "))
        .unwrap_or(t);
    let t = t.strip_prefix("const ").unwrap_or(t);
    let t = t.strip_prefix("async ").unwrap_or(t);
    let rest = t.strip_prefix("fn ")?;
    Some(
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect(),
    )
}

#[test]
fn no_function_in_src_is_longer_than_the_limit() {
    let mut long = Vec::new();
    let mut functions = 0;
    for (rel, text) in src_files() {
        if rel.ends_with("tests.rs") {
            continue;
        }
        functions += non_test_code(&text)
            .lines()
            .filter(|l| fn_name(l).is_some())
            .count();
        long.extend(long_functions(&rel, &text, MAX_FN_LINES));
    }
    assert!(functions > 300, "found only {functions} functions");
    assert!(
        long.is_empty(),
        "functions longer than {MAX_FN_LINES} lines: {long:?}"
    );
    println!("verified: {functions} functions in src/, none longer than {MAX_FN_LINES} lines");
}

#[test]
fn the_length_check_measures_a_function() {
    let text =
        "fn short() {\n    1\n}\n\nfn long() {\n    let a = {\n        2\n    };\n    a\n}\n";
    assert!(long_functions("x.rs", text, 6).is_empty());
    assert_eq!(
        long_functions("x.rs", text, 5),
        vec![(6, "x.rs".to_string(), "long".to_string())]
    );
}
