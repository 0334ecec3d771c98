//! How a rotation run starts, decided from the stages alone.

use crate::ids::VersionId;

/// How a rotation run starts, decided from the stages alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    /// No rotation in flight: create a new pending version.
    Create,
    /// Continue with this pending version.
    Continue(VersionId),
    /// Refuse, saying why and what to do.
    Refuse(String),
}

/// `pending` is the AWSPENDING version (id, creation time) when it is not
/// the current one; `resume` is --finish (a run with --resume and nothing
/// pending converges before it gets here).
pub fn plan_start(current: &VersionId, pending: Option<&(VersionId, Option<String>)>, resume: bool) -> Start {
    match (pending, resume) {
        (Some((id, created)), false) => Start::Refuse(format!(
            "a rotation is already in flight: version {id} is AWSPENDING ({}); continue it with --resume or drop it with --abort",
            age(created.as_deref())
        )),
        (Some((id, _)), true) => Start::Continue(id.clone()),
        (None, true) => Start::Refuse(format!(
            "no rotation in flight to finish (no AWSPENDING version besides AWSCURRENT {current}): announce one with --overlap (or --pull); `rotate --resume` converges the nodes to AWSCURRENT"
        )),
        (None, false) => Start::Create,
    }
}

/// How old a version is, for people.
pub fn age(created: Option<&str>) -> String {
    let Some(created) = created else {
        return "unknown age".to_owned();
    };
    match time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339) {
        Ok(t) => {
            let secs = (time::OffsetDateTime::now_utc() - t).whole_seconds().max(0);
            match secs {
                s if s < 120 => format!("{s} s old"),
                s if s < 7200 => format!("{} min old", s / 60),
                s => format!("{} h old", s / 3600),
            }
        }
        Err(_) => format!("created {}", crate::escape::escape(created)),
    }
}

#[cfg(test)]
mod tests {
    use super::{Start, age, plan_start};
    use crate::ids::VersionId;

    #[test]
    fn the_start_follows_the_stages() {
        let c = VersionId::random();
        let p = VersionId::random();
        assert_eq!(plan_start(&c, None, false), Start::Create);
        let pending = (p.clone(), Some("2020-01-01T00:00:00Z".to_owned()));
        assert_eq!(plan_start(&c, Some(&pending), true), Start::Continue(p.clone()));
        let Start::Refuse(busy) = plan_start(&c, Some(&pending), false) else {
            panic!("not refused")
        };
        assert!(
            busy.contains(&format!("version {p} is AWSPENDING")) && busy.contains("h old") && busy.contains("--abort"),
            "{busy}"
        );
        let Start::Refuse(idle) = plan_start(&c, None, true) else {
            panic!("not refused")
        };
        assert!(
            idle.contains("no rotation in flight") && idle.contains(&format!("AWSCURRENT {c}")),
            "{idle}"
        );
    }

    #[test]
    fn ages_read_naturally() {
        assert_eq!(age(None), "unknown age");
        assert_eq!(age(Some("not a time")), "created not a time");
        let now = time::OffsetDateTime::now_utc() - time::Duration::minutes(5);
        let stamp = now.format(&time::format_description::well_known::Rfc3339).unwrap();
        assert_eq!(age(Some(&stamp)), "5 min old");
    }
}
