//! The documentation holds together: README.md, BENCHMARKS.md and docs/
//! link only to files and headings that exist, and nothing in the
//! repository cites a specification users cannot read (the contract users
//! have is docs/, in the project's own words).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown documents users read.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![repo().join("README.md"), repo().join("BENCHMARKS.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

/// `text` without fenced code blocks and inline code spans, where link
/// syntax is only code.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// The anchors of a Markdown file's headings, as GitHub makes them:
/// lower case, punctuation dropped, spaces as hyphens, `-1`, `-2`... for
/// repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        let title = title.trim_start_matches('#').trim().trim_end_matches('#');
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut n = 0;
        let mut anchor = slug.clone();
        while !out.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
    }
    out
}

/// The targets of `[text](target)` links in prose.
fn link_targets(text: &str) -> Vec<String> {
    let text = prose(text);
    let mut out = Vec::new();
    for (i, _) in text.match_indices("](") {
        let rest = &text[i + 2..];
        if let Some(end) = rest.find(')') {
            let target = &rest[..end];
            if !target.contains(char::is_whitespace) {
                out.push(target.to_string());
            }
        }
    }
    out
}

/// What is wrong with a relative link of `from`, if anything.
fn broken(from: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, fragment) = match target.split_once('#') {
        Some((p, f)) => (p, Some(f)),
        None => (target, None),
    };
    let dest = if path.is_empty() {
        from.to_path_buf()
    } else {
        from.parent().expect("a folder").join(path)
    };
    if !dest.exists() {
        return Some(format!("{target}: no such file"));
    }
    let fragment = fragment?;
    if dest.extension().is_none_or(|e| e != "md") {
        return Some(format!(
            "{target}: an anchor into a file that is not Markdown"
        ));
    }
    let text = std::fs::read_to_string(&dest).expect("read");
    (!anchors(&text).contains(fragment)).then(|| format!("{target}: no such heading"))
}

#[test]
fn relative_links_in_the_docs_lead_to_files_and_headings_that_exist() {
    let mut checked = 0;
    let mut bad = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read");
        for target in link_targets(&text) {
            checked += 1;
            if let Some(why) = broken(&doc, &target) {
                bad.push(format!("{}: {why}", doc.display()));
            }
        }
    }
    assert!(checked > 100, "found only {checked} links");
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
    println!(
        "verified: {checked} links in {} documents resolve",
        documents().len()
    );
}

/// Files of the repository that are text a person reads or runs, below
/// `dir` (build output and git's own files aside).
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !matches!(name, "target" | ".git" | "node_modules") {
                text_files(&path, out);
            }
        } else if std::fs::read_to_string(&path).is_ok() {
            out.push(path);
        }
    }
}

#[test]
fn nothing_cites_a_specification_users_cannot_read() {
    // Spelled in two halves so that this file does not match itself.
    let needles = [concat!("SPEC", " §"), concat!("SPEC", ".md")];
    let mut files = Vec::new();
    text_files(&repo(), &mut files);
    assert!(files.len() > 150, "found only {} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        for (n, line) in text.lines().enumerate() {
            if needles.iter().any(|needle| line.contains(needle)) {
                found.push(format!("{}:{}: {line}", f.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/ instead (the contract users can read):\n{}",
        found.join("\n")
    );
    println!(
        "verified: no citation of the specification in {} files",
        files.len()
    );
}

#[test]
fn the_link_checker_finds_broken_links_and_headings() {
    let text = "# Top\n## `GET /v1/boards`\n## Top\n```\n# not a heading\n```\n";
    assert_eq!(
        anchors(text),
        BTreeSet::from(["top".to_string(), "get-v1boards".into(), "top-1".into()])
    );
    let links =
        link_targets("see [a](docs/a.md#x), `[b](c)` and\n```\n[d](e)\n```\n[f](https://x)");
    assert_eq!(links, vec!["docs/a.md#x".to_string(), "https://x".into()]);
    let readme = repo().join("README.md");
    assert_eq!(broken(&readme, "https://example.com/nowhere"), None);
    assert_eq!(broken(&readme, "docs/README.md"), None);
    assert!(broken(&readme, "docs/nowhere.md").is_some());
    assert!(broken(&readme, "#no-such-heading-here").is_some());
}
