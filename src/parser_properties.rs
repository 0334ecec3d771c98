//! Property tests for every parser of outside data: the secret document,
//! install's report line, the secret's tags, `sshd -T` output, known_hosts
//! files, SSM's plugin output, and the typed values (fingerprints, ids,
//! addresses). 10,000 cases each, biased towards the shapes each parser
//! expects; the property is always the same: no panic, and whatever is
//! accepted is what the grammar allows. (cargo-fuzz needs a nightly
//! toolchain, which is not available here.)

use proptest::prelude::*;

use crate::audit::expected_from_known_hosts_text;
use crate::aws::ssm::split_output;
use crate::document::SecretDocument;
use crate::fingerprint::Fingerprint;
use crate::hostport::HostPort;
use crate::ids::{Region, SecretId, StageLabel, VersionId};
use crate::install::InstallReport;
use crate::install::sshd::Effective;
use crate::store::{SecretInfo, TAG_FP_PREFIX, TAG_VERSION};

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(10_000)
}

/// Text near a JSON object: fragments of the real shapes mixed with noise.
fn jsonish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("\"format\":\"hostkeyctl/v1\",".to_owned()),
        Just("\"schema\":\"hostkeyctl-install/v1\",".to_owned()),
        Just("\"result\":\"changed\",".to_owned()),
        Just(
            "\"keys\":[{\"algorithm\":\"ssh-ed25519\",\"private_key\":\"-----BEGIN OPENSSH PRIVATE KEY-----\\n\"}],"
                .to_owned()
        ),
        Just("\"fingerprints\":{\"ssh-ed25519\":\"SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s\"},".to_owned()),
        Just("\"checks\":[{\"key_type\":\"x\",\"served\":{\"Err\":{\"kind\":\"refused\"}},\"ok\":true}],".to_owned()),
        Just("\"created\":\"2026-01-01T00:00:00Z\",".to_owned()),
        "[\\PC]{0,12}",
        "[0-9a-f\":,\\[\\]{}\\\\n-]{0,12}",
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_secret_document_parser_never_panics(text in jsonish()) {
        let _ = SecretDocument::parse(&text);
    }

    #[test]
    fn the_install_report_parser_never_panics_and_accepts_only_v1(text in jsonish(), noise in "[\\PC\n]{0,40}") {
        if let Ok(report) = InstallReport::from_output(&format!("{noise}\n{text}")) {
            prop_assert_eq!(report.schema, "hostkeyctl-install/v1");
        }
    }

    #[test]
    fn tag_parsing_never_panics_and_keeps_only_fingerprints(
        version in prop_oneof![Just("0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c".to_owned()), "[\\PC]{0,40}"],
        values in prop::collection::vec(prop_oneof![
            Just("SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s".to_owned()),
            "SHA256:[A-Za-z0-9+/ $()`;]{40,46}",
            "[\\PC]{0,50}",
        ], 0..4),
        keys in prop::collection::vec(prop_oneof![
            Just("ssh-ed25519"), Just("ecdsa-sha2-nistp256"), Just("ssh-rsa"), Just("ssh-dss"), Just("")
        ], 0..4),
    ) {
        let mut tags = vec![(TAG_VERSION.to_owned(), version)];
        for (k, v) in keys.iter().zip(values) {
            tags.push((format!("{TAG_FP_PREFIX}{k}"), v));
        }
        let info = SecretInfo {
            arn: SecretId::parse("hk").unwrap(),
            name: "hk".to_owned(),
            description: None,
            kms_key_id: None,
            tags,
            versions: vec![],
            rotation: Default::default(),
        };
        if let Ok(Some((_, fps))) = info.tagged_fingerprints() {
            for (_, fp) in fps {
                prop_assert!(Fingerprint::parse(fp.as_str()).is_ok());
            }
        }
    }

    #[test]
    fn sshd_t_output_parsing_never_panics(lines in prop::collection::vec(prop_oneof![
        Just("hostkey /etc/ssh/ssh_host_ed25519_key".to_owned()),
        Just("hostkeyalgorithms ssh-ed25519,rsa-sha2-512".to_owned()),
        Just("listenaddress [::]:22".to_owned()),
        Just("listenaddress 0.0.0.0:22".to_owned()),
        Just("pidfile /run/sshd.pid".to_owned()),
        "[a-z]{0,12} [\\PC]{0,30}",
        "[\\PC]{0,30}",
    ], 0..10)) {
        let e = Effective::parse(&lines.join("\n"));
        // Whatever sshd said, the verify address is an address or nothing.
        if let Some(address) = e.verify_address() {
            prop_assert!(HostPort::parse(&address.to_string()).is_ok());
        }
    }

    #[test]
    fn known_hosts_parsing_never_panics(lines in prop::collection::vec(prop_oneof![
        Just("login ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1Xc9ZxGfqXWcMz3i0Yq8pqQ4i8mHqk6OZbU4ZpXJ4K".to_owned()),
        Just("@cert-authority * ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1Xc9ZxGfqXWcMz3i0Yq8pqQ4i8mHqk6OZbU4ZpXJ4K".to_owned()),
        Just("# comment".to_owned()),
        "[a-z.,*\\[\\]:0-9|]{0,20} (ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256) [A-Za-z0-9+/=]{0,80}",
        "[\\PC]{0,60}",
    ], 0..6)) {
        let _ = expected_from_known_hosts_text(&lines.join("\n"), std::path::Path::new("known_hosts"));
    }

    #[test]
    fn ssm_output_splits_without_loss(out in "[\\PC\n]{0,60}", err in "[\\PC\n]{0,60}", with_err in any::<bool>()) {
        let joined = if with_err { format!("{out}\n----------ERROR-------\n{err}") } else { out.clone() };
        let (stdout, stderr) = split_output(&joined);
        if with_err && !out.contains("----------ERROR-------") {
            prop_assert_eq!(stdout, out);
            prop_assert_eq!(stderr, err);
        } else if !with_err {
            prop_assert_eq!(format!("{stdout}{stderr}").len() <= joined.len(), true);
        }
    }

    #[test]
    fn typed_values_accept_only_their_grammar(text in "[\\PC]{0,70}") {
        if let Ok(fp) = Fingerprint::parse(&text) {
            prop_assert_eq!(fp.as_str().len(), 50);
        }
        for parsed in [
            SecretId::parse(&text).map(|v| v.to_string()),
            VersionId::parse(&text).map(|v| v.to_string()),
            StageLabel::parse(&text).map(|v| v.to_string()),
            Region::parse(&text).map(|v| v.to_string()),
        ]
        .into_iter()
        .flatten()
        {
            prop_assert!(!parsed.chars().any(|c| c.is_whitespace() || "'\"`$;&|<>(){}\\\\".contains(c)), "{}", parsed);
        }
        if let Ok(hp) = HostPort::parse(&text) {
            prop_assert_eq!(HostPort::parse(&hp.to_string()), Ok(hp));
        }
    }
}
