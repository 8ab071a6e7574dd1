#![forbid(unsafe_code)]
#![deny(warnings, rust_2018_idioms)]

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use clap::Parser;
use kubesteer_webhook::args::{Args, CertMode};
use kubesteer_webhook::cluster::KubeCluster;
use kubesteer_webhook::selfmanaged::SelfManaged;
use kubesteer_webhook::server;
use kubesteer_webhook::tls::{self, CertFiles, CertStore};
use kubesteer_webhook::{router, AppState, Error};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.log_json);
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kubesteer-webhook failed");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Error> {
    // Only ring is linked; make it the process default for the kube client too.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube::Client::try_default().await?;
    let store = match args.cert_mode {
        CertMode::Files => {
            let files = CertFiles {
                cert: args.tls_cert_file.clone(),
                key: args.tls_key_file.clone(),
            };
            let store = CertStore::new(files.load()?);
            tokio::spawn(files.watch(store.clone(), args.cert_reload_interval));
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
    let mut state = AppState::new(KubeCluster::start(client));
    state.images = kubesteer_api::access::ImagePolicy::new(args.allowed_images.clone());
    let state = Arc::new(state);
    state.tls_ready.store(true, Ordering::Release);
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|source| Error::Bind {
            addr: args.addr.to_string(),
            source,
        })?;
    tracing::info!(addr = %args.addr, mode = ?args.cert_mode, "serving admission reviews");
    server::serve(
        listener,
        tls::server_config(store)?,
        router(state.clone()),
        args.limits(),
        state.draining.clone(),
        state.metrics.connections_closed.clone(),
        shutdown_signal(),
    )
    .await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn init_logging(json: bool) {
    // An empty RUST_LOG counts as unset, so the default level still applies.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| tracing_subscriber::EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| {
            tracing_subscriber::EnvFilter::new("info,kube_client=warn,kube_runtime=warn")
        });
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
