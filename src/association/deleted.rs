//! `association delete`: the association goes; what it installed stays on
//! the nodes, which push or their timers converge from then on.

use super::{AssociationError, Associations, one};
use crate::escape::escape;

/// Deletes the association named `name`: its id, or `None` when there was
/// none (nothing to do). What it installed stays on the nodes.
pub async fn delete(associations: &impl Associations, name: &str) -> Result<Option<String>, AssociationError> {
    let Some(association) = one(associations, name).await? else {
        return Ok(None);
    };
    associations.delete(&association.id).await?;
    Ok(Some(association.id))
}

/// What `association delete` did, as `--output json` prints it.
#[derive(Debug, serde::Serialize)]
pub struct Deleted<'a> {
    /// The association's name.
    pub association: &'a str,
    /// Its id, when there was one.
    pub association_id: Option<&'a str>,
    /// `deleted`, or `absent`: there was none.
    pub result: &'static str,
}

impl<'a> Deleted<'a> {
    /// The association `name`, deleted as `id`, or absent.
    pub fn new(name: &'a str, id: Option<&'a str>) -> Self {
        let result = if id.is_some() { "deleted" } else { "absent" };
        Self {
            association: name,
            association_id: id,
            result,
        }
    }

    /// What the text output says.
    pub fn text(&self) -> String {
        match self.association_id {
            Some(id) => format!(
                "association {} ({}): deleted. The nodes keep what it installed; push, or their timers, converge them from now on",
                escape(self.association),
                escape(id)
            ),
            None => format!(
                "association {}: there is none; nothing to delete",
                escape(self.association)
            ),
        }
    }
}
