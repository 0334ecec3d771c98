//! Enrolment on an EC2 Auto Scaling group: the signer, configured with
//! `HOSTKEYCTL_ENROL_CLUSTER_KIND=autoscaling`, knows a node by EC2's
//! `DescribeInstances` and the `aws:autoscaling:groupName` tag, which Auto
//! Scaling puts on the group's instances and nobody else can write
//! (docs/cluster-trust.md, "EC2 fleets"). One node enrols as the cloud-init
//! example's `runcmd` runs it (its settings file gives the Region), the
//! other with enroll's flags.

use std::path::Path;

use crate::bed::enrolment::{enroll_with, with_signer};
use crate::bed::enrolment_pcluster::imds;
use crate::common::bed::{BedOptions, Node, Role, Run, TestBed};

const GROUP: &str = "fleet";

/// The cloud-init example, as contrib/ ships it.
fn example() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/cloud-init/hostkeyctl-enroll.yaml"))
        .unwrap()
}

/// The example's `runcmd` line that enrols (its `sh -c` script), and its
/// `/etc/default/hostkeyctl-enroll` with the bed's signer and patterns.
fn enrolment_step(arn: &str, region: &str) -> (String, String) {
    let text = example();
    let script = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- [sh, -c, '"))
        .find(|l| l.contains(" enroll "))
        .and_then(|l| l.strip_suffix("']"))
        .expect("the example enrols in a `sh -c` runcmd line")
        .to_owned();
    let block = text
        .split("- path: /etc/default/hostkeyctl-enroll")
        .nth(1)
        .unwrap()
        .split("- path:")
        .next()
        .unwrap();
    let mut defaults = String::new();
    for line in block
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("HOSTKEYCTL_") || l.starts_with("AWS_"))
    {
        let (name, _) = line.split_once('=').unwrap();
        let value = match name {
            "HOSTKEYCTL_ENROL_FUNCTION" => arn.to_owned(),
            "HOSTKEYCTL_ENROL_TRUST" => "*.ec2.internal,ip-127-*,127.*".to_owned(),
            "AWS_REGION" => region.to_owned(),
            other => panic!("the example sets {other}, which this test does not know"),
        };
        defaults.push_str(&format!("{name}={value}\n"));
    }
    (script, defaults)
}

/// The example's enrolment step on `node`: its script, with only the
/// binary's and the defaults file's paths made the bed's, run as the
/// node's root with the cluster-node role and the node's IMDS.
fn cloud_init_enrol(bed: &TestBed, node: &Node, arn: &str) -> Run {
    let (script, defaults) = enrolment_step(arn, &bed.state.region);
    let file = bed.dir().join(format!("hostkeyctl-enroll.{}", node.name));
    std::fs::write(&file, defaults).unwrap();
    let binary = crate::common::support::node_binary();
    let script = script
        .replace("/etc/default/hostkeyctl-enroll", &file.display().to_string())
        .replace("/usr/local/bin/hostkeyctl", &binary.display().to_string());
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env_remove("HOSTKEYCTL_OUTPUT")
        .env_remove("AWS_PROFILE")
        .envs(bed.aws_env(Role::ClusterNode))
        .envs(node.env.iter())
        // The example's settings file must give the Region.
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds(bed, &node.instance_id))
        .env("HOSTKEYCTL_CLIENT_DIR", &node.ssh_dir)
        .output()
        .unwrap();
    Run::from(out)
}

#[test]
fn an_auto_scaling_groups_instances_enrol_and_no_tag_makes_another_instance_a_member() {
    let bed = TestBed::start(BedOptions::nodes(2));
    let (runtime, arn) = with_signer(&bed, "ecdsa", "autoscaling", GROUP);
    let config = runtime.block_on(bed.sdk_config(1));
    crate::bed::admission_asg::create_group(&bed, GROUP, &bed.state.nodes[0].instance_id);
    for node in &bed.state.nodes {
        let joined = bed.control(
            "POST",
            "/_bed/autoscaling/launch",
            &serde_json::json!({"group": GROUP, "instance_id": node.instance_id}),
        );
        assert_eq!(joined["state"], "InService", "{joined}");
    }
    let (first, second) = (&bed.state.nodes[0], &bed.state.nodes[1]);
    let run = cloud_init_enrol(&bed, first, &arn);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    let run = enroll_with(&bed, second, &arn, &imds(&bed, &second.instance_id));
    assert_eq!(run.code, 0, "{}", run.stderr);
    crate::bed::enrolment_cluster::every_pair_logs_in(&bed, "the group enrolled");

    // An instance outside the group, with a node's keys: refused, nothing
    // signed; and EC2 refuses to give it the group's tag.
    let other = bed
        .state
        .noise
        .iter()
        .find(|n| n.state == "running")
        .unwrap()
        .instance_id
        .clone();
    let signed = bed.count("kms:Sign");
    let refused = || {
        let run = enroll_with(&bed, first, &arn, &imds(&bed, &other));
        assert_eq!(run.code, 4, "{}", run.stderr);
        assert!(run.stderr.contains("is no node of this cluster"), "{}", run.stderr);
        // The refusal says how membership is decided, and what to check.
        assert!(
            run.stderr.contains("tag aws:autoscaling:groupName=fleet")
                && run.stderr.contains("HOSTKEYCTL_ENROL_CLUSTER_KIND"),
            "{}",
            run.stderr
        );
    };
    refused();
    let tagged = runtime.block_on(async {
        aws_sdk_ec2::Client::new(&config)
            .create_tags()
            .resources(&other)
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key("aws:autoscaling:groupName")
                    .value(GROUP)
                    .build(),
            )
            .send()
            .await
    });
    let said = format!("{:?}", tagged.unwrap_err());
    assert!(
        said.contains("InvalidParameterValue") && said.contains("reserved"),
        "{said}"
    );
    refused();
    assert_eq!(bed.count("kms:Sign"), signed, "a forgery was signed");
    let usage = bed.iam_usage();
    assert!(usage["denied"].get("hostkeyctl-enrolment").is_none(), "{usage}");
}
