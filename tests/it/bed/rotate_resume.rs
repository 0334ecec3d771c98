//! A killed rotation that `--resume` always finishes (issue 59). `rotate`
//! is killed outright (SIGKILL) while the emulator holds one of its AWS
//! calls unanswered (`Faults.hold_at`), at kill points spread from its
//! first call to its last; the held call then takes effect or not, in
//! turn. The same command with `--resume` follows (a `--finish` again:
//! it resumes by itself), then the rest of the rotation's commands. Each ends with AWSPENDING gone, the audit clean,
//! and every node serving AWSCURRENT; the killed run's promotion, when it
//! happened, is kept. `memory::rotation` kills at every store call; this
//! kills the real binary at its SDK calls, SSM's included.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::bed::rotate::stages;
use crate::common::bed::{BedOptions, SECRET, TARGETS, TestBed, wait_until};
use crate::common::roles::Role;

/// The calls a kill point may fall on, by the rotation role alone (not the
/// nodes' timers): every read and write of the secret, and every command
/// sent (the polls of a push vary with timing, so they would move the
/// points from run to run).
const CALLS: [&str; 8] = [
    "DescribeSecret",
    "GetSecretValue",
    "ListSecretVersionIds",
    "PutSecretValue",
    "UpdateSecretVersionStage",
    "TagResource",
    "UntagResource",
    "SendCommand",
];

/// Kill points per kind of rotation.
const POINTS: usize = 4;

/// One kind of rotation: its commands in order (each `rotate` with these
/// arguments), and whether it is a pull fleet's (the nodes' timers run
/// before each command after the first, and at the end).
struct Kind {
    name: &'static str,
    commands: &'static [&'static [&'static str]],
    pull: bool,
}

const KINDS: [Kind; 3] = [
    Kind {
        name: "push, promoted at once",
        commands: &[&["--min-overlap", "0"]],
        pull: false,
    },
    Kind {
        name: "push, announced then finished",
        commands: &[&["--overlap"], &["--finish", "--min-overlap", "0"]],
        pull: false,
    },
    Kind {
        name: "pull, announced then finished",
        commands: &[
            &["--pull"],
            &["--pull", "--finish", "--min-overlap", "0", "--wait", "0"],
        ],
        pull: true,
    },
];

fn spawn(bed: &TestBed, extra: &[&str]) -> Child {
    let mut args = vec!["rotate", "--secret-id", SECRET, "--max-concurrency", "100%"];
    args.extend(TARGETS);
    args.extend_from_slice(extra);
    Command::new(assert_cmd::cargo::cargo_bin("hostkeyctl"))
        .args(&args)
        .envs(bed.aws_env(Role::Rotation))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `rotate` with `extra` to its end: its exit code and stderr.
fn run(bed: &TestBed, extra: &[&str]) -> (i32, String) {
    let out = spawn(bed, extra).wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The nodes' timers: install on every node.
fn timers(bed: &TestBed) {
    for node in &bed.state.nodes {
        let run = bed.cli("install").on(node).secret().run();
        assert_eq!(run.code, 0, "timer install on {}: {}", node.name, run.stderr);
    }
}

fn hold_at(bed: &TestBed, n: usize) {
    let rotation = format!("hostkeyctl-{}", Role::Rotation.key());
    bed.control(
        "POST",
        "/_bed/faults",
        &json!({"hold_at": {"actions": CALLS, "n": n, "principal": rotation}}),
    );
}

fn held(bed: &TestBed) -> Value {
    bed.control("GET", "/_bed/hold", &Value::Null)
}

/// AWSPENDING gone, the audit clean: every node serves AWSCURRENT.
fn assert_finished(bed: &TestBed, what: &str) {
    let s = stages(bed);
    assert!(s.get("AWSPENDING").is_none(), "{what}: AWSPENDING left: {s}");
    let audit = bed.cli("audit").secret().targets().run();
    assert_eq!(audit.code, 0, "{what}: the audit is not clean:\n{}", audit.stderr);
}

/// The kind's commands from the `from`th on, each to its end (a pull
/// fleet's timers before each after the first), then its timers.
fn finish_from(bed: &TestBed, kind: &Kind, from: usize, what: &str) {
    for (i, extra) in kind.commands.iter().enumerate().skip(from) {
        if kind.pull && i > 0 {
            timers(bed);
        }
        let (code, stderr) = run(bed, extra);
        assert_eq!(code, 0, "{what}: rotate {extra:?}: {stderr}");
    }
    if kind.pull {
        timers(bed);
    }
}

/// One kill point: the kind's commands until the held call, the kill,
/// the release, the same command with `--resume`, and the rest.
fn kill_at(bed: &TestBed, kind: &Kind, n: usize, effect: bool) {
    let what = format!("{}: killed at call {n} (effect {effect})", kind.name);
    let before = stages(bed)["AWSCURRENT"].clone();
    hold_at(bed, n);
    let mut killed_in = None;
    for (i, extra) in kind.commands.iter().enumerate() {
        if kind.pull && i > 0 {
            timers(bed);
        }
        let mut child = spawn(bed, extra);
        let mut status = None;
        wait_until(
            &format!("{what}: the hold or the run's end"),
            Duration::from_secs(120),
            || {
                status = child.try_wait().unwrap();
                status.is_some() || !held(bed)["held"].is_null()
            },
        );
        if status.is_none() {
            child.kill().unwrap();
            child.wait().unwrap();
            bed.control("POST", "/_bed/hold/release", &json!({ "effect": effect }));
            killed_in = Some(i);
            break;
        }
        assert_eq!(status.and_then(|s| s.code()), Some(0), "{what}: rotate {extra:?}");
    }
    let i = killed_in.unwrap_or_else(|| panic!("{what}: the run never made call {n}"));
    bed.control("POST", "/_bed/faults/reset", &json!({}));
    // --finish resumes by itself (clap refuses it with --resume).
    let mut resume: Vec<&str> = kind.commands[i].to_vec();
    if !resume.contains(&"--finish") {
        resume.push("--resume");
    }
    let (code, stderr) = run(bed, &resume);
    assert_eq!(code, 0, "{what}: rotate {resume:?}: {stderr}");
    finish_from(bed, kind, i + 1, &what);
    assert_finished(bed, &what);
    if stages(bed)["AWSCURRENT"] == before {
        // Nothing was promoted: the kill came before anything took hold.
        // The rotation runs again, whole, and promotes.
        finish_from(bed, kind, 0, &what);
        assert_finished(bed, &what);
        assert_ne!(stages(bed)["AWSCURRENT"], before, "{what}: the rotation never promoted");
    }
}

#[test]
fn a_rotation_killed_anywhere_is_finished_by_resume() {
    let (bed, _) = TestBed::converged(BedOptions::nodes(2));
    for kind in &KINDS {
        // An uninterrupted run counts the calls the kill points spread over.
        hold_at(&bed, usize::MAX);
        finish_from(&bed, kind, 0, kind.name);
        assert_finished(&bed, kind.name);
        let calls = usize::try_from(held(&bed)["seen"].as_u64().unwrap()).unwrap();
        assert!(calls > POINTS, "{}: {calls} calls", kind.name);
        for k in 0..POINTS {
            let n = 1 + k * (calls - 1) / (POINTS - 1);
            kill_at(&bed, kind, n, k % 2 == 1);
        }
    }
}
