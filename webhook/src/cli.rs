//! The `kubesteer-webhook` command line: [`run`] runs the server on the given arguments (the
//! first is the program name), for the `kubesteer-webhook` binary and the image's multi-call
//! `kubesteer`.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use crate::args::{Args, CertMode};
use crate::cluster::KubeCluster;
use crate::crd_conversion::CaSource;
use crate::selfmanaged::SelfManaged;
use crate::server;
use crate::tls::{self, CertFiles, CertStore};
use crate::{apiserver_auth, router, AppState, Error};
use clap::Parser;
use kubesteer_runtime::{health, logging, signal};

/// Runs `kubesteer-webhook` with `args` (program name first) until a termination signal.
#[tokio::main]
pub async fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args = Args::parse_from(args);
    if let Err(e) = logging::init("kubesteer-webhook", args.runtime.log_json) {
        eprintln!("kubesteer-webhook: {e}");
        return ExitCode::FAILURE;
    }
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kubesteer-webhook failed");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), Error> {
    // Only ring is linked; make it the process default for the kube client too.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let health = args.runtime.health();
    // The client tells `health` when a watch reconnects.
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let client = health::client(config, &health)?;
    let store = match args.cert_mode {
        CertMode::Files => {
            let files = CertFiles {
                cert: args.tls_cert_file.clone(),
                key: args.tls_key_file.clone(),
            };
            let store = CertStore::new(files.load()?);
            tokio::spawn(files.watch(store.clone(), args.cert_reload_interval));
            if let Some(conversion) = args.conversion() {
                let source = match &args.conversion_ca {
                    Some(pem) => CaSource::Pem(pem.clone()),
                    None => CaSource::File(args.conversion_ca_file.clone()),
                };
                tokio::spawn(conversion.keep(client.clone(), source, args.cert_check_interval));
            }
            store
        }
        CertMode::SelfManaged => {
            let mut options = kubesteer_certs::Options::new(&args.service, &args.namespace);
            options.dns = args.cert_dns.clone();
            options.ips = args.cert_ip.clone();
            options.serving_validity = args.cert_validity;
            options.ca_validity = args.ca_validity;
            let manager = SelfManaged {
                client: client.clone(),
                namespace: args.namespace.clone(),
                secret: args.cert_secret.clone(),
                configuration: args.webhook_configuration.clone(),
                options,
                interval: args.cert_check_interval,
                conversion: args.conversion(),
            };
            let certs = manager.ensure().await?;
            let store = CertStore::new(tls::certified_key(
                certs.bundle.serving.cert.as_bytes(),
                certs.bundle.serving.key.as_bytes(),
                &args.cert_secret,
            )?);
            manager.inject_ca(&certs.trust).await?;
            tokio::spawn(manager.run(store.clone(), certs.bundle, certs.trust));
            store
        }
    };
    let mut state = AppState::new(KubeCluster::start(client, &health).with_host_claims());
    state.metrics.serving_certificate(store.clone());
    state.health = health;
    state.images = kubesteer_api::access::ImagePolicy::new(args.allowed_images.clone());
    state.implementation_specific_paths = args.allow_implementation_specific_paths;
    state.host_sharing = args.allow_host_sharing;
    state.scalers_own_namespace_only = args.scalers_own_namespace_only;
    state.permissions.set_limit(args.sar_limit());
    state.budget = crate::budget::Budget::new(args.request_body_budget);
    let state = Arc::new(state);
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|source| Error::Bind {
            addr: args.addr.to_string(),
            source,
        })?;
    let (tls, app) = match &args.apiserver_client_ca {
        Some(path) => {
            let ca = tls::ClientCa::load(path.clone())?;
            tokio::spawn(ca.clone().watch(args.cert_reload_interval));
            let names = args.apiserver_client_names.clone();
            tracing::info!(ca = %path.display(), ?names, "reviews only from the apiserver's client CA");
            (
                tls::server_config_with_client_ca(store, ca)?,
                apiserver_auth::require(router(state.clone()), names),
            )
        }
        None => (tls::server_config(store)?, router(state.clone())),
    };
    tracing::info!(addr = %args.addr, mode = ?args.cert_mode, "serving admission reviews");
    server::serve(
        listener,
        tls,
        app,
        args.limits(),
        state.health.clone(),
        state.metrics.connections_closed.clone(),
        signal::shutdown(),
    )
    .await;
    tracing::info!("stopped");
    Ok(())
}
