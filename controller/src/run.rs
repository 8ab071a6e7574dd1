//! Wiring: the client, the HTTP server, signals, leader election and the three controllers.
use std::sync::Arc;

use std::fmt::Debug;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, store::Writer, ObjectRef};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use kubesteer_api::watch::{self as tolerant, Undecodable};
use kubesteer_api::{Memcached, Scaler, Welcome};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::args::Args;
use crate::children::{self, children_of, Caches, Packed};
use crate::http::{self, Health};
use crate::metrics::Metrics;
use crate::metrics_auth::Authorizer;
use crate::reconcilers::{self, scaler, Owner};
use crate::{lease, telemetry, Context, Result, SystemClock};
use kubesteer_api::keys::label;

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(args: Args) -> Result<()> {
    telemetry::init(args.log_json)?;
    let config = kube::Config::infer().await?;
    let client = Client::try_from(config.clone())?;
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());
    let (shutdown_tx, shutdown) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutting down");
        let _ = shutdown_tx.send(true);
    });

    let authorizer = args.metrics_auth.then(|| Authorizer::new(client.clone()));
    let router = http::router(metrics.clone(), health.clone(), authorizer);
    let (addr, server) = if args.metrics_auth {
        let tls = http::self_signed(&args.lease_namespace)?;
        http::serve_tls(args.metrics_addr, router, tls, stopped(shutdown.clone())).await?
    } else {
        http::serve(args.metrics_addr, router, stopped(shutdown.clone())).await?
    };
    // The address comes last: tests read it from the end of this line.
    info!(
        https = args.metrics_auth,
        %addr,
        "serving /metrics, /healthz and /readyz"
    );

    let identity = args.identity();
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics,
        Arc::new(SystemClock),
        Some(identity.clone()),
        Caches::empty(),
    ));
    if args.leader_election {
        lease::run_while_leading(config, &args, identity, ctx, health, shutdown).await?;
    } else {
        health.set_ready(true);
        ctx.metrics.set_leading(true);
        controllers(ctx, &args, shutdown).await;
    }
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!(error = %e, "metrics server failed"),
        Err(e) => warn!(error = %e, "metrics server panicked"),
    }
    info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the controller");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Resolves once `stop` turns true, or its sender is gone.
pub async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|&s| s).await;
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

/// A watch that keeps what `trim` leaves of each object in a cache, and yields the objects it
/// saw change or go, to trigger reconciles.
fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    trim: fn(&mut K),
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    watcher(api, config)
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .touched_objects()
}

/// A watch that keeps each object packed in a cache, and yields the objects it saw change or
/// go, to trigger reconciles.
fn packed<K>(
    api: Api<K>,
    config: watcher::Config,
    mut writer: Writer<Packed<K>>,
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
    watcher(api, config)
        .default_backoff()
        .inspect_ok(move |event| match children::pack_event(event) {
            Ok(packed) => writer.apply_watcher_event(&packed),
            Err(e) => warn!(error = %e, "could not cache a watched object"),
        })
        .touched_objects()
}

/// The controller of an owner kind `K` (Memcached, Welcome): its objects cached without
/// managedFields (and forgotten by `ctx` when deleted), and reconciled on changes to them and to
/// their Deployments and Services, which fill the caches of `K::APP`, and to their pods if `K`
/// names them.
fn owner_controller<K: Owner>(
    ctx: &Arc<Context>,
    ns: Option<&str>,
    config: controller::Config,
) -> Controller<K> {
    let client = &ctx.client;
    let writers = ctx.caches.register(K::APP);
    let (store, writer) = reflector::store();
    let forget = ctx.clone();
    let owners =
        tolerant::watcher::<K>(client.clone(), ns, watcher::Config::default(), skipped::<K>)
            .default_backoff()
            .inspect_ok(move |event| {
                if let watcher::Event::Delete(owner) = event {
                    forget.forget(K::KIND, owner);
                }
            })
            .modify(children::trim::<K>)
            .reflect(writer)
            .applied_objects();
    let controller = Controller::for_stream(owners, store)
        .with_config(config)
        .owns_stream(packed(
            api::<Deployment>(client, ns),
            children_of(K::APP),
            writers.deployments,
        ))
        .owns_stream(packed(
            api::<Service>(client, ns),
            children_of(K::APP),
            writers.services,
        ));
    if !K::NAMES_PODS {
        return controller;
    }
    // Pods name the nodes in the status, so their comings and goings trigger a reconcile.
    controller.watches_stream(
        cached(
            api::<PartialObjectMeta<Pod>>(client, ns),
            children_of(K::APP),
            writers.pods,
            children::trim_pod,
        ),
        |pod| {
            let ns = pod.namespace()?;
            let instance = pod.labels().get(label::INSTANCE)?;
            Some(ObjectRef::<K>::new(instance).within(&ns))
        },
    )
}

/// Registers owner kind `K`: its controller runs until `stop` turns true.
async fn owned<K: Owner>(
    ctx: &Arc<Context>,
    ns: Option<&str>,
    config: controller::Config,
    stop: watch::Receiver<bool>,
) {
    owner_controller::<K>(ctx, ns, config)
        .graceful_shutdown_on(stopped(stop))
        .run(
            reconcilers::reconcile::<K>,
            reconcilers::error_policy::<K>,
            ctx.clone(),
        )
        .for_each(|r| async move { log_result(K::KIND, r) })
        .await
}

/// Runs the controllers until `stop` turns true, letting running reconciles finish.
/// Each run has caches of its own, filled by its own watches.
pub async fn controllers(base: Arc<Context>, args: &Args, stop: watch::Receiver<bool>) {
    let client = base.client.clone();
    let ns = args.namespace.as_deref();
    let ctx = Arc::new(base.with_caches(Caches::empty()));
    let config = controller::Config::default().concurrency(args.concurrency);
    let owner_config = config
        .clone()
        .debounce(Duration::from_millis(args.debounce_ms));

    // One line per owner kind (see `reconcilers`). Welcome's Secrets are not watched: the
    // controller may write them but not read them.
    let owners = futures::future::join_all([
        owned::<Memcached>(&ctx, ns, owner_config.clone(), stop.clone()).boxed(),
        owned::<Welcome>(&ctx, ns, owner_config.clone(), stop.clone()).boxed(),
    ]);

    // No debounce for Scalers: it would delay the requeue at a window's boundary.
    let (store, writer) = reflector::store();
    let scaler_objects = tolerant::watcher::<Scaler>(
        client.clone(),
        ns,
        watcher::Config::default(),
        skipped::<Scaler>,
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects();
    let scaler_controller = Controller::for_stream(scaler_objects, store).with_config(config);
    let store = scaler_controller.store();
    // Any Deployment may be a target, so all are watched and mapped through the Scalers' store.
    let scalers = scaler_controller
        // Their metadata is enough to name them; the reconcile reads a target when it acts.
        .watches(
            api::<PartialObjectMeta<Deployment>>(&client, ns),
            watcher::Config::default(),
            move |d| scaler::scalers_targeting(&store, &d),
        )
        .graceful_shutdown_on(stopped(stop))
        .run(scaler::reconcile, scaler::error_policy, ctx.clone())
        .for_each(|r| async move { log_result(scaler::KIND, r) });

    info!("controllers started");
    tokio::join!(owners, scalers);
    info!("controllers stopped");
}

fn log_result<K, E1, E2>(
    kind: &str,
    result: std::result::Result<
        (ObjectRef<K>, kube::runtime::controller::Action),
        kube::runtime::controller::Error<E1, E2>,
    >,
) where
    K: kube::Resource,
    E1: std::error::Error,
    E2: std::error::Error,
{
    match result {
        Ok((obj, action)) => debug!(kind, object = %obj, ?action, "reconciled"),
        // Reconcile errors are logged with their backoff by the error policy already.
        Err(kube::runtime::controller::Error::ReconcilerFailed(_, obj)) => {
            debug!(kind, object = %obj, "reconcile failed")
        }
        // Events of children whose owner is already gone; nothing to do.
        Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => {
            debug!(kind, object = %obj, "owner gone")
        }
        Err(e) => warn!(kind, error = %e, "controller"),
    }
}
