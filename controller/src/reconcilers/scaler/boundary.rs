//! The boundary: targets read just before a transition (the prefetch) and the gate that
//! lets every Scaler switching at one boundary write at it.
use super::*;

/// What a Scaler woken just before a boundary brings to it: its targets as read then, and its
/// pass through the boundary's gate, let go once its target writes are done, so that its events
/// and status wait for every other Scaler's target writes of that boundary.
pub(super) struct Early {
    pub(super) read: BTreeMap<Target, Current>,
    pub(super) pass: Pass,
}

/// Enters the boundary's gate, reads `targets` (those that exist and can be scaled), and waits
/// until the boundary `at`.
pub(super) async fn read_early(
    ctx: &ScalerContext,
    scaler: &Scaler,
    targets: &[Target],
    at: DateTime<Utc>,
) -> Result<Early> {
    let pass = ctx.boundary.enter();
    let mut read = BTreeMap::new();
    for target in targets {
        if let Some(current) = look(ctx, scaler, target).await?.current {
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

/// A gate for work due at one moment: the writes that make a change (a target's replicas)
/// go first, the writes that only tell of it (events, status) after every one of them, so on a
/// busy apiserver they do not stand in line before the next Scaler's scale write.
#[derive(Debug, Clone)]
pub struct Gate {
    pending: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            pending: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

/// Longest that telling of a change waits for the other changes due at the same moment.
pub const GATE_WAIT: Duration = Duration::from_millis(500);

impl Gate {
    /// A pass for one Scaler with writes due: held until [`Pass::leave_and_wait`] or dropped.
    pub fn enter(&self) -> Pass {
        self.pending.send_modify(|n| *n += 1);
        Pass {
            pending: self.pending.clone(),
            held: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

/// One holder's place at a [`Gate`].
#[derive(Debug)]
pub struct Pass {
    pending: Arc<tokio::sync::watch::Sender<usize>>,
    held: std::sync::atomic::AtomicBool,
}

impl Pass {
    /// Lets go (once), then waits until no one else holds a pass, for at most `cap`.
    pub async fn leave_and_wait(&self, cap: Duration) {
        self.leave();
        let mut pending = self.pending.subscribe();
        // Waiting longer than `cap` would only delay the status: go on either way.
        let _ = tokio::time::timeout(cap, pending.wait_for(|n| *n == 0)).await;
    }

    fn leave(&self) {
        if self.held.swap(false, std::sync::atomic::Ordering::AcqRel) {
            self.pending.send_modify(|n| *n = n.saturating_sub(1));
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::at;

    #[test]
    fn a_wake_up_a_hair_before_the_boundary_acts_as_at_the_boundary() {
        let status = ScalerStatus {
            next_transitions: vec![Transition {
                time: time(at("2025-03-03T09:00:00Z")),
                replicas: Some(3),
            }],
            ..ScalerStatus::default()
        };
        let boundary = at("2025-03-03T09:00:00Z");
        let early = at("2025-03-03T08:59:59.990Z");
        assert_eq!(at_boundary(early, &status), boundary);
        let too_early = at("2025-03-03T08:59:59.900Z");
        assert_eq!(at_boundary(too_early, &status), too_early);
        let late = at("2025-03-03T09:00:00.004Z");
        assert_eq!(at_boundary(late, &status), late);
        assert_eq!(at_boundary(early, &ScalerStatus::default()), early);
        // Requeued for the boundary itself, without slack.
        assert_eq!(until(too_early, boundary), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_waits_until_every_other_has_left_and_no_longer_than_the_cap() {
        let gate = Gate::default();
        let (a, b) = (gate.enter(), gate.enter());
        let start = tokio::time::Instant::now();
        let waiter = async {
            a.leave_and_wait(Duration::from_secs(5)).await;
            start.elapsed()
        };
        let other = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            b.leave_and_wait(Duration::from_secs(5)).await;
        };
        let (waited, ()) = tokio::join!(waiter, other);
        assert_eq!(waited, Duration::from_millis(100));

        // Alone, it goes at once, and leaving twice counts once.
        let c = gate.enter();
        let start = tokio::time::Instant::now();
        c.leave_and_wait(Duration::from_secs(5)).await;
        c.leave_and_wait(Duration::from_secs(5)).await;
        assert_eq!(start.elapsed(), Duration::ZERO);

        // One that never leaves holds the others for the cap only; dropped, it lets go.
        let (d, stuck) = (gate.enter(), gate.enter());
        let start = tokio::time::Instant::now();
        d.leave_and_wait(Duration::from_millis(500)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        drop(stuck);
        let e = gate.enter();
        let start = tokio::time::Instant::now();
        e.leave_and_wait(Duration::from_secs(5)).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
