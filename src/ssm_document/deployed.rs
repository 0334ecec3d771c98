//! What SSM holds of hostkeyctl's documents: a document's hash, whether
//! to trust it (by that hash, never by its name), and deploying ours.

use super::{Kind, RUN_SHELL_SCRIPT, content, sha256_hex};
use crate::aws_error::AwsError;
use crate::dispatch::Dispatcher;
use crate::ids::Program;

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
    /// hostkeyctl's own document is not deployed.
    #[error(
        "hostkeyctl's SSM document {name} is not deployed in this account and region; nothing was sent. Deploy it with `hostkeyctl ssm-document deploy` (the stack does too: docs/iam.md), or, to send the shell document that runs any command as root on every node, pass {option} AWS-RunShellScript"
    )]
    NotDeployed {
        /// Its name.
        name: String,
        /// The option that names another document.
        option: &'static str,
    },
    /// A custom document that does not exist.
    #[error(
        "SSM document {name} does not exist in this account and region; deploy it with `hostkeyctl ssm-document deploy {deploy_option} {name}`{instead}"
    )]
    Missing {
        /// Its name.
        name: String,
        /// `ssm-document deploy`'s option for its kind.
        deploy_option: &'static str,
        /// The alternative a push has (the shell document); none for the
        /// others.
        instead: &'static str,
    },
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
            Err(ResolveError::Missing {
                name: crate::escape::escape(name),
                deploy_option: match kind {
                    Kind::Install => "--document",
                    Kind::Check => "--check-document",
                    Kind::Converge => "--converge-document",
                },
                instead: match kind {
                    Kind::Install => ", or pass --document AWS-RunShellScript",
                    _ => "",
                },
            })
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

/// [`resolve`], with what push, rotate and `audit --via-ssm` do about its
/// answer: a custom document goes out with a warning naming its hash;
/// hostkeyctl's own, not deployed, is refused: `AWS-RunShellScript` (any
/// command as root on every node, which the shipped policies deny) is sent
/// only when named.
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
        None => Err(ResolveError::NotDeployed {
            name: name.to_owned(),
            option: if kind == Kind::Check {
                "--check-document"
            } else {
                "--document"
            },
        }),
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
