//! The `kubesteer-certs` command line: [`run`] runs it on the given arguments (the first is the
//! program name), for the `kubesteer-certs` binary and the image's multi-call `kubesteer`.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use crate::probe::Probe;
use crate::{check, ensure_dir, read_dir, Options, Renewal};
use clap::{Args, Parser, Subcommand};

/// kubesteer-certs: kubesteer's CA and webhook serving certificates.
///
/// Writes ca.crt, ca.key, tls.crt and tls.key into a directory, keeping an existing healthy CA
/// so the webhook's caBundle stays the same across runs; `probe` checks an HTTPS endpoint against
/// such a CA.
#[derive(Debug, Parser)]
#[command(name = "kubesteer-certs", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the CA and serving certificate, or renew the serving certificate when needed.
    ///
    /// Prints "created", "kept" or "renewed: <reason>".
    Generate(CertArgs),
    /// Report whether the serving certificate needs renewal; exits 0 when it does not, 1 when it does.
    Check(CertArgs),
    /// HTTPS GET a URL, trusting only the CA in --ca-file; exits 0 on a 2xx answer, 1 when every
    /// attempt failed, 2 when the flags or the CA file are unusable.
    ///
    /// For `helm test` in an image without a shell or curl, e.g.
    /// `kubesteer-certs probe --url https://kubesteer-webhook.kubesteer-system.svc:443/readyz --ca-file /ca/ca.crt`.
    Probe(ProbeArgs),
    /// Create a CA and a client certificate for the apiserver to present to webhooks, or renew
    /// the certificate when needed (a healthy CA is kept); writes ca.crt, ca.key, client.crt and
    /// client.key.
    ///
    /// Prints "created", "kept" or "renewed". Give client.crt and client.key to the apiserver in
    /// its AdmissionConfiguration's kubeconfig, and ca.crt to the webhook
    /// (`--apiserver-client-ca`, or the chart's `webhook.apiserverAuth.clientCA`).
    Client(ClientArgs),
}

#[derive(Debug, Args)]
struct ClientArgs {
    /// Directory to hold ca.crt, ca.key, client.crt and client.key.
    #[arg(long, env = "KUBESTEER_CERTS_OUT_DIR")]
    out_dir: PathBuf,

    /// The client certificate's common name, which the webhook's --apiserver-client-names may require.
    #[arg(long, default_value = "kube-apiserver")]
    name: String,

    /// Lifetime of a newly created CA, in days.
    #[arg(long, value_name = "N", default_value_t = 3650,
          value_parser = clap::value_parser!(u64).range(1..=36500))]
    ca_validity_days: u64,

    /// Lifetime of a newly issued client certificate, in days.
    #[arg(long, value_name = "N", default_value_t = 365,
          value_parser = clap::value_parser!(u64).range(1..=36500))]
    validity_days: u64,
}

#[derive(Debug, Args)]
struct ProbeArgs {
    /// The https:// URL to GET; its host must be a name (or IP address) in the server's certificate.
    #[arg(long, env = "KUBESTEER_PROBE_URL")]
    url: String,

    /// PEM file with the CA certificate(s) the server's certificate must chain to.
    #[arg(long, value_name = "FILE", env = "KUBESTEER_PROBE_CA_FILE")]
    ca_file: PathBuf,

    /// Connect to this address (host, host:port or an IP address) instead of the URL's host, whose
    /// name the certificate must still carry; e.g. a Service's $(NAME_SERVICE_HOST), needing no DNS.
    #[arg(long, value_name = "ADDR", env = "KUBESTEER_PROBE_CONNECT_TO")]
    connect_to: Option<String>,

    /// Further attempts after a failed one.
    #[arg(
        long,
        value_name = "N",
        env = "KUBESTEER_PROBE_RETRIES",
        default_value_t = 0
    )]
    retries: u32,

    /// Wait between attempts, e.g. "2s".
    #[arg(long, env = "KUBESTEER_PROBE_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    interval: Duration,

    /// Limit for each step of one attempt: connecting, the TLS handshake, the answer, an error body.
    #[arg(long, env = "KUBESTEER_PROBE_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

impl ProbeArgs {
    fn run(&self) -> crate::Result<ExitCode> {
        let ca = std::fs::read(&self.ca_file).map_err(|source| crate::Error::Io {
            path: self.ca_file.clone(),
            source,
        })?;
        let mut probe = Probe::new(&self.url, &ca, self.timeout)?;
        if let Some(addr) = &self.connect_to {
            probe = probe.connect_to(addr)?;
        }
        let attempts = self.retries.saturating_add(1);
        let url = &self.url;
        let result = probe.run(self.retries, self.interval, |n, e| {
            eprintln!("kubesteer-certs probe: {url}: attempt {n}/{attempts} failed: {e}");
        });
        match result {
            Ok(success) => {
                println!("{url}: {success}");
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("kubesteer-certs probe: {url}: failed after {attempts} attempt(s): {e}");
                Ok(ExitCode::FAILURE)
            }
        }
    }
}

#[derive(Debug, Args)]
struct CertArgs {
    /// Name of the Service in front of the webhook.
    #[arg(long, env = "KUBESTEER_CERTS_SERVICE")]
    service: String,

    /// Namespace of the webhook Service.
    #[arg(long, env = "KUBESTEER_CERTS_NAMESPACE")]
    namespace: String,

    /// Directory holding ca.crt, ca.key, tls.crt and tls.key.
    #[arg(long, env = "KUBESTEER_CERTS_OUT_DIR")]
    out_dir: PathBuf,

    /// Extra DNS name for the serving certificate (repeatable; comma-separated in the env var).
    #[arg(
        long = "dns",
        value_name = "NAME",
        env = "KUBESTEER_CERTS_DNS",
        value_delimiter = ','
    )]
    dns: Vec<String>,

    /// IP address for the serving certificate (repeatable; comma-separated in the env var).
    #[arg(
        long = "ip",
        value_name = "ADDR",
        env = "KUBESTEER_CERTS_IP",
        value_delimiter = ','
    )]
    ip: Vec<IpAddr>,

    /// Lifetime of a newly created CA, in days.
    #[arg(long, value_name = "N", env = "KUBESTEER_CERTS_CA_VALIDITY_DAYS", default_value_t = 3650,
          value_parser = clap::value_parser!(u64).range(1..=36500))]
    ca_validity_days: u64,

    /// Lifetime of a newly issued serving certificate, in days.
    #[arg(long, value_name = "N", env = "KUBESTEER_CERTS_VALIDITY_DAYS", default_value_t = 365,
          value_parser = clap::value_parser!(u64).range(1..=36500))]
    validity_days: u64,
}

impl CertArgs {
    fn options(&self) -> Options {
        let days = |n: u64| Duration::from_secs(n.saturating_mul(24 * 60 * 60));
        Options {
            dns: self.dns.clone(),
            ips: self.ip.clone(),
            ca_validity: days(self.ca_validity_days),
            serving_validity: days(self.validity_days),
            ..Options::new(&self.service, &self.namespace)
        }
    }
}

impl Command {
    fn run(&self) -> crate::Result<ExitCode> {
        let now = SystemTime::now();
        match self {
            Command::Generate(args) => {
                let outcome = ensure_dir(&args.out_dir, &args.options(), now)?;
                println!("{outcome}");
                Ok(ExitCode::SUCCESS)
            }
            Command::Check(args) => {
                let renewal = match read_dir(&args.out_dir)? {
                    Some(bundle) => check(&bundle, &args.options(), now),
                    None => Renewal::Unreadable(format!(
                        "no complete certificate set in {}",
                        args.out_dir.display()
                    )),
                };
                println!("{renewal}");
                Ok(if renewal.is_needed() {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                })
            }
            Command::Probe(args) => args.run(),
            Command::Client(args) => {
                let days = |n: u64| Duration::from_secs(n.saturating_mul(24 * 60 * 60));
                let outcome = crate::ensure_client_dir(
                    &args.out_dir,
                    &args.name,
                    days(args.ca_validity_days),
                    days(args.validity_days),
                    now,
                )?;
                println!("{outcome}");
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

/// Runs `kubesteer-certs` with `args` (program name first): 0 on success, 2 on an error.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    match Cli::parse_from(args).command.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kubesteer-certs: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_well_formed_and_documents_every_flag() {
        Cli::command().debug_assert();
        for sub in Cli::command().get_subcommands() {
            for arg in sub.get_arguments() {
                assert!(arg.get_help().is_some(), "{} lacks help", arg.get_id());
            }
        }
    }

    #[test]
    fn flags_become_options() {
        let cli = Cli::try_parse_from([
            "kubesteer-certs",
            "generate",
            "--service=svc",
            "--namespace=ns",
            "--out-dir=/tmp/x",
            "--dns=localhost",
            "--ip=127.0.0.1",
            "--validity-days=2",
        ])
        .unwrap();
        let Command::Generate(args) = cli.command else {
            panic!("expected generate");
        };
        let opts = args.options();
        assert_eq!(opts.dns_names().last().unwrap(), "localhost");
        assert_eq!(opts.ips, ["127.0.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(opts.serving_validity, Duration::from_secs(2 * 24 * 60 * 60));
        assert_eq!(opts.ca_validity, Options::new("svc", "ns").ca_validity);
    }

    #[test]
    fn probe_flags_and_defaults() {
        let cli = Cli::try_parse_from([
            "kubesteer-certs",
            "probe",
            "--url=https://svc.ns.svc:443/readyz",
            "--ca-file=/ca/ca.crt",
        ])
        .unwrap();
        let Command::Probe(args) = cli.command else {
            panic!("expected probe");
        };
        assert_eq!(args.retries, 0);
        assert_eq!(args.interval, Duration::from_secs(2));
        assert_eq!(args.timeout, Duration::from_secs(5));
        let cli = Cli::try_parse_from([
            "kubesteer-certs",
            "probe",
            "--url=https://svc/",
            "--ca-file=/ca/ca.crt",
            "--retries=30",
            "--interval=500ms",
            "--timeout=3s",
        ])
        .unwrap();
        let Command::Probe(args) = cli.command else {
            panic!("expected probe");
        };
        assert_eq!(
            (args.retries, args.interval, args.timeout),
            (30, Duration::from_millis(500), Duration::from_secs(3))
        );
        assert!(Cli::try_parse_from(["kubesteer-certs", "probe", "--url=https://svc/"]).is_err());
    }

    #[test]
    fn an_unreadable_ca_file_is_an_error_not_a_failed_probe() {
        let cli = Cli::try_parse_from([
            "kubesteer-certs",
            "probe",
            "--url=https://127.0.0.1:1/",
            "--ca-file=/nonexistent/ca.crt",
        ])
        .unwrap();
        let err = cli.command.run().unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.crt"), "{err}");
    }

    #[test]
    fn client_writes_a_ca_and_a_client_certificate_once() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("client");
        let out = out.to_str().unwrap();
        let run = || {
            let cli = Cli::try_parse_from(["kubesteer-certs", "client", "--out-dir", out]).unwrap();
            let Command::Client(args) = &cli.command else {
                panic!("expected client");
            };
            assert_eq!(args.name, "kube-apiserver");
            cli.command.run().unwrap()
        };
        assert_eq!(run(), ExitCode::SUCCESS);
        let ca = std::fs::read(dir.path().join("client/ca.crt")).unwrap();
        assert!(dir.path().join("client/client.key").exists());
        assert_eq!(run(), ExitCode::SUCCESS);
        assert_eq!(std::fs::read(dir.path().join("client/ca.crt")).unwrap(), ca);
    }

    #[test]
    fn zero_days_is_refused() {
        let parsed = Cli::try_parse_from([
            "kubesteer-certs",
            "check",
            "--service=svc",
            "--namespace=ns",
            "--out-dir=/tmp/x",
            "--validity-days=0",
        ]);
        assert!(parsed.is_err());
    }
}
