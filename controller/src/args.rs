//! Command-line arguments, each with an environment fallback for the Helm chart.
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// kubesteer-controller: reconciles what Scaler, Memcached, Welcome and Application own.
///
/// Durations are written like "500ms", "10s" or "2m" (humantime); "0" is zero.
#[derive(Debug, Clone, Parser)]
#[command(name = "kubesteer-controller", version, about, long_about = None)]
pub struct Args {
    /// Address of the server for /metrics, /healthz and /readyz (controller-runtime's flag name;
    /// `--metrics-addr` is the older one).
    #[arg(
        long = "metrics-bind-address",
        visible_alias = "metrics-addr",
        env = "KUBESTEER_METRICS_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_addr: SocketAddr,

    /// Serve HTTPS with a self-signed certificate, and /metrics only to bearer tokens that the
    /// apiserver authenticates (TokenReview) and allows `get` on /metrics (SubjectAccessReview),
    /// like controller-runtime's `--metrics-secure`. /healthz and /readyz stay open.
    #[arg(long, env = "KUBESTEER_METRICS_AUTH", default_value_t = false)]
    pub metrics_auth: bool,

    /// Run the controllers only while holding the leader Lease.
    #[arg(long, env = "KUBESTEER_LEADER_ELECTION", default_value_t = false)]
    pub leader_election: bool,

    /// Name of the leader Lease.
    #[arg(
        long,
        env = "KUBESTEER_LEASE_NAME",
        default_value = "kubesteer-controller"
    )]
    pub lease_name: String,

    /// Namespace of the leader Lease; defaults to the pod's namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,

    /// Identity in the leader Lease; defaults to the pod name, or hostname and pid.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Write each Scaler's targets (their replicas and records, HPAs and ScaledObjects) as this
    /// ServiceAccount of the Scaler's namespace, impersonated, so that the apiserver authorizes
    /// every write against what that namespace granted it (Flux's multi-tenant model). Unset:
    /// the controller's own rights, with the Scaler author's rights asked again.
    #[arg(long, env = "KUBESTEER_IMPERSONATE_SERVICE_ACCOUNT")]
    pub impersonate_service_account: Option<String>,

    /// Watch only this namespace instead of the whole cluster (operator-sdk's WATCH_NAMESPACE).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,

    /// Reconciles of one kind that may run at once; more wait their turn.
    #[arg(long, env = "KUBESTEER_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// How long a Memcached, Welcome or Application waits after a change before it is
    /// reconciled, so that the watch events of one write (a child created, a status written)
    /// make one reconcile. Every Ready waits this long once more, so it is short. Scalers are
    /// never delayed.
    #[arg(
        long,
        env = "KUBESTEER_DEBOUNCE",
        default_value = "300ms",
        value_parser = humantime::parse_duration
    )]
    pub debounce: Duration,

    /// The longest a stream of changes closer together than `--debounce` puts a reconcile off,
    /// from the first of them: a large Memcached's rollout, pod after pod, still has its status
    /// reconciled every few seconds meanwhile. Not shorter than `--debounce`.
    #[arg(
        long,
        env = "KUBESTEER_DEBOUNCE_MAX",
        default_value = "3s",
        value_parser = humantime::parse_duration
    )]
    pub debounce_max: Duration,

    /// The flags the webhook takes too: logging and readiness.
    #[command(flatten)]
    pub runtime: kubesteer_runtime::RuntimeArgs,
}

impl Args {
    /// The leader identity: the given one, or `hostname-pid` so two local runs differ.
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| "kubesteer-controller".to_string());
            format!("{host}-{}", std::process::id())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_flags() {
        let a = Args::try_parse_from(["kubesteer-controller"]).unwrap();
        assert_eq!(a.metrics_addr.to_string(), "0.0.0.0:8080");
        assert!(!a.leader_election && !a.metrics_auth);
        assert_eq!(a.lease_name, "kubesteer-controller");
        assert_eq!(
            (a.concurrency, a.debounce, a.debounce_max),
            (32, Duration::from_millis(300), Duration::from_secs(3))
        );
        assert_eq!(a.runtime.watch_stale_after, Duration::from_secs(30));
        assert!(Args::try_parse_from(["kubesteer-controller", "--concurrency=0"]).is_err());
        let a = Args::try_parse_from([
            "kubesteer-controller",
            "--leader-election",
            "--identity=me",
            "--metrics-addr=127.0.0.1:0",
            "--log-json",
            "--debounce=250ms",
            "--debounce-max=2s",
            "--watch-stale-after=1m",
        ])
        .unwrap();
        assert!(a.leader_election && a.runtime.log_json);
        assert_eq!(a.debounce, Duration::from_millis(250));
        assert_eq!(a.debounce_max, Duration::from_secs(2));
        assert_eq!(a.runtime.watch_stale_after, Duration::from_secs(60));
        let e = Args::try_parse_from(["kubesteer-controller", "--debounce=1000"]).unwrap_err();
        assert!(e.to_string().contains("--debounce"), "{e}");
        assert_eq!(a.identity(), "me");
        assert_eq!(a.metrics_addr.to_string(), "127.0.0.1:0");
        let a = Args::try_parse_from([
            "kubesteer-controller",
            "--metrics-bind-address=127.0.0.1:8443",
            "--metrics-auth",
        ])
        .unwrap();
        assert_eq!(a.metrics_addr.to_string(), "127.0.0.1:8443");
        assert!(a.metrics_auth);
    }
}
