//! The command line: clap subcommands, one runtime, and the exit code (0 done, 1 refused or
//! failed, 2 a usage error).
use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Parser, Subcommand};

use crate::cluster::Connection;
use crate::preview::{Output, Request};
use crate::text::Paint;
use crate::week::MAX_DAYS;
use crate::write::Until;
use crate::{Error, Result};

/// kubesteer's kubectl plugin: a Scaler's week as a picture, why a workload has its replicas,
/// and the everyday actions in one line.
#[derive(Debug, Parser)]
#[command(name = "kubectl kubesteer", bin_name = "kubectl kubesteer", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub connection: Connection,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show a Scaler's schedule as a picture: one row per day, hours across.
    #[command(group(ArgGroup::new("source").required(true).args(["scaler", "file"])))]
    Preview {
        /// The Scaler in the cluster: scaler/NAME.
        scaler: Option<String>,
        /// A file with a Scaler (or "-" for stdin); needs no cluster.
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: Option<PathBuf>,
        /// How many days to show.
        #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DAYS)))]
        days: u32,
        /// The first day: a date, a date and time or an RFC 3339 time (default: today), read on
        /// the Scaler's clock.
        #[arg(long, value_name = "TIME")]
        from: Option<String>,
        /// text, or svg for docs and chat (to stdout).
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Say which Scaler scales a workload, its replicas now, desired and original, its HPA,
    /// the next changes and the last events.
    Why {
        /// The workload: KIND/NAME, e.g. deployment/web or statefulset/db.
        object: String,
    },
    /// Hold every target of a Scaler at some replicas for a while, or clear that.
    #[command(group(ArgGroup::new("end").required(true).args(["for_", "until", "clear"])))]
    Override {
        /// The Scaler: scaler/NAME.
        scaler: String,
        /// The replicas to hold.
        #[arg(long, required_unless_present = "clear", allow_negative_numbers = true,
              value_parser = clap::value_parser!(i32).range(0..))]
        replicas: Option<i32>,
        /// For how long, e.g. 2h or 90m.
        #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
        for_: Option<Duration>,
        /// Until when: an RFC 3339 time, or a date and time or time of day on the Scaler's clock.
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        /// Remove the override: the schedule applies again.
        #[arg(long, conflicts_with = "replicas")]
        clear: bool,
    },
    /// Stop a Scaler scaling: its targets are left as they are.
    Suspend {
        /// The Scaler: scaler/NAME.
        scaler: String,
    },
    /// Let a suspended Scaler scale again.
    Resume {
        /// The Scaler: scaler/NAME.
        scaler: String,
    },
    /// Hold every Scaler of the namespace at its targets' original replicas for a while (an
    /// override holding as many, as long, is kept).
    Wake {
        /// For how long, e.g. 2h.
        #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
        for_: Duration,
    },
    /// The pods, CPU and memory requests each Scaler's targets did not run because of it (a dry
    /// run's: would not), over the last days.
    Savings {
        /// In every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// How many days back, today included: 1d to 31d.
        #[arg(long, value_name = "DAYS", default_value = "7d", value_parser = crate::savings::parse_since)]
        since: usize,
        /// text, or svg for docs and chat (to stdout).
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Every kubesteer object with its Ready reason, and the installation's health.
    Status {
        /// In every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
}

/// Runs the plugin with `args` (the program name first) and returns its exit code.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Writes to stdout and the error to stderr, as kubectl does.
    match runtime.block_on(execute(&cli, chrono::Utc::now())) {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`| head`) is no failure.
            let _ = stdout.write_all(out.as_bytes());
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// What one command prints, at `now`.
pub async fn execute(cli: &Cli, now: kubesteer_api::scaler::schedule::Instant) -> Result<String> {
    let connection = &cli.connection;
    match &cli.command {
        Command::Preview {
            scaler,
            file,
            days,
            from,
            output,
        } => {
            let request = Request {
                days: *days,
                from: from.clone(),
                output: *output,
                now,
            };
            let paint = Paint::for_stdout();
            match (file, scaler) {
                (Some(path), None) => {
                    let namespace = connection
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into());
                    crate::preview::from_file(path, &namespace, &request, paint)
                }
                (None, Some(scaler)) => {
                    crate::preview::live(connection, scaler, &request, paint).await
                }
                _ => Err(Error::Input("give scaler/NAME or -f FILE".into())),
            }
        }
        Command::Why { object } => crate::why::why(connection, object, now).await,
        Command::Override {
            scaler,
            replicas,
            for_,
            until,
            clear,
        } => {
            let hold = match (clear, replicas, for_, until) {
                (true, _, _, _) => None,
                (false, Some(r), Some(d), None) => Some((*r, Until::For(*d))),
                (false, Some(r), None, Some(t)) => Some((*r, Until::At(t.clone()))),
                _ => {
                    return Err(Error::Input(
                        "give --replicas N with --for DURATION or --until TIME, or --clear".into(),
                    ))
                }
            };
            crate::write::set_override(connection, scaler, hold, now).await
        }
        Command::Suspend { scaler } => crate::write::suspend(connection, scaler, true).await,
        Command::Resume { scaler } => crate::write::suspend(connection, scaler, false).await,
        Command::Wake { for_ } => crate::write::wake(connection, *for_, now).await,
        Command::Savings {
            all_namespaces,
            since,
            output,
        } => crate::savings::savings(connection, *all_namespaces, *since, *output, now).await,
        Command::Status { all_namespaces } => {
            crate::status::status(connection, *all_namespaces, now).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-kubesteer").chain(args.iter().copied()))
    }

    #[test]
    fn the_commands_parse_as_documented() {
        assert!(parse(&["preview", "scaler/office-hours"]).is_ok());
        assert!(parse(&[
            "preview",
            "-f",
            "scaler.yaml",
            "--days",
            "14",
            "--from",
            "2026-12-21",
            "-o",
            "svg"
        ])
        .is_ok());
        assert!(parse(&["why", "deployment/web", "-n", "team"]).is_ok());
        assert!(parse(&["override", "scaler/a", "--replicas", "6", "--for", "2h"]).is_ok());
        assert!(parse(&[
            "override",
            "scaler/a",
            "--replicas",
            "6",
            "--until",
            "18:00"
        ])
        .is_ok());
        assert!(parse(&["override", "scaler/a", "--clear"]).is_ok());
        assert!(parse(&["suspend", "scaler/a"]).is_ok());
        assert!(parse(&["resume", "scaler/a"]).is_ok());
        assert!(parse(&["wake", "-n", "team", "--for", "2h"]).is_ok());
        assert!(parse(&["status", "-A"]).is_ok());
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        for bad in [
            &["preview"][..],
            &["preview", "scaler/a", "-f", "x.yaml"],
            &["preview", "scaler/a", "--days", "0"],
            &["override", "scaler/a", "--replicas", "2"],
            &["override", "scaler/a", "--for", "2h"],
            &["override", "scaler/a", "--replicas", "-1", "--for", "2h"],
            &[
                "override",
                "scaler/a",
                "--replicas",
                "2",
                "--for",
                "2h",
                "--until",
                "18:00",
            ],
            &["override", "scaler/a", "--replicas", "2", "--clear"],
            &["override", "scaler/a", "--replicas", "2", "--for", "soon"],
            &["wake", "-n", "team"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn negative_replicas_are_refused_by_name_not_taken_for_a_flag() {
        let message = parse(&["override", "scaler/a", "--replicas", "-1", "--for", "2h"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("'--replicas <REPLICAS>'") && message.contains("-1 is not in 0.."),
            "{message}"
        );
    }
}
