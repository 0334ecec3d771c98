//! SSM Run Command in memory: each `hostkeyctl install` command line runs
//! in-process on its [`MemNode`], against a store, and SSM's answers (and
//! its documents, by content) are reported as SSM does.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use clap::Parser;

use super::fleet::{MemFleet, MemNode, lock};
use crate::aws::{AwsError, Call};
use crate::cli::{Cli, Command};
use crate::dispatch::{CommandSpec, Dispatcher, Invocation, MAX_IDS_PER_COMMAND, PollStats, Progress};
use crate::exit::ExitStatus as _;
use crate::hostport::HostPort;
use crate::store::SecretStore;

/// SSM Run Command in memory: runs each `hostkeyctl install` command line
/// in-process on its node, against `store`, at once (rate controls are
/// not modelled), and reports invocations as SSM does.
pub struct MemDispatcher<'a, S> {
    fleet: &'a MemFleet,
    store: &'a S,
    done: Mutex<BTreeMap<String, Invocation>>,
    /// Command lines sent, in order.
    pub sent: Mutex<Vec<String>>,
    /// The documents SSM holds: name -> versions' content (the last is the
    /// default). None at first, as in a fresh account.
    documents: Mutex<BTreeMap<String, Vec<String>>>,
    /// Faults (`ssm:SendCommand`, `ssm:ListCommandInvocations`,
    /// `ssm:CancelCommand`, `ssm:DescribeDocument`, `ssm:GetDocument`,
    /// `ssm:CreateDocument`, `ssm:UpdateDocument`).
    pub faults: super::faults::Faults,
}

impl<'a, S: SecretStore> MemDispatcher<'a, S> {
    /// A dispatcher over `fleet`, whose nodes read `store`.
    pub fn new(fleet: &'a MemFleet, store: &'a S) -> Self {
        MemDispatcher {
            fleet,
            store,
            done: Mutex::new(BTreeMap::new()),
            sent: Mutex::new(Vec::new()),
            documents: Mutex::new(BTreeMap::new()),
            faults: super::faults::Faults::new(),
        }
    }

    /// Adds `content` as the new default version of document `name`, as
    /// `ssm-document deploy` (or someone who may update documents) does.
    pub fn deploy(&self, name: &str, content: &str) {
        lock(&self.documents)
            .entry(name.to_owned())
            .or_default()
            .push(content.to_owned());
    }

    /// Runs one command line on one node as the SSM agent would:
    /// (exit code, stdout, stderr).
    async fn run_on(&self, node: &MemNode, line: &str) -> (i32, String, String) {
        if let Some(stderr) = lock(&node.faults).dispatch_fails.clone() {
            return (1, String::new(), stderr);
        }
        let args = match install_args(node, line) {
            Ok(args) => args,
            Err(e) => return (2, String::new(), e),
        };
        let outcome = match args.request() {
            Ok(request) => crate::install::run::execute(&request, Some(self.store), node, self.fleet).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(report) => {
                let line = serde_json::to_string(&report).unwrap_or_default();
                (i32::from(report.status().code()), format!("{line}\n"), String::new())
            }
            Err(e) => (
                i32::from(e.status().code()),
                String::new(),
                format!("error: {:#}", anyhow::Error::new(e)),
            ),
        }
    }
}

/// The arguments of `hostkeyctl install ...` (`line`) as they would be on
/// `node`, whose environment (HOSTKEYCTL_*, as on the bed) gives its
/// directories, lock, verify address and reload; or why the line is not
/// an install command.
pub fn install_args(node: &MemNode, line: &str) -> Result<crate::cli::InstallArgs, String> {
    let words = shlex::split(line).ok_or_else(|| "sh: syntax error".to_owned())?;
    let argv = std::iter::once("hostkeyctl".to_owned()).chain(words.into_iter().skip(1));
    let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
    let Command::Install(mut args) = cli.command else {
        return Err("not an install command".to_owned());
    };
    args.node.ssh_dir = node.ssh_dir.clone();
    args.node.sshd_config = Some(node.config.clone());
    args.state_dir = node.root.join("var/lib/hostkeyctl");
    args.lock_file = Some(node.root.join("run/hostkeyctl.lock"));
    args.verify_address = node
        .instance
        .private_ip
        .as_ref()
        .map(|ip| HostPort::new(ip.clone(), 22));
    args.node.reload_command = Some("reload".to_owned());
    args.verify_timeout = 0;
    args.lock_timeout = 1;
    Ok(args)
}

impl<S: SecretStore> Dispatcher for MemDispatcher<'_, S> {
    async fn send(&self, spec: &CommandSpec, instance_ids: &[String]) -> Result<Vec<(String, Vec<String>)>, AwsError> {
        let call = Call::new("ssm:SendCommand", format!("document {}", spec.document));
        self.faults.enter(call.action)?;
        lock(&self.sent).push(spec.command_line.clone());
        let mut sent = Vec::new();
        for batch in instance_ids.chunks(MAX_IDS_PER_COMMAND) {
            let command_id = uuid::Uuid::new_v4().to_string();
            for id in batch {
                let node = self.fleet.node(id).ok_or_else(|| {
                    crate::aws::classify_code("InvalidInstanceId", format!("instance {id} is not managed"), &call)
                })?;
                let (code, stdout, stderr) = self.run_on(node, &spec.command_line).await;
                lock(&self.done).insert(
                    id.clone(),
                    Invocation {
                        instance_id: id.clone(),
                        command_id: command_id.clone(),
                        status: if code == 0 { "Success" } else { "Failed" }.to_owned(),
                        response_code: Some(code),
                        stdout,
                        stderr,
                    },
                );
            }
            sent.push((command_id, batch.to_vec()));
        }
        Ok(sent)
    }

    async fn wait(
        &self,
        commands: &[(String, Vec<String>)],
        _deadline: Instant,
        progress: Progress<'_>,
    ) -> Result<(BTreeMap<String, Invocation>, PollStats), AwsError> {
        self.faults.enter("ssm:ListCommandInvocations")?;
        let done = lock(&self.done).clone();
        let out: BTreeMap<String, Invocation> = commands
            .iter()
            .flat_map(|(_, ids)| ids.iter())
            .filter_map(|id| done.get(id).map(|inv| (id.clone(), inv.clone())))
            .collect();
        progress(out.len(), out.len());
        let stats = PollStats {
            rounds: 1,
            list_calls: commands.len(),
            max_calls_per_round: commands.len(),
        };
        Ok((out, stats))
    }

    async fn cancel(&self, _command_id: &str) -> Result<(), AwsError> {
        self.faults.enter("ssm:CancelCommand")?;
        Ok(())
    }

    async fn document(&self, name: &str) -> Result<Option<crate::dispatch::Deployed>, AwsError> {
        self.faults.enter("ssm:DescribeDocument")?;
        Ok(lock(&self.documents).get(name).and_then(|versions| {
            versions.last().map(|content| crate::dispatch::Deployed {
                version: versions.len().to_string(),
                hash: crate::ssm_document::sha256_hex(content),
                hash_type: "Sha256".to_owned(),
                latest: Some(versions.len().to_string()),
            })
        }))
    }

    async fn document_content(&self, name: &str, version: &str) -> Result<Option<String>, AwsError> {
        self.faults.enter("ssm:GetDocument")?;
        let at: usize = version.parse().unwrap_or(0);
        Ok(lock(&self.documents)
            .get(name)
            .and_then(|versions| at.checked_sub(1).and_then(|i| versions.get(i)).cloned()))
    }
}

/// `ssm-document deploy` in memory: new content becomes a new default
/// version (`created` for a new document, else `updated`); the default's
/// own content changes nothing (`unchanged`). SSM's `restored` (an older
/// version's content made default again) is not modelled: it adds one.
impl<S: SecretStore> crate::ssm_document::publish::Documents for MemDispatcher<'_, S> {
    async fn deploy(
        &self,
        name: &str,
        kind: crate::ssm_document::Kind,
        node_command: &crate::ids::Program,
    ) -> Result<(String, &'static str), AwsError> {
        self.deploy_text(name, &crate::ssm_document::content(kind, node_command))
            .await
    }

    async fn deploy_text(&self, name: &str, text: &str) -> Result<(String, &'static str), AwsError> {
        // CreateDocument makes a new one; UpdateDocument adds a version.
        let exists = lock(&self.documents).contains_key(name);
        self.faults.enter(if exists {
            "ssm:UpdateDocument"
        } else {
            "ssm:CreateDocument"
        })?;
        let mut documents = lock(&self.documents);
        let versions = documents.entry(name.to_owned()).or_default();
        let done = match versions.last() {
            Some(last) if last == text => "unchanged",
            Some(_) => "updated",
            None => "created",
        };
        if done != "unchanged" {
            versions.push(text.to_owned());
        }
        Ok((versions.len().to_string(), done))
    }
}
