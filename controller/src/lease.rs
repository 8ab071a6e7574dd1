//! Leader election on a Lease: the controllers run only while this replica holds it.
use std::sync::Arc;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::args::Args;
use crate::http::Health;
use crate::run::{controllers, stopped};
use crate::{Context, Result};

/// A holder that stops renewing loses the Lease after this long, so a standby takes over within it.
pub const LEASE_DURATION_SECONDS: u64 = 10;
/// Renewal starts this long before expiry: with 10 s leases the holder renews every 3 s.
pub const LEASE_GRACE_SECONDS: u64 = 7;

/// Waits for the Lease, runs the controllers while holding it, and releases it on shutdown.
pub async fn run_while_leading(
    client: Client,
    args: &Args,
    identity: String,
    ctx: Arc<Context>,
    health: Arc<Health>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let manager = LeaseManagerBuilder::new(client, &args.lease_name)
        .with_namespace(&args.lease_namespace)
        .with_identity(&identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .build()
        .await?;
    health.set_ready(true);
    let (mut leading, task) = manager.watch().await;
    info!(lease = %args.lease_name, namespace = %args.lease_namespace, %identity, "waiting for the leader lease");
    loop {
        tokio::select! {
            r = leading.wait_for(|&l| l) => if r.is_err() { break },
            _ = shutdown.wait_for(|&s| s) => break,
        }
        info!(%identity, "leading");
        let (stop_tx, stop_rx) = watch::channel(false);
        let running = controllers(ctx.clone(), args, stop_rx);
        tokio::pin!(running);
        let lost = tokio::select! {
            _ = &mut running => false,
            _ = leading.wait_for(|&l| !l) => true,
            _ = stopped(shutdown.clone()) => false,
        };
        let _ = stop_tx.send(true);
        running.await;
        if !lost {
            break;
        }
        warn!(%identity, "lost the leader lease; standing by");
    }
    // Closing the channel makes the manager release the Lease, so a standby need not wait it out.
    drop(leading);
    match task.await {
        Ok(Ok(_)) => info!("released the leader lease"),
        Ok(Err(e)) => warn!(error = %e, "could not release the leader lease"),
        Err(e) => warn!(error = %e, "leader election task failed"),
    }
    Ok(())
}
