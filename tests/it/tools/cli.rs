//! The transcripts users see, snapshot-tested so wording changes are
//! deliberate: every `--help`, and the most common errors (bad input, no
//! region). The cases are tests/cmd/*.toml with their .stdout/.stderr;
//! `TRYCMD=overwrite cargo test --test it cli::` rewrites them after a
//! deliberate change. No AWS, no network: the environment is cleared.

#[test]
fn help_and_error_transcripts_are_as_snapshotted() {
    trycmd::TestCases::new()
        .register_bin("hostkeyctl", assert_cmd::cargo::cargo_bin("hostkeyctl"))
        .case("tests/cmd/*.toml");
}

/// Completions and man pages (what packages ship) cover every subcommand.
#[test]
fn completions_and_man_pages_cover_every_subcommand() {
    use clap::CommandFactory;

    let command = hostkeyctl::cli::Cli::command();
    let mut pages = vec!["hostkeyctl.1".to_owned()];
    let mut names = Vec::new();
    for sub in command.get_subcommands() {
        names.push(sub.get_name().to_owned());
        pages.push(format!("hostkeyctl-{}.1", sub.get_name()));
        for nested in sub.get_subcommands() {
            pages.push(format!("hostkeyctl-{}-{}.1", sub.get_name(), nested.get_name()));
        }
    }
    for shell in ["bash", "zsh", "fish"] {
        let out = crate::common::support::hostkeyctl()
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for name in &names {
            assert!(script.contains(name.as_str()), "{shell} completion lacks {name}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("man1");
    let run = crate::common::support::hostkeyctl()
        .args(["man", "--out-dir"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let mut written: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    pages.sort();
    assert_eq!(written, pages);
    for page in &pages {
        let text = std::fs::read_to_string(out_dir.join(page)).unwrap();
        assert!(text.contains(".TH "), "{page} is not a man page");
    }
}

/// A connection budget directory others can write is not used (anyone
/// could make every audit wait): the run says so and paces by itself.
/// Regression: warnings went to a pipe (a journal, SSM's output) in
/// terminal colours, escape sequences and all.
#[test]
fn a_shared_budget_directory_is_refused_and_warnings_are_plain_text() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("pacing");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    // Nothing listens on port 1 of loopback: the audit is incomplete.
    let out = crate::common::support::hostkeyctl()
        .args([
            "audit",
            "--expect",
            "SHA256:F8mcdLkvg/NI+SFNUCEaHb7QRE7TTYXFjuVRzO7FczI",
            "--endpoint",
            "127.0.0.1:1",
        ])
        .env("HOSTKEYCTL_PACING_DIR", &open)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("connection budget kept in this process only") && stderr.contains("alone"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "escape sequences in a pipe: {stderr:?}");
    assert_eq!(
        std::fs::read_dir(&open).unwrap().count(),
        0,
        "the shared directory was used"
    );
}
