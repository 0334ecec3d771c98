//! Spellings the CLI renamed (docs/cli.md, "Renamed"): each old one is a
//! hidden alias of its new name for one release, and a command line that
//! uses it parses as before, with a warning on stderr saying the new name.

use std::ffi::OsString;

use clap::{CommandFactory as _, FromArgMatches as _};

use super::Cli;

/// One renamed option: in `command` (its path, words separated by a space),
/// `--old` is now `--new`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renamed {
    /// The command's path, e.g. `ssm-document deploy`.
    pub command: &'static str,
    /// The old long name, without `--`.
    pub old: &'static str,
    /// The new long name, without `--`.
    pub new: &'static str,
}

/// Every rename, kept as a hidden alias until the next release.
pub const RENAMED: &[Renamed] = &[
    Renamed {
        command: "install",
        old: "require-principal",
        new: "principal",
    },
    #[cfg(feature = "admin")]
    Renamed {
        command: "ca init",
        old: "secret-id",
        new: "ca-secret-id",
    },
    #[cfg(feature = "admin")]
    Renamed {
        command: "audit",
        old: "timeout",
        new: "connect-timeout",
    },
    #[cfg(feature = "admin")]
    Renamed {
        command: "ssm-document deploy",
        old: "name",
        new: "document",
    },
    #[cfg(feature = "admin")]
    Renamed {
        command: "ssm-document deploy",
        old: "check-name",
        new: "check-document",
    },
    #[cfg(feature = "admin")]
    Renamed {
        command: "ssm-document deploy",
        old: "converge-name",
        new: "converge-document",
    },
    #[cfg(feature = "admin")]
    Renamed {
        command: "schedule enable",
        old: "every",
        new: "schedule",
    },
];

/// Parses a command line (clap's errors as clap reports them), with a
/// warning for each old spelling it used.
pub fn parse(raw: Vec<OsString>) -> Result<(Cli, Vec<String>), clap::Error> {
    let mut matches = Cli::command().try_get_matches_from(&raw)?;
    let path = command_path(&matches);
    let cli = Cli::from_arg_matches_mut(&mut matches)?;
    Ok((cli, warnings(&path, &raw)))
}

/// The subcommand path the matches chose, e.g. `schedule enable`.
fn command_path(matches: &clap::ArgMatches) -> String {
    let mut words = Vec::new();
    let mut at = matches;
    while let Some((name, sub)) = at.subcommand() {
        words.push(name.to_owned());
        at = sub;
    }
    words.join(" ")
}

/// A warning for each old spelling `raw` uses in `command`. clap reads a
/// word starting with `--` as an option (no argument of hostkeyctl takes
/// hyphen values), so a word `--old` or `--old=...` is the option; after a
/// bare `--` nothing is.
fn warnings(command: &str, raw: &[OsString]) -> Vec<String> {
    let words: Vec<&str> = raw
        .iter()
        .skip(1)
        .filter_map(|w| w.to_str())
        .take_while(|w| *w != "--")
        .collect();
    RENAMED
        .iter()
        .filter(|r| r.command == command)
        .filter(|r| {
            let old = format!("--{}", r.old);
            words.iter().any(|w| *w == old || w.starts_with(&format!("{old}=")))
        })
        .map(|r| {
            format!(
                "--{} is now --{} (hostkeyctl {}); the old spelling is accepted until the next release",
                r.old, r.new, r.command
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        std::iter::once("hostkeyctl")
            .chain(line.split(' '))
            .map(OsString::from)
            .collect()
    }

    /// An old spelling belongs to its command alone: `admit` shares
    /// audit's handshake options (`ScanArgs`) but never took `--timeout`.
    #[test]
    fn an_old_spelling_stays_with_its_command() {
        let root = Cli::command();
        let aliases = |command: &str| -> Vec<String> {
            let arg = root
                .find_subcommand(command)
                .unwrap()
                .get_arguments()
                .find(|a| a.get_long() == Some("connect-timeout"))
                .unwrap();
            arg.get_all_aliases()
                .unwrap_or_default()
                .into_iter()
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(aliases("audit"), ["timeout"]);
        assert!(aliases("admit").is_empty(), "{:?}", aliases("admit"));
    }

    /// Each old spelling is a hidden alias of its new name in its command.
    #[test]
    fn every_rename_is_a_hidden_alias_of_the_new_name() {
        let root = Cli::command();
        for r in RENAMED {
            let mut command = &root;
            for word in r.command.split(' ') {
                command = command
                    .find_subcommand(word)
                    .unwrap_or_else(|| panic!("no command {}", r.command));
            }
            let arg = command
                .get_arguments()
                .find(|a| a.get_long() == Some(r.new))
                .unwrap_or_else(|| panic!("{}: no --{}", r.command, r.new));
            assert!(
                arg.get_all_aliases().unwrap_or_default().contains(&r.old),
                "{}: --{} is not an alias of --{}",
                r.command,
                r.old,
                r.new
            );
            assert!(
                !arg.get_visible_aliases().unwrap_or_default().contains(&r.old),
                "{}: --{} is shown in help",
                r.command,
                r.old
            );
        }
    }

    #[test]
    fn an_old_spelling_parses_as_the_new_one_with_a_warning() {
        let (old, warned) = parse(args("install --require-principal a.example,b.example --check")).unwrap();
        let (new, quiet) = parse(args("install --principal a.example,b.example --check")).unwrap();
        assert_eq!(format!("{:?}", old.command), format!("{:?}", new.command));
        assert_eq!(
            warned,
            [
                "--require-principal is now --principal (hostkeyctl install); the old spelling is accepted until the next release"
            ]
        );
        assert!(quiet.is_empty(), "{quiet:?}");
        let (_, warned) = parse(args("install --require-principal=a.example --check")).unwrap();
        assert_eq!(warned.len(), 1, "{warned:?}");
    }

    #[cfg(feature = "admin")]
    #[test]
    fn a_name_renamed_in_one_command_is_not_warned_of_in_another() {
        // --name stays the association's name; only ssm-document deploy's
        // --name was renamed.
        let (_, warned) = parse(args("association delete --secret-id hostkeys/hk --name hk-assoc")).unwrap();
        assert!(warned.is_empty(), "{warned:?}");
        let (cli, warned) = parse(args("ssm-document deploy --name Mine --check-name=MineCheck")).unwrap();
        assert_eq!(warned.len(), 2, "{warned:?}");
        let shown = format!("{:?}", cli.command);
        assert!(shown.contains("\"Mine\"") && shown.contains("\"MineCheck\""), "{shown}");
        // After `--`, nothing is an option.
        assert!(warnings("audit", &args("audit -- --timeout")).is_empty());
    }
}
