//! `association deploy --deliver`: the association of the setup document
//! beside the converge association, so that an instance that comes online
//! without hostkeyctl gets the pinned build, then the keys.

use super::{AssociationError, AssociationSpec, Associations, DeployOutcome, DeployRequest, targets, upsert};
use crate::dispatch::Dispatcher;

/// How often the setup association runs besides when an instance comes
/// online: a node whose build was removed or replaced gets the pinned one
/// back within a day.
pub const SETUP_SCHEDULE: &str = "rate(1 day)";

/// The name of the setup association beside association `name`.
pub fn setup_name(name: &str) -> String {
    let mut base: String = name.chars().take(128 - "-setup".len()).collect();
    base.push_str("-setup");
    base
}

/// `association deploy --deliver`: the association of the setup document
/// (`document`, settled as `deliver` settles it) on the same targets as the converge
/// association `req.name`, named [`setup_name`], with the secret: State
/// Manager runs both on an instance that comes online, one at a time in
/// either order, and this one installs the keys after the build.
async fn deploy_setup(
    associations: &impl Associations,
    req: &DeployRequest<'_>,
    document: crate::ssm_document::SentDocument,
    secret_arn: &str,
    imds: &str,
) -> Result<DeployOutcome, AssociationError> {
    let targets = targets(req.targets)?;
    // The setup association also installs the keys once the build is
    // there: State Manager runs one association at a time on an instance,
    // in no order, so the converge association may have run first.
    let spec = AssociationSpec {
        name: setup_name(req.name),
        document: document.name.clone(),
        document_version: document.version.clone().unwrap_or_default(),
        parameters: {
            let mut p = crate::ssm_document::converge_parameters(secret_arn, req.region);
            p.extend([crate::ssm_document::setup::imds_parameter(imds)]);
            p
        },
        targets,
        schedule: SETUP_SCHEDULE.to_owned(),
        max_concurrency: req.max_concurrency.to_owned(),
        max_errors: req.max_errors.to_owned(),
    };
    let (deployed, association) = upsert(associations, &spec, |_| None).await?;
    Ok(DeployOutcome {
        deployed,
        association,
        document,
    })
}

/// What `association deploy` made: the converge association, and with
/// `--deliver` the setup association beside it.
#[derive(Debug, serde::Serialize)]
pub struct DeployReport {
    /// The converge association.
    #[serde(flatten)]
    pub outcome: DeployOutcome,
    /// The setup association (`--deliver`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<DeployOutcome>,
}

impl DeployReport {
    /// What the text output says of association `name`.
    pub fn text(&self, name: &str) -> String {
        let mut out = self.outcome.text(name);
        if let Some(setup) = &self.setup {
            out.push_str(&setup.text(&setup_name(name)));
        }
        out
    }
}

/// `association deploy`: the converge association, and with `setup`
/// (`--deliver`: the setup document and the metadata service's mode) the
/// setup association beside it. The setup document is checked first: a
/// converge association on nodes that never get hostkeyctl would only
/// fail.
pub async fn deploy_with_setup(
    store: &impl crate::store::SecretStore,
    documents: &impl Dispatcher,
    associations: &impl Associations,
    req: &DeployRequest<'_>,
    setup: Option<(&str, &str)>,
) -> Result<DeployReport, AssociationError> {
    // Read once, before anything is made.
    let setup = match setup {
        Some((name, imds)) => Some((settled(documents, name).await?, imds)),
        None => None,
    };
    let outcome = super::deploy(store, documents, associations, req).await?;
    let Some((document, imds)) = setup else {
        return Ok(DeployReport { outcome, setup: None });
    };
    // The secret as the converge association names it (its ARN).
    let arn = outcome
        .association
        .spec
        .parameters
        .get("SecretId")
        .and_then(|v| v.first())
        .cloned()
        .unwrap_or_default();
    let setup = deploy_setup(associations, req, document, &arn, imds).await?;
    Ok(DeployReport {
        outcome,
        setup: Some(setup),
    })
}

/// The setup document `name`, trusted as `deliver` trusts it.
async fn settled(
    documents: &impl Dispatcher,
    name: &str,
) -> Result<crate::ssm_document::SentDocument, AssociationError> {
    let (document, _) = crate::rollout::deliver::settle_setup(documents, name)
        .await
        .map_err(|e| match e {
            crate::rollout::deliver::DeliverError::Aws(a) => AssociationError::Aws(a),
            other => AssociationError::Setup(other.to_string()),
        })?;
    Ok(document)
}

/// After `ssm-document deploy-setup` made `version` the default of the
/// setup document `document`: every association that runs another
/// version of it now runs this one (an association runs the version it
/// names; left on the old one it would install the old build on new
/// instances, or refuse the new files). Returns the names updated.
pub async fn follow_setup(
    associations: &impl Associations,
    document: &str,
    version: &str,
) -> Result<Vec<String>, crate::aws_error::AwsError> {
    let mut updated = Vec::new();
    for association in associations.running(document).await? {
        if association.spec.document_version != version {
            let spec = AssociationSpec {
                document_version: version.to_owned(),
                ..association.spec.clone()
            };
            associations.update(&association.id, &spec).await?;
            updated.push(association.spec.name.clone());
        }
    }
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use super::setup_name;

    #[test]
    fn the_setup_associations_name_stays_within_state_managers_128() {
        assert_eq!(setup_name("hostkeyctl-hk"), "hostkeyctl-hk-setup");
        let long = "a".repeat(128);
        assert_eq!(setup_name(&long).len(), 128);
        assert!(setup_name(&long).ends_with("-setup"));
    }
}
