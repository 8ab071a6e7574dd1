//! Command-line flags, each with an environment-variable fallback.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use humantime::parse_duration;

use crate::server::Limits;

/// kubesteer-webhook: validates and defaults Scaler, Memcached, Welcome and Application through JSON patches.
///
/// Durations are written like "500ms", "10s", "2m" or "8760h" (humantime); "0" is zero.
#[derive(Debug, Clone, Parser)]
#[command(name = "kubesteer-webhook", version, about, long_about = None)]
pub struct Args {
    /// Address of the HTTPS server (admission endpoints, /healthz, /readyz, /metrics).
    #[arg(long, env = "KUBESTEER_WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    pub addr: SocketAddr,

    /// PEM file with the serving certificate chain; reloaded when it changes.
    #[arg(long, env = "KUBESTEER_TLS_CERT_FILE", default_value = "/tls/tls.crt")]
    pub tls_cert_file: PathBuf,

    /// PEM file with the serving private key; reloaded when it changes.
    #[arg(long, env = "KUBESTEER_TLS_KEY_FILE", default_value = "/tls/tls.key")]
    pub tls_key_file: PathBuf,

    /// Where the serving certificate comes from: `files` (reloaded when they change) or
    /// `self-managed` (kept in a Secret, renewed, and its CA injected into the webhook configurations).
    #[arg(long, env = "KUBESTEER_CERT_MODE", value_enum, default_value_t = CertMode::Files)]
    pub cert_mode: CertMode,

    /// Self-managed: the Secret that holds ca.crt, ca.key, tls.crt and tls.key.
    #[arg(
        long,
        env = "KUBESTEER_CERT_SECRET",
        default_value = "kubesteer-webhook-tls"
    )]
    pub cert_secret: String,

    /// Image prefixes that Memcached, Welcome and Application pods may run, e.g. "registry.example.com/"
    /// (comma-separated in the variable); empty allows any image. Checked on create and when
    /// an object's image changes.
    #[arg(
        long = "allowed-images",
        env = "KUBESTEER_ALLOWED_IMAGES",
        value_delimiter = ','
    )]
    pub allowed_images: Vec<String>,

    /// Allow Applications whose Ingress has `pathType: ImplementationSpecific` (off: Prefix and
    /// Exact only), checked on create and when the Ingress part changes.
    #[arg(
        long,
        env = "KUBESTEER_ALLOW_IMPLEMENTATION_SPECIFIC_PATHS",
        default_value_t = false
    )]
    pub allow_implementation_specific_paths: bool,

    /// Allow an Application's Ingress for a host that another namespace serves already (off: a
    /// host belongs to the namespace that serves it first).
    #[arg(long, env = "KUBESTEER_ALLOW_HOST_SHARING", default_value_t = false)]
    pub allow_host_sharing: bool,

    /// Refuse Scalers that reach beyond their own namespace: a target in another namespace, a
    /// selector listing other namespaces or selecting namespaces by label (off: allowed, with
    /// the author's permission there checked).
    #[arg(
        long,
        env = "KUBESTEER_SCALERS_OWN_NAMESPACE_ONLY",
        default_value_t = false
    )]
    pub scalers_own_namespace_only: bool,

    /// PEM file of the CA(s) that sign the client certificate the apiserver presents to webhooks
    /// (through its AdmissionConfiguration's kubeconfig); reloaded when it changes. Set: /mutate
    /// and /validate answer only clients with such a certificate (401 otherwise), since anyone
    /// could write a review's userInfo; probes, /metrics and /convert need none. Unset: off.
    #[arg(long, env = "KUBESTEER_APISERVER_CLIENT_CA")]
    pub apiserver_client_ca: Option<PathBuf>,

    /// With --apiserver-client-ca: the client certificate's common name or a DNS name must be one
    /// of these (comma-separated in the variable; 403 otherwise). Empty: any certificate of the CA.
    #[arg(
        long = "apiserver-client-names",
        env = "KUBESTEER_APISERVER_CLIENT_NAMES",
        value_delimiter = ',',
        requires = "apiserver_client_ca"
    )]
    pub apiserver_client_names: Vec<String>,

    /// SubjectAccessReviews per second the webhook may send about reviews' authors (answers
    /// are cached, so this is new questions per second). Over it a check waits up to 1 s for its
    /// turn and otherwise fails, denying the review with the reason.
    #[arg(long, env = "KUBESTEER_SUBJECT_ACCESS_REVIEW_QPS", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub subject_access_review_qps: u32,

    /// SubjectAccessReviews the webhook may send at once above --subject-access-review-qps.
    #[arg(long, env = "KUBESTEER_SUBJECT_ACCESS_REVIEW_BURST", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub subject_access_review_burst: u32,

    /// Self-managed: the namespace of the Secret and the Service.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kubesteer-system")]
    pub namespace: String,

    /// Self-managed: the webhook Service, whose DNS names the certificate carries.
    #[arg(long, env = "KUBESTEER_SERVICE", default_value = "kubesteer-webhook")]
    pub service: String,

    /// Self-managed: the name of both webhook configurations whose caBundle is kept current.
    #[arg(
        long,
        env = "KUBESTEER_WEBHOOK_CONFIGURATION",
        default_value = "kubesteer"
    )]
    pub webhook_configuration: String,

    /// The CRD whose conversion this webhook serves (e.g. scalers.kubesteer.io): its
    /// `spec.conversion` is pointed at this webhook (`--service` in `--namespace`, or
    /// `--conversion-url`) with the CA, at start-up and every `--cert-check-interval`. Empty: off.
    #[arg(long, env = "KUBESTEER_CONVERSION_CRD", default_value = "")]
    pub conversion_crd: String,

    /// The conversion webhook's base URL instead of the Service, e.g. https://127.0.0.1:9443
    /// (runs outside the cluster).
    #[arg(long, env = "KUBESTEER_CONVERSION_URL")]
    pub conversion_url: Option<String>,

    /// Files mode: the PEM of the CA that signed the serving certificate, for the CRD's
    /// conversion caBundle (self-managed mode uses its own CA).
    #[arg(
        long,
        env = "KUBESTEER_CONVERSION_CA_FILE",
        default_value = "/tls/ca.crt"
    )]
    pub conversion_ca_file: PathBuf,

    /// Files mode: the CA's PEM itself, instead of `--conversion-ca-file`.
    #[arg(long, env = "KUBESTEER_CONVERSION_CA")]
    pub conversion_ca: Option<String>,

    /// Self-managed: extra DNS names for the certificate (comma-separated in the variable).
    #[arg(long = "cert-dns", env = "KUBESTEER_CERT_DNS", value_delimiter = ',')]
    pub cert_dns: Vec<String>,

    /// Self-managed: extra IP addresses for the certificate, e.g. 127.0.0.1 for a URL webhook.
    #[arg(long = "cert-ip", env = "KUBESTEER_CERT_IP", value_delimiter = ',')]
    pub cert_ip: Vec<std::net::IpAddr>,

    /// Self-managed: how often the Secret is checked and the certificate renewed when due.
    #[arg(long, env = "KUBESTEER_CERT_CHECK_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub cert_check_interval: Duration,

    /// Self-managed: lifetime of a serving certificate; it is renewed when a third is left.
    #[arg(long, env = "KUBESTEER_CERT_VALIDITY", default_value = "8760h", value_parser = parse_duration)]
    pub cert_validity: Duration,

    /// Self-managed: lifetime of a new CA; it is replaced when a third is left, and the old CA
    /// stays trusted beside the new one for 10 check intervals.
    #[arg(long, env = "KUBESTEER_CA_VALIDITY", default_value = "87600h", value_parser = parse_duration)]
    pub ca_validity: Duration,

    /// How often the certificate files are checked for changes, e.g. "2s".
    #[arg(long, env = "KUBESTEER_CERT_RELOAD_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub cert_reload_interval: Duration,

    /// Time a client has to finish the TLS handshake. The apiserver needs milliseconds; 3 s
    /// leaves room for a starved node, while a client that never sends a ClientHello holds its
    /// connection only briefly.
    #[arg(long, env = "KUBESTEER_HANDSHAKE_TIMEOUT", default_value = "3s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,

    /// Time a client has to send a whole request head: the first one counted from the end of
    /// the handshake, later ones from their first byte. The apiserver writes a head at once on a
    /// connection it opened for a request; 5 s cuts off clients that trickle theirs (slow-loris).
    #[arg(long, env = "KUBESTEER_HEADER_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// Time a kept-alive connection may sit between requests. Longer than the apiserver's 90 s
    /// idle timeout, so the apiserver, not us, closes its idle connections, unless room is needed
    /// (see --max-connections).
    #[arg(long, env = "KUBESTEER_IDLE_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Time to read a request body and answer it; the apiserver gives up after 5-10 s anyway.
    #[arg(long, env = "KUBESTEER_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// After SIGTERM, how long /readyz fails while connections are still accepted and served,
    /// so that endpoints and the apiserver move to other replicas before this one stops.
    #[arg(long, env = "KUBESTEER_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,

    /// After the shutdown delay, how long requests in progress may take to finish.
    #[arg(long, env = "KUBESTEER_DRAIN_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// Connections open at once. Every connection is accepted; past this limit room is made by
    /// closing the connection longest in its phase without a request in progress (handshaking,
    /// awaiting a request head, or idle), from the address that holds the most connections. A
    /// connection with a request in progress is never closed for room; a new connection is closed
    /// only when all are busy. 1024 is far beyond what the apiserver needs, and bounds memory and
    /// file descriptors.
    #[arg(long, env = "KUBESTEER_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,

    /// Connections one client address may hold; past it, room is made among that address's
    /// connections by the same rule. All admission requests come from the apiserver, often from
    /// one address that others may share; its connections are busy or were idle a moment ago, so
    /// an abuser's silent, slow and long-idle connections are closed first. 512 is far more than
    /// the apiserver's requests in flight and leaves half the total to other addresses.
    #[arg(long, env = "KUBESTEER_MAX_CONNECTIONS_PER_IP", default_value_t = 512)]
    pub max_connections_per_ip: usize,

    /// Bytes of request bodies read at once, e.g. "16Mi" (Ki, Mi, Gi; 1Mi to 1Gi): a request
    /// the budget has no room for is answered 429 with Retry-After before its body is read, so a
    /// flood of large bodies cannot take the webhook past its memory limit. An eighth is kept for
    /// bodies of at most an eighth of that (the apiserver's ordinary reviews). Bodies over 7 MiB
    /// (two objects at the apiserver's 3 MiB limit) are answered 413.
    #[arg(long, env = "KUBESTEER_REQUEST_BODY_BUDGET", default_value = "16Mi", value_parser = crate::budget::parse_bytes)]
    pub request_body_budget: usize,

    /// The flags the controller takes too: logging and readiness.
    #[command(flatten)]
    pub runtime: kubesteer_runtime::RuntimeArgs,
}

impl Args {
    /// The server's timeouts and connection limits.
    /// The CRD conversion this webhook keeps, if `--conversion-crd` is given.
    pub fn conversion(&self) -> Option<crate::crd_conversion::Conversion> {
        use crate::crd_conversion::{Conversion, Endpoint};
        (!self.conversion_crd.is_empty()).then(|| Conversion {
            crd: self.conversion_crd.clone(),
            endpoint: match &self.conversion_url {
                Some(url) => Endpoint::Url(url.clone()),
                None => Endpoint::Service {
                    namespace: self.namespace.clone(),
                    name: self.service.clone(),
                },
            },
        })
    }

    /// The bound on SubjectAccessReviews.
    pub fn sar_limit(&self) -> crate::permissions::SarLimit {
        crate::permissions::SarLimit {
            per_second: self.subject_access_review_qps,
            burst: self.subject_access_review_burst,
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            handshake: self.handshake_timeout,
            header: self.header_timeout,
            idle: self.idle_timeout,
            request: self.request_timeout,
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
            shutdown_delay: self.shutdown_delay,
            drain: self.drain_timeout,
        }
    }
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CertMode {
    Files,
    SelfManaged,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_human_and_a_bad_one_names_its_flag() {
        let a = Args::try_parse_from([
            "kubesteer-webhook",
            "--cert-validity=90d",
            "--request-timeout=1m 30s",
            "--handshake-timeout=250ms",
        ])
        .unwrap();
        assert_eq!(a.cert_validity, Duration::from_secs(90 * 24 * 3600));
        assert_eq!(a.request_timeout, Duration::from_secs(90));
        assert_eq!(a.handshake_timeout, Duration::from_millis(250));
        assert_eq!(a.runtime.watch_stale_after, Duration::from_secs(30));
        for bad in ["--idle-timeout=ten", "--idle-timeout=10"] {
            let e = Args::try_parse_from(["kubesteer-webhook", bad]).unwrap_err();
            assert!(e.to_string().contains("--idle-timeout"), "{bad}: {e}");
        }
    }

    #[test]
    fn shutdown_defaults_and_flags() {
        let a = Args::try_parse_from(["kubesteer-webhook"]).unwrap();
        assert_eq!(a.shutdown_delay, Duration::from_secs(5));
        assert_eq!(a.drain_timeout, Duration::from_secs(10));
        let a = Args::try_parse_from([
            "kubesteer-webhook",
            "--shutdown-delay=0",
            "--drain-timeout=2s",
        ])
        .unwrap();
        assert_eq!(a.shutdown_delay, Duration::ZERO);
        assert_eq!(a.drain_timeout, Duration::from_secs(2));
        assert!(Args::try_parse_from(["kubesteer-webhook", "--shutdown-delay=soon"]).is_err());
    }

    #[test]
    fn apiserver_client_names_need_the_client_ca() {
        let a = Args::try_parse_from(["kubesteer-webhook"]).unwrap();
        assert_eq!(a.apiserver_client_ca, None);
        let a = Args::try_parse_from([
            "kubesteer-webhook",
            "--apiserver-client-ca=/ca/ca.crt",
            "--apiserver-client-names=kube-apiserver,apiserver.example",
        ])
        .unwrap();
        assert_eq!(a.apiserver_client_ca, Some(PathBuf::from("/ca/ca.crt")));
        assert_eq!(
            a.apiserver_client_names,
            ["kube-apiserver", "apiserver.example"]
        );
        let e =
            Args::try_parse_from(["kubesteer-webhook", "--apiserver-client-names=x"]).unwrap_err();
        assert!(e.to_string().contains("--apiserver-client-ca"), "{e}");
    }

    #[test]
    fn subject_access_reviews_are_bounded_by_default_and_a_zero_bound_is_refused() {
        use crate::permissions::SarLimit;
        let a = Args::try_parse_from(["kubesteer-webhook"]).unwrap();
        assert_eq!(a.sar_limit(), SarLimit::default());
        assert_eq!(
            (SarLimit::default().per_second, SarLimit::default().burst),
            (50, 100)
        );
        let a = Args::try_parse_from([
            "kubesteer-webhook",
            "--subject-access-review-qps=5",
            "--subject-access-review-burst=10",
        ])
        .unwrap();
        assert_eq!(
            a.sar_limit(),
            SarLimit {
                per_second: 5,
                burst: 10
            }
        );
        for bad in [
            "--subject-access-review-qps=0",
            "--subject-access-review-burst=0",
        ] {
            let e = Args::try_parse_from(["kubesteer-webhook", bad]).unwrap_err();
            let flag = bad.split('=').next().unwrap_or_default();
            assert!(e.to_string().contains(flag), "{bad}: {e}");
        }
    }

    #[test]
    fn connection_limits() {
        let l = Args::try_parse_from(["kubesteer-webhook"])
            .unwrap()
            .limits();
        assert_eq!(l.handshake, Duration::from_secs(3));
        assert_eq!(l.header, Duration::from_secs(5));
        assert_eq!(l.idle, Duration::from_secs(120));
        assert_eq!((l.max_connections, l.max_connections_per_ip), (1024, 512));
        let l = Args::try_parse_from([
            "kubesteer-webhook",
            "--header-timeout=2s",
            "--max-connections-per-ip=8",
        ])
        .unwrap()
        .limits();
        assert_eq!(l.header, Duration::from_secs(2));
        assert_eq!(l.max_connections_per_ip, 8);
    }

    #[test]
    fn help_is_complete() {
        use clap::CommandFactory;
        let help = Args::command().render_help().to_string();
        for flag in [
            "--addr",
            "--tls-cert-file",
            "--tls-key-file",
            "--handshake-timeout",
            "--header-timeout",
            "--idle-timeout",
            "--max-connections",
            "--max-connections-per-ip",
            "--request-timeout",
            "--shutdown-delay",
            "--drain-timeout",
            "--log-json",
            "--watch-stale-after",
            "--apiserver-client-ca",
            "--apiserver-client-names",
            "--subject-access-review-qps",
            "--subject-access-review-burst",
        ] {
            assert!(help.contains(flag), "{flag} missing from --help");
        }
    }
}
