//! hostkeyctl's own SSM Command document: it can only run
//! `hostkeyctl install` with typed parameters.
//!
//! `AWS-RunShellScript` runs any shell line as root, so a role that may send
//! it has root on every node it targets. This document runs one program with
//! parameters whose `allowedPattern` admits only their grammar (a secret
//! name or ARN, a UUID, SHA256 fingerprints, a region): no quote, space,
//! `;`, `$` or newline can reach the shell on any SSM Agent version, and the
//! values are single-quoted in the script as well. `push` and `rotate` use
//! it when it exists (`ssm-document deploy`), pinned to its default
//! version.

use std::collections::BTreeMap;

use aws_sdk_ssm::types::{DocumentFormat, DocumentType};
use serde_json::json;

use crate::aws::{AwsError, Call};
use crate::ids::{Program, Region};
use crate::store::StoredVersion;

/// The document's default name.
pub const DEFAULT_NAME: &str = "hostkeyctl-Install";
/// The shell document push falls back to (explicitly, or when hostkeyctl's
/// own is not deployed).
pub const RUN_SHELL_SCRIPT: &str = "AWS-RunShellScript";

const UUID: &str = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
const FINGERPRINT: &str = "SHA256:[A-Za-z0-9+/]{43}";

/// `allowedPattern` of each parameter.
pub fn patterns() -> BTreeMap<&'static str, String> {
    let fps = format!("{FINGERPRINT}(,{FINGERPRINT}){{0,2}}");
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
    ])
}

/// The document's content (JSON), byte-stable for the same node command.
pub fn content(node_command: &Program) -> String {
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

/// The default version of document `name`, or `None` when it does not
/// exist.
pub async fn default_version(client: &aws_sdk_ssm::Client, name: &str) -> Result<Option<String>, AwsError> {
    let call = Call::new("ssm:DescribeDocument", format!("document {name}"));
    match client.describe_document().name(name).send().await {
        Ok(out) => Ok(out.document().and_then(|d| d.default_version()).map(str::to_owned)),
        Err(e) => match AwsError::from_sdk(e, &call) {
            AwsError::NotFound { .. } => Ok(None),
            AwsError::Service { code, .. } if code == "InvalidDocument" => Ok(None),
            other => Err(other),
        },
    }
}

/// Creates the document, or adds a new version and makes it the default
/// when the content changed. Returns the default version and what was done.
pub async fn deploy(
    client: &aws_sdk_ssm::Client,
    name: &str,
    node_command: &Program,
) -> Result<(String, &'static str), AwsError> {
    let text = content(node_command);
    let Some(current) = default_version(client, name).await? else {
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
    let call = Call::new("ssm:GetDocument", format!("document {name}"));
    let existing = client
        .get_document()
        .name(name)
        .document_version(&current)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk(e, &call))?;
    if existing.content() == Some(text.as_str()) {
        return Ok((current, "unchanged"));
    }
    let call = Call::new("ssm:UpdateDocument", format!("document {name}"));
    let out = client
        .update_document()
        .name(name)
        .content(&text)
        .document_version("$LATEST")
        .document_format(DocumentFormat::Json)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk(e, &call))?;
    let version = out
        .document_description()
        .and_then(|d| d.document_version())
        .unwrap_or_default()
        .to_owned();
    let call = Call::new("ssm:UpdateDocumentDefaultVersion", format!("document {name}"));
    client
        .update_document_default_version()
        .name(name)
        .document_version(&version)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk(e, &call))?;
    Ok((version, "updated"))
}

#[cfg(test)]
mod tests {
    use super::{content, patterns};
    use crate::ids::Program;

    #[test]
    fn the_document_is_byte_stable_and_its_patterns_admit_only_the_grammar() {
        let program = Program::parse("hostkeyctl").unwrap();
        assert_eq!(content(&program), content(&program));
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
