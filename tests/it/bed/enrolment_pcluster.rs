//! Enrolment on ParallelCluster: the signer, configured with
//! `HOSTKEYCTL_ENROL_CLUSTER_KIND=parallelcluster`, knows a node by EC2's
//! `DescribeInstances` and the `parallelcluster:cluster-name` tag that
//! ParallelCluster 3 puts on every instance it launches. The bed's nodes
//! carry ParallelCluster's tags alone; an instance of another cluster is
//! refused with nothing signed (docs/cluster-trust.md).

use crate::bed::enrolment::{enroll_with, with_signer};
use crate::common::bed::{BedOptions, TestBed};

/// The EC2 instance's own IMDS endpoint.
pub(crate) fn imds(bed: &TestBed, instance_id: &str) -> String {
    let answer = bed.control(
        "POST",
        "/_bed/ec2/imds",
        &serde_json::json!({ "instance_id": instance_id }),
    );
    answer["endpoint"].as_str().unwrap().to_owned()
}

#[test]
fn parallelcluster_nodes_enrol_by_their_tag_and_another_clusters_instance_is_refused() {
    let bed = TestBed::start(BedOptions::nodes(3).parallelcluster_tags());
    let cluster = bed.state.hyperpod.as_ref().unwrap().cluster.clone();
    let (_runtime, arn) = with_signer(&bed, "ecdsa", "parallelcluster", &cluster);
    for node in &bed.state.nodes {
        let run = enroll_with(&bed, node, &arn, &imds(&bed, &node.instance_id));
        assert_eq!(run.code, 0, "{}: {}", node.name, run.stderr);
    }
    crate::bed::enrolment_cluster::every_pair_logs_in(&bed, "the cluster enrolled");

    // Another cluster's instance, with a node's keys: refused, nothing signed.
    let other = bed
        .state
        .noise
        .iter()
        .find(|n| n.kind.contains("'other'"))
        .unwrap()
        .instance_id
        .clone();
    let signed = bed.count("kms:Sign");
    let run = enroll_with(&bed, &bed.state.nodes[0], &arn, &imds(&bed, &other));
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert!(run.stderr.contains("is no node of this cluster"), "{}", run.stderr);
    assert_eq!(bed.count("kms:Sign"), signed);
    let usage = bed.iam_usage();
    assert!(usage["denied"].get("hostkeyctl-enrolment").is_none(), "{usage}");
}
