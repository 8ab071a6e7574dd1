//! The claim index (`kubesteer_api::scaler::claims`) kept in step with a watch of Scalers.
use std::collections::BTreeSet;

use kube::runtime::watcher::Event;
use kubesteer_api::scaler::claims::{ClaimIndex, Claimant, Claims};
use kubesteer_api::Scaler;

/// A function that keeps `claims` in step with a watch of Scalers, event by event, and returns
/// the Scalers whose ownership of a target may have changed with the event. A relist replaces
/// the index whole when it is done, as a reflector's store is.
pub fn follow(claims: &Claims) -> impl FnMut(&Event<Scaler>) -> BTreeSet<Claimant> {
    let claims = claims.clone();
    let mut relisted: Option<ClaimIndex> = None;
    move |event| match event {
        Event::Apply(s) => claims.write().upsert(s),
        Event::Delete(s) => claims.write().remove(
            s.metadata.namespace.as_deref().unwrap_or_default(),
            s.metadata.name.as_deref().unwrap_or_default(),
        ),
        Event::Init => {
            relisted = Some(ClaimIndex::default());
            BTreeSet::new()
        }
        Event::InitApply(s) => {
            relisted.get_or_insert_with(ClaimIndex::default).upsert(s);
            BTreeSet::new()
        }
        // Every Scaler is reconciled after a relist anyway, so none is named here.
        Event::InitDone => {
            if let Some(index) = relisted.take() {
                *claims.write() = index;
            }
            BTreeSet::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use kubesteer_api::scaler::target::Target;
    use serde_json::json;

    use super::*;

    fn scaler(name: &str, created: &str, uid: &str) -> Scaler {
        let mut s: Scaler = serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
            "metadata": {"name": name, "namespace": "team", "uid": uid},
            "spec": {
                "scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                "windows": [{"start": 9, "end": 17}],
            },
        }))
        .unwrap();
        s.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            created.parse().unwrap(),
        ));
        s
    }

    fn names<'a>(claimants: impl IntoIterator<Item = &'a Claimant>) -> Vec<String> {
        claimants.into_iter().map(Claimant::id).collect()
    }

    #[test]
    fn the_watch_keeps_the_index_and_a_relist_replaces_it_when_done() {
        let claims = Claims::default();
        let mut follow = follow(&claims);
        let web = Target::deployment("team", "web");
        let a = scaler("a", "2026-01-01T00:00:00Z", "u1");
        let b = scaler("b", "2026-01-02T00:00:00Z", "u2");
        assert!(follow(&Event::Apply(a.clone())).is_empty());
        assert_eq!(names(&follow(&Event::Apply(b.clone()))), vec!["team/a"]);
        // A relist in which only b is left: the old picture holds until it is done.
        follow(&Event::Init);
        follow(&Event::InitApply(b.clone()));
        assert_eq!(claims.read().len(), 2);
        follow(&Event::InitDone);
        assert_eq!(names(claims.read().claimants(&web)), vec!["team/b"]);
        follow(&Event::Apply(a.clone()));
        assert_eq!(names(&follow(&Event::Delete(a))), vec!["team/b"]);
        assert_eq!(
            claims.read().owner(&web).map(Claimant::id).as_deref(),
            Some("team/b")
        );
    }
}
