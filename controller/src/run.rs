//! Wiring: the client, the HTTP server, signals, leader election and the three controllers.
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Api, Client, ResourceExt};
use kubesteer_api::{Memcached, Scaler, Welcome};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::args::Args;
use crate::http::{self, Health};
use crate::metrics::Metrics;
use crate::objects::{owned_by_kubesteer, INSTANCE_LABEL};
use crate::{lease, memcached, scaler, telemetry, welcome, Context, Result, SystemClock};

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(args: Args) -> Result<()> {
    telemetry::init(args.log_json)?;
    let client = Client::try_default().await?;
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());
    let (shutdown_tx, shutdown) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutting down");
        let _ = shutdown_tx.send(true);
    });

    let (addr, server) = http::serve(
        args.metrics_addr,
        http::router(metrics.clone(), health.clone()),
        stopped(shutdown.clone()),
    )
    .await?;
    info!(%addr, "serving /metrics, /healthz and /readyz");

    let identity = args.identity();
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics,
        Arc::new(SystemClock),
        Some(identity.clone()),
    ));
    if args.leader_election {
        lease::run_while_leading(client, &args, identity, ctx, health, shutdown).await?;
    } else {
        health.set_ready(true);
        controllers(ctx, args.namespace.as_deref(), shutdown).await;
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

/// Runs the three controllers until `stop` turns true, letting running reconciles finish.
pub async fn controllers(ctx: Arc<Context>, namespace: Option<&str>, stop: watch::Receiver<bool>) {
    let client = ctx.client.clone();
    let ns = namespace;
    let memcached_children = watcher::Config::default().labels(&owned_by_kubesteer(memcached::APP));
    let welcome_children = watcher::Config::default().labels(&owned_by_kubesteer(welcome::APP));

    let memcacheds = Controller::new(api::<Memcached>(&client, ns), watcher::Config::default())
        .owns(api::<Deployment>(&client, ns), memcached_children.clone())
        .owns(api::<Service>(&client, ns), memcached_children.clone())
        // Pods name the nodes in the status, so their comings and goings trigger a reconcile.
        .watches(api::<Pod>(&client, ns), memcached_children, |pod| {
            let ns = pod.namespace()?;
            let instance = pod.labels().get(INSTANCE_LABEL)?;
            Some(ObjectRef::<Memcached>::new(instance).within(&ns))
        })
        .graceful_shutdown_on(stopped(stop.clone()))
        .run(memcached::reconcile, memcached::error_policy, ctx.clone())
        .for_each(|r| async move { log_result(memcached::KIND, r) });

    let welcomes = Controller::new(api::<Welcome>(&client, ns), watcher::Config::default())
        .owns(api::<Deployment>(&client, ns), welcome_children.clone())
        // Secrets are not watched: the controller may write them but not read them.
        .owns(api::<Service>(&client, ns), welcome_children)
        .graceful_shutdown_on(stopped(stop.clone()))
        .run(welcome::reconcile, welcome::error_policy, ctx.clone())
        .for_each(|r| async move { log_result(welcome::KIND, r) });

    let scaler_controller = Controller::new(api::<Scaler>(&client, ns), watcher::Config::default());
    let store = scaler_controller.store();
    // Any Deployment may be a target, so all are watched and mapped through the Scalers' store.
    let scalers = scaler_controller
        .watches(
            api::<Deployment>(&client, ns),
            watcher::Config::default(),
            move |d| scaler::scalers_targeting(&store, &d),
        )
        .graceful_shutdown_on(stopped(stop))
        .run(scaler::reconcile, scaler::error_policy, ctx)
        .for_each(|r| async move { log_result(scaler::KIND, r) });

    info!("controllers started");
    tokio::join!(memcacheds, welcomes, scalers);
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
