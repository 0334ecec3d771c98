//! The house's rules (docs/design-notes.md, "The house"), checked by
//! `scripts/check_house.py` over this tree: no file in src/, tests/,
//! testbed/ or scripts/ over 600 lines, no function over 100, no import
//! cycle between files or rooms of src/, no library room importing the
//! command line, no command importing another. And the checker itself is
//! shown to catch each breach on a tree made for it, so a checker that
//! checks nothing cannot pass.

use std::path::{Path, PathBuf};
use std::process::Command;

fn check(root: &Path) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_house.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("--root")
        .arg(root)
        .output()
        .expect("python3 runs scripts/check_house.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_tree_keeps_the_house_rules() {
    let (ok, text) = check(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(ok, "{text}");
    // The floors it printed hold the rooms in their order.
    let floor_of = |room: &str| {
        text.lines()
            .find(|l| l.split_whitespace().skip(2).any(|r| r == room))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.trim_end_matches(':').parse::<u32>().ok())
            .unwrap_or_else(|| panic!("no floor for {room}: {text}"))
    };
    assert!(floor_of("commands") > floor_of("rotation"), "{text}");
    assert!(floor_of("aws") > floor_of("store"), "{text}");
    assert!(floor_of("store") > floor_of("aws_error"), "{text}");
}

/// A small tree for the checker, with files given as (path, text).
fn tree(files: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path: PathBuf = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

fn lib() -> (&'static str, String) {
    (
        "src/lib.rs",
        "//! The map: [`cli`], [`commands`], [`low`], [`high`].\npub mod cli;\npub mod commands;\npub mod low;\npub mod high;\n"
            .to_owned(),
    )
}

#[test]
fn a_tree_within_the_rules_passes() {
    let dir = tree(&[
        lib(),
        ("src/low.rs", "pub struct Low;\n".to_owned()),
        ("src/high/mod.rs", "mod part;\nuse crate::low::Low;\n".to_owned()),
        ("src/high/part.rs", "use super::super::low::Low;\n".to_owned()),
        ("src/commands/mod.rs", "pub mod a;\n".to_owned()),
        (
            "src/commands/a.rs",
            "use crate::high::part;\nuse crate::commands::common;\n".to_owned(),
        ),
        ("src/commands/common.rs", String::new()),
        ("src/cli.rs", String::new()),
    ]);
    let (ok, text) = check(dir.path());
    assert!(ok, "{text}");
}

#[test]
fn each_breach_is_caught_and_named() {
    let long_fn = format!("fn long() {{\n{}}}\n", "    let _ = 1;\n".repeat(99));
    let long_py = format!("def long():\n{}", "    x = 1\n".repeat(100));
    let dir = tree(&[
        lib(),
        // Two rooms importing each other, through a `super` path and a
        // path in the code.
        ("src/low.rs", "pub fn f() { crate::high::g() }\n".to_owned()),
        ("src/high/mod.rs", "mod part;\npub fn g() {}\n".to_owned()),
        ("src/high/part.rs", "use super::super::low;\n".to_owned()),
        // The library reaching into the command line.
        ("src/high/args.rs", "use crate::cli::Args;\n".to_owned()),
        // A command importing another.
        ("src/commands/mod.rs", "pub mod a;\npub mod b;\n".to_owned()),
        ("src/commands/a.rs", "use crate::commands::b::run;\n".to_owned()),
        ("src/commands/b.rs", String::new()),
        ("src/cli.rs", String::new()),
        // Sizes, in Rust, Python and the tests.
        ("src/long.rs", long_fn),
        ("scripts/long.py", long_py),
        ("tests/it/big.rs", "// a line\n".repeat(601)),
    ]);
    let (ok, text) = check(dir.path());
    assert!(!ok, "{text}");
    for breach in [
        "rooms import each other (high, low)",
        "src/high/args.rs imports src/cli.rs: the library does not reach into the command line",
        "src/commands/a.rs imports src/commands/b.rs: no command imports another",
        "src/long.rs:1: long is 101 lines",
        "scripts/long.py:1: long is 101 lines",
        "tests/it/big.rs: 601 lines",
    ] {
        assert!(text.contains(breach), "missing {breach:?} in:\n{text}");
    }
    // A 100-line function is within the limit.
    assert!(!text.contains("is 100 lines"), "{text}");
}

/// An outside-system trait with no double in src/testing, and one whose
/// double plans no faults, are each named; a double with `Faults`, and
/// the traits that are no outside system, pass.
#[test]
fn a_trait_without_a_faulting_double_is_caught() {
    let dir = tree(&[
        ("src/lib.rs", "pub mod low;\npub mod testing;\n".to_owned()),
        (
            "src/low.rs",
            "pub trait Store {}\npub trait Queue {}\npub trait Covered {}\npub trait Word {}\n".to_owned(),
        ),
        ("src/testing/mod.rs", "mod plain;\nmod faulty;\n".to_owned()),
        ("src/testing/plain.rs", "impl crate::low::Queue for Plain {\n}\n".to_owned()),
        (
            "src/testing/faulty.rs",
            "impl<S: Sync> crate::low::Covered for Faulty<S> {\n    // self.faults.enter(\"op\")\n}\nstruct Faulty<S> { faults: Faults, s: S }\n"
                .to_owned(),
        ),
    ]);
    let (ok, text) = check(dir.path());
    assert!(!ok, "{text}");
    assert!(
        text.contains("src/low.rs: trait Store has no double in src/testing"),
        "{text}"
    );
    assert!(
        text.contains("trait Queue's double (src/testing/plain.rs) plans no faults"),
        "{text}"
    );
    assert!(!text.contains("Covered") && !text.contains("Word"), "{text}");
}

/// A command over 150 lines, one that builds its report by hand or exits
/// by itself, a front door over 100 lines of code, and a module missing
/// from the crate's map are each named; a 150-line command and a door of
/// 100 lines of code (comments aside) pass.
#[test]
fn the_commands_doors_and_map_rules_catch_their_breaches() {
    let door = format!("//! The map.\n{}", "pub mod part;\n".repeat(100));
    let big_door = format!("//! The map.\n{}", "pub fn f() {}\n".repeat(101));
    let dir = tree(&[
        (
            "src/lib.rs",
            "//! The crate: [`cli`], [`commands`], [`low`].\npub mod cli;\npub mod commands;\npub mod low;\npub mod lost;\n"
                .to_owned(),
        ),
        ("src/cli.rs", String::new()),
        ("src/low/mod.rs", door),
        ("src/low/part.rs", String::new()),
        ("src/lost/mod.rs", big_door),
        ("src/commands/mod.rs", "pub mod a;\npub mod b;\npub mod c;\n".to_owned()),
        ("src/commands/a.rs", "// a line\n".repeat(151)),
        ("tests/it/common/mod.rs", "pub const SECRET: &str = \"hostkeys/hk\";\n".to_owned()),
        ("tests/it/bed/x.rs", "fn f() { g(\"hostkeys/hk\") }\n".to_owned()),
        ("src/commands/b.rs", "fn r() { let _ = serde_json::json!({}); }\n// json! in a comment\n".to_owned()),
        (
            "src/commands/c.rs",
            "fn e() { std::process::exit(3) }\nfn s() -> Status { Status::Drift }\nfn t() -> Status { Status::Success }\n"
                .to_owned()
                + &"//\n".repeat(147),
        ),
    ]);
    let (ok, text) = check(dir.path());
    assert!(!ok, "{text}");
    for breach in [
        "src/commands/a.rs: 151 lines (a command at most 150)",
        "src/commands/b.rs:1: json! in a command",
        "src/commands/c.rs:1: process::exit in a command",
        "src/commands/c.rs:2: Status::Drift in a command",
        "src/lost/mod.rs: 101 lines of code (a front door at most 100)",
        "src/lib.rs: module lost is not in the crate's map",
        "tests/it/bed/x.rs:1: \"hostkeys/hk\" written out",
    ] {
        assert!(text.contains(breach), "missing {breach:?} in:\n{text}");
    }
    for fine in [
        "src/commands/c.rs: ",
        "c.rs:3",
        "src/low/mod.rs",
        "b.rs:2",
        "module low",
        "module cli",
        "common/mod.rs",
    ] {
        assert!(!text.contains(fine), "{fine:?} was not a breach:\n{text}");
    }
}

/// A chain of `n` rooms, each importing the next: `n` floors.
fn stack(n: usize) -> tempfile::TempDir {
    let names: Vec<String> = (1..=n).map(|i| format!("r{i}")).collect();
    let map: String = names.iter().map(|r| format!("[`{r}`] ")).collect();
    let mods: String = names.iter().map(|r| format!("pub mod {r};\n")).collect();
    let mut files = vec![("src/lib.rs".to_owned(), format!("//! The map: {map}\n{mods}"))];
    for (i, r) in names.iter().enumerate() {
        let text = match names.get(i + 1) {
            Some(below) => format!("use crate::{below}::X;\npub struct X;\n"),
            None => "pub struct X;\n".to_owned(),
        };
        files.push((format!("src/{r}.rs"), text));
    }
    let files: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    tree(&files)
}

#[test]
fn a_fourteenth_floor_is_a_breach_and_thirteen_are_not() {
    let (ok, text) = check(stack(13).path());
    assert!(ok, "{text}");
    assert!(text.contains("floor 13: r1"), "{text}");
    let (ok, text) = check(stack(14).path());
    assert!(!ok, "{text}");
    assert!(text.contains("src: 14 floors (at most 13)"), "{text}");
}
