//! Whether the nodes a `--target` found belong to the secret's cluster.
//!
//! A tag such as `Role=login` is shared by every fleet of an account: a
//! push of one cluster's key set to `tag:Role=login` would install it on
//! another cluster's login nodes too, and those would then serve the wrong
//! identity. A cluster is named by a tag on its instances: hostkeyctl's
//! `Cluster=NAME` (the quick starts tag nodes and the secret with it,
//! `init --tag Cluster=NAME`), or ParallelCluster's own
//! `parallelcluster:cluster-name`, which it puts on every instance it
//! launches. The secret's `Cluster` tag names its cluster.
//!
//! The check is on what discovery found, not on how the targets were
//! written: `tag:Role=login` alone is fine in an account with one fleet.
//! Node sources (`lb:`, `tg:`, `hyperpod:`) name the nodes themselves and
//! are not checked.

use super::{Instance, Target, TargetSpec, describe_specs};

/// hostkeyctl's tag for a cluster's name, on the secret and on its nodes.
pub const CLUSTER_TAG: &str = "Cluster";

/// The tags that name an instance's cluster: hostkeyctl's and
/// ParallelCluster's.
pub const CLUSTER_TAGS: [&str; 2] = [CLUSTER_TAG, "parallelcluster:cluster-name"];

/// How many outsiders an error names before "and N more".
const NAMED: usize = 5;

/// Targets that reach instances of another cluster.
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    /// Instances that are not tagged as the secret's cluster.
    #[error(
        "--target {targets} reaches {count} running instance(s) outside the secret's cluster {cluster} ({named}); nothing was sent. Add --target tag:{CLUSTER_TAG}={cluster} to keep to its nodes; if they are the cluster's nodes, tag them {CLUSTER_TAG}={cluster} (or, for a cluster renamed, the secret: `aws secretsmanager tag-resource --secret-id SECRET --tags Key={CLUSTER_TAG},Value=NAME`); or pass --allow-other-clusters if these instances must serve this key set"
    )]
    Outside {
        /// The targets, as written.
        targets: String,
        /// The secret's cluster.
        cluster: String,
        /// How many instances are outside.
        count: usize,
        /// The first few, each with the cluster it is tagged with.
        named: String,
    },
    /// Tag targets resolved later (a State Manager association resolves
    /// them on every run) without the secret's cluster among them.
    #[error(
        "--target {targets} does not keep to the secret's cluster {cluster}: State Manager resolves the tags on every run, so any instance tagged that way, in any cluster, would install this key set; nothing was changed. Add --target tag:{CLUSTER_TAG}={cluster} (or tag:parallelcluster:cluster-name={cluster}), or pass --allow-other-clusters"
    )]
    Unscoped {
        /// The targets, as written.
        targets: String,
        /// The secret's cluster.
        cluster: String,
    },
    /// The secret names no cluster, and the instances are of several.
    #[error(
        "--target {targets} reaches instances of {count} clusters ({named}), and the secret names none (it has no {CLUSTER_TAG} tag); nothing was sent. Narrow the targets with --target tag:{CLUSTER_TAG}=NAME, tag the secret with its cluster (`aws secretsmanager tag-resource --secret-id SECRET --tags Key={CLUSTER_TAG},Value=NAME`), or pass --allow-other-clusters if one key set must serve them all"
    )]
    Several {
        /// The targets, as written.
        targets: String,
        /// How many clusters.
        count: usize,
        /// The clusters, each with how many instances.
        named: String,
    },
}

impl crate::exit::ExitStatus for ScopeError {
    /// A target to correct: 2.
    fn status(&self) -> crate::exit::Status {
        crate::exit::Status::Usage
    }
}

/// The secret's cluster: the value of its `Cluster` tag.
pub fn secret_cluster(tags: &[(String, String)]) -> Option<&str> {
    tags.iter()
        .find(|(k, _)| k == CLUSTER_TAG)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// The cluster names an instance's tags give it.
pub fn clusters_of<'a>(tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut out: Vec<String> = tags
        .into_iter()
        .filter(|(k, v)| CLUSTER_TAGS.contains(k) && !v.is_empty())
        .map(|(_, v)| v.to_owned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Checks that `found`, what `targets` reached, stays inside the secret's
/// cluster (`secret_tags`' `Cluster`): every instance tagged with it, by
/// either cluster tag. A secret without the tag: the instances' cluster
/// tags must agree (untagged instances are not counted). `allow` lets any
/// through, with a warning naming the outsiders.
pub fn check(
    secret_tags: &[(String, String)],
    targets: &[TargetSpec],
    found: &[Instance],
    allow: bool,
) -> Result<(), ScopeError> {
    let found: Vec<Reached<'_>> = found
        .iter()
        .map(|i| Reached {
            id: &i.instance_id,
            clusters: &i.clusters,
        })
        .collect();
    check_reached(secret_tags, targets, &found, allow)
}

/// [`check`] for the nodes an audit or admission looks up.
pub fn check_targets(
    secret_tags: &[(String, String)],
    targets: &[TargetSpec],
    found: &[Target],
    allow: bool,
) -> Result<(), ScopeError> {
    let found: Vec<Reached<'_>> = found
        .iter()
        .map(|t| Reached {
            id: t.instance_id.as_deref().unwrap_or(&t.name),
            clusters: &t.clusters,
        })
        .collect();
    check_reached(secret_tags, targets, &found, allow)
}

/// One instance a target reached.
struct Reached<'a> {
    id: &'a str,
    clusters: &'a [String],
}

fn check_reached(
    secret_tags: &[(String, String)],
    targets: &[TargetSpec],
    found: &[Reached<'_>],
    allow: bool,
) -> Result<(), ScopeError> {
    if targets.iter().any(TargetSpec::is_source) {
        return Ok(());
    }
    let refusal = match secret_cluster(secret_tags) {
        Some(cluster) => {
            let outside: Vec<&Reached<'_>> = found
                .iter()
                .filter(|i| !i.clusters.iter().any(|c| c == cluster))
                .collect();
            (!outside.is_empty()).then(|| ScopeError::Outside {
                targets: describe_specs(targets),
                cluster: crate::escape::escape(cluster),
                count: outside.len(),
                named: name_some(outside.iter().map(|i| {
                    let tagged = if i.clusters.is_empty() {
                        "no cluster tag".to_owned()
                    } else {
                        format!("cluster {}", i.clusters.join(", "))
                    };
                    format!("{} {}", crate::escape::escape(i.id), crate::escape::escape(&tagged))
                })),
            })
        }
        None => {
            let mut counts = std::collections::BTreeMap::<&str, usize>::new();
            for i in found {
                for c in i.clusters {
                    *counts.entry(c).or_default() += 1;
                }
            }
            (counts.len() > 1).then(|| ScopeError::Several {
                targets: describe_specs(targets),
                count: counts.len(),
                named: name_some(
                    counts
                        .iter()
                        .map(|(c, n)| format!("{}: {n} instance(s)", crate::escape::escape(c))),
                ),
            })
        }
    };
    match refusal {
        Some(e) if allow => {
            tracing::warn!(
                "--allow-other-clusters: {}",
                e.to_string().split("; nothing").next().unwrap_or("")
            );
            Ok(())
        }
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// For targets that are resolved later, by someone else (a State Manager
/// association): tag targets must name the secret's cluster themselves
/// (`tag:Cluster=NAME` or `tag:parallelcluster:cluster-name=NAME`).
/// Instance ids alone are fixed and pass.
pub fn check_written(secret_tags: &[(String, String)], targets: &[TargetSpec], allow: bool) -> Result<(), ScopeError> {
    let tags = targets.iter().any(|t| matches!(t, TargetSpec::Tag { .. }));
    let Some(cluster) = secret_cluster(secret_tags).filter(|_| tags) else {
        return Ok(());
    };
    let scoped = targets.iter().any(
        |t| matches!(t, TargetSpec::Tag { key, value } if CLUSTER_TAGS.contains(&key.as_str()) && value == cluster),
    );
    match (scoped, allow) {
        (true, _) => Ok(()),
        (false, true) => {
            tracing::warn!(
                "--allow-other-clusters: --target {} does not keep to the secret's cluster {}",
                describe_specs(targets),
                crate::escape::escape(cluster)
            );
            Ok(())
        }
        (false, false) => Err(ScopeError::Unscoped {
            targets: describe_specs(targets),
            cluster: crate::escape::escape(cluster),
        }),
    }
}

/// The first [`NAMED`] items, then "and N more".
fn name_some(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    let mut out = items.iter().take(NAMED).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > NAMED {
        out.push_str(&format!("; and {} more", items.len() - NAMED));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(id: &str, clusters: &[&str]) -> Instance {
        Instance {
            instance_id: id.to_owned(),
            private_ip: None,
            name: None,
            clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn role() -> Vec<TargetSpec> {
        vec!["tag:Role=login".parse().unwrap()]
    }

    #[test]
    fn a_tag_that_reaches_another_cluster_is_refused_naming_it() {
        let secret = tags(&[("Cluster", "my-cluster"), ("team", "hpc")]);
        let found = [
            instance("i-0000000000000001", &["my-cluster"]),
            instance("i-0000000000000002", &["other-fleet"]),
            instance("i-0000000000000003", &[]),
        ];
        let err = check(&secret, &role(), &found, false).unwrap_err().to_string();
        assert!(
            err.contains("reaches 2 running instance(s) outside the secret's cluster my-cluster"),
            "{err}"
        );
        assert!(err.contains("i-0000000000000002 cluster other-fleet"), "{err}");
        assert!(err.contains("i-0000000000000003 no cluster tag"), "{err}");
        assert!(err.contains("--target tag:Cluster=my-cluster"), "{err}");
        assert!(!err.contains("i-0000000000000001"), "{err}");
        assert!(
            check(&secret, &role(), &found, true).is_ok(),
            "--allow-other-clusters lets them through"
        );
        assert!(check(&secret, &role(), &found[..1], false).is_ok());
    }

    #[test]
    fn parallelclusters_own_tag_names_the_cluster_too() {
        let secret = tags(&[("Cluster", "pc")]);
        let found = [instance("i-0000000000000001", &["pc"])];
        assert!(check(&secret, &role(), &found, false).is_ok());
        assert_eq!(
            clusters_of([("parallelcluster:cluster-name", "pc"), ("Name", "x"), ("Cluster", "pc")]),
            ["pc"]
        );
        assert_eq!(
            clusters_of([("parallelcluster:cluster-name", "pc"), ("Cluster", "other")]),
            ["other", "pc"]
        );
    }

    #[test]
    fn a_secret_without_a_cluster_refuses_targets_that_span_two() {
        let found = [
            instance("i-0000000000000001", &["a"]),
            instance("i-0000000000000002", &["b"]),
            instance("i-0000000000000003", &[]),
        ];
        let err = check(&[], &role(), &found, false).unwrap_err().to_string();
        assert!(
            err.contains("instances of 2 clusters (a: 1 instance(s); b: 1 instance(s))"),
            "{err}"
        );
        assert!(check(&[], &role(), &found[..1], false).is_ok(), "one cluster");
        assert!(check(&[], &role(), &found[2..], false).is_ok(), "untagged alone");
    }

    #[test]
    fn targets_resolved_later_must_name_the_cluster() {
        let secret = tags(&[("Cluster", "c")]);
        let err = check_written(&secret, &role(), false).unwrap_err().to_string();
        assert!(err.contains("State Manager resolves the tags on every run"), "{err}");
        assert!(check_written(&secret, &role(), true).is_ok());
        for scoped in ["tag:Cluster=c", "tag:parallelcluster:cluster-name=c"] {
            let targets = vec![role().remove(0), scoped.parse().unwrap()];
            assert!(check_written(&secret, &targets, false).is_ok(), "{scoped}");
        }
        let other = vec![role().remove(0), "tag:Cluster=d".parse().unwrap()];
        assert!(check_written(&secret, &other, false).is_err());
        let ids = vec!["i-0123456789abcdef0".parse().unwrap()];
        assert!(check_written(&secret, &ids, false).is_ok(), "instance ids are fixed");
        assert!(check_written(&[], &role(), false).is_ok(), "a secret without a cluster");
    }

    #[test]
    fn node_sources_are_not_checked_and_long_lists_are_cut() {
        let secret = tags(&[("Cluster", "c")]);
        let found: Vec<Instance> = (1..=8).map(|n| instance(&format!("i-{n:016x}"), &["d"])).collect();
        let lb = vec!["lb:hp-login".parse().unwrap()];
        assert!(check(&secret, &lb, &found, false).is_ok());
        let err = check(&secret, &role(), &found, false).unwrap_err().to_string();
        assert!(err.contains("reaches 8 running") && err.contains("and 3 more"), "{err}");
    }
}
