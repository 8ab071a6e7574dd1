//! Wiring: the client, the HTTP server, signals, leader election and the controllers, each of
//! whose watches tells readiness its state. The framework pieces (queue, lease, server, metrics
//! authorization) are `kubesteer_runtime`'s.
//!
//! Readiness (`/readyz`): not ready until the controller has started; then, while this replica
//! runs the controllers, until every watch has listed once, and again while one has been
//! failing for `--watch-stale-after`. The Scalers' watches that start on demand
//! ([`crate::scaler::inventory`]) are waited for only when they start while unready. Under
//! `--leader-election` a standby replica runs no watches, so it is ready once it reached the
//! apiserver to contest the Lease: a rollout need not wait for the leader to step down. A new
//! leader is unready until its watches have listed.
use std::sync::Arc;

use std::fmt::Debug;

use std::future::Future;

use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use kubesteer_api::{Application, Memcached, Scaler, Welcome};
use kubesteer_runtime::watch::{self as tolerant, Undecodable};
use kubesteer_runtime::{health, logging, signal, Health};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::args::Args;
use crate::children::{
    self, children_of, packed_store, Caches, Notes, Packed, PackedStore, PackedWriter, WatchedPod,
};
use crate::metrics::Metrics;
use crate::reconcilers::{self, scaler, Owner};
use crate::{storage, Context, Error, Result, SystemClock};
use kubesteer_runtime::health::STARTING;
use kubesteer_runtime::lease;
use kubesteer_runtime::metrics_auth::Authorizer;
use kubesteer_runtime::queue::{self, Action, ObjectKey, Settings};
use kubesteer_runtime::serve;
use kubesteer_runtime::signal::stopped;

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(args: Args) -> Result<()> {
    logging::init("kubesteer-controller", args.runtime.log_json)?;
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let health = args.runtime.health();
    // The client tells `health` when a watch reconnects.
    let client = health::client(config.clone(), &health)?;
    let metrics = Arc::new(Metrics::default());
    health.hold(STARTING);
    let (shutdown_tx, shutdown) = watch::channel(false);
    tokio::spawn({
        let health = health.clone();
        async move {
            signal::shutdown().await;
            info!("shutting down");
            health.shut_down();
            let _ = shutdown_tx.send(true);
        }
    });

    let authorizer = args.metrics_auth.then(|| Authorizer::new(client.clone()));
    let router = serve::router(metrics.clone(), health.clone(), authorizer);
    let (addr, server) = if args.metrics_auth {
        let tls = crate::metrics::self_signed(&args.lease_namespace)?;
        serve::serve_tls(args.metrics_addr, router, tls, stopped(shutdown.clone())).await?
    } else {
        serve::serve(args.metrics_addr, router, stopped(shutdown.clone())).await?
    };
    // The address comes last: tests read it from the end of this line.
    info!(
        https = args.metrics_auth,
        %addr,
        "serving /metrics, /healthz and /readyz"
    );

    let identity = args.identity();
    let acting = Arc::new(scaler::acting::Acting::impersonating(
        client.clone(),
        config.clone(),
        args.impersonate_service_account.clone(),
    ));
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics.clone(),
        Arc::new(SystemClock),
        Some(identity.clone()),
        Caches::empty(),
    ));
    if args.leader_election {
        let lead = |stop| controllers(ctx.clone(), acting.clone(), &args, &health, stop);
        let on_leading: lease::OnLeading = {
            let metrics = metrics.clone();
            Arc::new(move |leading| metrics.set_leading(leading))
        };
        let at = (args.lease_namespace.as_str(), args.lease_name.as_str());
        lease::run_while_leading(config, at, identity, on_leading, &health, shutdown, lead).await?;
    } else {
        ctx.metrics.set_leading(true);
        controllers(ctx, acting, &args, &health, shutdown).await;
    }
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!(error = %e, "metrics server failed"),
        Err(e) => warn!(error = %e, "metrics server panicked"),
    }
    info!("stopped");
    Ok(())
}

/// All objects of a kind, in `namespace` or in the whole cluster.
fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Logs an object of kind `K` that its watch leaves out, as it cannot be decoded: the other
/// objects of the kind are reconciled on, this one waits until it is fixed or deleted.
fn skipped<K: Resource<DynamicType = ()>>(object: Undecodable) {
    warn!(
        kind = %K::kind(&()),
        namespace = object.namespace.as_deref().unwrap_or_default(),
        name = %object.name,
        error = %object.error,
        "cannot decode this object, so it is not reconciled; fix or delete it"
    );
}

/// A watch of `api`, registered with `health` as `what`.
fn tracked<K>(
    health: &Health,
    what: String,
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let key = health::key(&api, &config);
    health.track(what, key, watcher(api, config))
}

/// A watch of the `K`s that leaves out those it cannot decode, registered with `health`.
fn tolerant_watch<K>(
    health: &Health,
    client: &Client,
    ns: Option<&str>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + 'static,
{
    let api = tolerant::api::<K>(client.clone(), ns);
    let config = tolerant::config();
    let key = health::key(&api, &config);
    let watch = tolerant::watcher::<K>(api, config, skipped::<K>);
    health.track(K::kind(&()).to_string(), key, watch)
}

/// A watch that keeps each object packed in a cache, and yields the objects it saw change or
/// go, to trigger reconciles.
fn packed<K>(
    health: &Health,
    what: String,
    api: Api<K>,
    config: watcher::Config,
    writer: PackedWriter<K>,
    notes: Arc<Notes>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let watch = tracked(health, what, api, config).backoff(tolerant::backoff());
    packing(watch, writer, Packed::pack)
        .touched_objects()
        .inspect_ok(move |child| notes.unseen.seen(child))
}

/// The items of `watch`, its errors logged (the watch retries them with a backoff).
fn logged<T: Send + 'static>(
    kind: &'static str,
    watch: impl Stream<Item = Result<T, watcher::Error>> + Send + 'static,
) -> impl Stream<Item = T> + Send + 'static {
    watch.filter_map(move |item| {
        std::future::ready(match item {
            Ok(item) => Some(item),
            Err(e) => {
                warn!(kind, error = %e, "watch failed; retrying");
                None
            }
        })
    })
}

/// The key of a namespaced object in its controller's queue.
fn key_of<K: Resource>(obj: &K) -> ObjectKey {
    ObjectKey::new(&obj.namespace().unwrap_or_default(), &obj.name_any())
}

/// The owners of kind `K` that `child` names in its owner references.
fn owners_of<K: Resource<DynamicType = ()>, C: Resource>(child: &C) -> Vec<ObjectKey> {
    let (api_version, kind) = (K::api_version(&()), K::kind(&()));
    let ns = child.namespace().unwrap_or_default();
    child
        .owner_references()
        .iter()
        .filter(|o| o.api_version == api_version && o.kind == kind)
        .map(|o| ObjectKey::new(&ns, &o.name))
        .collect()
}

/// `watch`, each event's object packed by `pack` ([`Packed::pack`] or [`Packed::whole`]) into
/// `writer`'s store as it passes.
fn packing<K>(
    watch: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    mut writer: PackedWriter<K>,
    pack: fn(&K) -> crate::Result<Packed<K>>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Send + 'static,
{
    watch.inspect_ok(move |event| match children::pack_event(event, pack) {
        Ok(packed) => writer.apply_watcher_event(&packed),
        Err(e) => warn!(kind = %K::kind(&()), error = %e, "could not cache a watched object"),
    })
}

/// Resolves once `store` has listed its objects once (or can no longer: its watch is gone).
fn listed<K: Resource<DynamicType = ()>>(store: &PackedStore<K>) -> impl Future<Output = ()> {
    let store = store.clone();
    async move {
        let _ = store.wait_until_ready().await;
    }
}

/// One reconcile of the object `key` names, read from `store`: `reconcile`'s action, or on
/// failure `error_policy`'s. An object gone from the store meanwhile is not reconciled.
async fn reconcile_one<K, C, F>(
    kind: &'static str,
    store: PackedStore<K>,
    ctx: Arc<C>,
    key: ObjectKey,
    reconcile: impl FnOnce(Arc<K>, Arc<C>) -> F,
    error_policy: impl FnOnce(Arc<K>, &Error, Arc<C>) -> Action,
) -> Action
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    F: Future<Output = Result<Action>>,
{
    // Named as kube-runtime names objects (`Kind.version.group/name.namespace`), as before.
    let object = || ObjectRef::<K>::new(&key.name).within(&key.namespace);
    let Some(packed) = store.get_key(&key) else {
        debug!(kind, object = %object(), "gone");
        return Action::await_change();
    };
    let obj = match packed.object() {
        Ok(obj) => Arc::new(obj),
        Err(e) => {
            warn!(kind, object = %object(), error = %e, "cannot read the cached object; it waits for its next change");
            return Action::await_change();
        }
    };
    match reconcile(obj.clone(), ctx.clone()).await {
        Ok(action) => {
            debug!(kind, object = %object(), ?action, "reconciled");
            action
        }
        // The error policy logs the failure with its backoff.
        Err(e) => error_policy(obj, &e, ctx),
    }
}

/// What reconciles an owner kind `K` (Memcached, Welcome, Application): its objects, kept
/// packed in the returned store (and forgotten by `ctx` when deleted), and the keys of those to
/// reconcile on changes to them and to their Deployments and Services (and Ingresses if `K`
/// owns some), which fill the caches of `K::APP`, and to their pods. Every
/// watch is registered with `health`.
fn owner_triggers<K: Owner>(
    health: &Health,
    ctx: &Arc<Context>,
    ns: Option<&str>,
) -> (PackedStore<K>, BoxStream<'static, ObjectKey>) {
    let client = &ctx.client;
    let writers = ctx.caches.register(K::APP);
    let (store, writer) = packed_store();
    let forget = ctx.clone();
    let kind = K::KIND;
    let owners = tolerant_watch::<K>(health, client, ns)
        .backoff(tolerant::backoff())
        .inspect_ok(move |event| {
            if let watcher::Event::Delete(owner) = event {
                forget.forget(K::KIND, owner);
            }
        })
        .modify(children::trim::<K>);
    let owners = packing(owners, writer, Packed::whole).applied_objects();
    let owners = logged(kind, owners).map(|owner| key_of(&owner));
    fn owners_named_by<K: Owner, C: Resource + Send + 'static>(
        children: impl Stream<Item = Result<C, watcher::Error>> + Send + 'static,
    ) -> BoxStream<'static, ObjectKey> {
        logged(K::KIND, children)
            .flat_map(|child| futures::stream::iter(owners_of::<K, C>(&child)))
            .boxed()
    }
    let mut triggers = vec![
        owners.boxed(),
        owners_named_by::<K, _>(packed(
            health,
            format!("{kind} Deployment"),
            api::<Deployment>(client, ns),
            children_of(K::APP),
            writers.deployments,
            writers.notes.clone(),
        )),
        owners_named_by::<K, _>(packed(
            health,
            format!("{kind} Service"),
            api::<Service>(client, ns),
            children_of(K::APP),
            writers.services,
            writers.notes.clone(),
        )),
    ];
    if K::OWNS_INGRESS {
        triggers.push(owners_named_by::<K, _>(packed(
            health,
            format!("{kind} Ingress"),
            api::<Ingress>(client, ns),
            children_of(K::APP),
            writers.ingresses,
            writers.notes.clone(),
        )));
    }
    // A rollout counts the pods (and a Memcached's status names them), so their comings
    // and goings and their readiness trigger a reconcile of each instance whose pods changed
    // (both, for a pod relabelled from one to another); their other changes (scheduled,
    // started, a condition before Ready) change nothing a reconcile reads, and trigger none.
    let mut writer = writers.pods;
    let pods = tracked(
        health,
        format!("{kind} Pod"),
        api::<WatchedPod>(client, ns),
        children_of(K::APP),
    )
    .backoff(tolerant::backoff())
    .map_ok(move |event| futures::stream::iter(writer.apply_watcher_event(&event)));
    triggers.push(logged(kind, pods).flatten().boxed());
    (store, futures::stream::select_all(triggers).boxed())
}

/// Registers owner kind `K`: its controller runs until `stop` turns true.
async fn owned<K: Owner>(
    health: &Health,
    ctx: &Arc<Context>,
    ns: Option<&str>,
    settings: Settings,
    stop: watch::Receiver<bool>,
) {
    let (store, triggers) = owner_triggers::<K>(health, ctx, ns);
    let ready = listed(&store);
    queue::run(triggers, settings, ready, stopped(stop), |key| {
        reconcile_one(
            K::KIND,
            store.clone(),
            ctx.clone(),
            key,
            reconcilers::reconcile::<K>,
            reconcilers::error_policy::<K>,
        )
    })
    .await
}

/// Runs the controllers until `stop` turns true, letting running reconciles finish.
/// Each run has caches of its own, filled by its own watches, which are registered with
/// `health` for as long as the run lasts.
pub async fn controllers(
    base: Arc<Context>,
    acting: Arc<scaler::acting::Acting>,
    args: &Args,
    health: &Health,
    stop: watch::Receiver<bool>,
) {
    let client = base.client.clone();
    let ns = args.namespace.as_deref();
    let migration_stop = stop.clone();
    let ctx = Arc::new(base.with_caches(Caches::empty()));
    let settings = Settings {
        concurrency: args.concurrency,
        ..Settings::default()
    };
    let owner_settings = Settings {
        debounce: args.debounce,
        debounce_max: args.debounce_max,
        ..settings
    };

    // One line per owner kind (see `reconcilers`). Welcome's Secrets are not watched: the
    // controller may write them but not read them.
    let owners = futures::future::join_all([
        owned::<Memcached>(health, &ctx, ns, owner_settings, stop.clone()).boxed(),
        owned::<Welcome>(health, &ctx, ns, owner_settings, stop.clone()).boxed(),
        owned::<Application>(health, &ctx, ns, owner_settings, stop.clone()).boxed(),
    ]);

    // No debounce for Scalers: it would delay the requeue at a window's boundary.
    let (store, writer) = packed_store::<Scaler>();
    // The claims index follows the same watch. When a Scaler's claims change (created,
    // deleted, a target added or dropped or given back), the others that claim one of those
    // targets are reconciled at once, so a younger one takes over when the owner lets go.
    let (claims_changed, reconcile_claimants) = futures::channel::mpsc::unbounded();
    let scaler_ctx = Arc::new(scaler::ScalerContext::new(ctx.clone()).acting(acting));
    let mut follow = kubesteer_runtime::claims::follow(&scaler_ctx.claims);
    // Any Deployment or StatefulSet may be a target, so all are watched (whole, trimmed to
    // what a reconcile reads) from the first Scaler seen, as is every other kind a selector
    // names; a change wakes the Scalers that name, hold or select the object. Targets of other
    // kinds named in scaleTargetRefs are brought back at each transition.
    let (wake, woken) = futures::channel::mpsc::unbounded::<ObjectRef<Scaler>>();
    scaler_ctx.inventory.start(
        client.clone(),
        health.clone(),
        ns.map(str::to_string),
        wake,
        stop.clone(),
    );
    let (inventory, claims) = (scaler_ctx.inventory.clone(), scaler_ctx.claims.clone());
    let scaler_objects = tolerant_watch::<Scaler>(health, &client, ns)
        .backoff(tolerant::backoff())
        .modify(children::trim::<Scaler>)
        .inspect_ok(move |event| {
            if matches!(
                event,
                watcher::Event::Apply(_) | watcher::Event::InitApply(_)
            ) {
                inventory.watch_workloads(&claims);
            }
            for other in follow(event) {
                let _ =
                    claims_changed.unbounded_send(ObjectKey::new(&other.namespace, &other.name));
            }
        });
    let scaler_objects = packing(scaler_objects, writer, Packed::whole).applied_objects();
    let scaler_objects = logged(scaler::KIND, scaler_objects);
    let woken = woken.map(|scaler| {
        ObjectKey::new(
            scaler.namespace.as_deref().unwrap_or_default(),
            &scaler.name,
        )
    });
    let triggers = futures::stream::select_all([
        scaler_objects.map(|scaler| key_of(&scaler)).boxed(),
        reconcile_claimants.boxed(),
        woken.boxed(),
    ]);
    let scalers = queue::run(triggers, settings, listed(&store), stopped(stop), |key| {
        reconcile_one(
            scaler::KIND,
            store.clone(),
            scaler_ctx.clone(),
            key,
            scaler::reconcile,
            scaler::error_policy,
        )
    });

    // Every watch is registered now: readiness waits for them instead.
    health.release(STARTING);
    // The tuning in effect, whether from flags or their environment fallbacks (the chart's
    // `controller.extraEnv`).
    info!(
        concurrency = args.concurrency,
        debounce = %humantime::format_duration(args.debounce),
        debounce_max = %humantime::format_duration(args.debounce_max),
        "controllers started"
    );
    // A leader over the whole cluster stores every object at its CRD's storage version once
    // (see `storage`); one watching a single namespace cannot see them all.
    let migration = async {
        if ns.is_none() {
            tokio::select! {
                _ = storage::migrate_all(client.clone()) => {}
                _ = stopped(migration_stop) => {}
            }
        }
    };
    tokio::join!(owners, scalers, migration);
    info!("controllers stopped");
}
