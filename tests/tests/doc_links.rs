//! Guarantee: every relative link in the repository's markdown files leads somewhere. The file
//! or directory a link names exists, and a link to a heading (`file.md#heading`, or `#heading`
//! within the same file) names a heading that file has, so moving, deleting or renaming a page
//! or a section cannot leave a reader at a dead end.
//!
//! Method: walk every `*.md` file under the workspace root (skipping `target/` and hidden
//! directories), read its inline links (`[text](target)`, images too) and reference
//! definitions (`[label]: target`) outside fenced code blocks and code spans, leave out links
//! with a scheme (`https://`, `mailto:`), and resolve the rest against the linking file's
//! directory. Anchors are matched against the target's headings, turned into anchors the way
//! GitHub does it (lower case, punctuation dropped, spaces to hyphens, `-1`, `-2`, ... for
//! repeats). Every broken link is reported at once, with its file and line.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// A link found in a markdown file: its line (1-based) and its target as written.
struct Link {
    line: usize,
    target: String,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the workspace root")
        .to_path_buf()
}

/// Every markdown file under `dir`, skipping build output and hidden directories.
fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                markdown_files(&path, found);
            }
        } else if path.extension().is_some_and(|extension| extension == "md") {
            found.push(path);
        }
    }
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"]
            .into_iter()
            .find(|marker| trimmed.starts_with(marker));
        match (fence, marker) {
            (None, Some(marker)) => fence = Some(marker),
            (Some(open), Some(marker)) if open == marker => fence = None,
            (None, None) => lines.push((index + 1, line)),
            _ => {}
        }
    }
    lines
}

/// `line` with its code spans removed, so that a bracket inside backticks is not a link.
fn without_code_spans(line: &str) -> String {
    let mut kept = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        kept.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        let Some(end) = after.find(&closing) else {
            rest = after;
            break;
        };
        rest = &after[end + ticks..];
    }
    kept.push_str(rest);
    kept
}

/// The links of one file: inline links and reference definitions.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (line_number, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some(close) = trimmed.find(']')
            && trimmed[close + 1..].starts_with(':')
        {
            if let Some(target) = trimmed[close + 2..].split_whitespace().next() {
                found.push(Link {
                    line: line_number,
                    target: target.to_owned(),
                });
            }
            continue;
        }
        let mut rest = line.as_str();
        while let Some(open) = rest.find("](") {
            let after = &rest[open + 2..];
            let end = after
                .find(|c: char| c == ')' || c.is_whitespace())
                .unwrap_or(after.len());
            let target = after[..end].trim_matches(|c| c == '<' || c == '>');
            found.push(Link {
                line: line_number,
                target: target.to_owned(),
            });
            rest = &after[end..];
        }
    }
    found
}

/// The anchor GitHub gives a heading's text.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of every heading of a markdown file, repeats numbered as GitHub numbers them.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor(&line[hashes..]);
        let repeats = seen.entry(base.clone()).or_insert(0);
        anchors.push(if *repeats == 0 {
            base
        } else {
            format!("{base}-{repeats}")
        });
        *repeats += 1;
    }
    anchors
}

/// Why `link`, written in `file`, leads nowhere (paths shown from `root`); `None` when it
/// resolves.
fn broken(root: &Path, file: &Path, link: &Link) -> Option<String> {
    let target = link.target.as_str();
    if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, heading) = match target.split_once('#') {
        Some((path, heading)) => (path, Some(heading)),
        None => (target, None),
    };
    let resolved = if path.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().unwrap().join(path)
    };
    let shown = resolved.strip_prefix(root).unwrap_or(&resolved).display();
    if !resolved.exists() {
        return Some(format!("{shown} does not exist"));
    }
    let heading = heading.filter(|heading| !heading.is_empty())?;
    if resolved
        .extension()
        .is_none_or(|extension| extension != "md")
    {
        return None;
    }
    let text = fs::read_to_string(&resolved).unwrap();
    if anchors(&text).iter().any(|anchor| anchor == heading) {
        None
    } else {
        Some(format!("{shown} has no heading with the anchor #{heading}"))
    }
}

#[test]
fn every_relative_link_in_the_markdown_files_resolves() {
    let root = workspace_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(
        files.iter().any(|file| file.ends_with("docs/design.md")),
        "the walk found no docs/design.md under {}",
        root.display()
    );
    let mut problems = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        for link in links(&text) {
            if let Some(reason) = broken(&root, file, &link) {
                let shown = file.strip_prefix(&root).unwrap_or(file).display();
                problems.push(format!("{shown}:{}: ({}) {reason}", link.line, link.target));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} broken link(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        anchor(" Local trust: the liveness directory"),
        "local-trust-the-liveness-directory"
    );
    assert_eq!(
        anchor(" Crashes and power loss, per durability"),
        "crashes-and-power-loss-per-durability"
    );
    assert_eq!(anchor(" fork() without exec"), "fork-without-exec");
    assert_eq!(
        anchor(" Hooks, releases and write-behind"),
        "hooks-releases-and-write-behind"
    );
    assert_eq!(
        anchors("# A\n## B\n```\n# not a heading\n```\n## B\n"),
        ["a", "b", "b-1"]
    );
}

#[test]
fn links_in_code_are_not_links() {
    let found = links("[a](x.md) `[b](y.md)` and [c][d]\n```\n[e](z.md)\n```\n[d]: w.md\n");
    let targets: Vec<&str> = found.iter().map(|link| link.target.as_str()).collect();
    assert_eq!(targets, ["x.md", "w.md"]);
}
