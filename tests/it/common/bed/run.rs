//! Running `hostkeyctl` on the bed: as a role, on a node, and the typed
//! command builder ([`Cli`]).

use std::time::Duration;

use serde_json::Value;

use super::{BedOptions, Node, Role, TARGETS, TestBed};

/// What a `hostkeyctl` run gave: exit code, stdout, stderr.
pub struct Run {
    /// Exit code.
    pub code: i32,
    /// stdout.
    pub stdout: String,
    /// stderr.
    pub stderr: String,
}

impl From<std::process::Output> for Run {
    fn from(out: std::process::Output) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Asserts the exit code, failing with both output streams; returns the
    /// run for what comes next (`run.code(2).stderr`).
    #[track_caller]
    pub fn code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.code, expected,
            "exit {} where {expected} was expected\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    /// Asserts exit 0 ([`Run::code`]).
    #[track_caller]
    pub fn ok(&self) -> &Self {
        self.code(0)
    }

    /// stdout as JSON (the last line that is a JSON document, or all of it).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .or_else(|_| {
                let line = self.stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or("null");
                serde_json::from_str(line)
            })
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr))
    }
}

impl TestBed {
    /// Runs hostkeyctl with `args` against the bed's AWS, as the role
    /// docs/iam.md names for the command ([`Role::for_command`]).
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    /// Runs hostkeyctl with `args` and extra environment, as the role of
    /// the command.
    pub fn run_env(&self, args: &[&str], env: &[(String, String)]) -> Run {
        self.run_as_env(Role::for_command(args), args, env)
    }

    /// Runs hostkeyctl with `args`, signing as `role`.
    pub fn run_as(&self, role: Role, args: &[&str]) -> Run {
        self.run_as_env(role, args, &[])
    }

    /// Runs hostkeyctl with `args` and extra environment, signing as `role`.
    pub fn run_as_env(&self, role: Role, args: &[&str], env: &[(String, String)]) -> Run {
        let out = self
            .hostkeyctl_as(role)
            .args(args)
            .envs(env.iter().cloned())
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        Run::from(out)
    }

    /// Runs `hostkeyctl install` on a node as the SSM agent would (the
    /// node's environment), with extra arguments.
    pub fn install_on(&self, node: &Node, args: &[&str]) -> Run {
        let mut all = vec!["install"];
        all.extend(args);
        self.node_run(node, &all, &[])
    }

    /// Runs the node build on a node, as its root would (the node role,
    /// the node's environment, then `env`).
    pub fn node_run(&self, node: &Node, args: &[&str], env: &[(String, String)]) -> Run {
        let out = assert_cmd::Command::new(crate::common::support::node_binary())
            .env_remove("HOSTKEYCTL_OUTPUT")
            .env_remove("AWS_PROFILE")
            .envs(self.aws_env(Role::Node))
            .envs(node.env.iter())
            .envs(env.iter().cloned())
            .args(args)
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        Run::from(out)
    }

    /// What [`TestBed::node_run`] runs, as one `sh` command line: for a
    /// step the bed's emulator runs on the node (a HyperPod lifecycle
    /// script run again by a patch).
    pub fn node_script(&self, node: &Node, args: &[&str], env: &[(String, String)]) -> String {
        let quote = |word: &str| shlex::try_quote(word).unwrap().into_owned();
        let mut words = vec!["exec env -u HOSTKEYCTL_OUTPUT -u AWS_PROFILE".to_owned()];
        let owned = self.aws_env(Role::Node).into_iter().map(|(k, v)| (k.to_owned(), v));
        let all = owned
            .chain(node.env.iter().map(|(k, v)| (k.clone(), v.clone())))
            .chain(env.iter().cloned());
        words.extend(all.map(|(k, v)| quote(&format!("{k}={v}"))));
        words.push(quote(&crate::common::support::node_binary().display().to_string()));
        words.extend(args.iter().map(|a| quote(a)));
        words.join(" ")
    }

    /// Creates secret `name` adopting `node`'s current host keys.
    pub fn init_from_node(&self, name: &str, node: &Node) -> Value {
        let run = self
            .cli("init")
            .json()
            .secret_id(name)
            .args(&["--from-dir", node.ssh_dir.to_str().unwrap()])
            .run();
        run.ok();
        run.json()
    }

    /// A bed whose nodes all serve `hostkeys/hk`, the set adopted from its
    /// first node and pushed to every node (`TARGETS`). Returns `init`'s
    /// report too.
    pub fn converged(options: BedOptions) -> (TestBed, Value) {
        let bed = TestBed::start(options);
        let init = bed.init_from_node(SECRET, &bed.state.nodes[0]);
        let mut push = vec!["push", "--secret-id", SECRET, "--max-concurrency", "100%"];
        push.extend(TARGETS);
        bed.run(&push).ok();
        (bed, init)
    }

    /// Creates secret `name` with a freshly generated set.
    pub fn init_generated(&self, name: &str) -> Value {
        let run = self.cli("init").json().secret_id(name).run();
        run.ok();
        run.json()
    }
}

/// The secret most bed tests use.
pub use crate::common::SECRET;

/// A `hostkeyctl` command line for the bed, built by what it says rather
/// than by hand-written argument lists: the command, the role it signs as
/// (by default the one docs/iam.md names for the command), the secret, the
/// targets, JSON output, and whatever else the test adds.
///
/// ```ignore
/// bed.cli("rotate").secret().targets().json().args(&["--abort"]).run().ok();
/// ```
#[must_use]
pub struct Cli<'a> {
    bed: &'a TestBed,
    /// Run on this node, as its SSM agent would ([`TestBed::install_on`]).
    node: Option<&'a Node>,
    role: Option<Role>,
    args: Vec<String>,
}

impl TestBed {
    /// `hostkeyctl COMMAND...` (`command` split on spaces: `"ca init"`).
    pub fn cli(&self, command: &str) -> Cli<'_> {
        Cli {
            bed: self,
            node: None,
            role: None,
            args: command.split_whitespace().map(str::to_owned).collect(),
        }
    }
}

impl<'a> Cli<'a> {
    /// Runs on `node` with the node's binary and environment, as the SSM
    /// agent would (`install`).
    pub fn on(mut self, node: &'a Node) -> Self {
        self.node = Some(node);
        self
    }

    /// Signs as `role` instead of the command's own.
    pub fn role(mut self, role: Role) -> Self {
        self.role = Some(role);
        self
    }

    /// `--secret-id hostkeys/hk` ([`SECRET`]).
    pub fn secret(self) -> Self {
        self.secret_id(SECRET)
    }

    /// `--secret-id ID`.
    pub fn secret_id(self, id: &str) -> Self {
        self.args(&["--secret-id", id])
    }

    /// The bed's login nodes ([`TARGETS`]).
    pub fn targets(self) -> Self {
        self.args(&TARGETS)
    }

    /// `--output json`.
    pub fn json(self) -> Self {
        self.args(&["--output", "json"])
    }

    /// More arguments, as they are.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Runs it and returns what it gave.
    pub fn run(self) -> Run {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        if let Some(node) = self.node {
            assert_eq!(args.first(), Some(&"install"), "only install runs on a node");
            assert!(self.role.is_none(), "a node runs with its own role");
            return self.bed.install_on(node, &args[1..]);
        }
        let role = self.role.unwrap_or_else(|| Role::for_command(&args));
        self.bed.run_as(role, &args)
    }
}
