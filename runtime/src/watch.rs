//! Watches that survive one bad object, for the webhook and the controller.
//!
//! A typed watch decodes a whole list at once, so a single stored object that does not decode
//! (an integer out of range written under an older schema, say) fails every list and stalls every
//! object of the kind. These watches decode each object on its own: one that does not decode is
//! reported to a callback, with the path of the field at fault, and left out; the rest flow on.
use std::time::Duration;

use futures::{future, Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::{self, Event, ExponentialBackoff};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

/// The longest wait between two attempts of a failing watch, before jitter of up to as much
/// again. kube's default is 30 s, so a watch came back up to a minute after the apiserver did;
/// a process has a handful of watches, which may retry more eagerly.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The backoff of every watch (`.backoff(backoff())`): 0.5 s doubling to [`BACKOFF_MAX`], with
/// jitter, and back to 0.5 s once the watch ran a minute without an error.
pub fn backoff() -> impl Backoff {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(BACKOFF_MAX)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(
        ExponentialBackoff::from(exponential),
        Duration::from_secs(60),
    )
}

/// Objects per page of a watch's list. kube's default is 500: a page of Deployments, parsed with
/// their managed fields, is about 5 MB, and each watch holds one while it lists, so after a
/// restart the lists' pages were the largest part of the heap (a third of it, with 10,000
/// Memcacheds). 100 makes that a fifth, for five times the list requests (500 for 50,000
/// Deployments, once per start or relist).
pub const PAGE: u32 = 100;

/// The configuration every watch starts from: lists in pages of [`PAGE`] objects.
pub fn config() -> watcher::Config {
    watcher::Config::default().page_size(PAGE)
}

/// A watched object that could not be read as its kind, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    pub namespace: Option<String>,
    pub name: String,
    /// Names the field at fault, e.g. `spec.replicas: invalid value: integer ...`.
    pub error: String,
}

/// Reads `object` as a `K`.
pub fn decode<K: DeserializeOwned>(object: DynamicObject) -> Result<K, Undecodable> {
    let namespace = object.metadata.namespace.clone();
    let name = object.metadata.name.clone().unwrap_or_default();
    let undecodable = |error: String| Undecodable {
        namespace: namespace.clone(),
        name: name.clone(),
        error,
    };
    let value = serde_json::to_value(object).map_err(|e| undecodable(e.to_string()))?;
    serde_path_to_error::deserialize(value).map_err(|e| undecodable(e.to_string()))
}

/// `event` with its object read as a `K`, or `None` (after telling `skipped`) when it does not
/// decode. An undecodable object is never added to a cache, so its delete is dropped too.
pub fn decode_event<K: DeserializeOwned>(
    event: Event<DynamicObject>,
    skipped: &impl Fn(Undecodable),
) -> Option<Event<K>> {
    let decoded = |object| decode(object).map_err(skipped).ok();
    match event {
        Event::Apply(o) => decoded(o).map(Event::Apply),
        Event::InitApply(o) => decoded(o).map(Event::InitApply),
        Event::Delete(o) => decoded(o).map(Event::Delete),
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
    }
}

/// `event` with each object it carries made into `f(object)`.
pub fn map_event<A, B>(event: Event<A>, mut f: impl FnMut(A) -> B) -> Event<B> {
    match event {
        Event::Apply(o) => Event::Apply(f(o)),
        Event::InitApply(o) => Event::InitApply(f(o)),
        Event::Delete(o) => Event::Delete(f(o)),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

/// The `K`s in `namespace` (all namespaces when `None`), as dynamic objects, for [`watcher()`].
pub fn api<K>(client: Client, namespace: Option<&str>) -> Api<DynamicObject>
where
    K: Resource<DynamicType = ()>,
{
    let resource = ApiResource::erase::<K>(&());
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    }
}

/// `kube::runtime::watcher` over `api` (from [`api`]), decoding each object as a `K` on its
/// own and leaving out, after telling `skipped`, those that do not decode.
pub fn watcher<K>(
    api: Api<DynamicObject>,
    config: watcher::Config,
    skipped: impl Fn(Undecodable) + Send + 'static,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + 'static,
{
    watcher::watcher(api, config).filter_map(move |event| {
        future::ready(match event {
            Ok(event) => decode_event(event, &skipped).map(Ok),
            Err(e) => Some(Err(e)),
        })
    })
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use serde_json::json;

    use super::*;
    use kubesteer_api::Memcached;

    fn memcached(name: &str, size: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1alpha1", "kind": "Memcached",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"size": size}
        }))
        .unwrap()
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_with_jitter_and_never_gives_up() {
        let delays: Vec<Duration> = backoff().take(20).collect();
        assert_eq!(delays.len(), 20);
        assert!(delays[0] >= Duration::from_millis(500) && delays[0] < Duration::from_secs(1));
        for d in &delays[5..] {
            assert!(*d >= BACKOFF_MAX && *d <= 2 * BACKOFF_MAX, "{d:?}");
        }
    }

    #[test]
    fn an_object_out_of_range_is_left_out_and_named_with_its_field() {
        let skipped = RefCell::new(Vec::new());
        let report = |u: Undecodable| skipped.borrow_mut().push(u);
        let events = [
            Event::Init,
            Event::InitApply(memcached("good", json!(2))),
            Event::InitApply(memcached("poison", json!(3_000_000_000_u64))),
            Event::InitApply(memcached("also-good", json!(3))),
            Event::InitDone,
            Event::Apply(memcached("poison", json!(-5_000_000_000_i64))),
            Event::Delete(memcached("poison", json!(3_000_000_000_u64))),
        ];
        let decoded: Vec<Event<Memcached>> = events
            .into_iter()
            .filter_map(|e| decode_event(e, &report))
            .collect();
        let names: Vec<String> = decoded
            .iter()
            .map(|e| match e {
                Event::Init => "init".to_string(),
                Event::InitDone => "done".to_string(),
                Event::InitApply(m) | Event::Apply(m) | Event::Delete(m) => {
                    format!(
                        "{}={}",
                        m.metadata.name.clone().unwrap_or_default(),
                        m.spec.size.unwrap_or_default()
                    )
                }
            })
            .collect();
        assert_eq!(names, ["init", "good=2", "also-good=3", "done"]);
        let skipped = skipped.into_inner();
        assert_eq!(skipped.len(), 3);
        assert_eq!(skipped[0].name, "poison");
        assert_eq!(skipped[0].namespace.as_deref(), Some("team"));
        assert!(
            skipped[0].error.starts_with("spec.size: "),
            "{}",
            skipped[0].error
        );
    }
}
