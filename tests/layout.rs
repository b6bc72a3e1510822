//! Checks of the code's shape that keep the house easy to change: no import
//! cycle between the crate's top-level modules, and no function in `src/`
//! longer than [`MAX_FN_LINES`] lines (tests aside). They read the source
//! text; a failure names the cycle or the function.

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

/// The code of a file before its `#[cfg(test)]` module, if any.
fn non_test_code(text: &str) -> &str {
    match text.find("\n#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// Top-level modules each module names through `crate::…` outside comments.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in src_files() {
        let from = module_of(&rel);
        if from == "lib" || from == "main" {
            continue;
        }
        let deps = graph.entry(from.clone()).or_default();
        for line in non_test_code(&text).lines() {
            let code = match line.find("//") {
                Some(i) => &line[..i],
                None => line,
            };
            for (i, _) in code.match_indices("crate::") {
                let name: String = code[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != from {
                    deps.insert(name);
                }
            }
        }
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
