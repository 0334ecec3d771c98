//! One CLI vocabulary (docs/cli.md): every command leaf's `--help` is
//! snapshotted, the vocabulary table names every option of every leaf with
//! the commands that take it, and a renamed option's old spelling still
//! works, with a warning.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use clap::CommandFactory as _;

/// Every leaf command's path (`["schedule", "enable"]`) with its own
/// options' long names (global ones, help and version left out).
fn leaves() -> BTreeMap<String, BTreeSet<String>> {
    fn walk(command: &clap::Command, path: &mut Vec<String>, out: &mut BTreeMap<String, BTreeSet<String>>) {
        let subs: Vec<&clap::Command> = command.get_subcommands().filter(|c| c.get_name() != "help").collect();
        if subs.is_empty() {
            let longs = command
                .get_arguments()
                .filter(|a| !a.is_global_set() && !a.is_hide_set())
                .filter_map(|a| a.get_long())
                .filter(|l| !["help", "version"].contains(l))
                .map(|l| format!("--{l}"))
                .collect();
            out.insert(path.join(" "), longs);
        }
        for sub in subs {
            path.push(sub.get_name().to_owned());
            walk(sub, path, out);
            path.pop();
        }
    }
    let mut command = hostkeyctl::cli::Cli::command();
    command.build();
    let mut out = BTreeMap::new();
    walk(&command, &mut Vec::new(), &mut out);
    out
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Each leaf has tests/cmd/help-<path>.toml running `<path> --help`.
#[test]
fn every_command_leaf_has_a_help_snapshot() {
    let leaves = leaves();
    assert!(leaves.len() >= 20, "{leaves:?}");
    for path in leaves.keys() {
        let name = format!("tests/cmd/help-{}.toml", path.replace(' ', "-"));
        let case = std::fs::read_to_string(root().join(&name)).unwrap_or_else(|_| panic!("{path}: no {name}"));
        let words: Vec<String> = path.split(' ').chain(["--help"]).map(|w| format!("{w:?}")).collect();
        assert!(
            case.contains(&format!("args = [{}]", words.join(", "))),
            "{name} does not run `{path} --help`:\n{case}"
        );
        let stdout = root().join(name.replace(".toml", ".stdout"));
        assert!(stdout.is_file(), "{path}: no {}", stdout.display());
    }
}

/// Every command's examples (its `--help`, as the binary prints it) are
/// commands a reader can copy: none longer than 100 columns (where clap
/// would wrap it mid-command), and a line that continues a command follows
/// one ending in ` \\` and is indented under it.
#[test]
fn help_examples_never_wrap_mid_command() {
    fn paths(command: &clap::Command, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(path.clone());
        for sub in command.get_subcommands().filter(|c| c.get_name() != "help") {
            path.push(sub.get_name().to_owned());
            paths(sub, path, out);
            path.pop();
        }
    }
    let mut command = hostkeyctl::cli::Cli::command();
    command.build();
    let mut all = Vec::new();
    paths(&command, &mut Vec::new(), &mut all);
    let mut checked = 0;
    for path in all {
        let name = path.join(" ");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hostkeyctl"))
            .args(&path)
            .arg("--help")
            .env_remove("COLUMNS")
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let Some((_, examples)) = text.split_once("\nExamples:\n") else {
            continue;
        };
        let mut continued = false;
        for line in examples.lines().take_while(|l| l.starts_with("  ")) {
            checked += 1;
            assert!(line.len() <= 100, "{name}: {} columns: {line}", line.len());
            let continuation = line.starts_with("    ");
            assert_eq!(
                continuation,
                continued,
                "{name}: {line:?} {} (a command goes on after ` \\`, indented)",
                if continued {
                    "should continue the line above"
                } else {
                    "is a command's wrapped tail"
                }
            );
            if !continuation {
                let first = line.split_whitespace().next().unwrap_or("");
                assert!(
                    ["hostkeyctl", "plink", "sh", "ssh"].contains(&first),
                    "{name}: {line:?} starts no command"
                );
            }
            continued = line.ends_with(" \\");
        }
        assert!(!continued, "{name}: the last example ends in ` \\`");
    }
    assert!(checked > 40, "only {checked} example lines found");
}

/// docs/cli.md's table: option → meaning → commands. Each row's commands
/// are exactly the leaves whose `--help` lists the option, and every
/// option of every leaf has its row.
#[test]
fn the_vocabulary_table_matches_every_commands_help() {
    let doc = std::fs::read_to_string(root().join("docs/cli.md")).unwrap();
    let start = doc
        .find("<!-- vocabulary")
        .expect("docs/cli.md has the vocabulary table");
    let mut table: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in doc[start..].lines().skip(1).skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let Some(option) = cells[0].strip_prefix('`').and_then(|c| c.split([' ', '`']).next()) else {
            continue;
        };
        assert_eq!(cells.len(), 3, "{line}");
        let commands = cells[2]
            .split(',')
            .map(|c| c.trim().trim_matches('`').to_owned())
            .collect();
        assert!(
            table.insert(option.to_owned(), commands).is_none(),
            "{option} has two rows"
        );
    }
    let mut actual: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, longs) in leaves() {
        for long in longs {
            actual.entry(long).or_default().insert(path.clone());
        }
    }
    let rows = |m: &BTreeMap<String, BTreeSet<String>>| -> Vec<String> {
        m.iter()
            .map(|(o, c)| format!("{o}: {}", c.iter().cloned().collect::<Vec<_>>().join(", ")))
            .collect()
    };
    assert_eq!(
        rows(&table),
        rows(&actual),
        "docs/cli.md's vocabulary table differs from the commands' --help"
    );
}

/// Every list takes commas as well as repetition, but `--target` and
/// `--tag`, whose values may hold one (docs/cli.md, "Rules").
#[test]
fn every_list_takes_commas_but_targets_and_tags() {
    fn walk(command: &clap::Command, path: &str, wrong: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let list = matches!(arg.get_action(), clap::ArgAction::Append);
            let Some(long) = arg.get_long() else { continue };
            let commas = arg.get_value_delimiter() == Some(',');
            if list && !commas && !["target", "tag"].contains(&long) {
                wrong.push(format!("{path}: --{long} repeats but takes no commas"));
            }
            if commas && ["target", "tag"].contains(&long) {
                wrong.push(format!("{path}: --{long} splits on commas"));
            }
        }
        for sub in command.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), wrong);
        }
    }
    let mut command = hostkeyctl::cli::Cli::command();
    command.build();
    let mut wrong = Vec::new();
    walk(&command, "hostkeyctl", &mut wrong);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A renamed option's old spelling (docs/cli.md, "Renamed") still parses,
/// through the real binary, with a warning naming the new one; `--quiet`
/// keeps the warning back. Nothing listens on port 1: the run then fails
/// reaching AWS, after parsing.
#[test]
fn an_old_spelling_still_works_with_a_warning() {
    let run = |extra: &[&str]| {
        let out = crate::common::support::hostkeyctl()
            .args([
                "ssm-document",
                "deploy",
                "--name",
                "Mine",
                "--endpoint-url",
                "http://127.0.0.1:1",
            ])
            .args(["--max-attempts", "1"])
            .args(extra)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
            .env("AWS_SECRET_ACCESS_KEY", "not-a-secret")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = run(&[]);
    assert!(
        stderr.starts_with("warning: --name is now --document (hostkeyctl ssm-document deploy)"),
        "{stderr}"
    );
    assert_ne!(code, Some(2), "the old spelling was refused: {stderr}");
    let (quiet_code, quiet) = run(&["--quiet"]);
    assert_eq!(quiet_code, code, "{quiet}");
    assert!(!quiet.contains("warning"), "{quiet}");
}
