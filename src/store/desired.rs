//! What the nodes serve, from the stages alone: the desired state
//! (AWSCURRENT and at most one extra set) and every set a node may serve,
//! the one place install and revocation both read it.

use super::{
    STAGE_CURRENT, STAGE_NEXT, STAGE_PENDING, STAGE_PREVIOUS, SecretStore, StoreError, StoredVersion, VersionSelector,
    same_keys, stage,
};
use crate::aws_error::AwsError;
use crate::document::{RETIRING_MAX_SECONDS, RETIRING_SECONDS, Retiring};
use crate::ids::{SecretId, VersionId};
use crate::keyset::KeySet;

/// What every login node must serve, from the stages alone: AWSCURRENT,
/// and, while a rotation has announced one, the AWSPENDING set as extra
/// host keys (or, for a while after a promotion, the set it retired; or,
/// between scheduled rotations, the HOSTKEYCTL_NEXT set: [`Servable::extra`]).
/// `install` without a version, `push` and `rotate` all converge nodes to
/// this one state, so a timer and a push never disagree.
#[derive(Debug)]
pub struct DesiredState {
    /// AWSCURRENT.
    pub current: StoredVersion,
    /// [`Servable::extra`]: AWSPENDING, the retiring set or
    /// HOSTKEYCTL_NEXT, when it holds other keys.
    pub next: Option<StoredVersion>,
}

/// Every set a login node may serve, read from the stages: the one place
/// that decides it, for what nodes install ([`Servable::extra`]), what
/// clients are given ([`Servable::others`]) and what is never revoked
/// ([`Servable::never_revoked`]). AWSCURRENT, and each set
/// that may be extra host keys: AWSPENDING (a rotation in flight; the
/// empty version Secrets Manager stages before a scheduled rotation's
/// createSecret holds nothing yet), the set the last promotion retired
/// while the announced set says it is still offered
/// ([`crate::document::Retiring`]), and HOSTKEYCTL_NEXT (announced for
/// the next scheduled rotation).
#[derive(Debug)]
pub struct Servable {
    /// AWSCURRENT (or the version a pinned install was given).
    pub current: StoredVersion,
    /// AWSPENDING, when it is another version with a value.
    pub pending: Option<StoredVersion>,
    /// The set the promotion of `current` retired, while HOSTKEYCTL_NEXT
    /// says nodes still offer it, when it holds other keys.
    pub retiring: Option<StoredVersion>,
    /// HOSTKEYCTL_NEXT, when it is another version.
    pub next: Option<StoredVersion>,
}

impl Servable {
    /// The one extra set nodes serve beside AWSCURRENT: AWSPENDING when it
    /// holds other keys; else, for a while after a promotion, the set it
    /// retired (nodes that installed the promotion keep offering the keys
    /// the others still sign with, so no `UpdateHostKeys` client drops
    /// them); else HOSTKEYCTL_NEXT when it holds other keys. A scheduled
    /// rotation stages the announced keys as AWSPENDING, so the two hold
    /// the same keys while its steps run and nodes never serve three sets.
    pub fn extra(&self) -> Option<&StoredVersion> {
        let other = |v: &&StoredVersion| !same_keys(&v.document.keys, &self.current.document.keys);
        self.pending
            .as_ref()
            .filter(other)
            .or_else(|| self.retiring.as_ref().filter(other))
            .or_else(|| self.next.as_ref().filter(other))
    }

    /// AWSCURRENT and [`Servable::extra`], owned.
    pub fn split(self) -> (StoredVersion, Option<StoredVersion>) {
        let current = &self.current.document.keys;
        let other = |v: &StoredVersion| !same_keys(&v.document.keys, current);
        let extra = [self.pending, self.retiring, self.next]
            .into_iter()
            .flatten()
            .find(other);
        (self.current, extra)
    }

    /// Every set a node may serve now or at any moment of a rotation in
    /// flight.
    pub fn sets(&self) -> impl Iterator<Item = &StoredVersion> {
        std::iter::once(&self.current)
            .chain(self.pending.as_ref())
            .chain(self.retiring.as_ref())
            .chain(self.next.as_ref())
    }

    /// The sets whose keys are never revoked: AWSCURRENT, AWSPENDING and
    /// HOSTKEYCTL_NEXT. A retiring set is revocable as soon as it is
    /// retired: it is offered only so that `UpdateHostKeys` clients keep
    /// it while the fleet converges, and a leak answered by a rotation must
    /// be revocable at once (nodes not converged yet still sign with it
    /// until their timers run, as before any promotion reached them).
    pub fn never_revoked(&self) -> impl Iterator<Item = &StoredVersion> {
        std::iter::once(&self.current)
            .chain(self.pending.as_ref())
            .chain(self.next.as_ref())
    }

    /// Every set but AWSCURRENT a client should trust now: what nodes may
    /// offer as extra keys (a client given only the extra set would miss
    /// the next one while a retired set is still offered).
    pub fn others(&self) -> impl Iterator<Item = &StoredVersion> {
        let current = &self.current.document.keys;
        self.sets()
            .skip(1)
            .filter(move |v| !same_keys(&v.document.keys, current))
    }
}

/// [`Servable`] beside `current` (AWSCURRENT, or a pinned version). Any
/// failure to read a stage other than its absence (or an empty AWSPENDING)
/// is an error: a node must never drop the next keys because of a hiccup.
pub async fn servable_with(
    store: &impl SecretStore,
    secret: &SecretId,
    current: StoredVersion,
) -> Result<Servable, StoreError> {
    let mut read = Vec::new();
    for label in [STAGE_PENDING, STAGE_NEXT] {
        read.push(match store.get(secret, &VersionSelector::Stage(stage(label))).await {
            Ok(v) if v.version_id != current.version_id => Some(v),
            Ok(_) | Err(StoreError::Aws(AwsError::NotFound { .. })) => None,
            Err(e) => return Err(e),
        });
    }
    let next = read.pop().flatten();
    let pending = read.pop().flatten();
    // The set the promotion of `current` retired, named by the set that
    // promotion announced, while that says it is offered.
    let retiring = match next.as_ref().and_then(|n| retiring_of(n, store.clock())) {
        Some(r) => retired_set(store, secret, &current, &r.version_id).await?,
        None => None,
    };
    Ok(Servable {
        current,
        pending,
        retiring,
        next,
    })
}

/// The `retiring` of an announced set, when it holds at `now`: before its
/// `until`, which is at most a day and an hour after the announcement
/// (`--retire-for` is at most a day, counted from the promotion's moment;
/// a value a promotion never writes is a hand-made or forged one, and
/// ignored).
pub fn retiring_of(next: &StoredVersion, now: i64) -> Option<&Retiring> {
    let r = next.document.retiring.as_ref()?;
    let announced = time::OffsetDateTime::parse(&next.document.created, &time::format_description::well_known::Rfc3339)
        .ok()?
        .unix_timestamp();
    (r.offered_at(now) && r.until <= announced.saturating_add(RETIRING_MAX_SECONDS + RETIRING_SECONDS)).then_some(r)
}

/// The set a retiring names, only while it is still AWSPREVIOUS (the set
/// the last promotion retired: a later promotion, a rollback or a stage
/// moved by hand ends it) and holds other keys than `current`. A version
/// that is gone is simply no longer offered.
async fn retired_set(
    store: &impl SecretStore,
    secret: &SecretId,
    current: &StoredVersion,
    named: &VersionId,
) -> Result<Option<StoredVersion>, StoreError> {
    match store.get(secret, &VersionSelector::Stage(stage(STAGE_PREVIOUS))).await {
        Ok(v) if names_the_retired(named, &v, &current.document.keys) => Ok(Some(v)),
        Ok(_) | Err(StoreError::Aws(AwsError::NotFound { .. })) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether AWSPREVIOUS (`previous`) is the set a retiring names (`named`)
/// and holds other keys than AWSCURRENT's (`current`): then nodes offer it.
pub fn names_the_retired(named: &VersionId, previous: &StoredVersion, current: &KeySet) -> bool {
    previous.version_id == *named && !same_keys(&previous.document.keys, current)
}

/// [`Servable`] of the secret's stages.
pub async fn servable(store: &impl SecretStore, secret: &SecretId) -> Result<Servable, StoreError> {
    let current = store.get(secret, &VersionSelector::Stage(stage(STAGE_CURRENT))).await?;
    servable_with(store, secret, current).await
}

/// The one extra set nodes serve beside version `current`
/// ([`Servable::extra`]).
pub async fn announced_next(
    store: &impl SecretStore,
    secret: &SecretId,
    current: &VersionId,
) -> Result<Option<StoredVersion>, StoreError> {
    let current = store.get(secret, &VersionSelector::VersionId(current.clone())).await?;
    Ok(servable_with(store, secret, current).await?.split().1)
}

/// A version's value, or `None` when the version holds none: the empty
/// version Secrets Manager stages as AWSPENDING before a scheduled
/// rotation's createSecret stores the new set in it (or a version that is
/// gone).
pub async fn value_of(
    store: &impl SecretStore,
    secret: &SecretId,
    version: &VersionId,
) -> Result<Option<StoredVersion>, StoreError> {
    match store.get(secret, &VersionSelector::VersionId(version.clone())).await {
        Ok(v) => Ok(Some(v)),
        Err(StoreError::Aws(AwsError::NotFound { .. })) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The desired state of the fleet (see [`DesiredState`]). Needs only
/// `secretsmanager:GetSecretValue` on the secret, as the node role has.
pub async fn desired_state(store: &impl SecretStore, secret: &SecretId) -> Result<DesiredState, StoreError> {
    let (current, next) = servable(store, secret).await?.split();
    Ok(DesiredState { current, next })
}
