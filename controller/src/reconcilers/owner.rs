//! The owner kinds' one reconcile: the [`Owner`] trait a kind implements (its children, its
//! status), [`reconcile`] and [`error_policy`] for every such kind, the Ingress an owner may
//! have, the one rollout check ([`Rollout`]), and the conditions they share.
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::core::object::HasStatus;
use kube::runtime::events::EventType;
use kube::Resource;
use kubesteer_api::common::condition;
use kubesteer_runtime::queue::Action;
use serde::Serialize;

use crate::children::{
    self, namespace_and_name, write_params, Children, Ensured, ListedPod, NameConflict, Namespaced,
    Packed,
};
use crate::{Context, Error, Result};
use kubesteer_api::keys::condition::{
    AVAILABLE, DEGRADED, FALSE, PROGRESSING, READY, REPLICA_FAILURE, TRUE,
};
use kubesteer_api::keys::reason;

use super::{status_patch, time};

/// A kind that owns a Deployment and a Service, and reports their state in its status.
pub trait Owner: Namespaced + HasStatus<Status: OwnerStatus> + Send + Sync + 'static {
    /// The kind, as in metrics, logs and events.
    const KIND: &'static str;
    /// The `app.kubernetes.io/name` of everything it owns; its caches go by it.
    const APP: &'static str;
    /// How long a status write that only reports progress may wait for more of it.
    const STATUS_GRACE: Duration = Duration::ZERO;
    /// How long a status write that only names other pods (see
    /// [`Owner::only_pod_names_differ`]) may wait for a change `kubectl get` shows: by default
    /// the [grace](Owner::STATUS_GRACE) of other progress.
    const POD_NAMES_GRACE: Duration = Self::STATUS_GRACE;
    /// Whether it may own an Ingress, so that its Ingresses are watched and cached.
    const OWNS_INGRESS: bool = false;

    /// What [`Owner::prepare`] learns for the Deployment, e.g. the uid of a Secret.
    type Prepared: Default + Send + Sync;

    /// Children made before the Deployment and the Service, which may refer to them. A conflict
    /// reported here keeps the Deployment from being applied: its pods would read an object of
    /// someone else's.
    fn prepare(
        &self,
        _ctx: &Context,
        _namespace: &str,
        _name: &str,
    ) -> impl Future<Output = Result<Prepared<Self::Prepared>>> + Send {
        async { Ok(Prepared::default()) }
    }

    /// The Deployment it wants.
    fn deployment(&self, prepared: &Self::Prepared) -> Result<Deployment>;

    /// The Service it wants.
    fn service(&self) -> Result<Service>;

    /// The Ingress it wants, if any (only read when it [owns Ingresses](Owner::OWNS_INGRESS)):
    /// with none, the one it owned is deleted.
    fn ingress(&self) -> Result<Option<Ingress>> {
        Ok(None)
    }

    /// Its status, from its children as the caches (or the apiserver's answers) show them.
    fn status_from(&self, children: &Observed<'_>, now: DateTime<Utc>) -> Self::Status;

    /// Whether `new` says nothing `old` did not but other names of pods.
    fn only_pod_names_differ(_old: &Self::Status, _new: &Self::Status) -> bool {
        false
    }

    /// When to look again once everything is as wanted.
    fn settled(&self, _prepared: &Self::Prepared) -> Action {
        Action::await_change()
    }

    /// The result as it may be told (in events and logs): e.g. without a password it holds.
    fn redact(&self, result: Result<Action>) -> Result<Action> {
        result
    }
}

/// What [`Owner::prepare`] did: children created (for the event), names taken, and what it learnt.
pub struct Prepared<T> {
    pub value: T,
    pub created: Vec<String>,
    pub conflicts: Vec<NameConflict>,
}

impl<T: Default> Default for Prepared<T> {
    fn default() -> Self {
        Self {
            value: T::default(),
            created: Vec::new(),
            conflicts: Vec::new(),
        }
    }
}

/// The children an owner's status is made from.
pub struct Observed<'a> {
    pub namespace: &'a str,
    pub deployment: &'a Deployment,
    pub service: &'a Service,
    /// Its Ingress, when it wants one.
    pub ingress: Option<&'a Ingress>,
    /// Its live pods, sorted by name: a rollout counts them ([`Rollout::with_pods`]).
    pub pods: Vec<ListedPod>,
}

/// The controller's reconcile function of an owner kind.
pub async fn reconcile<K: Owner>(owner: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    let work = async { owner.redact(reconcile_owner(owner.as_ref(), &ctx).await) };
    ctx.reconcile(K::KIND, owner.as_ref(), work).await
}

/// The error policy of an owner kind.
pub fn error_policy<K: Owner>(owner: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.error_policy(K::KIND, owner.as_ref(), error)
}

/// Desired children, applied where they differ, then the status from them.
async fn reconcile_owner<K: Owner>(owner: &K, ctx: &Context) -> Result<Action> {
    if owner.meta().deletion_timestamp.is_some() {
        // Garbage collection removes the children; recreating them would only race it.
        ctx.forget(K::KIND, owner);
        return Ok(Action::await_change());
    }
    let (ns, name) = namespace_and_name(K::KIND, owner)?;
    let Prepared {
        value: prepared,
        mut created,
        mut conflicts,
    } = owner.prepare(ctx, &ns, &name).await?;
    let children = ctx.caches.of(K::APP);
    children.synced().await;
    let want_deployment = match conflicts.is_empty() {
        true => Some(owner.deployment(&prepared)?),
        false => None,
    };
    let want_service = owner.service()?;
    let deployment = async {
        match &want_deployment {
            Some(d) => children::ensure(ctx, &children.deployments, &children.notes, d)
                .await
                .map(Some),
            None => Ok(None),
        }
    };
    let service = children::ensure(ctx, &children.services, &children.notes, &want_service);
    let ingress = async {
        match K::OWNS_INGRESS {
            true => ensure_ingress(ctx, owner, &children, &ns, &name).await,
            false => Ok(None),
        }
    };
    let (deployment, service, ingress) = tokio::try_join!(deployment, service, ingress)?;
    let before = created.len();
    let deployment = deployment.and_then(|d| ours(d, &name, &mut created, &mut conflicts));
    let service = ours(service, &name, &mut created, &mut conflicts);
    let ingress = ingress.and_then(|i| ours(i, &name, &mut created, &mut conflicts));
    let watched_created = created.len() > before;
    if let Some(note) = created_note(&created) {
        ctx.publish(owner, EventType::Normal, reason::CREATED, note)
            .await;
    }
    let (Some(deployment), Some(service), true) = (deployment, service, conflicts.is_empty())
    else {
        return report_conflicts(ctx, K::KIND, owner, &conflicts).await;
    };
    if watched_created {
        // The new child's watch event brings another reconcile, which writes the status from
        // the cache; writing it now as well would only cost the apiserver a write more.
        return Ok(owner.settled(&prepared));
    }
    let pods = children.pods.of(&ns, &name);
    let observed = Observed {
        namespace: &ns,
        deployment: &deployment,
        service: &service,
        ingress: ingress.as_deref(),
        pods,
    };
    // The owner as this controller wrote it: while the cache has not brought its status write
    // back, the written status stands for the cached one, its conditions' transition times too.
    let noted;
    let current = match ctx.written_status::<K, K::Status>(K::KIND, owner) {
        Some(written) => {
            let mut as_written = owner.clone();
            *as_written.status_mut() = Some(K::Status::clone(&written));
            noted = as_written;
            &noted
        }
        None => owner,
    };
    let status = current.status_from(&observed, ctx.clock.now());
    let shown = HasStatus::status(current);
    if shown != Some(&status) {
        // What a user waits for (Ready, Degraded, any condition turning) and any change to a
        // Ready owner are written at once. Progress of a rollout before Ready (some pods ready)
        // may wait up to STATUS_GRACE; the names of its pods alone (created and not ready yet,
        // or an unready one replaced), which change nothing `kubectl get` shows, up to
        // POD_NAMES_GRACE. Both count from the first change held.
        if !K::STATUS_GRACE.is_zero() && !is_news(shown, &status) {
            let grace = match shown.is_some_and(|shown| K::only_pod_names_differ(shown, &status)) {
                true => K::POD_NAMES_GRACE,
                false => K::STATUS_GRACE,
            };
            if let Some(left) = ctx.hold_status(K::KIND, owner, grace) {
                return Ok(Action::requeue(left));
            }
        }
        write_status(ctx, K::KIND, owner, status).await?;
    }
    Ok(owner.settled(&prepared))
}

/// Makes the Ingress `owner` wants so, or deletes the one it controls when it wants none. An
/// Ingress not cached yet is left to its watch event, which brings another reconcile.
async fn ensure_ingress<K: Owner>(
    ctx: &Context,
    owner: &K,
    children: &Children,
    ns: &str,
    name: &str,
) -> Result<Option<Ensured<Ingress>>> {
    if let Some(want) = owner.ingress()? {
        let ensured = children::ensure(ctx, &children.ingresses, &children.notes, &want);
        return Ok(Some(ensured.await?));
    }
    let Some(cached) = children.ingresses.get(&Packed::key(name, ns)) else {
        return Ok(None);
    };
    let live = cached.object()?;
    let owner_uid = owner.meta().uid.clone().unwrap_or_default();
    if owner_uid.is_empty() || !children::controlled_by(live.meta(), &owner_uid) {
        return Ok(None);
    }
    let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), ns);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: live.meta().uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            let note = format!("Deleted Ingress {name}: spec.ingress was removed");
            ctx.publish(owner, EventType::Normal, reason::DELETED, note)
                .await;
        }
        // Gone already, or replaced by an object of another uid, which is not ours to delete.
        Err(e) if crate::is_status(&e, 404) || crate::is_status(&e, 409) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(None)
}

/// The child if it is ours, noting its creation; else its name conflict.
fn ours<K: Resource<DynamicType = ()>>(
    ensured: Ensured<K>,
    name: &str,
    created: &mut Vec<String>,
    conflicts: &mut Vec<NameConflict>,
) -> Option<Arc<K>> {
    match ensured {
        Ensured::Ours(applied) => {
            if applied.created {
                created.push(format!("{} {name}", K::kind(&())));
            }
            Some(applied.object)
        }
        Ensured::Foreign(c) => {
            conflicts.push(c);
            None
        }
    }
}

/// Whether `new` says something a user waits for: a first status (so `kubectl get` shows the
/// object's state from the start, and the first writes of many new objects spread out with
/// their creation instead of coming due together a grace later), Ready or Degraded, or a
/// condition that turned since `old`. Otherwise it is only progress.
fn is_news<S: OwnerStatus>(old: Option<&S>, new: &S) -> bool {
    let state = |s: &S, type_: &str| {
        s.conditions()
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    };
    let is_true = |type_| state(new, type_).as_deref() == Some(TRUE);
    old.is_none()
        || is_true(READY)
        || is_true(DEGRADED)
        || old.is_some_and(|old| {
            new.conditions()
                .iter()
                .any(|c| state(old, &c.type_).as_deref() != Some(c.status.as_str()))
        })
}

/// How far a Deployment's rollout to `wanted` pods is: the one check of every owner kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    pub wanted: i32,
    pub ready: i32,
    /// Every pod is of the current template and ready, and the Deployment's controller has seen
    /// its current spec.
    pub done: bool,
}

impl Rollout {
    pub fn of(deployment: &Deployment, wanted: i32) -> Self {
        let ds = deployment.status.clone().unwrap_or_default();
        let ready = ds.ready_replicas.unwrap_or(0);
        let observed =
            ds.observed_generation.unwrap_or(0) >= deployment.metadata.generation.unwrap_or(0);
        let done = observed
            && ds.updated_replicas.unwrap_or(0) == wanted
            && ds.replicas.unwrap_or(0) == wanted
            && ready == wanted;
        Self {
            wanted,
            ready,
            done,
        }
    }

    /// The rollout as its pods show it, when that is ahead of the Deployment's status.
    ///
    /// A pod's readiness reaches the Deployment's status only through the controller-manager:
    /// its ReplicaSet controller counts it, then its Deployment controller, each from a queue
    /// of its own, which falls tens of seconds behind when many Deployments roll out at once.
    /// The pods themselves say it first. They are counted only when every pod of the
    /// Deployment is known to be of its current template: while it has never changed since it
    /// was created (generation 1), or once its controller has seen its current spec and found
    /// only pods of the current template, as many as wanted. And only pods created since the
    /// Deployment count, so a lingering pod of a same-named one before it never does. Then the
    /// rollout is done when exactly `wanted` pods are live and all of them are ready; otherwise
    /// the Deployment's status stands, so this is never behind it.
    pub fn with_pods(mut self, deployment: &Deployment, pods: &[ListedPod]) -> Self {
        let meta = &deployment.metadata;
        let generation = meta.generation.unwrap_or(0);
        let rolled_to_current = deployment.status.as_ref().is_some_and(|s| {
            s.observed_generation == Some(generation)
                && s.updated_replicas == Some(self.wanted)
                && s.replicas == Some(self.wanted)
        });
        let current = deployment.spec.as_ref().and_then(|s| s.replicas) == Some(self.wanted)
            && (generation == 1 || rolled_to_current);
        let born = meta.creation_timestamp.as_ref().map(|t| t.0.as_second());
        let (true, Some(born)) = (current, born) else {
            return self;
        };
        let ready = pods
            .iter()
            .filter(|p| p.ready && p.created.is_some_and(|c| c >= born))
            .count();
        let ready = i32::try_from(ready).unwrap_or(i32::MAX);
        let all = usize::try_from(self.wanted).is_ok_and(|w| w == pods.len());
        self.done |= all && ready == self.wanted;
        self.ready = self.ready.max(ready);
        self
    }

    /// "2/3 pods ready".
    pub fn message(&self) -> String {
        format!("{}/{} pods ready", self.ready, self.wanted)
    }

    /// The four conditions of an owner whose state is its Deployment's: Ready, Available,
    /// Progressing and Degraded (the rollout stalled past its deadline, or pods cannot be made).
    pub fn conditions(
        &self,
        deployment: &Deployment,
        generation: Option<i64>,
        now: Time,
        previous: &[Condition],
    ) -> Vec<Condition> {
        let progressing = deployment_condition(deployment, PROGRESSING);
        let deadline_exceeded = progressing.is_some_and(|c| c.status == FALSE);
        let replica_failure =
            deployment_condition(deployment, REPLICA_FAILURE).filter(|c| c.status == TRUE);
        let degraded = deadline_exceeded || replica_failure.is_some();
        let degraded_message = replica_failure
            .or(progressing.filter(|_| deadline_exceeded))
            .and_then(|c| c.message.clone())
            .unwrap_or_default();
        // Every wanted pod ready is the minimum available, whether or not the Deployment's
        // status says so yet (see `with_pods`).
        let available = self.done
            || deployment_condition(deployment, AVAILABLE).is_some_and(|a| a.status == TRUE);
        let c = |type_: &str, ok: bool, reason: &str, message: String| {
            condition(
                type_,
                ok,
                reason,
                message,
                generation,
                now.clone(),
                previous,
            )
        };
        let message = self.message();
        vec![
            self.ready_condition(generation, now.clone(), previous),
            match available {
                true => c(
                    AVAILABLE,
                    true,
                    reason::MINIMUM_PODS_AVAILABLE,
                    message.clone(),
                ),
                false => c(
                    AVAILABLE,
                    false,
                    reason::MINIMUM_PODS_UNAVAILABLE,
                    message.clone(),
                ),
            },
            if degraded {
                c(
                    PROGRESSING,
                    false,
                    reason::ROLLOUT_STALLED,
                    degraded_message.clone(),
                )
            } else if self.done {
                let note = format!("{} pods up to date", self.wanted);
                c(PROGRESSING, false, reason::ROLLOUT_COMPLETE, note)
            } else {
                c(PROGRESSING, true, reason::ROLLING_OUT, message)
            },
            match degraded {
                true => c(DEGRADED, true, reason::DEPLOYMENT_FAILING, degraded_message),
                false => c(DEGRADED, false, reason::AS_EXPECTED, String::new()),
            },
        ]
    }

    /// The owner's Ready condition.
    pub fn ready_condition(
        &self,
        generation: Option<i64>,
        now: Time,
        previous: &[Condition],
    ) -> Condition {
        let (ok, reason) = match self.done {
            true => (true, reason::ALL_PODS_READY),
            false => (false, reason::PODS_NOT_READY),
        };
        condition(READY, ok, reason, self.message(), generation, now, previous)
    }
}

/// The condition of `type_` of a Deployment, if it has one.
pub fn deployment_condition<'a>(d: &'a Deployment, type_: &str) -> Option<&'a DeploymentCondition> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The conditions an owner kind has before any were written.
pub fn previous_conditions<K: Owner>(owner: &K) -> &[Condition] {
    HasStatus::status(owner)
        .map(OwnerStatus::conditions)
        .unwrap_or_default()
}

/// How often a blocked owner looks again: a foreign object may lack our labels, so no event comes.
pub const NAME_CONFLICT_REQUEUE: std::time::Duration = std::time::Duration::from_secs(60);

/// `previous` with Ready turned False, reason `NameConflict`, naming every conflicting object.
pub fn name_conflict_conditions(
    owner_kind: &str,
    previous: &[Condition],
    conflicts: &[NameConflict],
    generation: Option<i64>,
    now: Time,
) -> Vec<Condition> {
    let message = conflicts
        .iter()
        .map(|c| c.describe(owner_kind))
        .collect::<Vec<_>>()
        .join("; ");
    let ready = condition(
        READY,
        false,
        reason::NAME_CONFLICT,
        message,
        generation,
        now,
        previous,
    );
    let mut conditions: Vec<Condition> = previous.to_vec();
    match conditions.iter_mut().find(|c| c.type_ == READY) {
        Some(c) => *c = ready,
        None => conditions.insert(0, ready),
    }
    conditions
}

/// The note of a reason::CREATED event naming `children` (e.g. "Deployment cache"), if any.
pub fn created_note(children: &[String]) -> Option<String> {
    (!children.is_empty()).then(|| format!("Created {}", children.join(", ")))
}

/// The status of an owner kind: conditions and the generation they describe.
pub trait OwnerStatus: Default + Clone + PartialEq + Serialize + Send + Sync + 'static {
    fn conditions(&self) -> &[Condition];
    fn observe(&mut self, generation: Option<i64>, conditions: Vec<Condition>);
}

/// The statuses of the owner kinds: each has `conditions` and `observed_generation`.
macro_rules! owner_status {
    ($($status:ty),+) => {$(
        impl OwnerStatus for $status {
            fn conditions(&self) -> &[Condition] {
                &self.conditions
            }
            fn observe(&mut self, generation: Option<i64>, conditions: Vec<Condition>) {
                self.observed_generation = generation;
                self.conditions = conditions;
            }
        }
    )+};
}
owner_status!(
    kubesteer_api::MemcachedStatus,
    kubesteer_api::WelcomeStatus,
    kubesteer_api::ApplicationStatus
);

/// Writes `status` as `owner`'s, whole (a JSON patch), and notes it: until the owner's watch
/// brings the write back, [`Context::written_status`] stands for the cached status, so that a
/// reconcile in between (the event of a child, a slow watch) does not write it again.
async fn write_status<K>(
    ctx: &Context,
    kind: &'static str,
    owner: &K,
    status: K::Status,
) -> Result<()>
where
    K: Namespaced + HasStatus,
    K::Status: OwnerStatus,
{
    let (ns, name) = namespace_and_name(kind, owner)?;
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch_status(&name, &write_params(), &status_patch(&status)?)
        .await?;
    ctx.status_written(kind, owner, status);
    Ok(())
}

/// Reports taken child names of `owner` as Ready=False NameConflict, with a Warning event when
/// that is news, and looks again after `NAME_CONFLICT_REQUEUE`.
pub async fn report_conflicts<K>(
    ctx: &Context,
    kind: &'static str,
    owner: &K,
    conflicts: &[NameConflict],
) -> Result<Action>
where
    K: Namespaced + HasStatus,
    K::Status: OwnerStatus,
{
    let generation = owner.meta().generation;
    let written = ctx.written_status::<K, K::Status>(kind, owner);
    let shown = written.as_deref().or(owner.status());
    let mut status = shown.cloned().unwrap_or_default();
    let conditions = name_conflict_conditions(
        kind,
        status.conditions(),
        conflicts,
        generation,
        time(ctx.clock.now()),
    );
    status.observe(generation, conditions);
    if shown != Some(&status) {
        write_status(ctx, kind, owner, status).await?;
        let note = conflicts
            .iter()
            .map(|c| c.describe(kind))
            .collect::<Vec<_>>()
            .join("; ");
        ctx.publish(owner, EventType::Warning, reason::NAME_CONFLICT, note)
            .await;
    }
    Ok(Action::requeue(NAME_CONFLICT_REQUEUE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Unix seconds of 2026-11-29T10:00:00Z, when the Deployments below were created.
    const BORN: i64 = 1_795_946_400;

    /// A Deployment of `replicas` at `generation`, created at `BORN`, with `status`.
    fn deployment(generation: i64, replicas: i32, status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "cache", "namespace": "team", "generation": generation,
                "creationTimestamp": "2026-11-29T10:00:00Z"},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    /// A pod `name`, ready or not, created `after` seconds after `BORN`.
    fn pod(name: &str, ready: bool, after: i64) -> ListedPod {
        ListedPod {
            name: name.into(),
            ready,
            created: Some(BORN + after),
        }
    }

    fn state(r: &Rollout) -> (i32, bool) {
        (r.ready, r.done)
    }

    #[test]
    fn a_new_deployments_ready_pods_finish_its_rollout_before_its_status_says_so() {
        // The controller-manager has not counted the pod yet: no status at all.
        let d = deployment(1, 2, json!({}));
        let rollout = |pods: &[ListedPod]| Rollout::of(&d, 2).with_pods(&d, pods);
        assert_eq!(state(&Rollout::of(&d, 2)), (0, false));
        let both = [pod("cache-a", true, 1), pod("cache-b", true, 0)];
        assert_eq!(state(&rollout(&both)), (2, true));
        let conditions = rollout(&both).conditions(&d, Some(1), Time(Default::default()), &[]);
        let is_true = |t: &str| conditions.iter().any(|c| c.type_ == t && c.status == TRUE);
        assert!(is_true(READY) && is_true(AVAILABLE) && !is_true(PROGRESSING));
        // One not ready yet; one too many (a pod of a rollout it has no status of yet).
        let one = [pod("cache-a", true, 1), pod("cache-b", false, 1)];
        assert_eq!(state(&rollout(&one)), (1, false));
        let three = [
            pod("cache-a", true, 1),
            pod("cache-b", true, 1),
            pod("x", true, 1),
        ];
        assert!(!rollout(&three).done);
        // A pod from before the Deployment (of a same-named one deleted) never counts.
        let lingering = [pod("cache-a", true, 1), pod("cache-old", true, -30)];
        assert_eq!(state(&rollout(&lingering)), (1, false));
    }

    #[test]
    fn a_changed_deployments_pods_count_only_once_its_controller_has_rolled_them_all() {
        let ready = [pod("cache-a", true, 60), pod("cache-b", true, 60)];
        // Changed since (generation 2): its pods may still be of the old template.
        for status in [
            json!({}),
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2}),
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1}),
        ] {
            let d = deployment(2, 2, status);
            assert_eq!(state(&Rollout::of(&d, 2).with_pods(&d, &ready)), (0, false));
        }
        // Rolled to the current template, the pods not counted ready yet.
        let d = deployment(
            2,
            2,
            json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2}),
        );
        assert_eq!(state(&Rollout::of(&d, 2).with_pods(&d, &ready)), (2, true));
        // A Deployment of another size than wanted (an apply of the new size to come).
        let d = deployment(1, 3, json!({}));
        assert_eq!(state(&Rollout::of(&d, 2).with_pods(&d, &ready)), (0, false));
    }

    #[test]
    fn pods_never_put_a_rollout_behind_its_deployments_status() {
        let d = deployment(
            1,
            1,
            json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                "readyReplicas": 1}),
        );
        // The pod's ready event not seen yet: the status stands.
        let rollout = Rollout::of(&d, 1).with_pods(&d, &[pod("cache-a", false, 1)]);
        assert_eq!(state(&rollout), (1, true));
    }
}
