//! Every name that kubesteer writes into the cluster or reads back from it, once: annotation and
//! label keys, the finalizer, the field manager, condition types and reasons, event reasons.

/// Annotations.
pub mod annotation {
    /// On a Scaler's target: its replicas from before the window opened.
    pub const ORIGINAL_REPLICAS: &str = "kubesteer.io/original-replicas";
    /// Written with [`ORIGINAL_REPLICAS`]: the Scaler that recorded it, as `namespace/name`; only
    /// that Scaler trusts and restores the record.
    pub const ORIGINAL_REPLICAS_OWNER: &str = "kubesteer.io/original-replicas-owner";
    /// On a HorizontalPodAutoscaler a Scaler cooperates with: its minReplicas from before the
    /// Scaler raised it, with [`ORIGINAL_REPLICAS_OWNER`] naming that Scaler.
    pub const ORIGINAL_MIN_REPLICAS: &str = "kubesteer.io/original-min-replicas";
    /// On a KEDA ScaledObject a Scaler pauses: KEDA's `autoscaling.keda.sh/paused-replicas`
    /// as it was before ("" when it was not paused), with [`ORIGINAL_REPLICAS_OWNER`] naming
    /// that Scaler.
    pub const ORIGINAL_PAUSED_REPLICAS: &str = "kubesteer.io/original-paused-replicas";
    /// Every annotation of a Scaler's record on a target. The Scaler writes them with merge
    /// patches under kubesteer's field manager; a child that is also a Scaler's target keeps
    /// them when its owner applies it, as the record is not the owner's to remove.
    pub const SCALER_RECORD: [&str; 5] = [
        ORIGINAL_REPLICAS,
        ORIGINAL_REPLICAS_OWNER,
        ORIGINAL_MIN_REPLICAS,
        ORIGINAL_PAUSED_REPLICAS,
        ASLEEP_PATCH,
    ];
    /// On a target put to sleep by a Scaler's declared patch (`spec.patches`): the Scaler, and
    /// every path the patch touched as it was and as set, in JSON, to give it back exactly.
    pub const ASLEEP_PATCH: &str = "kubesteer.io/asleep-patch";
    /// KEDA's own annotation on a ScaledObject: while present, KEDA deletes the HPA it made and
    /// holds the target at this many replicas (KEDA 2.x).
    pub const KEDA_PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";
    /// On an owned child: a digest of what the controller last applied, to see drift.
    pub const APPLIED: &str = "kubesteer.io/applied";
    /// On a Welcome's Deployment: the uid of the credentials Secret the controller wrote.
    pub const CREDENTIALS_UID: &str = "kubesteer.io/credentials-uid";
    /// On a Scaler read as v1alpha1: its v1beta1-only fields as JSON, so that converting back
    /// to v1beta1 loses nothing.
    pub const V1BETA1_FIELDS: &str = "kubesteer.io/v1beta1-fields";
    /// On a Scaler read as v1beta1: the v1alpha1 fields v1beta1 has no place for (days or a lone
    /// start, end or replicas without a window), as JSON, for the way back.
    pub const V1ALPHA1_FIELDS: &str = "kubesteer.io/v1alpha1-fields";
    /// On a Scaler: who last set its spec (the admission request's userInfo as JSON), written by
    /// the webhook and read by the controller to check that they still hold the rights the
    /// spec needs ([`crate::access::author`]).
    pub const AUTHOR: &str = "kubesteer.io/author";
    /// On the webhook's certificate Secret: until when the old CA stays in the bundles.
    pub const CA_OVERLAP_UNTIL: &str = "kubesteer.io/ca-overlap-until";
}

/// Labels.
pub mod label {
    /// The recommended labels on every owned child.
    pub const NAME: &str = "app.kubernetes.io/name";
    pub const INSTANCE: &str = "app.kubernetes.io/instance";
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// The value of [`MANAGED_BY`].
    pub const MANAGED_BY_VALUE: &str = "kubesteer";
    /// On the real node (with a taint of the same key), so only kubesteer's own pods run there.
    pub const REAL_NODE: &str = "kubesteer.io/real-node";
    /// On an end-to-end test's namespace, which its own webhook configurations select.
    pub const E2E: &str = "kubesteer.io/e2e";
}

/// The Scaler's finalizer: the targets get their replicas back before the Scaler goes.
pub const RESTORE_TARGETS_FINALIZER: &str = "kubesteer.io/restore-targets";

/// The field manager of the controller's applies, patches and status writes.
pub const CONTROLLER_FIELD_MANAGER: &str = "kubesteer-controller";

/// The field manager of the `Ready=False` condition the controller writes when an admission
/// webhook denied one of its writes; the next status of [`CONTROLLER_FIELD_MANAGER`] (a forced
/// apply) takes the condition back.
pub const DENIAL_FIELD_MANAGER: &str = "kubesteer-controller-denial";

/// The webhook's field manager for what it writes about its own certificate: the caBundles of
/// its webhook configurations and of the Scaler CRD's conversion.
pub const WEBHOOK_CA_FIELD_MANAGER: &str = "kubesteer-webhook-cabundle";

/// Condition types.
pub mod condition {
    /// The condition `kubectl wait --for=condition=Ready` waits on.
    pub const READY: &str = "Ready";
    pub const AVAILABLE: &str = "Available";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
    /// A Deployment's condition that its pods could not be made (quota, admission).
    pub const REPLICA_FAILURE: &str = "ReplicaFailure";
    /// A condition's status values.
    pub const TRUE: &str = "True";
    pub const FALSE: &str = "False";
}

/// Reasons of conditions and events.
pub mod reason {
    // Every kind.
    pub const NAME_CONFLICT: &str = "NameConflict";
    pub const RECONCILE_FAILED: &str = "ReconcileFailed";
    /// An admission webhook (kubesteer's own, or another) denied one of the controller's writes.
    pub const ADMISSION_DENIED: &str = "AdmissionDenied";
    pub const CREATED: &str = "Created";
    pub const DELETED: &str = "Deleted";
    // Memcached and Welcome.
    pub const ALL_PODS_READY: &str = "AllPodsReady";
    pub const PODS_NOT_READY: &str = "PodsNotReady";
    pub const ROLLOUT_STALLED: &str = "RolloutStalled";
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    pub const ROLLING_OUT: &str = "RollingOut";
    pub const DEPLOYMENT_FAILING: &str = "DeploymentFailing";
    pub const AS_EXPECTED: &str = "AsExpected";
    pub const MINIMUM_PODS_AVAILABLE: &str = "MinimumPodsAvailable";
    pub const MINIMUM_PODS_UNAVAILABLE: &str = "MinimumPodsUnavailable";
    // Scaler.
    pub const WINDOW_OPEN: &str = "WindowOpen";
    pub const WINDOW_CLOSED: &str = "WindowClosed";
    pub const JOB_FIRED: &str = "JobFired";
    pub const WAITING_FOR_FIRST_FIRING: &str = "WaitingForFirstFiring";
    /// v1beta1: today is one of `excludeDates`, so the Scaler behaves as outside every window.
    pub const EXCLUDED_DATE: &str = "ExcludedDate";
    /// v1beta1: `override` holds the targets at its replicas.
    pub const OVERRIDE: &str = "Override";
    pub const SCALED: &str = "Scaled";
    pub const RESTORED: &str = "Restored";
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    /// The author of a Scaler's spec no longer holds a right its admission required; the
    /// Scaler writes nothing until they do again.
    pub const FORBIDDEN: &str = "Forbidden";
    /// A Scaler's `spec.excludeCalendar` cannot be read (its ConfigMap or key missing, or not
    /// an iCalendar file): the Scaler writes nothing until it can.
    pub const CALENDAR_UNREADABLE: &str = "CalendarUnreadable";
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    pub const TARGET_CLAIMED: &str = "TargetClaimed";
    /// A change to one of a Scaler's targets failed; the others were still done.
    pub const TARGET_FAILED: &str = "TargetFailed";
    /// A deleted Scaler could not give a target back (a refusal no retry changes); it let go.
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    /// Waking a target put to sleep by a declared patch left a path as someone else set it
    /// while it slept.
    pub const PATCH_KEPT: &str = "PatchKept";
    /// A Scaler target whose kind is unknown, cluster-scoped or has no /scale subresource.
    pub const TARGET_NOT_SCALABLE: &str = "TargetNotScalable";
    /// Another Scaler claims the same target and is older, so it owns the target; this one
    /// leaves the target alone until the owner lets go.
    pub const CONFLICT: &str = "Conflict";
    pub const SUSPENDED: &str = "Suspended";
    /// A Scaler in dry run: what it would do, nothing written to its targets.
    pub const DRY_RUN: &str = "DryRun";
    /// A target held outside every window was set back to outsideReplicas.
    pub const HELD: &str = "Held";
}
