//! The boundary: targets read just before a transition (the prefetch) and the gate that
//! lets every Scaler switching at one boundary write at it.
use super::*;

/// What a Scaler woken just before a boundary brings to it: its targets as read then, and its
/// pass through the boundary's gate, let go once its target writes are done, so that its events
/// and status wait for every other Scaler's target writes of that boundary.
pub(super) struct Early {
    pub(super) read: BTreeMap<Named, Current>,
    pub(super) pass: Pass,
}

/// Enters the boundary's gate, reads `targets` (those that exist and can be scaled), and waits
/// until the boundary `at`.
pub(super) async fn read_early(
    ctx: &Context,
    targets: &[Named],
    at: DateTime<Utc>,
) -> Result<Early> {
    let pass = ctx.boundary.enter();
    let mut read = BTreeMap::new();
    for target in targets {
        if let Some(current) = look(ctx, target).await?.current {
            read.insert(target.clone(), current);
        }
    }
    tokio::time::sleep(until(ctx.clock.now(), at)).await;
    Ok(Early { read, pass })
}

/// `now`, or the next transition in `status` when that is at most [`BOUNDARY_TOLERANCE`] away.
pub(super) fn at_boundary(now: DateTime<Utc>, status: &ScalerStatus) -> DateTime<Utc> {
    transition_within(now, status, BOUNDARY_TOLERANCE).unwrap_or(now)
}

/// The next transition in `status`, when it is after `now` and at most `lead` away.
pub(super) fn transition_within(
    now: DateTime<Utc>,
    status: &ScalerStatus,
    lead: Duration,
) -> Option<DateTime<Utc>> {
    let at = status
        .next_transitions
        .first()
        .and_then(|t| DateTime::from_timestamp(t.time.0.as_second(), 0))?;
    (at > now && (at - now).to_std().is_ok_and(|d| d <= lead)).then_some(at)
}
