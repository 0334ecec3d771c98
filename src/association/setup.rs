//! `association deploy --deliver`: the association of the setup document
//! beside the converge association, so that an instance that comes online
//! without hostkeyctl gets the pinned build, then the keys.

use std::collections::BTreeMap;

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
/// (trusted as `deliver` trusts it) on the same targets as the converge
/// association `req.name`, named [`setup_name`]. State Manager runs both
/// on an instance that comes online; the converge document waits for the
/// build the setup association puts there.
pub async fn deploy_setup(
    documents: &impl Dispatcher,
    associations: &impl Associations,
    req: &DeployRequest<'_>,
    setup_document: &str,
) -> Result<DeployOutcome, AssociationError> {
    let targets = targets(req.targets)?;
    let (document, _) = crate::rollout::deliver::settle_setup(documents, setup_document)
        .await
        .map_err(|e| match e {
            crate::rollout::deliver::DeliverError::Aws(a) => AssociationError::Aws(a),
            other => AssociationError::Setup(other.to_string()),
        })?;
    let spec = AssociationSpec {
        name: setup_name(req.name),
        document: document.name.clone(),
        document_version: document.version.clone().unwrap_or_default(),
        parameters: BTreeMap::new(),
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
