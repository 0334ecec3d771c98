//! `ssm-document deploy`: put this binary's three documents in SSM and
//! make them the default versions, over [`Documents`] (SSM, or a double).

use std::future::Future;

use super::Kind;
use crate::aws_error::AwsError;
use crate::ids::Program;

/// Where the documents go: SSM's CreateDocument, UpdateDocument and
/// UpdateDocumentDefaultVersion (`crate::aws::ssm::documents::deploy` in the AWS room).
pub trait Documents: Sync {
    /// Makes a version with `kind`'s content for `node_command` the default
    /// version of `name`; returns that version and what was done
    /// ("created", "updated", "restored" or "unchanged").
    fn deploy(
        &self,
        name: &str,
        kind: Kind,
        node_command: &Program,
    ) -> impl Future<Output = Result<(String, &'static str), AwsError>> + Send;

    /// The same for a document whose content is `text` (the setup
    /// document, whose pins make its content).
    fn deploy_text(
        &self,
        name: &str,
        text: &str,
    ) -> impl Future<Output = Result<(String, &'static str), AwsError>> + Send;
}

/// One document as deployed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Published {
    /// Its name in SSM.
    pub document: String,
    /// Its default version now.
    pub default_version: String,
    /// What was done.
    pub result: &'static str,
}

/// The three documents, deployed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Publication {
    /// The install document (push, rotate).
    pub install: Published,
    /// The check document (`audit --via-ssm`).
    pub check: Published,
    /// The converge document (`association deploy`).
    pub converge: Published,
}

/// The names to deploy under.
#[derive(Clone, Copy, Debug)]
pub struct Names<'a> {
    /// The install document's.
    pub install: &'a str,
    /// The check document's.
    pub check: &'a str,
    /// The converge document's.
    pub converge: &'a str,
}

/// Deploys the three documents, install first: an error stops at the
/// document it names, and what was deployed before it stays (running the
/// command again finishes the job; a document already right is left
/// "unchanged").
pub async fn publish<D: Documents>(
    docs: &D,
    names: Names<'_>,
    node_command: &Program,
) -> Result<Publication, AwsError> {
    let one = |name: &str, kind| {
        let name = name.to_owned();
        async move {
            let (default_version, result) = docs.deploy(&name, kind, node_command).await?;
            Ok::<_, AwsError>(Published {
                document: name,
                default_version,
                result,
            })
        }
    };
    Ok(Publication {
        install: one(names.install, Kind::Install).await?,
        check: one(names.check, Kind::Check).await?,
        converge: one(names.converge, Kind::Converge).await?,
    })
}

/// The setup document, deployed with its pins.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SetupPublication {
    /// The document.
    #[serde(flatten)]
    pub published: Published,
    /// What it pins.
    pub builds: super::setup::NodeBuilds,
}

/// `ssm-document deploy --setup --output json`: the setup document
/// deployed, and the associations that now run its new version.
#[derive(Debug, serde::Serialize)]
pub struct SetupReport<'a> {
    /// The document and its pins.
    #[serde(flatten)]
    pub setup: &'a SetupPublication,
    /// The associations of the document moved to its new version.
    pub associations_updated: &'a [String],
}

/// Deploys the setup document for `builds` under `name`.
pub async fn publish_setup<D: Documents>(
    docs: &D,
    name: &str,
    builds: super::setup::NodeBuilds,
) -> Result<SetupPublication, AwsError> {
    let (default_version, result) = docs.deploy_text(name, &builds.content()).await?;
    Ok(SetupPublication {
        published: Published {
            document: name.to_owned(),
            default_version,
            result,
        },
        builds,
    })
}

impl SetupPublication {
    /// What was done, the pins, and what reads them.
    pub fn text(&self) -> String {
        let mut out = format!(
            "document {}: {}; default version {}. It installs:\n",
            crate::escape::escape(&self.published.document),
            self.published.result,
            self.published.default_version,
        );
        for (arch, sha) in &self.builds.pins {
            out.push_str(&format!("  {} SHA-256 {sha}\n", self.builds.location.uri(*arch)));
        }
        out.push_str(
            "Upload those files there if they are not yet; then `hostkeyctl deliver` puts them on running nodes, and `association deploy --deliver` on every node that comes online.\n",
        );
        out
    }
}

impl Publication {
    /// One line per document: what was done, its default version, and who
    /// uses it.
    pub fn text(&self) -> String {
        [
            (&self.install, "push and rotate use it from now on"),
            (&self.check, "audit --via-ssm uses it from now on"),
            (&self.converge, "association deploy uses it from now on"),
        ]
        .iter()
        .map(|(p, used)| {
            format!(
                "document {}: {}; default version {}. {used}\n",
                crate::escape::escape(&p.document),
                p.result,
                p.default_version
            )
        })
        .collect()
    }

    /// The JSON report: the install document's fields at the top (as
    /// before), the other two nested.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "document": self.install.document,
            "default_version": self.install.default_version,
            "result": self.install.result,
            "check": self.check,
            "converge": self.converge,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::{Documents, Names, publish};
    use crate::aws_error::AwsError;
    use crate::ids::Program;
    use crate::ssm_document::Kind;

    struct Refusing {
        seen: Mutex<Vec<(String, Kind)>>,
        refuse: &'static str,
    }

    impl Documents for Refusing {
        async fn deploy(&self, name: &str, kind: Kind, _: &Program) -> Result<(String, &'static str), AwsError> {
            self.seen.lock().unwrap().push((name.to_owned(), kind));
            if name == self.refuse {
                return Err(AwsError::AccessDenied {
                    action: "ssm:UpdateDocument",
                    resource: format!("document {name}"),
                    message: "no".to_owned(),
                });
            }
            Ok(("3".to_owned(), "updated"))
        }

        async fn deploy_text(&self, name: &str, _: &str) -> Result<(String, &'static str), AwsError> {
            self.seen.lock().unwrap().push((name.to_owned(), Kind::Install));
            Ok(("1".to_owned(), "created"))
        }
    }

    fn names() -> Names<'static> {
        Names {
            install: "i",
            check: "c",
            converge: "v",
        }
    }

    #[tokio::test]
    async fn deploys_each_kind_under_its_name_and_reports_them() {
        let docs = Refusing {
            seen: Mutex::default(),
            refuse: "",
        };
        let program: Program = "hostkeyctl".parse().unwrap();
        let done = publish(&docs, names(), &program).await.unwrap();
        assert_eq!(
            *docs.seen.lock().unwrap(),
            [
                ("i".into(), Kind::Install),
                ("c".into(), Kind::Check),
                ("v".into(), Kind::Converge)
            ]
        );
        assert_eq!(done.json()["check"]["document"], "c");
        assert!(
            done.text()
                .contains("document v: updated; default version 3. association deploy")
        );
    }

    #[tokio::test]
    async fn an_error_stops_at_the_document_it_names() {
        let docs = Refusing {
            seen: Mutex::default(),
            refuse: "c",
        };
        let program: Program = "hostkeyctl".parse().unwrap();
        let err = publish(&docs, names(), &program).await.unwrap_err();
        assert!(err.to_string().contains("document c"), "{err}");
        assert_eq!(
            docs.seen.lock().unwrap().len(),
            2,
            "the converge document was not tried"
        );
    }
}
