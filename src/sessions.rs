//! `hostkeyctl sessions`: the commands that run the HyperPod lifecycle
//! step on the running nodes of an instance group.
//!
//! The lifecycle step runs when HyperPod creates a node; the nodes that
//! already run never see it. SSM Run Command does not reach HyperPod
//! nodes, and State Manager cannot target them. What AWS documents for
//! them is a Session Manager session to the target
//! `sagemaker-cluster:CLUSTER-ID_GROUP-INSTANCE-ID` (SageMaker Developer
//! Guide, "Access your SageMaker HyperPod cluster nodes"). A session runs
//! one command with `AWS-StartNonInteractiveCommand`, the managed session
//! document whose one parameter is `command` (Session Manager's
//! documentation, "Session document schema"). That HyperPod accepts this
//! document is not documented: docs/quickstart/hyperpod.md says so, and
//! gives the interactive session as the fallback, with the same command.
//!
//! hostkeyctl cannot open sessions itself (they need the Session Manager
//! plugin's WebSocket client), so it prints one `aws ssm start-session`
//! per running node, ready to run. Each downloads the step's folder from
//! the lifecycle scripts bucket (the node role reads it: HyperPod requires
//! that) and runs it with the node type given, as base-config would.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::discovery::{DiscoveryError, Fleet, TargetSpec};
use crate::ids::Region;

/// The session document that runs one command.
pub const DOCUMENT: &str = "AWS-StartNonInteractiveCommand";

/// The S3 folder holding the lifecycle step (`install_hostkeyctl.sh`, its
/// `hostkeyctl.env`, the units and the binaries): `s3://BUCKET/PREFIX`.
/// Letters, digits and `-_./` only, so it stands in a command line as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepUri(String);

impl FromStr for StepUri {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let trimmed = s.trim_end_matches('/');
        let Some(rest) = trimmed.strip_prefix("s3://") else {
            return Err(format!(
                "{s:?} is not an S3 folder: give the lifecycle step's folder as s3://BUCKET/PREFIX (where install_hostkeyctl.sh is)"
            ));
        };
        let (bucket, _) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{s:?} names no bucket: give s3://BUCKET/PREFIX"));
        }
        if let Some(c) = rest
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
        {
            return Err(format!(
                "{s:?} holds {c:?}: the step's folder may hold letters, digits and -_./ only (it goes into the node's command line); copy the step to such a prefix"
            ));
        }
        Ok(StepUri(format!("s3://{rest}")))
    }
}

impl fmt::Display for StepUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The node type the step is told (lifecycle_script.py's `node_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeType {
    /// A login node: the step installs the keys.
    Login,
    /// The controller: the step does nothing.
    Controller,
    /// A compute node: the step does nothing.
    Compute,
}

impl NodeType {
    fn as_str(self) -> &'static str {
        match self {
            NodeType::Login => "login",
            NodeType::Controller => "controller",
            NodeType::Compute => "compute",
        }
    }
}

/// One node: its session, or why it has none.
#[derive(Clone, Debug, Serialize)]
pub struct Session {
    /// The node's host name (or group/instance id).
    pub node: String,
    /// Its instance id.
    pub instance_id: String,
    /// Its status in the cluster.
    pub status: String,
    /// The session's target.
    pub target: String,
    /// The command to run, when the node is `Running`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Why there is no command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The sessions for one instance group.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The cluster's name or ARN, as given.
    pub cluster: String,
    /// The instance group.
    pub group: String,
    /// The cluster's id (the last part of its ARN).
    pub cluster_id: String,
    /// One entry per node of the group.
    pub sessions: Vec<Session>,
}

impl Report {
    /// The nodes that got a command.
    pub fn runnable(&self) -> usize {
        self.sessions.iter().filter(|s| s.command.is_some()).count()
    }

    /// Exit 3 when a node got no command (not Running, or no instance):
    /// the run did not do all it was asked.
    pub fn status(&self) -> crate::exit::Status {
        if self.runnable() < self.sessions.len() {
            crate::exit::Status::Incomplete
        } else {
            crate::exit::Status::Success
        }
    }

    /// A shell script: one command per running node, a comment for the rest.
    pub fn script(&self) -> String {
        let mut out = format!(
            "# the lifecycle step on the running nodes of {}/{}: one session per node\n",
            self.cluster, self.group
        );
        for s in &self.sessions {
            match &s.command {
                Some(command) => out.push_str(&format!("# {} ({})\n{command}\n", s.node, s.instance_id)),
                None => out.push_str(&format!(
                    "# {} ({}): skipped: {}\n",
                    s.node,
                    s.instance_id,
                    s.skipped.as_deref().unwrap_or("")
                )),
            }
        }
        out
    }
}

/// The cluster and instance group of `specs`: exactly one
/// `hyperpod:CLUSTER/GROUP`. Checked before any AWS call.
pub fn group_of(specs: &[TargetSpec]) -> Result<(String, String), DiscoveryError> {
    match specs {
        [
            TargetSpec::HyperPod {
                cluster,
                group: Some(group),
            },
        ] => Ok((cluster.clone(), group.clone())),
        [TargetSpec::HyperPod { cluster, group: None }] => Err(DiscoveryError::Malformed(format!(
            "hyperpod:{cluster} names the whole cluster: name the login group, --target hyperpod:{cluster}/GROUP (the group's name is in `aws sagemaker describe-cluster --cluster-name {cluster}`)"
        ))),
        [] => Err(DiscoveryError::NoTargets),
        [one] => Err(DiscoveryError::Malformed(format!(
            "{one} is not a HyperPod instance group: sessions are for HyperPod nodes, which SSM Run Command cannot reach; EC2 instances take `push --target {one}`"
        ))),
        _ => Err(DiscoveryError::Malformed(
            "give one --target hyperpod:CLUSTER/GROUP: one instance group per run".to_owned(),
        )),
    }
}

/// The line each node's command prints last: its host name and the step's
/// exit code. A session's exit status is not the command's (the Session
/// Manager plugin exits 0), so this line is how the admin reads it.
pub const MARKER: &str = "hostkeyctl-step";

/// The command a node runs: the step's folder from S3 into a directory of
/// root's own (`mktemp -d`: a fixed path under /var/tmp could be planted
/// by any user of the node), then the step, told the node type or (by
/// default) finding it in the node's configs as at creation. Each `$` is
/// escaped, so the session user's shell expands nothing: root's shell does.
fn node_command(step: &StepUri, node_type: Option<NodeType>) -> String {
    format!(
        "sudo sh -c \"d=\\$(mktemp -d) && aws s3 cp --recursive --only-show-errors {step} \\$d/hostkeyctl && bash \\$d/hostkeyctl/install_hostkeyctl.sh{}; rc=\\$?; echo {MARKER} \\$(hostname): exit \\$rc; rm -rf \\$d; exit \\$rc\"",
        node_type.map(|t| format!(" {}", t.as_str())).unwrap_or_default()
    )
}

/// How the printed `aws` lines reach AWS: the region, and the caller's
/// named profile when it gave one.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The region.
    pub region: Region,
    /// `--profile` of this run, if any.
    pub profile: Option<String>,
}

/// The `aws ssm start-session` line for `target`.
fn session_line(caller: &Caller, target: &str, step: &StepUri, node_type: Option<NodeType>) -> String {
    let parameters = serde_json::json!({ "command": [node_command(step, node_type)] }).to_string();
    // Every variable word through the one quoting function (none can hold
    // a NUL byte: they are JSON, parsed ids and the profile's name).
    let quote = |word: &str| crate::shell::quote(word).unwrap_or_default();
    let profile = caller
        .profile
        .as_deref()
        .map(|p| format!(" --profile {}", quote(p)))
        .unwrap_or_default();
    format!(
        "aws ssm start-session{profile} --region {} --target {} --document-name {DOCUMENT} --parameters {}",
        quote(caller.region.as_str()),
        quote(target),
        quote(&parameters)
    )
}

/// Whether `id` can stand in a session target as it is: an instance id's
/// characters (it comes from the SageMaker API, and goes onto a command
/// line).
fn plain_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// The sessions for the nodes of `hyperpod:CLUSTER/GROUP`: a command per
/// `Running` node, the others listed with their status.
pub async fn plan(
    fleet: &impl Fleet,
    specs: &[TargetSpec],
    step: &StepUri,
    node_type: Option<NodeType>,
    caller: &Caller,
) -> Result<Report, DiscoveryError> {
    let (cluster, group) = group_of(specs)?;
    let cluster_id = fleet.hyperpod_cluster_id(&cluster).await?;
    let nodes = fleet.targets(specs).await?;
    let sessions = nodes
        .into_iter()
        .map(|node| {
            let instance_id = node.instance_id.clone().unwrap_or_default();
            let status = node.health.map_or_else(|| "unknown".to_owned(), |h| h.state);
            let target = format!("sagemaker-cluster:{cluster_id}_{group}-{instance_id}");
            let skipped = if !plain_id(&instance_id) {
                Some(format!(
                    "the instance id {} is not one: no command is made for it",
                    crate::escape::escape(&instance_id)
                ))
            } else if status != "Running" {
                Some(format!("status {}: a session needs a Running node; run this again once it is (a node HyperPod creates runs the step itself)", crate::escape::escape(&status)))
            } else {
                None
            };
            Session {
                command: skipped.is_none().then(|| session_line(caller, &target, step, node_type)),
                skipped,
                node: crate::escape::escape(&node.name),
                instance_id,
                status,
                target,
            }
        })
        .collect();
    Ok(Report {
        cluster,
        group,
        cluster_id,
        sessions,
    })
}

/// The cluster id in a HyperPod cluster ARN
/// (`arn:aws:sagemaker:REGION:ACCOUNT:cluster/ID`).
pub fn cluster_id_of_arn(arn: &str) -> Result<String, DiscoveryError> {
    match arn.rsplit_once(":cluster/") {
        Some((_, id)) if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()) => Ok(id.to_owned()),
        _ => Err(DiscoveryError::Malformed(format!(
            "{arn:?} is not a HyperPod cluster ARN (arn:aws:sagemaker:REGION:ACCOUNT:cluster/ID)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_folder_is_an_s3_folder_of_plain_characters() {
        assert_eq!(
            "s3://bucket/lifecycle/hostkeyctl/"
                .parse::<StepUri>()
                .unwrap()
                .to_string(),
            "s3://bucket/lifecycle/hostkeyctl"
        );
        for bad in [
            "bucket/x",
            "s3://",
            "s3:///x",
            "s3://b/x y",
            "s3://b/x'y",
            "s3://b/$(id)",
            "s3://b/a\"b",
        ] {
            assert!(bad.parse::<StepUri>().is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn only_one_instance_group_has_sessions() {
        let parse = |s: &str| s.parse::<TargetSpec>().unwrap();
        assert_eq!(
            group_of(&[parse("hyperpod:c/login-group")]).unwrap(),
            ("c".to_owned(), "login-group".to_owned())
        );
        let whole = group_of(&[parse("hyperpod:c")]).unwrap_err().to_string();
        assert!(whole.contains("hyperpod:c/GROUP"), "{whole}");
        let ec2 = group_of(&[parse("tag:Role=login")]).unwrap_err().to_string();
        assert!(ec2.contains("push --target tag:Role=login"), "{ec2}");
        assert!(group_of(&[parse("hyperpod:c/a"), parse("hyperpod:c/b")]).is_err());
        assert!(group_of(&[]).is_err());
    }

    #[test]
    fn a_session_line_survives_the_shell_and_the_json() {
        let caller = Caller {
            region: "eu-west-1".parse().unwrap(),
            profile: Some("prod admin".to_owned()),
        };
        let step: StepUri = "s3://b/p/hostkeyctl".parse().unwrap();
        let line = session_line(&caller, "sagemaker-cluster:abc_login-i-1", &step, None);
        let words = shlex::split(&line).unwrap();
        let parameters: serde_json::Value = serde_json::from_str(words.last().unwrap()).unwrap();
        let command = parameters["command"][0].as_str().unwrap();
        // What the session user's shell hands sudo: one script for root's sh.
        let sudo = shlex::split(command).unwrap();
        assert_eq!(sudo[..3], ["sudo", "sh", "-c"]);
        assert!(sudo[3].starts_with("d=$(mktemp -d) && aws s3 cp"), "{command}");
        assert!(
            sudo[3].contains("install_hostkeyctl.sh; rc=$?; echo hostkeyctl-step $(hostname): exit $rc"),
            "{command}"
        );
        assert!(words.windows(2).any(|w| w == ["--profile", "prod admin"]), "{line}");
        let told = node_command(&step, Some(NodeType::Login));
        assert!(told.contains("install_hostkeyctl.sh login;"), "{told}");
        assert!(plain_id("i-0123456789abcdef0") && !plain_id("i-1;reboot") && !plain_id(""));
        assert!(words.contains(&"sagemaker-cluster:abc_login-i-1".to_owned()), "{line}");
    }

    #[test]
    fn the_cluster_id_is_the_arns_last_part() {
        assert_eq!(
            cluster_id_of_arn("arn:aws:sagemaker:us-east-1:111122223333:cluster/ab12cd34ef56").unwrap(),
            "ab12cd34ef56"
        );
        assert!(cluster_id_of_arn("arn:aws:sagemaker:us-east-1:1:cluster/").is_err());
        assert!(cluster_id_of_arn("my-cluster").is_err());
    }
}
