//! Admission against whoever may tag instances or register targets (the
//! red team's A1, A2 and A3), on the bed's ELB API, after
//! `admission::admission_lets_users_reach_only_nodes_serving_the_set`'s
//! phases (its logins stopped: strangers would take some).

use std::time::Duration;

use crate::bed::admission::{admit, backends, decision_of};
use crate::common::bed::{Node, TestBed, wait_until};

/// The ip target group's targets, changed by hand (as the admin role,
/// which is not admission's): `register` on `port`, or deregister.
fn by_hand(bed: &TestBed, register: bool, targets: &[(&str, i32)]) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let elb = aws_sdk_elasticloadbalancingv2::Client::new(&bed.sdk_config(1).await);
        let descriptions: Vec<_> = targets
            .iter()
            .map(|(id, port)| {
                aws_sdk_elasticloadbalancingv2::types::TargetDescription::builder()
                    .id(*id)
                    .port(*port)
                    .build()
            })
            .collect();
        let arn = bed.state.elb["ip"].target_group_arn.clone();
        if register {
            elb.register_targets()
                .target_group_arn(arn)
                .set_targets(Some(descriptions))
                .send()
                .await
                .unwrap();
        } else {
            elb.deregister_targets()
                .target_group_arn(arn)
                .set_targets(Some(descriptions))
                .send()
                .await
                .unwrap();
        }
    });
}

/// The red team's findings on admission, each on the real ELB API:
/// - A1: whoever may tag instances takes a node out of `--target`
///   (`Role=retired`): it serves the set, so run after run keeps it;
/// - A2: whoever may register targets adds more strangers than there are
///   nodes: none is removed (a person looks), and a node serving the set
///   that is no target is still admitted.
///
/// A3 (a node on two ports) is `memory::admission`'s.
pub(crate) fn strangers_never_steer_admission(bed: &TestBed, nodes: &[&Node]) {
    let before = backends(bed);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let retag = |value: &str| {
        runtime.block_on(async {
            let ec2 = aws_sdk_ec2::Client::new(&bed.sdk_config(1).await);
            let tag = aws_sdk_ec2::types::Tag::builder().key("Role").value(value).build();
            ec2.create_tags()
                .resources(&nodes[0].instance_id)
                .tags(tag)
                .send()
                .await
                .unwrap();
        });
    };
    retag("retired");
    for _ in 0..2 {
        let (code, report) = admit(bed, &[]);
        assert_eq!(code, 3, "{report}");
        assert_eq!(decision_of(&report, &nodes[0].address), "keep", "{report}");
        assert_eq!(backends(bed), before, "a retagged node serving the set was taken out");
    }
    retag("login");

    by_hand(bed, false, &[(nodes[1].address.as_str(), 22)]);
    // Admission puts nothing back while it drains (AWS's deregistration
    // delay): it waits for the drain's end.
    let elb = crate::bed::load_balancer::Elb::new(bed);
    let group = &bed.state.elb["ip"].target_group_arn;
    wait_until("the drain to end", Duration::from_secs(30), || {
        elb.health(group, &nodes[1].address, 22).is_none()
    });
    let strangers: Vec<String> = (230..235).map(|i| format!("127.0.0.{i}")).collect();
    let registered: Vec<(&str, i32)> = strangers.iter().map(|a| (a.as_str(), 22)).collect();
    by_hand(bed, true, &registered);
    let (code, report) = admit(bed, &[]);
    assert_eq!(code, 3, "{report}");
    assert_eq!(decision_of(&report, &nodes[1].address), "admit", "{report}");
    for stranger in &strangers {
        assert_eq!(decision_of(&report, stranger), "held_back", "{report}");
    }
    wait_until("the admitted node to take users", Duration::from_secs(30), || {
        backends(bed).contains(&format!("{}:22", nodes[1].address))
    });
    by_hand(bed, false, &registered);

    let (code, report) = admit(bed, &[]);
    assert_eq!(code, 0, "{report}");
}
