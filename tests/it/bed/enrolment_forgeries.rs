//! The signer function on the bed, asked as a node asks it: a node's own
//! keys certified for AWS's names, and every forgery refused with nothing
//! signed.

use crate::bed::enrolment::{
    cluster_bed, dns_of, instance_of, invoke, listed, names_of, node_request, node_request_at, principals_listed,
};

/// A HyperPod node's own keys, certified by the KMS CA for exactly the
/// names AWS reports (real `ssh-keygen -L`). Then each forgery is refused
/// with its reason and no `kms:Sign` call: the same request again (a
/// replay); another node's keys with this node's identity document;
/// names that are not the node's; an instance that is no longer a node
/// of the cluster.
#[test]
fn the_signer_certifies_a_nodes_own_keys_for_awss_names_and_refuses_forgeries() {
    let (bed, runtime, arn) = cluster_bed(2, "", "ed25519");
    let (first, second) = (&bed.state.nodes[0], &bed.state.nodes[1]);
    let (one, two) = (instance_of(&bed, &first.address), instance_of(&bed, &second.address));
    let event = node_request(&bed, first, &one, &arn, &[]);
    // A request of a second before, sent after: older than the accepted one.
    let earlier = node_request_at(
        &bed,
        first,
        &one,
        &arn,
        event["request"]["issued_at_ms"].as_i64().unwrap() - 1000,
    );
    let (failed, answer) = invoke(&bed, &runtime, &arn, &event);
    assert!(!failed, "{answer}");
    let certificates = answer["certificates"].as_array().unwrap();
    assert_eq!(certificates.len(), 3, "{answer}");
    for (i, line) in certificates.iter().enumerate() {
        let file = bed.dir().join(format!("enrolled-{i}-cert.pub"));
        std::fs::write(&file, line.as_str().unwrap()).unwrap();
        assert_eq!(principals_listed(&listed(&file)), names_of(&first.address));
    }
    let signed = bed.count("kms:Sign");
    // The second node's own document, before HyperPod replaces it.
    let gone = node_request(&bed, second, &two, &arn, &[]);
    bed.control(
        "POST",
        "/_bed/hyperpod/replace",
        &serde_json::json!({
            "cluster": bed.state.hyperpod.as_ref().unwrap().cluster,
            "instance_id": two,
            "successor": "i-0a0000000000eeeee",
            "address": second.address,
        }),
    );
    let dns = dns_of(&first.address);
    // The same request again (a retry whose answer was lost): the same
    // certificates, nothing signed.
    let (failed, again) = invoke(&bed, &runtime, &arn, &event);
    assert!(!failed && again["certificates"] == answer["certificates"], "{again}");
    let forgeries = [
        ("a replay", earlier, "a replay"),
        (
            "another node's keys with this node's document",
            node_request(&bed, second, &one, &arn, &[]),
            "enrolled other host keys",
        ),
        (
            "another node's name",
            node_request(&bed, first, &one, &arn, &[dns.as_str(), "login9.example"]),
            "not its names",
        ),
        ("an instance no longer in the cluster", gone, "no node of this cluster"),
    ];
    for (what, forged, reason) in forgeries {
        let (failed, answer) = invoke(&bed, &runtime, &arn, &forged);
        assert!(failed && answer.to_string().contains(reason), "{what}: {answer}");
    }
    assert_eq!(bed.count("kms:Sign"), signed, "a forgery was signed");
}
