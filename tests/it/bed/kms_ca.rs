//! A host CA in KMS (docs/certificates.md, "A CA in KMS"): the emulator's
//! KMS as AWS documents it (testbed/emulator/kms.py), every certificate
//! checked by real `ssh-keygen -L` (it verifies the CA's signature) and a
//! real ssh login with only the CA line, under the shipped policies.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::bed::{BedOptions, SECRET, TestBed};
use crate::common::support::require;

const NAME: &str = "login.test";

/// A key made outside hostkeyctl, as the bed (an admin's own key).
async fn create_key(kms: &aws_sdk_kms::Client, spec: &str, usage: &str, tagged: bool) -> String {
    let mut create = kms
        .create_key()
        .key_spec(aws_sdk_kms::types::KeySpec::from(spec))
        .key_usage(aws_sdk_kms::types::KeyUsageType::from(usage));
    if tagged {
        create = create.tags(
            aws_sdk_kms::types::Tag::builder()
                .tag_key("hostkeyctl:purpose")
                .tag_value("ssh-host-ca")
                .build()
                .unwrap(),
        );
    }
    let out = create.send().await.unwrap();
    out.key_metadata().unwrap().arn().unwrap().to_owned()
}

/// The host key types the bed's nodes serve, by file name and by the
/// certificate's wire name.
const HOST_KEYS: [(&str, &str); 3] = [
    ("ed25519", "ssh-ed25519-cert-v01@openssh.com"),
    ("ecdsa", "ecdsa-sha2-nistp256-cert-v01@openssh.com"),
    ("rsa", "rsa-sha2-512-cert-v01@openssh.com"),
];

/// `ssh-keygen -L` of node 0's certificate of host key type `kind`: it
/// fails unless the CA's signature verifies.
fn listing(bed: &TestBed, kind: &str) -> String {
    let path = bed.state.nodes[0].ssh_dir.join(format!("ssh_host_{kind}_key-cert.pub"));
    let out = Command::new(require("ssh-keygen"))
        .arg("-L")
        .arg("-f")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A login to node 0 with only the CA's `@cert-authority` line, strict,
/// offered only the host certificate `cert_type`.
fn ca_only_login(bed: &TestBed, ca_secret: &str, cert_type: &str) -> std::process::Output {
    let line = bed
        .cli("known-hosts")
        .args(&["--ca-secret-id", ca_secret, "--host", NAME, "--cert-authority"])
        .run();
    assert_eq!(line.code, 0, "{}", line.stderr);
    let file = bed.dir().join(format!("known_hosts.{}", ca_secret.replace('/', "_")));
    std::fs::write(&file, &line.stdout).unwrap();
    let node = &bed.state.nodes[0];
    bed.ssh_with(
        None,
        &node.address,
        &file,
        &[
            &format!("HostKeyAlias={NAME}"),
            &format!("HostKeyAlgorithms={cert_type}"),
        ],
    )
}

fn sign_and_push(bed: &TestBed, ca_secret: &str) -> crate::common::bed::Run {
    let signed = bed
        .cli("sign")
        .json()
        .secret()
        .args(&["--ca-secret-id", ca_secret, "--principal", NAME])
        .run();
    if signed.code == 0 {
        let push = bed
            .cli("push")
            .secret()
            .targets()
            .args(&["--max-concurrency", "100%"])
            .run();
        assert_eq!(push.code, 0, "push: {}", push.stderr);
    }
    signed
}

/// Every file under `dir` (bytes, lossily as text) holding any of `needles`.
fn files_holding(dir: &Path, needles: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if meta.is_file() && meta.len() < 64 << 20 {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
            if needles.iter().any(|n| !n.is_empty() && text.contains(n.as_str())) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// Refusals, each with nothing created: the admin's role reads only keys
/// tagged as host CAs, and only signing keys of a spec SSH certificates
/// can carry are CAs.
fn assert_unusable_keys_are_refused(bed: &TestBed, runtime: &tokio::runtime::Runtime, kms: &aws_sdk_kms::Client) {
    let untagged = runtime.block_on(create_key(kms, "ECC_NIST_P384", "SIGN_VERIFY", false));
    let denied = ca_init(bed, "hostkeyctl-ca/untagged", &["--kms-ca-key", &untagged]);
    denied.code(4);
    assert!(
        denied.stderr.contains("access denied: kms:GetPublicKey"),
        "{}",
        denied.stderr
    );
    let p521 = runtime.block_on(create_key(kms, "ECC_NIST_P521", "SIGN_VERIFY", true));
    let refused = ca_init(bed, "hostkeyctl-ca/p521", &["--kms-ca-key", &p521]);
    refused.code(2);
    assert!(
        refused.stderr.contains("ECC_NIST_P521 cannot be an SSH host CA"),
        "{}",
        refused.stderr
    );
    let symmetric = runtime.block_on(create_key(kms, "SYMMETRIC_DEFAULT", "ENCRYPT_DECRYPT", true));
    let refused = ca_init(bed, "hostkeyctl-ca/symmetric", &["--kms-ca-key", &symmetric]);
    refused.code(2);
    assert!(
        refused.stderr.contains("is not an asymmetric signing key"),
        "{}",
        refused.stderr
    );
    let encrypting = runtime.block_on(create_key(kms, "RSA_3072", "ENCRYPT_DECRYPT", true));
    let refused = ca_init(bed, "hostkeyctl-ca/encrypting", &["--kms-ca-key", &encrypting]);
    refused.code(2);
    assert!(
        refused.stderr.contains("key usage is ENCRYPT_DECRYPT"),
        "{}",
        refused.stderr
    );
}

fn ca_init(bed: &TestBed, name: &str, args: &[&str]) -> crate::common::bed::Run {
    let mut all = vec!["--ca-secret-id", name];
    all.extend_from_slice(args);
    bed.cli("ca init").json().args(&all).run()
}

/// `ca init` of one KMS CA, `sign` and `push` with it: one kms:Sign per
/// host key, `ssh-keygen -L` names the CA and the signature algorithm and
/// the principal, a CA-only client logs in strictly. The key's ARN.
fn assert_kms_ca_signs(
    bed: &TestBed,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    args: &[&str],
    signing: &str,
) -> String {
    let secret = format!("hostkeyctl-ca/kms-{name}");
    let ca = ca_init(bed, &secret, args);
    assert_eq!(ca.code, 0, "ca init {name}: {}", ca.stderr);
    let ca: Value = ca.json();
    let key = ca["kms_key_arn"].as_str().unwrap().to_owned();
    assert!(key.starts_with("arn:aws:kms:"), "{ca}");
    let value = runtime.block_on(bed.secret_value(&secret));
    assert!(
        value.contains(r#""format": "hostkeyctl-ca/kms-v1""#) && !value.contains("private_key"),
        "{value}"
    );
    let before = bed.count("kms:Sign");
    let signed = sign_and_push(bed, &secret);
    assert_eq!(signed.code, 0, "sign {name}: {}", signed.stderr);
    // One kms:Sign per host key type: the private key signed in KMS.
    assert_eq!(bed.count("kms:Sign"), before + 3);
    let (kind, using) = signing.split_once(' ').unwrap();
    let fingerprint = ca["fingerprint"].as_str().unwrap();
    // Each host key's certificate, and a login offered only that one.
    for (host_key, cert_type) in HOST_KEYS {
        let listed = listing(bed, host_key);
        assert!(
            listed.contains(&format!("Signing CA: {kind} {fingerprint} {using}")),
            "{name} {host_key}: {listed}"
        );
        let principals: Vec<&str> = listed
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("Principals:"))
            .skip(1)
            .take_while(|l| !l.contains(':'))
            .map(str::trim)
            .collect();
        assert_eq!(principals, [NAME], "{listed}");
        let login = ca_only_login(bed, &secret, cert_type);
        let said = String::from_utf8_lossy(&login.stderr);
        assert!(
            login.status.success() && !said.contains("WARNING"),
            "{name} {host_key}: {said}"
        );
    }
    key
}

/// Four KMS CAs (Ed25519, P-256 and RSA made by `ca init --kms`, a P-384
/// key the admin made), each signing the set for real sshd: `ssh-keygen -L`
/// names the CA and the signature algorithm, a CA-only client logs in.
/// Refused with nothing stored: an untagged key, a key spec SSH cannot
/// use, an encryption key, a disabled key. No private key of any CA is
/// in a secret or a file of the bed.
#[test]
fn a_ca_in_kms_signs_what_sshd_serves_and_its_private_key_is_nowhere_else() {
    let bed = TestBed::start(BedOptions::nodes(1));
    bed.init_generated(SECRET);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kms = runtime.block_on(async { aws_sdk_kms::Client::new(&bed.sdk_config(1).await) });

    assert_unusable_keys_are_refused(&bed, &runtime, &kms);
    let p384 = runtime.block_on(create_key(&kms, "ECC_NIST_P384", "SIGN_VERIFY", true));
    let cases: [(&str, Vec<&str>, &str); 4] = [
        (
            "ed25519",
            vec!["--kms", "--algorithm", "ed25519"],
            "ED25519 (using ssh-ed25519)",
        ),
        (
            "p256",
            vec!["--kms", "--algorithm", "ecdsa"],
            "ECDSA (using ecdsa-sha2-nistp256)",
        ),
        ("rsa", vec!["--kms", "--algorithm", "rsa"], "RSA (using rsa-sha2-512)"),
        ("p384", vec!["--kms-ca-key", &p384], "ECDSA (using ecdsa-sha2-nistp384)"),
    ];
    let mut keys = Vec::new();
    for (name, args, signing) in &cases {
        keys.push(assert_kms_ca_signs(&bed, &runtime, name, args, signing));
    }

    // A CA secret that exists: refused before any key is created.
    let created = bed.counts().get("kms:CreateKey").copied();
    let again = ca_init(&bed, "hostkeyctl-ca/kms-p256", &["--kms"]);
    again.code(2);
    assert!(again.stderr.contains("never overwrites a CA"), "{}", again.stderr);
    assert_eq!(bed.counts().get("kms:CreateKey").copied(), created);

    // A rotation signs the new set through KMS, as the rotation role.
    let rotated = bed
        .cli("rotate")
        .secret()
        .targets()
        .args(&[
            "--ca-secret-id",
            "hostkeyctl-ca/kms-p256",
            "--min-overlap",
            "0",
            "--max-concurrency",
            "100%",
        ])
        .run();
    assert_eq!(rotated.code, 0, "rotate: {}", rotated.stderr);
    assert!(listing(&bed, "ed25519").contains("(using ecdsa-sha2-nistp256)"));
    assert!(
        ca_only_login(&bed, "hostkeyctl-ca/kms-p256", HOST_KEYS[0].1)
            .status
            .success()
    );

    // A disabled CA key: KMS refuses, sign says why, nothing is stored.
    let before = bed.cli("status").json().secret().run().json();
    // By key id: moto's DisableKey looks the ARN up as an id.
    let key_id = keys[0].rsplit('/').next().unwrap();
    runtime.block_on(async { kms.disable_key().key_id(key_id).send().await.unwrap() });
    let disabled = bed
        .cli("sign")
        .secret()
        .args(&["--ca-secret-id", "hostkeyctl-ca/kms-ed25519", "--principal", NAME])
        .run();
    disabled.code(4);
    assert!(
        disabled.stderr.contains("is disabled") && disabled.stderr.contains("nothing was stored"),
        "{}",
        disabled.stderr
    );
    let after = bed.cli("status").json().secret().run().json();
    assert_eq!(before["versions"], after["versions"]);

    // The private keys live in the emulator's KMS only.
    for key in &keys {
        let forms = bed.control("POST", "/_bed/kms/private", &serde_json::json!({ "key_id": key }));
        assert_eq!(forms["secrets_holding_it"], serde_json::json!([]), "{key}");
        let pem_line = forms["pem"].as_str().unwrap().lines().nth(1).unwrap().to_owned();
        let needles: Vec<String> = ["der_base64", "scalar_hex", "scalar_base64"]
            .iter()
            .map(|k| forms[*k].as_str().unwrap().to_owned())
            .chain([pem_line])
            .collect();
        assert_eq!(files_holding(bed.dir(), &needles), Vec::<String>::new(), "{key}");
        // The search finds a copy where there is one.
        let planted = bed.dir().join("planted");
        std::fs::write(&planted, format!("x{}x", needles[1])).unwrap();
        assert_eq!(files_holding(bed.dir(), &needles), [planted.display().to_string()]);
        std::fs::remove_file(&planted).unwrap();
    }
}
