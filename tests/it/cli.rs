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
