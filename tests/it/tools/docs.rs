//! The user pages (README.md, docs/, the quick starts) are for admins:
//! no test-bed or emulator talk (it belongs in CONTRIBUTING.md, testbed/
//! and docs/design-notes.md), and cluster trust and admission are one
//! link away from the README and every quick start.

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
