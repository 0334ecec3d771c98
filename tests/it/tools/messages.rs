//! What a command says when it refuses or fails, from the built binary:
//! the cause in one line and what to do, never the AWS SDK's Debug text,
//! each cause once, and refusals that follow from the arguments alone
//! before anything needs AWS. No AWS: a closed loopback port stands in for
//! an unreachable endpoint.

use crate::common::support::hostkeyctl_without_aws as isolated;

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `push` to a HyperPod cluster can never work (SSM does not reach its
/// nodes): refused with no region or credentials, naming `rotate --pull`.
/// So is a push rotation; node sources mixed with EC2 filters too.
#[test]
fn targets_ssm_cannot_reach_are_refused_before_any_aws_configuration() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["push", "--secret-id", "hk", "--target", "hyperpod:hp/login-group"],
        vec![
            "rotate",
            "--secret-id",
            "hk",
            "--target",
            "hyperpod:hp/login-group",
            "--overlap",
        ],
    ] {
        let out = isolated(dir.path()).args(&args).output().unwrap();
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("rotate --pull --target hyperpod:hp/login-group"),
            "{stderr}"
        );
        assert!(!stderr.contains("region"), "asked for AWS first: {stderr}");
    }
    let out = isolated(dir.path())
        .args([
            "push",
            "--secret-id",
            "hk",
            "--target",
            "lb:hp-login",
            "--target",
            "tag:Role=login",
        ])
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot be combined") && !stderr.contains("region"),
        "{stderr}"
    );
}

/// An endpoint nothing answers: exit 4, the cause in one line and the
/// hint, no SDK Debug text (what lands in a node's provisioning log).
#[test]
fn an_unreachable_endpoint_is_one_line_and_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let out = isolated(dir.path())
        .args(["status", "--secret-id", "hk"])
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
        .env("AWS_SECRET_ACCESS_KEY", "not-a-secret")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AWS_MAX_ATTEMPTS", "1")
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert!(
        stderr.contains("Connection refused") && stderr.contains("check network access"),
        "{stderr}"
    );
    for debug in ["DispatchFailure", "ConnectorError", "Os {", "hyper_util"] {
        assert!(!stderr.contains(debug), "SDK Debug text ({debug}): {stderr}");
    }
}

/// An error that quotes its cause does not print it twice.
#[test]
fn a_cause_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nonexistent");
    let out = isolated(dir.path())
        .args(["init", "--secret-id", "hk", "--from-dir"])
        .arg(&missing)
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");
}

/// `install --check` when sshd cannot be asked says so in its one line
/// (and which address), and no row says ok beside the error.
#[test]
fn a_check_that_cannot_ask_sshd_names_why_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::common::support::check_against_nothing(dir.path())
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains("sshd at 127.0.0.1:9 could not be asked") && stderr.contains("--verify-address"),
        "{stderr}"
    );
    let report = hostkeyctl::install::InstallReport::from_output(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert!(
        report.checks.iter().all(|r| !r.ok),
        "a row says ok though nothing was asked: {report:?}"
    );
}

/// A table never cuts a fingerprint to fit the width.
#[test]
fn a_table_keeps_fingerprints_whole() {
    let dir = tempfile::tempdir().unwrap();
    let out = isolated(dir.path())
        .args(["keygen", "--output", "table", "--out-dir"])
        .arg(dir.path().join("keys"))
        .env("COLUMNS", "60")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let whole = stdout
        .split(|c: char| c.is_whitespace() || c == '│')
        .filter(|w| w.starts_with("SHA256:") && w.len() == 50)
        .count();
    assert_eq!(whole, 3, "a fingerprint was cut:\n{stdout}");
}
