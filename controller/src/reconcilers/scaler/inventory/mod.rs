//! What Scaler selectors may pick: every object of each selected kind and every namespace's
//! labels, kept from watches of their metadata (names, labels and the Scaler whose record an
//! object carries, nothing else), and which Scalers to wake when one of them changes.
//!
//! Deployments, StatefulSets and HPAs are watched from the first Scaler seen (any Deployment or
//! StatefulSet may be a named target too), so a cluster without Scalers pays for none of these
//! watches; another kind from the first time a selector names it. An object that starts or
//! stops matching wakes the Scalers concerned from its watch event, never by polling.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use kubesteer_api::keys::annotation::{APPLIED, ORIGINAL_REPLICAS_OWNER};
use kubesteer_api::scaler::claims::{Candidate, ClaimIndex, Claimant, Claims};
use kubesteer_api::scaler::savings::template_requests;
use kubesteer_api::scaler::target::Target;
use kubesteer_api::Scaler;
use kubesteer_runtime::health::{self, Health};
use kubesteer_runtime::watch::{self as tolerant, map_event};
use tokio::sync::watch;
use tracing::warn;

use super::workload::{kept, replicas_in_spec, replicas_in_spec_kind, spec_replicas, Current};

mod watches;

/// (group, kind).
type KindKey = (String, String);
/// A target an HPA scales: (group, kind, name).
type Scaled = (String, String, String);
/// Per namespace, each target HPAs scale and how many.
type Autoscaled = HashMap<String, BTreeMap<Scaled, usize>>;

/// One watched object: its labels and the Scaler (`namespace/name`) whose record it carries.
/// 40 bytes, as the inventory holds one for every Deployment of the cluster in the slots of
/// its maps, up to half of them empty: the target as read is boxed (it would take 96 more).
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    labels: Labels,
    holder: Option<Box<str>>,
    /// For the kinds watched whole (Deployments, StatefulSets): the target as a reconcile
    /// reads it, with kubesteer's annotations only, so a reconcile needs no read of it.
    current: Option<Box<Current>>,
}

impl Entry {
    fn of(meta: &kube::core::ObjectMeta, replicas: Option<i32>) -> Self {
        Self {
            labels: Labels::of(meta.labels.as_ref()),
            holder: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ORIGINAL_REPLICAS_OWNER))
                .map(|h| h.as_str().into()),
            current: replicas.map(|r| Box::new(Current::keeping(meta, r, is_record))),
        }
    }
}

/// The prefix of the annotations a reconcile reads on a target (its records).
const KUBESTEER_PREFIX: &str = "kubesteer.io/";

/// Whether a target's annotation `key` is one of the records a Scaler's reconcile reads:
/// kubesteer's, but for the fingerprint its controller stamps on its own children. Only those
/// are copied, so most Deployments keep no map at all (a map emptied after a copy would keep a
/// node of 0.5 KiB: the inventory holds every Deployment of the cluster).
fn is_record(key: &str) -> bool {
    key.starts_with(KUBESTEER_PREFIX) && key != APPLIED
}

/// An object's labels in one allocation (`key NUL value NUL ...`, sorted by key), where a map
/// takes one node of eleven slots and two strings per label: the inventory keeps every
/// Deployment and StatefulSet of the cluster. Label keys and values never contain NUL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Labels(Box<str>);

impl Labels {
    fn of(labels: Option<&BTreeMap<String, String>>) -> Self {
        let mut packed = String::new();
        for (k, v) in labels.into_iter().flatten() {
            if !packed.is_empty() {
                packed.push('\0');
            }
            packed.push_str(k);
            packed.push('\0');
            packed.push_str(v);
        }
        Self(packed.into_boxed_str())
    }

    /// The labels as a map, as selectors match them.
    fn map(&self) -> BTreeMap<String, String> {
        let mut parts = self.0.split('\0');
        let mut map = BTreeMap::new();
        while let (Some(k), Some(v)) = (parts.next(), parts.next()) {
            map.insert(k.to_string(), v.to_string());
        }
        map
    }
}

/// The kinds watched whole for every Scaler: (group, version, kind, plural).
const WORKLOADS: [(&str, &str, &str, &str); 2] = [
    ("apps", "v1", "Deployment", "deployments"),
    ("apps", "v1", "StatefulSet", "statefulsets"),
];

/// One watch event, as the inventory keeps it: namespace, name and entry.
type Kept = (String, String, Entry);

/// The objects of one kind in one namespace: name → entry.
type Names = BTreeMap<Box<str>, Entry>;

/// The objects of one kind: namespace → name → entry.
#[derive(Debug, Default)]
struct Objects {
    api_version: String,
    /// Whether the watch has listed them all once.
    synced: bool,
    by_namespace: BTreeMap<String, Names>,
}

#[derive(Debug, Default)]
struct State {
    kinds: HashMap<KindKey, Objects>,
    /// The targets HorizontalPodAutoscalers scale, per namespace: (group, kind, name) → how
    /// many HPAs; None until the watch has listed them all once.
    autoscaled: Option<Autoscaled>,
    /// Each target whose HPA a KEDA ScaledObject owned when last seen: (namespace, group, kind,
    /// name) → the ScaledObject. Kept after the HPA goes, since KEDA deletes it while paused.
    keda: HashMap<(String, String, String, String), String>,
    /// Every namespace's labels, once a selector needs them.
    namespaces: Option<HashMap<String, BTreeMap<String, String>>>,
}

/// What a watch needs to run: set once per run of the controllers.
#[derive(Clone)]
struct Runner {
    client: Client,
    health: Health,
    namespace: Option<String>,
    wake: UnboundedSender<ObjectRef<Scaler>>,
    stop: watch::Receiver<bool>,
}

/// The objects selectors may pick (see the module docs). Cheap to clone: one shared state.
#[derive(Clone, Default)]
pub struct Inventory {
    state: Arc<RwLock<State>>,
    watching: Arc<Mutex<BTreeSet<KindKey>>>,
    runner: Arc<OnceLock<Runner>>,
    /// Set once the watches of every Scaler's kinds (Deployments, StatefulSets, HPAs) run.
    started: Arc<OnceLock<()>>,
    /// Told each time a kind's watch has listed whole.
    listed: Arc<tokio::sync::Notify>,
}

/// What a Scaler's selector picks now.
#[derive(Debug, Default)]
pub struct Selected {
    /// Picked and this Scaler's: no other Scaler names them, no older selector picks them.
    pub mine: Vec<Target>,
    /// Whether every selected kind has been listed once (before that, nothing is given back
    /// for having stopped matching).
    pub complete: bool,
}

impl Inventory {
    /// The KEDA ScaledObject whose HPA scaled `target` when last seen (it may be paused now,
    /// its HPA deleted).
    pub fn scaled_object_of(&self, target: &Target) -> Option<String> {
        let key = (
            target.namespace.clone(),
            target.group.clone(),
            target.kind.clone(),
            target.name.clone(),
        );
        self.read().keda.get(&key).cloned()
    }

    /// Whether no HorizontalPodAutoscaler scales `target`, as the watch knows: false until it
    /// has listed them once (then the HPAs are read).
    pub fn surely_unscaled(&self, target: &Target) -> bool {
        let state = self.read();
        let Some(autoscaled) = &state.autoscaled else {
            return false;
        };
        let key = (
            target.group.clone(),
            target.kind.clone(),
            target.name.clone(),
        );
        !autoscaled
            .get(&target.namespace)
            .is_some_and(|t| t.contains_key(&key))
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// What the selector of `scaler` (the claimant `me`, in namespace `own`) picks now, as
    /// `claims` arbitrates: an object another Scaler names is that one's; of two selectors
    /// that pick one object, the older Scaler's.
    pub fn selected(&self, scaler: &Scaler, me: &Claimant, claims: &ClaimIndex) -> Selected {
        let own = me.namespace.as_str();
        let Some(selector) = &scaler.spec.selector else {
            return Selected {
                complete: true,
                ..Selected::default()
            };
        };
        let Ok(matcher) = selector.matcher(own) else {
            return Selected::default();
        };
        let state = self.read();
        let mut mine = Vec::new();
        let mut complete = true;
        let listed = selector.listed_namespaces(own);
        if listed.is_none() && state.namespaces.is_none() {
            complete = false;
        }
        for (api_version, kind) in selector.kinds() {
            let group = kubesteer_api::scaler::target::group_of(&api_version).to_string();
            let Some(objects) = state.kinds.get(&(group.clone(), kind.clone())) else {
                complete = false;
                continue;
            };
            complete &= objects.synced;
            let namespaces: Box<dyn Iterator<Item = (&String, &Names)>> = match &listed {
                Some(names) => Box::new(
                    names
                        .iter()
                        .filter_map(|n| objects.by_namespace.get_key_value(*n)),
                ),
                None => Box::new(objects.by_namespace.iter()),
            };
            for (ns, names) in namespaces {
                let ns_labels = state.namespaces.as_ref().and_then(|n| n.get(ns));
                for (name, entry) in names {
                    let labels = entry.labels.map();
                    let candidate = Candidate {
                        group: &group,
                        kind: &kind,
                        namespace: ns,
                        name,
                        labels: &labels,
                        namespace_labels: ns_labels,
                    };
                    if !matcher.selects((&group, &kind), ns, name, &labels, ns_labels) {
                        continue;
                    }
                    let target = Target::new(&objects.api_version, &kind, ns, name);
                    if claims.named_elsewhere(&target, me).is_some()
                        || claims.older_selector(&candidate, me).is_some()
                    {
                        continue;
                    }
                    mine.push(target);
                }
            }
        }
        Selected { mine, complete }
    }

    /// The objects whose record names the Scaler `me` (`namespace/name`): what it holds,
    /// selected or not.
    pub fn held_by(&self, me: &str) -> Vec<Target> {
        let state = self.read();
        let mut held = Vec::new();
        for ((_, kind), objects) in &state.kinds {
            for (ns, names) in &objects.by_namespace {
                for (name, entry) in names {
                    if entry.holder.as_deref() == Some(me) {
                        held.push(Target::new(&objects.api_version, kind, ns, name));
                    }
                }
            }
        }
        held
    }

    /// The target as a reconcile reads it, from the watch of its kind: Some(None) when that
    /// watch has listed everything and it is not there; None when this kind is not watched
    /// whole or not listed yet (then it is read from the apiserver).
    pub fn current(&self, target: &Target) -> Option<Option<Current>> {
        let state = self.read();
        let objects = state
            .kinds
            .get(&(target.group.clone(), target.kind.clone()))?;
        if !objects.synced {
            return None;
        }
        let entry = objects
            .by_namespace
            .get(&target.namespace)
            .and_then(|n| n.get(target.name.as_str()));
        match entry {
            Some(e) => Some(Some(Current::clone(e.current.as_deref()?))),
            // Only a kind watched whole knows that an object is not there.
            None if replicas_in_spec_kind(&target.group, &target.kind) => Some(None),
            None => None,
        }
    }

    /// Keeps what the Scaler itself just wrote to `target` (the apiserver's answer), unless
    /// the watch already brought something newer: a reconcile right after its own write then
    /// reads what it wrote.
    pub fn remember(&self, target: &Target, written: &Current) {
        let mut state = self.write();
        let Some(entry) = state
            .kinds
            .get_mut(&(target.group.clone(), target.kind.clone()))
            .and_then(|o| o.by_namespace.get_mut(&target.namespace))
            .and_then(|n| n.get_mut(target.name.as_str()))
        else {
            return;
        };
        let version = |c: &Current| {
            c.resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        let newer = match (entry.current.as_deref().and_then(version), version(written)) {
            (Some(have), Some(got)) => got > have,
            _ => false,
        };
        if newer {
            // A write through /scale answers without the pod template: its requests are kept.
            let requests = written
                .requests
                .or(entry.current.as_ref().and_then(|c| c.requests));
            let current = Current {
                annotations: kept(&written.annotations, is_record),
                requests,
                ..written.clone()
            };
            entry.holder = current
                .annotations
                .get(ORIGINAL_REPLICAS_OWNER)
                .map(|h| h.as_str().into());
            entry.current = Some(Box::new(current));
        }
    }

    /// Whether the selector of the Scaler `namespace/name` picks the object `target` (group,
    /// kind, namespace, name), as far as the watches know it.
    pub fn selects(&self, claims: &ClaimIndex, scaler: (&str, &str), target: &Target) -> bool {
        let state = self.read();
        let Some(objects) = state
            .kinds
            .get(&(target.group.clone(), target.kind.clone()))
        else {
            return false;
        };
        let Some(entry) = objects
            .by_namespace
            .get(&target.namespace)
            .and_then(|n| n.get(target.name.as_str()))
        else {
            return false;
        };
        let labels = entry.labels.map();
        let candidate = Candidate {
            group: &target.group,
            kind: &target.kind,
            namespace: &target.namespace,
            name: &target.name,
            labels: &labels,
            namespace_labels: state
                .namespaces
                .as_ref()
                .and_then(|n| n.get(&target.namespace)),
        };
        claims.selected_by(scaler.0, scaler.1, &candidate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_kept_in_one_string_and_matched_as_a_map() {
        let map: BTreeMap<String, String> = [
            ("app.kubernetes.io/name", "memcached"),
            ("tier", "web"),
            ("empty", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let labels = Labels::of(Some(&map));
        assert_eq!(labels.map(), map);
        assert_eq!(Labels::of(None).map(), BTreeMap::new());
        assert_eq!(Labels::of(Some(&BTreeMap::new())), Labels::default());
        let one: BTreeMap<String, String> = [("a".to_string(), String::new())].into();
        assert_eq!(Labels::of(Some(&one)).map(), one);
    }

    #[test]
    fn a_target_keeps_kubesteers_records_but_not_its_childrens_fingerprint() {
        let annotations: BTreeMap<String, String> = [
            (ORIGINAL_REPLICAS_OWNER, "team/night"),
            (APPLIED, "0123456789abcdef"),
            ("deployment.kubernetes.io/revision", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let meta = kube::core::ObjectMeta {
            annotations: Some(annotations),
            ..Default::default()
        };
        let kept = Entry::of(&meta, Some(1)).current.unwrap_or_default();
        assert_eq!(std::mem::size_of::<Entry>(), 40);
        assert_eq!(
            kept.annotations
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            [ORIGINAL_REPLICAS_OWNER]
        );
    }

    #[test]
    fn a_write_through_scale_keeps_the_pod_requests_the_watch_read() {
        use kubesteer_api::scaler::savings::PodRequests;
        let inventory = Inventory::default();
        let target = Target::deployment("team", "web");
        let requests = PodRequests {
            cpu_millicores: 100,
            memory_bytes: 64 << 20,
        };
        let read = Current {
            resource_version: Some("41".into()),
            replicas: 3,
            requests: Some(requests),
            ..Current::default()
        };
        {
            let mut state = inventory.write();
            let objects = state
                .kinds
                .entry(("apps".into(), "Deployment".into()))
                .or_default();
            objects.synced = true;
            let entry = Entry {
                current: Some(Box::new(read)),
                ..Entry::of(&kube::core::ObjectMeta::default(), None)
            };
            objects
                .by_namespace
                .entry("team".into())
                .or_default()
                .insert("web".into(), entry);
        }
        // /scale answers with the replicas and no template.
        let written = Current {
            resource_version: Some("42".into()),
            replicas: 0,
            ..Current::default()
        };
        inventory.remember(&target, &written);
        let now = inventory.current(&target).flatten().unwrap_or_default();
        assert_eq!((now.replicas, now.requests), (0, Some(requests)));
    }

    #[tokio::test]
    async fn the_workloads_are_watched_from_the_first_scaler_only() {
        use crate::fixtures::{empty_list, is_watch, start_inventory};
        let inventory = Inventory::default();
        // Never started: nothing to wait for.
        assert!(inventory.workloads_listed());
        let (mut handle, stop_tx) = start_inventory(&inventory);
        assert!(!inventory.workloads_listed());
        let claims = Claims::default();
        // Without a Scaler, no request: a cluster with none pays for no watch.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            futures::poll!(std::pin::pin!(handle.next_request())).is_pending(),
            "a request before any Scaler"
        );
        inventory.watch_workloads(&claims);
        inventory.watch_workloads(&claims);
        let wait = std::time::Duration::from_secs(10);
        let mut listed = BTreeSet::new();
        while listed.len() < 3 {
            let (request, reply) = tokio::time::timeout(wait, handle.next_request())
                .await
                .expect("the first lists within 10 s")
                .expect("a request");
            let path = request.uri().path().to_string();
            assert!(!is_watch(&request), "{path}: a watch before its list");
            assert!(listed.insert(path.clone()), "{path} listed twice");
            reply.send_response(empty_list());
        }
        assert_eq!(
            listed.into_iter().collect::<Vec<_>>(),
            [
                "/apis/apps/v1/deployments",
                "/apis/apps/v1/statefulsets",
                "/apis/autoscaling/v2/horizontalpodautoscalers",
            ]
        );
        let deadline = tokio::time::Instant::now() + wait;
        while !inventory.workloads_listed() {
            assert!(tokio::time::Instant::now() < deadline, "not listed in 10 s");
            tokio::task::yield_now().await;
        }
        let _ = stop_tx.send(true);
    }
}
