//! Which Scaler owns a target that several claim, decided in one place: the oldest claimant
//! (creationTimestamp, then uid) owns it. Admission denies a second claim, but two creates that
//! race, or one made while the webhook is down, let both in; the controller then scales the
//! target for the owner only, and the webhook looks claims up in the same index.
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use crate::scaler::scaler_id;
use crate::scaler::selector::{Matcher, Scope, TargetSelector};
use crate::scaler::target::Target;
use crate::Scaler;

/// A Scaler as `(namespace, name)`.
type ScalerKey = (String, String);

/// A Scaler as a claimant of targets. Ordered oldest first: by creationTimestamp, an object
/// not created yet (one under review) last; then by uid, so two created within the same
/// second are still told apart the same way everywhere.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Claimant {
    pub created: Option<Timestamp>,
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

impl Claimant {
    /// The claimant an object with `meta` is.
    pub fn of(meta: &ObjectMeta) -> Self {
        Self {
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            uid: meta.uid.clone().unwrap_or_default(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// How it is named to users: `namespace/name`, as in the target's record.
    pub fn id(&self) -> String {
        scaler_id(&self.namespace, &self.name)
    }

    fn is(&self, namespace: &str, name: &str) -> bool {
        self.namespace == namespace && self.name == name
    }
}

impl Ord for Claimant {
    fn cmp(&self, other: &Self) -> Ordering {
        let created = match (&self.created, &other.created) {
            (Some(a), Some(b)) => a.cmp(b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        created
            .then_with(|| self.uid.cmp(&other.uid))
            .then_with(|| (&self.namespace, &self.name).cmp(&(&other.namespace, &other.name)))
    }
}

impl PartialOrd for Claimant {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Scaler {
    /// Whether the spec is one the controller has not acted on yet: the Scaler was just created,
    /// edited or resumed (its status' observedGeneration is not its generation).
    pub fn spec_is_new(&self) -> bool {
        self.status.as_ref().and_then(|s| s.observed_generation) != self.metadata.generation
    }

    /// Every target this Scaler claims: those its spec names and those its status still lists,
    /// which it holds until it has given them back.
    pub fn claimed_targets(&self) -> BTreeSet<Target> {
        let own = self.metadata.namespace.as_deref().unwrap_or_default();
        let in_spec = self.spec.targets(own).map(|(t, ns)| t.target(ns));
        let in_status = self
            .status
            .iter()
            .flat_map(|s| &s.targets)
            .map(|t| Target::new(&t.api_version, &t.kind, &t.namespace, &t.name));
        in_spec.chain(in_status).collect()
    }
}

/// What one Scaler claims: the targets its spec names and those its status still lists, and its
/// selector. Kept small, as the controller and the webhook keep one for every Scaler of the
/// cluster: the targets are one sorted slice, each marked whether the spec names it (a
/// `BTreeSet` of one target allocates a node of eleven, 1.3 KiB), and the selector, which most
/// Scalers do not have, is boxed. The claimant and the targets are shared with the index's
/// map from target to claimants, not copied into it.
#[derive(Debug, Clone)]
struct Claim {
    claimant: Arc<Claimant>,
    /// Each claimed target, and whether the spec names it (else only the status lists it).
    targets: Box<[(Arc<Target>, bool)]>,
    selector: Option<Box<(TargetSelector, Matcher)>>,
}

/// An object a selector may pick, as the controller's watches saw it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// Its namespace's labels, when known.
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
}

impl Candidate<'_> {
    fn selected_by(&self, matcher: &Matcher) -> bool {
        matcher.selects(
            (self.group, self.kind),
            self.namespace,
            self.name,
            self.labels,
            self.namespace_labels,
        )
    }

    pub fn target(&self) -> Target {
        Target {
            group: self.group.to_string(),
            version: String::new(),
            kind: self.kind.to_string(),
            namespace: self.namespace.to_string(),
            name: self.name.to_string(),
        }
    }
}

/// From each target to the Scalers that claim it, for lookups in O(1) per target, and every
/// Scaler's selector.
#[derive(Debug, Clone, Default)]
pub struct ClaimIndex {
    /// target → claimants, oldest first (most targets have one: a `Vec` of one, where a
    /// `BTreeSet` would allocate a node of eleven).
    targets: HashMap<Arc<Target>, Vec<Arc<Claimant>>>,
    /// (namespace, name) of each Scaler → what it claims.
    scalers: HashMap<ScalerKey, Claim>,
    /// The Scalers with a selector, oldest first.
    selecting: BTreeSet<(Arc<Claimant>, ScalerKey)>,
}

impl ClaimIndex {
    /// The Scalers that claim `target`, oldest first.
    pub fn claimants(&self, target: &Target) -> impl Iterator<Item = &Claimant> {
        self.targets.get(target).into_iter().flatten().map(|c| &**c)
    }

    /// The owner of `target`: its oldest claimant.
    pub fn owner(&self, target: &Target) -> Option<&Claimant> {
        self.claimants(target).next()
    }

    /// The oldest other Scaler that claims `target` and is older than `me`, which therefore
    /// owns it; None when `me` is (or would be) the owner. `me` need not be in the index.
    pub fn older_claimant(&self, target: &Target, me: &Claimant) -> Option<&Claimant> {
        self.claimants(target)
            .find(|c| !c.is(&me.namespace, &me.name))
            .filter(|c| *c < me)
    }

    /// Another Scaler whose spec names `target`: it is that one's, whatever selects it.
    pub fn named_elsewhere(&self, target: &Target, me: &Claimant) -> Option<&Claimant> {
        self.claimants(target)
            .find(|c| !c.is(&me.namespace, &me.name) && self.names(c, target))
    }

    /// The oldest Scaler older than `me` whose spec names `target`: a second name for it is
    /// refused at admission. (One that holds it only by its selector, or until it has given
    /// it back, lets it go to `me`.)
    pub fn older_naming(&self, target: &Target, me: &Claimant) -> Option<&Claimant> {
        self.claimants(target)
            .find(|c| !c.is(&me.namespace, &me.name) && self.names(c, target))
            .filter(|c| *c < me)
    }

    fn names(&self, c: &Claimant, target: &Target) -> bool {
        self.scalers
            .get(&(c.namespace.clone(), c.name.clone()))
            .is_some_and(|claim| {
                let at = claim.targets.binary_search_by(|(t, _)| (**t).cmp(target));
                at.ok()
                    .and_then(|i| claim.targets.get(i))
                    .is_some_and(|(_, named)| *named)
            })
    }

    /// The oldest Scaler older than `me` whose selector picks `candidate`, which therefore
    /// scales it rather than `me`.
    pub fn older_selector(&self, candidate: &Candidate<'_>, me: &Claimant) -> Option<&Claimant> {
        self.selecting
            .iter()
            .take_while(|(c, _)| **c < *me)
            .filter(|(c, _)| !c.is(&me.namespace, &me.name))
            .find(|(_, key)| self.selects(key, candidate))
            .map(|(c, _)| &**c)
    }

    /// Every Scaler whose selector picks `candidate`.
    pub fn selectors_of<'a>(
        &'a self,
        candidate: &'a Candidate<'_>,
    ) -> impl Iterator<Item = &'a Claimant> + 'a {
        self.selecting
            .iter()
            .filter(|(_, key)| self.selects(key, candidate))
            .map(|(c, _)| &**c)
    }

    /// Whether the Scaler `namespace/name` selects `candidate`.
    pub fn selected_by(&self, namespace: &str, name: &str, candidate: &Candidate<'_>) -> bool {
        self.selects(&(namespace.to_string(), name.to_string()), candidate)
    }

    /// The selector of each Scaler that has one, with the Scaler's namespace.
    pub fn selectors(&self) -> impl Iterator<Item = (&Claimant, &TargetSelector)> {
        self.selecting.iter().filter_map(|(c, key)| {
            let (selector, _) = self.scalers.get(key)?.selector.as_deref()?;
            Some((&**c, selector))
        })
    }

    fn selects(&self, key: &ScalerKey, candidate: &Candidate<'_>) -> bool {
        self.scalers
            .get(key)
            .and_then(|c| c.selector.as_deref())
            .is_some_and(|(_, m)| candidate.selected_by(m))
    }

    /// Records what `scaler` claims now. Returns the other Scalers that claim a target it
    /// claimed before or claims now, when its claims changed: whose ownership may have changed;
    /// and, when its selector changed or it is new or gone, the other Scalers whose selectors
    /// may pick the same objects.
    pub fn upsert(&mut self, scaler: &Scaler) -> BTreeSet<Claimant> {
        let claimant = Arc::new(Claimant::of(&scaler.metadata));
        let targets = scaler.claimed_targets();
        let own = claimant.namespace.clone();
        let named: BTreeSet<Target> = scaler
            .spec
            .targets(&own)
            .map(|(t, ns)| t.target(ns))
            .collect();
        let selector = scaler.spec.selector.as_ref().and_then(|s| {
            let matcher = s.matcher(&own).ok()?;
            Some((s.clone(), matcher))
        });
        let key = (claimant.namespace.clone(), claimant.name.clone());
        let before = self.scalers.get(&key);
        let same_targets = |claimed: &[(Arc<Target>, bool)]| {
            claimed.len() == targets.len()
                && claimed
                    .iter()
                    .zip(&targets)
                    .all(|((t, n), target)| **t == *target && *n == named.contains(target))
        };
        let unchanged = before.is_some_and(|c| {
            c.claimant == claimant
                && same_targets(&c.targets)
                && c.selector.as_ref().map(|s| &s.0) == selector.as_ref().map(|s| &s.0)
        });
        if unchanged {
            return BTreeSet::new();
        }
        let selector_changed = before.map(|c| c.selector.as_ref().map(|s| &s.0))
            != Some(selector.as_ref().map(|s| &s.0));
        let mut overlapping = BTreeSet::new();
        if selector_changed {
            overlapping.extend(self.overlapping(&key));
        }
        let mut touched = self.forget(&key);
        let mut claimed = Vec::with_capacity(targets.len());
        for target in &targets {
            let shared = match self.targets.get_key_value(target) {
                Some((shared, _)) => shared.clone(),
                None => Arc::new(target.clone()),
            };
            let claimants = self.targets.entry(shared.clone()).or_default();
            if let Err(at) = claimants.binary_search(&claimant) {
                // Exactly one more: a `Vec` grows to four at its first push.
                claimants.reserve_exact(1);
                claimants.insert(at, claimant.clone());
            }
            claimed.push((shared, named.contains(target)));
        }
        touched.extend(targets.iter().cloned());
        if selector.is_some() {
            self.selecting.insert((claimant.clone(), key.clone()));
        }
        self.scalers.insert(
            key.clone(),
            Claim {
                claimant,
                targets: claimed.into_boxed_slice(),
                selector: selector.map(Box::new),
            },
        );
        if selector_changed {
            overlapping.extend(self.overlapping(&key));
        }
        let mut others = self.others_on(&touched, &key);
        others.extend(overlapping);
        others
    }

    /// Forgets the Scaler `namespace/name`. Returns the other Scalers that claim a target it
    /// claimed, and those whose selectors may pick what its selector picked: whose ownership
    /// may have changed.
    pub fn remove(&mut self, namespace: &str, name: &str) -> BTreeSet<Claimant> {
        let key = (namespace.to_string(), name.to_string());
        let overlapping = self.overlapping(&key);
        let touched = self.forget(&key);
        let mut others = self.others_on(&touched, &key);
        others.extend(overlapping);
        others
    }

    /// The other Scalers whose selectors may pick an object the selector of `key` picks: those
    /// searching a namespace it searches (any, when either selects namespaces by label).
    fn overlapping(&self, key: &ScalerKey) -> BTreeSet<Claimant> {
        let Some((_, mine)) = self.scalers.get(key).and_then(|c| c.selector.as_deref()) else {
            return BTreeSet::new();
        };
        self.selecting
            .iter()
            .filter(|(_, other)| other != key)
            .filter(|(_, other)| {
                let Some((_, theirs)) = self.scalers.get(other).and_then(|c| c.selector.as_deref())
                else {
                    return false;
                };
                match (&mine.scope, &theirs.scope) {
                    (Scope::Listed(a), Scope::Listed(b)) => !a.is_disjoint(b),
                    _ => true,
                }
            })
            .map(|(c, _)| Claimant::clone(c))
            .collect()
    }

    /// How many Scalers the index holds.
    pub fn len(&self) -> usize {
        self.scalers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scalers.is_empty()
    }

    /// Removes a Scaler's claims; returns the targets it claimed.
    fn forget(&mut self, key: &ScalerKey) -> BTreeSet<Target> {
        let Some(Claim {
            claimant, targets, ..
        }) = self.scalers.remove(key)
        else {
            return BTreeSet::new();
        };
        self.selecting.remove(&(claimant.clone(), key.clone()));
        for (target, _) in &targets {
            if let Some(claimants) = self.targets.get_mut(target) {
                claimants.retain(|c| *c != claimant);
                if claimants.is_empty() {
                    self.targets.remove(target);
                }
            }
        }
        targets
            .into_vec()
            .into_iter()
            .map(|(t, _)| Arc::unwrap_or_clone(t))
            .collect()
    }

    fn others_on(&self, targets: &BTreeSet<Target>, me: &ScalerKey) -> BTreeSet<Claimant> {
        targets
            .iter()
            .flat_map(|t| self.claimants(t))
            .filter(|c| !c.is(&me.0, &me.1))
            .cloned()
            .collect()
    }
}
/// A [`ClaimIndex`] shared between the watch that keeps it and the readers.
#[derive(Debug, Clone, Default)]
pub struct Claims(Arc<RwLock<ClaimIndex>>);

impl Claims {
    /// The index to read; hold it only briefly (never across an await).
    pub fn read(&self) -> RwLockReadGuard<'_, ClaimIndex> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The index to change, as a watch of Scalers does (`kubesteer_runtime::claims::follow`);
    /// hold it only briefly (never across an await).
    pub fn write(&self) -> std::sync::RwLockWriteGuard<'_, ClaimIndex> {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scaler(name: &str, created: &str, uid: &str, targets: serde_json::Value) -> Scaler {
        let mut s: Scaler = serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
            "metadata": {"name": name, "namespace": "team", "uid": uid},
            "spec": {"scaleTargetRefs": targets, "windows": [{"start": 9, "end": 17}]},
        }))
        .unwrap();
        if !created.is_empty() {
            s.metadata.creation_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created.parse().unwrap()),
            );
        }
        s
    }

    fn web_in(namespace: &str, name: &str) -> Target {
        Target::deployment(namespace, name)
    }

    fn names<'a>(claimants: impl IntoIterator<Item = &'a Claimant>) -> Vec<String> {
        claimants.into_iter().map(Claimant::id).collect()
    }

    #[test]
    fn the_older_scaler_owns_then_the_lower_uid_then_one_not_yet_created_comes_last() {
        let web = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]);
        let old = Claimant::of(&scaler("old", "2026-01-01T00:00:00Z", "zzz", web.clone()).metadata);
        let young =
            Claimant::of(&scaler("young", "2026-01-01T00:00:01Z", "aaa", web.clone()).metadata);
        let twin =
            Claimant::of(&scaler("twin", "2026-01-01T00:00:01Z", "bbb", web.clone()).metadata);
        let unborn = Claimant::of(&scaler("new", "", "", web).metadata);
        assert!(old < young, "creationTimestamp first, whatever the uid");
        assert!(young < twin, "the same second: the lower uid is older");
        assert!(twin < unborn, "an object under review is the youngest");
        let mut all = vec![unborn.clone(), twin.clone(), old.clone(), young.clone()];
        all.sort();
        assert_eq!(all, vec![old, young, twin, unborn]);
    }

    #[test]
    fn the_index_names_the_owner_and_who_to_tell_when_claims_change() {
        let mut index = ClaimIndex::default();
        let a = scaler(
            "a",
            "2026-01-01T00:00:00Z",
            "u1",
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "prod"}]),
        );
        let b = scaler(
            "b",
            "2026-01-02T00:00:00Z",
            "u2",
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "team"}]),
        );
        assert!(
            index.upsert(&a).is_empty(),
            "no one else claims its targets"
        );
        assert_eq!(names(&index.upsert(&b)), vec!["team/a"]);
        assert_eq!(
            index
                .owner(&web_in("team", "web"))
                .map(Claimant::id)
                .as_deref(),
            Some("team/a")
        );
        assert_eq!(
            names(index.claimants(&web_in("team", "web"))),
            vec!["team/a", "team/b"]
        );
        assert_eq!(
            names(index.claimants(&web_in("prod", "api"))),
            vec!["team/a"]
        );

        let me_b = Claimant::of(&b.metadata);
        let me_a = Claimant::of(&a.metadata);
        assert_eq!(
            index
                .older_claimant(&web_in("team", "web"), &me_b)
                .map(Claimant::id)
                .as_deref(),
            Some("team/a")
        );
        assert_eq!(
            index.older_claimant(&web_in("team", "web"), &me_a),
            None,
            "the owner has none"
        );
        assert_eq!(index.older_claimant(&web_in("team", "db"), &me_b), None);
        let reviewed = Claimant {
            namespace: "team".into(),
            name: "c".into(),
            ..Default::default()
        };
        assert_eq!(
            index
                .older_claimant(&web_in("team", "web"), &reviewed)
                .map(Claimant::id)
                .as_deref(),
            Some("team/a"),
            "a Scaler not yet created is younger than every stored one"
        );

        // The same claims again (a status write, say) tell no one.
        assert!(index.upsert(&a).is_empty());
        // The owner lets go of web: b owns it now and is told so.
        let mut a2 = a.clone();
        a2.spec.scale_target_refs.retain(|t| t.name != "web");
        assert_eq!(names(&index.upsert(&a2)), vec!["team/b"]);
        assert_eq!(
            index
                .owner(&web_in("team", "web"))
                .map(Claimant::id)
                .as_deref(),
            Some("team/b")
        );
        // Deleting a Scaler tells those that shared a target with it.
        index.upsert(&a);
        assert_eq!(names(&index.remove("team", "a")), vec!["team/b"]);
        assert_eq!(
            names(index.claimants(&web_in("team", "web"))),
            vec!["team/b"]
        );
        assert_eq!(index.claimants(&web_in("prod", "api")).count(), 0);
        assert_eq!(index.len(), 1);
        assert!(index.remove("team", "b").is_empty());
        assert!(index.is_empty() && index.targets.is_empty(), "{index:?}");
    }

    #[test]
    fn a_target_is_its_group_kind_namespace_and_name_in_any_version() {
        let beta: Scaler = serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
            "metadata": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "b", "namespace": "team"},
            "spec": {"scaleTargetRefs": [
                {"apiVersion": "apps/v1beta2", "kind": "Deployment", "name": "web"},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "namespace": "data"}
            ], "windows": [{"start": 9, "end": 17}]},
        }))
        .unwrap();

        let db = Target::new("apps/v1", "StatefulSet", "data", "web");
        assert_eq!(
            beta.claimed_targets(),
            BTreeSet::from([web_in("team", "web"), db.clone()]),
            "the group and kind, whatever the version"
        );
        assert_eq!(crate::scaler::target::group_of("v1"), "");
        assert_eq!(db.to_string(), "StatefulSet data/web");
    }

    #[test]
    fn a_target_still_in_the_status_stays_claimed_until_given_back() {
        let mut index = ClaimIndex::default();
        let mut a = scaler(
            "a",
            "2026-01-01T00:00:00Z",
            "u1",
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}]),
        );
        a.status = Some(crate::ScalerStatus {
            targets: vec![crate::scaler::v1beta1::TargetStatus {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                namespace: "team".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        index.upsert(&a);
        assert_eq!(
            index
                .owner(&web_in("team", "web"))
                .map(Claimant::id)
                .as_deref(),
            Some("team/a")
        );
        a.status = None;
        index.upsert(&a);
        assert_eq!(index.owner(&web_in("team", "web")), None);
    }
}
