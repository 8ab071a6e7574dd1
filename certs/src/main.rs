#![forbid(unsafe_code)]
#![deny(warnings, rust_2018_idioms)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand};
use kubesteer_certs::{check, ensure_dir, read_dir, Options, Renewal};

/// kubesteer-certs: kubesteer's CA and webhook serving certificates.
///
/// Writes ca.crt, ca.key, tls.crt and tls.key into a directory, keeping an existing healthy CA
/// so the webhook's caBundle stays the same across runs.
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
        let days = |n: u64| Duration::from_secs(n * 24 * 60 * 60);
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
    fn run(&self) -> kubesteer_certs::Result<ExitCode> {
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
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command.run() {
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
