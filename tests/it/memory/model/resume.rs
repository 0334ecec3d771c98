//! Invariant 4 of the model (module documentation): what a sequence left
//! is resumable, and a first rotation with nothing announced completes.

use std::time::Duration;

use super::{
    DAY, FleetMode, Hooked, MemDispatcher, MemoryStore, Report, Request, STAGE_CURRENT, STAGE_NEXT, STEPS, VersionId,
    World, ident, secret,
};
use crate::memory::options;
use hostkeyctl::store::SecretStore as _;

/// Invariant 4: whatever the sequence left, a clean abort, an
/// announcement, a day and one scheduled rotation promote the announced
/// set.
pub(super) async fn resumable(world: &World, first: bool) -> Result<(), String> {
    let hooked = Hooked::new(&world.store, world.hook(None));
    let dispatcher = MemDispatcher::new(&world.empty, &world.store);
    let push = options(0);
    let abort = Request {
        phase: hostkeyctl::rotation::Phase::Abort,
        pull: Some(Duration::ZERO),
        ..Request::default()
    };
    world
        .rotation(&hooked, &dispatcher, &push)
        .run(abort, &mut Report::new(secret()))
        .await
        .map_err(|e| format!("abort: {e}"))?;
    for node in world.nodes.lock().iter_mut() {
        node.timer = true;
    }
    world.timers().await;
    // In one sequence of four (by seed): the check costs a whole rotation.
    if first {
        first_rotation(world, &hooked, &dispatcher, &push).await?;
    }
    world
        .rotation(&hooked, &dispatcher, &push)
        .announce_after(&crate::memory::current(&world.store).await, FleetMode::Push)
        .await
        .map_err(|e| format!("announce: {e}"))?;
    world.update_ghost();
    world.timers().await;
    world.store.advance(DAY + 3600);
    // The timers ran in that day: after a promotion, its retired set is
    // offered for an hour (`Retiring`), then the announced one.
    world.timers().await;
    let announced = world.keys_at(STAGE_NEXT).ok_or("nothing announced")?;
    let token = VersionId::random();
    world
        .store
        .stage_rotation(&secret(), &token, false)
        .map_err(|e| e.to_string())?;
    let rotation = world.rotation(&hooked, &dispatcher, &push);
    for s in STEPS {
        rotation
            .scheduled_step(s, &token, FleetMode::Pull)
            .await
            .map_err(|e| format!("{s}: {e}"))?;
    }
    if world.keys_at(STAGE_CURRENT).map(|k| ident(&k)) != Some(ident(&announced)) {
        return Err("the announced set was not promoted".to_owned());
    }
    world.check(&hooked).await;
    Ok(())
}

/// A scheduled rotation of a secret with nothing announced (a stack's
/// `RotationSchedule` nobody followed with `schedule enable`): the
/// announcement is taken off first, as if it never was. All four steps
/// complete, AWSCURRENT keeps its keys (a copy is promoted: no client sees
/// a change), and the next set is announced. Invariant 1 only holds such a
/// rotation from promoting a new set; this holds it to completing.
async fn first_rotation<'w>(
    world: &'w World,
    hooked: &Hooked<'w, MemoryStore>,
    dispatcher: &MemDispatcher<'w, MemoryStore>,
    push: &hostkeyctl::rollout::PushOptions,
) -> Result<(), String> {
    let label = hostkeyctl::ids::StageLabel::parse(STAGE_NEXT).map_err(|e| e.to_string())?;
    if let Some(holder) = world.store.holder(&secret(), STAGE_NEXT) {
        world
            .store
            .move_stage(&secret(), &label, None, Some(&holder))
            .await
            .map_err(|e| format!("taking the announcement off: {e}"))?;
    }
    world.update_ghost();
    let before = world.keys_at(STAGE_CURRENT).map(|k| ident(&k));
    let token = VersionId::random();
    world
        .store
        .stage_rotation(&secret(), &token, false)
        .map_err(|e| e.to_string())?;
    let rotation = world.rotation(hooked, dispatcher, push);
    for s in STEPS {
        rotation
            .scheduled_step(s, &token, FleetMode::Pull)
            .await
            .map_err(|e| format!("a first rotation, {s}: {e}"))?;
    }
    if world.keys_at(STAGE_CURRENT).map(|k| ident(&k)) != before {
        return Err("a first rotation with nothing announced changed AWSCURRENT's keys".to_owned());
    }
    if world.keys_at(STAGE_NEXT).is_none() {
        return Err("a first rotation announced nothing".to_owned());
    }
    world.check(hooked).await;
    Ok(())
}
