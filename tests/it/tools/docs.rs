//! The user pages (README.md, docs/, the quick starts) are for admins:
//! no test-bed or emulator talk (it belongs in CONTRIBUTING.md, testbed/
//! and docs/design-notes.md), cluster trust and admission are one
//! link away from the README and every quick start, and the whole stays
//! within a reading budget.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The user pages and their text: README.md, and every page of docs/ but
/// the contributors' (design-notes.md, cli.md).
fn user_pages() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut pages = vec![("README.md".to_owned(), readme)];
    for dir in ["docs", "docs/quickstart"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".md") || ["design-notes.md", "cli.md"].contains(&name.as_str()) {
                continue;
            }
            pages.push((format!("{dir}/{name}"), std::fs::read_to_string(&path).unwrap()));
        }
    }
    pages
}

#[test]
fn user_pages_never_speak_of_the_test_bed() {
    let words = [
        "test bed", "testbed", "emulator", "emulated", "the bed", "bed's", "bed test",
    ];
    let mut found = Vec::new();
    let pages = user_pages();
    assert!(pages.len() > 15, "{} pages", pages.len());
    for (name, text) in &pages {
        for (i, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            if let Some(word) = words.iter().find(|w| lower.contains(*w)) {
                found.push(format!("{name}:{}: {word:?}: {line}", i + 1));
            }
            // The project's issue numbers mean nothing to an admin.
            let issue = lower
                .match_indices("issue ")
                .any(|(at, _)| lower[at + 6..].starts_with(|c: char| c.is_ascii_digit()));
            if issue {
                found.push(format!("{name}:{}: an issue number: {line}", i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "move these to CONTRIBUTING.md (\"What the tests show behind the user pages\"), testbed/ or design-notes:\n{}",
        found.join("\n")
    );
}

#[test]
fn cluster_trust_and_admission_are_linked_from_the_readme_and_every_quick_start() {
    for (name, text) in user_pages() {
        if !(name == "README.md" || name.starts_with("docs/quickstart/")) {
            continue;
        }
        for page in ["cluster-trust.md", "admission.md"] {
            assert!(text.contains(page), "{name} does not link {page}");
        }
    }
}

/// Each quick start reads in one sitting: at most 1,500 words.
#[test]
fn each_quick_start_is_at_most_1500_words() {
    for (name, text) in user_pages() {
        if name.starts_with("docs/quickstart/") {
            let words = text.split_whitespace().count();
            assert!(words <= 1500, "{name} has {words} words, over 1,500");
        }
    }
}

/// The whole of what an admin may read stays readable: README.md, docs/
/// and the quick starts (`wc -w README.md docs/*.md docs/quickstart/*.md`,
/// the contributors' design notes and CLI reference included) at most
/// 25,000 words.
#[test]
fn the_docs_are_at_most_25000_words() {
    let mut total = 0;
    let mut pages = vec![root().join("README.md")];
    for dir in ["docs", "docs/quickstart"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    let mut sizes = Vec::new();
    for path in &pages {
        let words = std::fs::read_to_string(path).unwrap().split_whitespace().count();
        total += words;
        sizes.push(format!("{words:>6} {}", path.strip_prefix(root()).unwrap().display()));
    }
    sizes.sort();
    assert!(pages.len() > 17, "{} pages", pages.len());
    assert!(total <= 25_000, "{total} words, over 25,000:\n{}", sizes.join("\n"));
}

/// Every place that cites a page's section by name (`docs/install.md,
/// "Running nodes"`, in code, strings, scripts, units, policies and
/// pages) names a
/// heading or a bold label the page still has: trimming a page must not
/// leave a pointer to nothing.
#[test]
fn every_cited_section_exists() {
    let cite = regex_lite::Regex::new(r#"(docs/[a-z/_-]+\.md)(?:'s)?,?\s+\\?"([A-Z`][^"\n\\]*)\\?""#).unwrap();
    let mut files = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    for dir in ["src", "scripts", "contrib", "docs", "iam", "testbed", "tests/it"] {
        walk(&root().join(dir), &mut files);
    }
    for file in ["README.md", "CONTRIBUTING.md", "Cargo.toml", "Makefile"] {
        files.push(root().join(file));
    }
    let mut missing = Vec::new();
    let mut cited = 0;
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        // Comments wrap: a citation may run over a line's `//` or `#`.
        let joined = regex_lite::Regex::new(r"\n\s*(//[!/]?|#)\s*")
            .unwrap()
            .replace_all(&text, " ");
        for c in cite.captures_iter(&joined) {
            let (page, section) = (&c[1], &c[2]);
            let Ok(target) = std::fs::read_to_string(root().join(page)) else {
                missing.push(format!("{}: {page} does not exist", file.display()));
                continue;
            };
            cited += 1;
            let found = target.lines().any(|l| {
                let heading = l.trim_start_matches('#').trim();
                (l.starts_with('#') && heading.trim_matches('`').starts_with(section.trim_matches('`')))
                    || l.contains(&format!("**{section}"))
            });
            if !found {
                missing.push(format!(
                    "{}: {page}, \"{section}\"",
                    file.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    assert!(cited > 20, "{cited} citations found");
    assert!(
        missing.is_empty(),
        "cited sections that do not exist:\n{}",
        missing.join("\n")
    );
}
