//! The checks of the nodes themselves: a HyperPod group's nodes, each
//! target's SSM registration, and on each registered node, through the
//! read-only check document, hostkeyctl's release and the set it serves.

use std::time::Duration;

use super::{Doctor, DoctorRequest, Finding, Level, subject_of};
use crate::discovery::{Fleet, Instance};
use crate::dispatch::ManagedInstances;
use crate::dispatch::{CommandSpec, Dispatcher, Invocation};
use crate::escape::escape;
use crate::imds_guard::Access;
use crate::install::InstallReport;
use crate::ssm_document::check_parameters;
use crate::store::SecretStore;

impl<S, F, D, M, B, L> Doctor<'_, S, F, D, M, B, L>
where
    S: SecretStore,
    F: Fleet,
    D: Dispatcher,
    M: ManagedInstances,
    B: crate::admission::Balancers,
    L: crate::rotation::scheduled::function::FunctionConfig,
{
    /// A HyperPod instance group: SSM Run Command does not reach its
    /// nodes, which get hostkeyctl and the keys from the lifecycle step
    /// (and `sessions`): its nodes found, in the secret's cluster.
    pub(super) async fn hyperpod(&self, req: &DoctorRequest<'_>, out: &mut Vec<Finding>) {
        let shown: Vec<String> = req.targets.iter().map(ToString::to_string).collect();
        let subject = shown.join(" and ");
        out.push(Finding::ok(
            "document",
            "SSM documents",
            "not used: HyperPod nodes get hostkeyctl and the keys from the lifecycle step, not SSM Run Command",
        ));
        let found = match self.fleet.targets(req.targets).await {
            Ok(found) => found,
            Err(e) => {
                out.push(Finding::failed(
                    "targets",
                    subject,
                    &e,
                    "check the cluster and instance group names, and the admin policy's sagemaker:ListClusterNodes",
                ));
                return;
            }
        };
        if found.is_empty() {
            out.push(Finding::bad(
                "targets",
                Level::Fail,
                subject,
                "the instance group has no node",
                "`aws sagemaker list-cluster-nodes --cluster-name CLUSTER` lists them",
            ));
            return;
        }
        let tags = self.secret_tags(req.secret).await;
        match crate::discovery::scope::check_targets(&tags, req.targets, &found, req.allow_other_clusters) {
            Ok(()) => out.push(Finding::ok(
                "targets",
                subject,
                format!(
                    "{} node(s); what they serve: `hostkeyctl audit`, which checks by handshake",
                    found.len()
                ),
            )),
            Err(e) => out.push(Finding::failed(
                "targets",
                subject,
                &e,
                "name the secret's cluster in --target",
            )),
        }
        // The load balancer in front of the group: HyperPod's nodes are
        // matched to its targets by instance id or by address.
        if let Some(spec) = super::balancer::group_of(req.target_group, req.targets) {
            let nodes: Vec<Instance> = found
                .iter()
                .map(|t| Instance {
                    instance_id: t.instance_id.clone().unwrap_or_else(|| t.name.clone()),
                    private_ip: t.address.clone(),
                    name: Some(t.name.clone()),
                    clusters: t.clusters.clone(),
                })
                .collect();
            self.balancer(&spec, req.port, &nodes, out).await;
        }
        for target in &found {
            let state = target.health.as_ref().map(|h| h.state.as_str()).unwrap_or("unknown");
            if state != "Running" {
                out.push(Finding::bad(
                    "node",
                    Level::Warn,
                    escape(&target.name),
                    format!("HyperPod reports it {}", escape(state)),
                    "a node not Running gets the step when HyperPod (re)creates it; run `hostkeyctl sessions` for it once it runs",
                ));
            }
        }
    }

    /// Each target's SSM registration; the ones online.
    pub(super) async fn registered(&self, instances: &[Instance], out: &mut Vec<Finding>) -> Vec<Instance> {
        if instances.is_empty() {
            return Vec::new();
        }
        let ids: Vec<String> = instances.iter().map(|i| i.instance_id.clone()).collect();
        let registrations = match self.managed.registrations(&ids).await {
            Ok(r) => r,
            Err(e) => {
                out.push(Finding::failed(
                    "ssm",
                    "every node",
                    &e,
                    "the admin policy (iam/admin.json) allows ssm:DescribeInstanceInformation",
                ));
                return Vec::new();
            }
        };
        let mut online = Vec::new();
        for instance in instances {
            let subject = subject_of(instance);
            match registrations.get(&instance.instance_id) {
                Some(r) if r.ping_status == "Online" => {
                    out.push(Finding::ok(
                        "ssm",
                        subject,
                        format!(
                            "managed, Online (SSM Agent {})",
                            escape(r.agent_version.as_deref().unwrap_or("?"))
                        ),
                    ));
                    online.push(instance.clone());
                }
                Some(r) => out.push(Finding::bad(
                    "ssm",
                    Level::Fail,
                    subject,
                    format!("SSM sees it {}: commands do not reach it", escape(&r.ping_status)),
                    "is the SSM Agent running, and does the node reach ssm, ssmmessages and ec2messages (a NAT gateway or VPC endpoints)?",
                )),
                None => out.push(Finding::bad(
                    "ssm",
                    Level::Fail,
                    subject,
                    "not managed by SSM: push, deliver and associations never reach it",
                    "give its instance role AmazonSSMManagedInstanceCore and start the SSM Agent; or install from its lifecycle step or cloud-init (docs/bootstrap.md)",
                )),
            }
        }
        online
    }

    /// On each node, through the check document: hostkeyctl's release and
    /// whether it serves the set.
    pub(super) async fn nodes(
        &self,
        document: &crate::ssm_document::SentDocument,
        fps: &[String],
        online: &[Instance],
        out: &mut Vec<Finding>,
    ) {
        let parsed: Vec<crate::fingerprint::Fingerprint> = fps.iter().filter_map(|f| f.parse().ok()).collect();
        let refs: Vec<&crate::fingerprint::Fingerprint> = parsed.iter().collect();
        let spec = CommandSpec {
            document: document.name.clone(),
            document_version: document.version.clone(),
            parameters: Some(check_parameters(&refs)),
            command_line: format!("{} (the read-only check)", document.name),
            comment: "hostkeyctl doctor".to_owned(),
            max_concurrency: "25%".to_owned(),
            max_errors: "100%".to_owned(),
            execution_timeout: Duration::from_secs(120),
        };
        let ids: Vec<String> = online.iter().map(|i| i.instance_id.clone()).collect();
        let sent = match self.dispatcher.send(&spec, &ids).await {
            Ok(sent) => sent,
            Err(e) => {
                out.push(Finding::failed(
                    "node",
                    "every node",
                    &e,
                    "the admin policy sends hostkeyctl-Check (iam/admin.json, or the auditor's)",
                ));
                return;
            }
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        let states = match self.dispatcher.wait(&sent, deadline, &|_, _| {}).await {
            Ok((states, _)) => states,
            Err(e) => {
                out.push(Finding::failed("node", "every node", &e, "run doctor again"));
                return;
            }
        };
        for (command_id, ids) in &sent {
            if ids.iter().any(|id| states.get(id).is_none_or(|s| !s.is_final())) {
                // What did not finish is not left running.
                let _ = self.dispatcher.cancel(command_id).await;
            }
        }
        for instance in online {
            let inv = states.get(&instance.instance_id);
            out.push(node_finding(instance, inv));
            out.extend(imds_finding(instance, inv));
        }
    }
}

/// What a node's check says of it.
fn node_finding(instance: &Instance, inv: Option<&Invocation>) -> Finding {
    let subject = subject_of(instance);
    let Some(inv) = inv else {
        return Finding::bad(
            "node",
            Level::Fail,
            subject,
            "SSM did not run the check on it",
            "run doctor again",
        );
    };
    let ours = env!("CARGO_PKG_VERSION");
    match InstallReport::from_output(&inv.stdout) {
        Ok(report) => {
            let serves = !report.checks.is_empty() && report.checks.iter().all(|c| c.ok);
            let release = report.hostkeyctl.as_deref().map(escape);
            let newer = "deploy the setup document from this release's builds and run `hostkeyctl deliver`";
            match (release.as_deref(), serves) {
                (_, false) => Finding::bad(
                    "node",
                    Level::Fail,
                    subject,
                    format!(
                        "hostkeyctl {}, but it does not serve the set on disk and to a handshake",
                        release.as_deref().unwrap_or("(an older release)")
                    ),
                    "`hostkeyctl push` (or its timer); `hostkeyctl audit` shows what it serves",
                ),
                (Some(v), true) if v == ours => Finding::ok("node", subject, format!("hostkeyctl {v}, serves the set")),
                (Some(v), true) => Finding::bad(
                    "node",
                    Level::Warn,
                    subject,
                    format!("serves the set, but runs hostkeyctl {v}; this hostkeyctl is {ours}"),
                    newer,
                ),
                (None, true) => Finding::bad(
                    "node",
                    Level::Warn,
                    subject,
                    format!("serves the set, but runs a hostkeyctl older than {ours}, which does not say its release"),
                    newer,
                ),
            }
        }
        Err(_) if inv.response_code == Some(127) => Finding::bad(
            "node",
            Level::Fail,
            subject,
            "hostkeyctl is not installed on it",
            "`hostkeyctl deliver` (docs/install.md, \"Running nodes\")",
        ),
        Err(e) => Finding::bad(
            "node",
            Level::Fail,
            subject,
            if inv.stderr.trim().is_empty() {
                format!("SSM status {}: {e}", escape(&inv.status))
            } else {
                escape(inv.stderr.trim().lines().last().unwrap_or_default())
            },
            "`aws ssm list-command-invocations --details` has the node's whole output",
        ),
    }
}

/// Who reaches the node's metadata service, as its check reported it
/// (nothing from a release before the report said).
fn imds_finding(instance: &Instance, inv: Option<&Invocation>) -> Option<Finding> {
    let access = InstallReport::from_output(&inv?.stdout).ok()?.imds?;
    let subject = subject_of(instance);
    let guard = "`hostkeyctl imds-guard` on it, and for every boot `hostkeyctl-imds-guard.service` from contrib/systemd, enabled (docs/security.md, \"Login users and the metadata service\")";
    Some(match access {
        Access::RootOnly => Finding::ok("imds", subject, "the metadata service answers root alone"),
        Access::Open => Finding::bad(
            "imds",
            Level::Warn,
            subject,
            "hostkeyctl's guard (HOSTKEYCTL-IMDS) is not in place: unless a rule of your own keeps the metadata service to root, any login user can read the key set with the node's role",
            format!("{guard}; leave it open only where login users need the role (HOSTKEYCTL_IMDS=open)"),
        ),
        Access::NoIptables => Finding::bad(
            "imds",
            Level::Warn,
            subject,
            "no iptables on the node: hostkeyctl's guard cannot keep the metadata service to root",
            format!("install iptables, then {guard}"),
        ),
        Access::Unknown => Finding::bad(
            "imds",
            Level::Warn,
            subject,
            "cannot tell who reaches the metadata service: the rules could not be read (the xtables lock held?)",
            "`hostkeyctl imds-guard --check` on the node says why",
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::{Level, imds_finding, node_finding};
    use crate::discovery::Instance;
    use crate::dispatch::Invocation;

    fn instance() -> Instance {
        Instance {
            instance_id: "i-0123456789abcdef0".to_owned(),
            private_ip: None,
            name: Some("login-1".to_owned()),
            clusters: Vec::new(),
        }
    }

    fn inv(code: i32, stdout: &str, stderr: &str) -> Invocation {
        Invocation {
            instance_id: "i-0123456789abcdef0".to_owned(),
            command_id: "c".to_owned(),
            status: if code == 0 { "Success" } else { "Failed" }.to_owned(),
            response_code: Some(code),
            stdout: stdout.to_owned(),
            stderr: stderr.to_owned(),
        }
    }

    #[test]
    fn a_node_is_judged_by_its_report_or_by_what_is_missing() {
        let ok_row = r#"{"key_type":"ssh-ed25519","expected":null,"on_disk":null,"served":{"Ok":"SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},"ok":true}"#;
        let report = |release: &str, ok: bool| {
            let row = ok_row.replace("\"ok\":true", &format!("\"ok\":{ok}"));
            format!(r#"{{"schema":"hostkeyctl-install/v1",{release}"result":"unchanged","checks":[{row}]}}"#)
        };
        let ours = format!("\"hostkeyctl\":\"{}\",", env!("CARGO_PKG_VERSION"));
        let f = node_finding(&instance(), Some(&inv(0, &report(&ours, true), "")));
        assert_eq!(f.level, Level::Ok, "{f:?}");
        let f = node_finding(
            &instance(),
            Some(&inv(0, &report("\"hostkeyctl\":\"0.0.9\",", true), "")),
        );
        assert_eq!((f.level, f.message.contains("0.0.9")), (Level::Warn, true), "{f:?}");
        let f = node_finding(&instance(), Some(&inv(0, &report("", true), "")));
        assert_eq!(f.level, Level::Warn, "{f:?}");
        let f = node_finding(&instance(), Some(&inv(1, &report(&ours, false), "")));
        assert_eq!(f.level, Level::Fail, "{f:?}");
        assert!(f.fix.unwrap().contains("hostkeyctl push"));
        let f = node_finding(
            &instance(),
            Some(&inv(127, "", "bash: line 3: exec: hostkeyctl: not found")),
        );
        assert_eq!(
            (f.level, f.message.as_str()),
            (Level::Fail, "hostkeyctl is not installed on it")
        );
        assert_eq!(node_finding(&instance(), None).level, Level::Fail);
    }

    #[test]
    fn a_node_whose_metadata_service_answers_every_user_is_a_warning() {
        let report = |imds: &str| format!(r#"{{"schema":"hostkeyctl-install/v1","result":"unchanged"{imds}}}"#);
        let level = |imds: &str| imds_finding(&instance(), Some(&inv(0, &report(imds), ""))).map(|f| f.level);
        assert_eq!(level(r#","imds":"root_only""#), Some(Level::Ok));
        assert_eq!(level(r#","imds":"open""#), Some(Level::Warn));
        assert_eq!(level(r#","imds":"unknown""#), Some(Level::Warn));
        assert_eq!(level(r#","imds":"no_iptables""#), Some(Level::Warn));
        // A later release's word is not known here: a warning, never a
        // report that cannot be read.
        assert_eq!(level(r#","imds":"nft_only""#), Some(Level::Warn));
        // A release before the field says nothing of it.
        assert_eq!(level(""), None);
        assert_eq!(imds_finding(&instance(), None), None);
    }
}
