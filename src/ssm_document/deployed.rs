//! What SSM holds of hostkeyctl's documents: a document's hash, whether
//! to trust it (by that hash, never by its name), and deploying ours.

use aws_sdk_ssm::types::{DocumentFormat, DocumentType};

use super::{Kind, RUN_SHELL_SCRIPT, content, sha256_hex};
use crate::aws::{AwsError, Call};
use crate::dispatch::Dispatcher;
use crate::ids::Program;

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
        write!(f, "SSM document {}", crate::escape::escape(&self.name))?;
        if let Some(version) = &self.version {
            write!(f, " version {}", crate::escape::escape(version))?;
        }
        if let Some(hash) = &self.sha256 {
            write!(f, " (SHA-256 {})", crate::escape::escape(hash))?;
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
    dispatcher: &impl Dispatcher,
    name: &str,
    kind: Kind,
    node_command: &Program,
) -> Result<Option<SentDocument>, ResolveError> {
    if name == RUN_SHELL_SCRIPT {
        return Ok(Some(SentDocument::shell()));
    }
    let ours = content(kind, node_command);
    let Some(deployed) = dispatcher.document(name).await? else {
        return if name == kind.default_name() {
            Ok(None)
        } else {
            Err(ResolveError::Missing(crate::escape::escape(name)))
        };
    };
    let trust = if deployed.holds(&ours) {
        Trust::Pinned
    } else if name == kind.default_name() {
        return Err(ResolveError::Tampered {
            name: name.to_owned(),
            version: crate::escape::escape(&deployed.version),
            found: crate::escape::escape(&deployed.hash),
            hash_type: crate::escape::escape(&deployed.hash_type),
            expected: sha256_hex(&ours),
            node_command: node_command.to_string(),
            kind_flag: match kind {
                Kind::Install => "",
                Kind::Check => " --kind check",
                Kind::Converge => " --kind converge",
            },
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
            crate::escape::escape(name)
        ),
    })
}

/// [`resolve`], with what push, rotate and `audit --via-ssm` do about its
/// answer: a custom document goes out with a warning naming its hash;
/// hostkeyctl's own, not deployed, falls back to `AWS-RunShellScript` with a
/// warning (the shipped policies deny it; the warning says what to run).
pub async fn settle(
    dispatcher: &impl Dispatcher,
    name: &str,
    kind: Kind,
    node_command: &Program,
) -> Result<SentDocument, ResolveError> {
    match resolve(dispatcher, name, kind, node_command).await? {
        Some(document) => {
            if document.trust == Trust::Custom {
                tracing::warn!(
                    "sending the custom SSM document {} (version {}, SHA-256 {}), which is not hostkeyctl's own: whoever may update it decides what runs as root on the nodes",
                    crate::escape::escape(&document.name),
                    crate::escape::escape(document.version.as_deref().unwrap_or("?")),
                    crate::escape::escape(document.sha256.as_deref().unwrap_or("?"))
                );
            }
            Ok(document)
        }
        None => {
            tracing::warn!(
                "hostkeyctl's SSM document {name} is not deployed; sending {RUN_SHELL_SCRIPT}, which lets whoever may send it run any command as root. Run `hostkeyctl ssm-document deploy` (docs/iam.md)"
            );
            Ok(SentDocument::shell())
        }
    }
}

impl crate::exit::ExitStatus for ResolveError {
    /// SSM's trouble is 4; a document not to send is 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            ResolveError::Aws(a) => crate::exit::ExitStatus::status(a),
            _ => crate::exit::Status::Usage,
        }
    }
}
