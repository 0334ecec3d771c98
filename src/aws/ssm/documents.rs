//! What SSM holds of hostkeyctl's documents (`DescribeDocument`: a
//! version's hash) and deploying ours (`CreateDocument`, `UpdateDocument`,
//! `UpdateDocumentDefaultVersion`). SSM's refusals are answered here, as
//! what they mean: a document that is not there is `None`.

use aws_sdk_ssm::types::{DocumentFormat, DocumentType};

use crate::aws::{AwsError, Call};
use crate::dispatch::Deployed;
use crate::ids::Program;
use crate::ssm_document::{Kind, content};

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
    deploy_text(client, name, &content(kind, node_command)).await
}

/// [`deploy`] of any content (the setup document's, which its pins make).
pub async fn deploy_text(
    client: &aws_sdk_ssm::Client,
    name: &str,
    text: &str,
) -> Result<(String, &'static str), AwsError> {
    let text = text.to_owned();
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
            "SSM says a version of {} already holds this content, but none of versions 1 to {latest} does; deploy under another name (ssm-document deploy's --document, --check-document or --converge-document, for the kind)",
            crate::escape::escape(name)
        ),
    })
}

/// The content of `version` of document `name` (`GetDocument`), or `None`
/// when SSM has no such document or version.
pub async fn get(client: &aws_sdk_ssm::Client, name: &str, version: &str) -> Result<Option<String>, AwsError> {
    let call = Call::new("ssm:GetDocument", format!("document {name} version {version}"));
    match client.get_document().name(name).document_version(version).send().await {
        Ok(out) => Ok(out.content().map(str::to_owned)),
        Err(e) => match AwsError::from_sdk(e, &call) {
            AwsError::NotFound { .. } => Ok(None),
            AwsError::Service { code, .. } if code == "InvalidDocument" || code == "InvalidDocumentVersion" => Ok(None),
            other => Err(other),
        },
    }
}
