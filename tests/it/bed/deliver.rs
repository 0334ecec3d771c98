//! `deliver` and the setup document on bare nodes (no hostkeyctl, as an
//! AMI starts): push says what is missing; the build arrives from the
//! bucket only with the SHA-256 the document pins, a wrong file replaces
//! nothing, a second run changes nothing, the metadata service is kept to
//! root now and at boot (or opened, when asked), and a document someone
//! edited is never sent.

use std::path::Path;

use crate::common::bed::{BedOptions, Node, SECRET, TARGETS, TestBed};

fn sha256_file(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

/// The node's own hostkeyctl, where the setup document puts it.
fn installed(node: &Node) -> std::path::PathBuf {
    node.root.join("usr/local/bin/hostkeyctl")
}

fn with_targets<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut out = args.to_vec();
    out.extend(TARGETS);
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn deliver_puts_the_pinned_build_on_bare_nodes_and_nothing_else() {
    let bed = TestBed::start(BedOptions::nodes(2).bare());
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    for node in &bed.state.nodes {
        assert!(!installed(node).exists(), "{} starts bare", node.name);
    }

    nothing_before_the_setup_document(&bed);

    // The admin's builds; the bucket holds another file under the name.
    let node_build = crate::common::support::node_bin_dir().join("hostkeyctl");
    let builds = tempfile::tempdir().unwrap();
    std::fs::copy(&node_build, builds.path().join("hostkeyctl-x86_64")).unwrap();
    let bucket = bed.dir().join("s3/bed-bucket/hk");
    std::fs::create_dir_all(&bucket).unwrap();
    let mut other = std::fs::read(&node_build).unwrap();
    other.extend_from_slice(b"\0changed");
    std::fs::write(bucket.join("hostkeyctl-x86_64"), &other).unwrap();
    let deploy = bed
        .cli("ssm-document deploy-setup")
        .args(&[
            "--builds",
            builds.path().to_str().unwrap(),
            "--builds-at",
            "s3://bed-bucket/hk/",
        ])
        .run();
    deploy.ok();
    let pin = sha256_file(&node_build);
    let deployed = deploy.json();
    assert_eq!(deployed["builds"]["pins"]["x86_64"], pin.as_str(), "{deployed}");
    assert_eq!(deployed["builds"]["location"]["prefix"], "hk", "{deployed}");

    let wrong = bed.cli("deliver --max-errors 100%").secret().targets().json().run();
    wrong.code(3);
    for r in wrong.json()["results"].as_array().unwrap() {
        assert_eq!(r["status"], "Failed", "{r}");
        let error = r["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("the document pins {pin}: not installed")),
            "{r}"
        );
    }
    for node in &bed.state.nodes {
        assert!(
            !installed(node).exists(),
            "{} installed a file the document does not pin",
            node.name
        );
    }

    // The right file: every node runs it, and says which version.
    std::fs::copy(&node_build, bucket.join("hostkeyctl-x86_64")).unwrap();
    every_node_gets(&bed, &pin);
    the_metadata_service_is_kept_to_root_unless_opened(&bed);
    // Now push installs the keys.
    bed.run(&with_targets(&["push", "--secret-id", SECRET])).ok();

    // Someone who may update documents adds a line: deliver sends nothing.
    let pwned = edit_the_setup_document(&bed).await;
    let refused = bed.run(&with_targets(&["deliver", "--secret-id", SECRET]));
    assert!(
        refused
            .code(2)
            .stderr
            .contains("is not a setup document this hostkeyctl writes"),
        "{}",
        refused.stderr
    );
    assert!(!pwned.exists(), "the edited document ran");
}

/// Adds a line to the setup document's default version, as anyone allowed
/// ssm:UpdateDocument could: the file that line would create.
async fn edit_the_setup_document(bed: &TestBed) -> std::path::PathBuf {
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
    let ours = ssm
        .get_document()
        .name("hostkeyctl-Setup")
        .send()
        .await
        .unwrap()
        .content()
        .unwrap()
        .to_owned();
    let pwned = bed.dir().join("pwned");
    let evil = ours.replacen(
        "\"set -eu\",",
        &format!("\"set -eu\", \"touch {}\",", pwned.display()),
        1,
    );
    assert_ne!(evil, ours);
    crate::bed::ssm_document::tamper(&ssm, "hostkeyctl-Setup", &evil).await;
    pwned
}

/// Before any setup document: push says, per node, what is missing, and
/// deliver sends nothing.
fn nothing_before_the_setup_document(bed: &TestBed) {
    let push = bed.cli("push --max-errors 100%").secret().targets().json().run();
    push.code(3);
    for r in push.json()["results"].as_array().unwrap() {
        let error = r["error"].as_str().unwrap_or_default();
        assert!(error.contains("hostkeyctl is not installed on this node"), "{r}");
    }
    let none = bed.run(&with_targets(&["deliver", "--secret-id", SECRET]));
    assert!(
        none.code(2).stderr.contains("ssm-document deploy-setup"),
        "{}",
        none.stderr
    );
}

/// deliver: every node installs the build pinned as `pin` and reports
/// its version; a second run changes nothing.
fn every_node_gets(bed: &TestBed, pin: &str) {
    let dry = bed.run(&with_targets(&[
        "deliver",
        "--secret-id",
        SECRET,
        "--dry-run",
        "--output",
        "json",
    ]));
    assert_eq!(dry.ok().json()["builds"]["pins"]["x86_64"], pin);
    let done = bed.run(&with_targets(&["deliver", "--secret-id", SECRET, "--output", "json"]));
    done.ok();
    let version = format!("hostkeyctl {}", env!("CARGO_PKG_VERSION"));
    for r in done.json()["results"].as_array().unwrap() {
        assert_eq!(
            (r["result"].as_str(), r["version"].as_str()),
            (Some("installed"), Some(version.as_str())),
            "{r}"
        );
    }
    for node in &bed.state.nodes {
        assert_eq!(sha256_file(&installed(node)), pin, "{}", node.name);
    }
    let again = bed.run(&with_targets(&["deliver", "--secret-id", SECRET, "--output", "json"]));
    for r in again.ok().json()["results"].as_array().unwrap() {
        assert_eq!(r["result"], "unchanged", "{r}");
    }
}

/// After deliver: a user on the nodes gets nothing from the metadata
/// service (the nodes' netfilter, bed.json's netns), and the guard's unit
/// and settings are written and enabled for every boot; `--imds open`
/// undoes both, and the default puts them back.
fn the_metadata_service_is_kept_to_root_unless_opened(bed: &TestBed) {
    use crate::common::bed::netfilter::NodeNetfilter;
    let scratch = tempfile::tempdir().unwrap();
    let netfilter = NodeNetfilter::of_bed(bed.state.netns.as_deref().unwrap(), scratch.path());
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd/hostkeyctl-imds-guard.service");
    let written = |node: &Node| node.root.join("etc/systemd/system/hostkeyctl-imds-guard.service");
    let systemctl = |node: &Node| std::fs::read_to_string(node.root.join("systemctl.log")).unwrap_or_default();
    assert!(netfilter.metadata_as(65534).starts_with("refused:"));
    assert_eq!(netfilter.metadata_as(0), "i-0123456789abcdef0");
    for node in &bed.state.nodes {
        assert_eq!(
            std::fs::read(written(node)).unwrap(),
            std::fs::read(&unit).unwrap(),
            "{}",
            node.name
        );
        let settings = std::fs::read_to_string(node.root.join("etc/default/hostkeyctl-imds-guard")).unwrap();
        assert!(settings.contains("HOSTKEYCTL_IMDS_ALLOW_USERS="), "{settings}");
        assert!(
            systemctl(node).contains("systemctl enable hostkeyctl-imds-guard.service"),
            "{}",
            systemctl(node)
        );
    }
    let deliver = |imds: &str| {
        let run = bed.run(&with_targets(&[
            "deliver",
            "--secret-id",
            SECRET,
            "--imds",
            imds,
            "--output",
            "json",
        ]));
        run.ok();
        let json = run.json();
        for r in json["results"].as_array().unwrap() {
            assert_eq!(r["imds"], imds.replace('-', "_"), "{r}");
        }
    };
    deliver("open");
    assert_eq!(netfilter.metadata_as(65534), "i-0123456789abcdef0");
    for node in &bed.state.nodes {
        assert!(!written(node).exists(), "{}", node.name);
        assert!(systemctl(node).contains("systemctl disable hostkeyctl-imds-guard.service"));
    }
    // Users the lifecycle step allowed (uid 1 here) stay allowed when a
    // delivery guards the node again.
    for node in &bed.state.nodes {
        std::fs::write(
            node.root.join("etc/default/hostkeyctl-imds-guard"),
            "# Written by the hostkeyctl lifecycle step.\nHOSTKEYCTL_IMDS_ALLOW_USERS=1\n",
        )
        .unwrap();
    }
    deliver("root-only");
    assert!(netfilter.metadata_as(65534).starts_with("refused:"));
    assert_eq!(netfilter.metadata_as(1), "i-0123456789abcdef0");
    for node in &bed.state.nodes {
        let settings = std::fs::read_to_string(node.root.join("etc/default/hostkeyctl-imds-guard")).unwrap();
        assert!(settings.contains("HOSTKEYCTL_IMDS_ALLOW_USERS=1\n"), "{settings}");
    }
}
