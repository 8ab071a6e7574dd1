//! kubesteer-bench: the client side of `make bench-controller` (see bench/scripts/controller.sh).
//!
//! Every subcommand prints one JSON object on stdout; `report` assembles what the others wrote
//! into bench/results/controller.json (see report.rs). Times are wall-clock on the benchmark
//! machine.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod echo;
mod fleet;
mod memory;
mod report;
mod reviews;
mod sar_cache;
mod servers;
mod stores;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use chrono::{DateTime, DurationRound, TimeDelta, Timelike, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec, PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use kubesteer_api::keys::condition;
use kubesteer_api::scaler::v1beta1::{HpaCooperation, ScaleTargetRef, ScaleWindow, TimeOfDay};
use kubesteer_api::{Memcached, MemcachedSpec, Scaler, ScalerSpec};
use kubesteer_controller::children::ListedPod;
use serde_json::{json, Value};
use tokio::sync::oneshot;

#[derive(Debug, Parser)]
#[command(name = "kubesteer-bench", about = "Controller benchmark client")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// A client certificate to present to the webhook: the apiserver's, for a webhook that answers
/// only the apiserver.
#[derive(Debug, clap::Args)]
struct ClientCert {
    #[arg(long, requires = "client_key")]
    client_cert: Option<PathBuf>,
    #[arg(long, requires = "client_cert")]
    client_key: Option<PathBuf>,
}

impl ClientCert {
    fn pair(&self) -> Option<(PathBuf, PathBuf)> {
        self.client_cert.clone().zip(self.client_key.clone())
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What the controller's caches take per object, kept as it keeps them and parsed (see
    /// stores.rs); no cluster needed.
    Stores {
        /// The sample objects: memcached.json, deployment.json, service.json, scaler.json.
        #[arg(long, default_value = "bench/bodies/stores")]
        samples: PathBuf,
        #[arg(long, default_value_t = 20000)]
        count: usize,
    },
    /// Creates `count` objects and waits until all of them have converged (see `Mode`).
    Converge {
        #[arg(long, value_enum)]
        mode: Mode,
        #[arg(long)]
        namespace: String,
        /// Spread the objects over this many namespaces, `NAMESPACE-0`, `NAMESPACE-1`, ...
        /// (1: all in `NAMESPACE`).
        #[arg(long, default_value_t = 1)]
        namespaces: usize,
        #[arg(long, default_value_t = 1000)]
        count: usize,
        /// Memcached size, or the ceiling Deployments' replicas.
        #[arg(long, default_value_t = 1)]
        size: i32,
        /// Requests of this client in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// What the controller mode waits for.
        #[arg(long, value_enum, default_value_t = Until::Ready)]
        until: Until,
        #[arg(long, default_value_t = 900)]
        timeout_secs: u64,
    },
    /// Creates `count` Deployments (0 replicas) and one Scaler each, with a window hours away;
    /// returns once every Scaler has a status.
    IdleSetup {
        #[arg(long)]
        namespace: String,
        /// As for converge.
        #[arg(long, default_value_t = 1)]
        namespaces: usize,
        #[arg(long, default_value_t = 100)]
        count: usize,
        #[arg(long, default_value_t = 300)]
        timeout_secs: u64,
    },
    /// Creates `count` Deployments (0 replicas) and one Scaler each whose window opens at the
    /// next minute boundary at least `lead_secs` away and closes a minute later, and measures
    /// when each Deployment's spec.replicas changes, as seen by a watch.
    Lateness {
        #[arg(long)]
        namespace: String,
        #[arg(long, default_value_t = 30)]
        count: usize,
        #[arg(long, default_value_t = 20)]
        lead_secs: i64,
        /// How long after the closing boundary to keep watching.
        #[arg(long, default_value_t = 15)]
        grace_secs: u64,
        /// The controller's log: when its writes to the targets were answered, beside when the
        /// watch saw them.
        #[arg(long)]
        controller_log: Option<PathBuf>,
    },
    /// The fleet phase (see fleet.rs): `namespaces` x `per_namespace` Deployments, one selector
    /// Scaler per namespace whose window closes at one minute boundary, then `hold` of them
    /// scaled up by a plain client for Hold to set back. Writes the results to `out`.
    Fleet {
        #[arg(long, default_value = "fleet")]
        prefix: String,
        #[arg(long, default_value_t = 100)]
        namespaces: usize,
        #[arg(long, default_value_t = 100)]
        per_namespace: usize,
        #[arg(long, default_value_t = 2)]
        replicas: i32,
        #[arg(long, default_value_t = 1000)]
        hold: usize,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// The ceiling line: a plain client's PATCH of every Deployment, this many at a time,
        /// with the controller stopped (0 skips it).
        #[arg(long, default_value_t = 200)]
        ceiling_concurrency: usize,
        #[arg(long, default_value_t = 75)]
        lead_secs: i64,
        /// The apiserver's log directory, with audit*.log.
        #[arg(long)]
        audit_dir: PathBuf,
        /// The controller's user in the audit log.
        #[arg(long)]
        user: String,
        #[arg(long)]
        controller_pid: u32,
        #[arg(long)]
        controller_log: Option<PathBuf>,
        /// Creating the fleet until rolled out, and each wait for the Scalers.
        #[arg(long, default_value_t = 3600)]
        setup_timeout_secs: u64,
        /// How long after the boundary, and after the scale-ups, to wait for the fleet.
        #[arg(long, default_value_t = 1800)]
        settle_timeout_secs: u64,
        /// Facts for the results file: fake nodes, commit, Kubernetes version, notes.
        #[arg(long, default_value_t = 0)]
        nodes: usize,
        #[arg(long, default_value = "?")]
        commit: String,
        #[arg(long, default_value = "?")]
        k8s: String,
        #[arg(long = "note")]
        notes: Vec<String>,
        #[arg(long, default_value = "bench/results/controller-fleet.json")]
        out: PathBuf,
    },
    /// One steady-state resync: merge-patches the annotation `bench.kubesteer.io/touch` (the
    /// time) onto every Memcached in `namespace`, `concurrency` at a time, then waits
    /// `quiet_secs`. An annotation does not change metadata.generation, so a controller need not
    /// write anything for it. Prints `started_at` and `window_end` (the last patch answered plus
    /// `quiet_secs`), the window `audit --window-of` counts the controller's requests in.
    Touch {
        #[arg(long)]
        namespace: String,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 20)]
        quiet_secs: u64,
    },
    /// Counts the requests of `user` in an apiserver audit log (Metadata level, one
    /// ResponseComplete event per request), received between `since` and `until`.
    Audit {
        /// The audit log files (the apiserver rotates them at 100 MB).
        #[arg(long, num_args = 1.., required = true)]
        log: Vec<PathBuf>,
        #[arg(long)]
        user: String,
        #[arg(long, conflicts_with = "window_of")]
        since: Option<DateTime<Utc>>,
        #[arg(long, conflicts_with = "window_of")]
        until: Option<DateTime<Utc>>,
        /// Counts from the `started_at` to the `converged_at` of this `converge` output (or the
        /// `window_end` of a `touch` output) instead.
        #[arg(long)]
        window_of: Option<PathBuf>,
    },
    /// The webhook benchmark's limit line: kubesteer's server stack answering every review with
    /// one fixed AdmissionReview, doing no review work. Takes the webhook's flags (`--addr`,
    /// `--tls-cert-file`, `--tls-key-file`, ...).
    EchoWebhook {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        flags: Vec<std::ffi::OsString>,
    },
    /// The review path alone, for profiling (`perf record`): answers the AdmissionReview in
    /// `body` `count` times in process, no HTTP or TLS, every permission granted.
    Reviews {
        #[arg(long)]
        body: PathBuf,
        /// The kind's plural, as in `/validate/<plural>`.
        #[arg(long)]
        plural: String,
        /// validate or mutate.
        #[arg(long, default_value = "validate")]
        endpoint: String,
        #[arg(long, default_value_t = 100_000)]
        count: u64,
    },
    /// kubesteer's HTTPS servers (the webhook's, the controller's /metrics) against axum-server
    /// under a flood of idle and slow connections (see servers.rs): failed requests, latency and
    /// the server's memory.
    Servers {
        /// Which servers, in turn each round.
        #[arg(long, num_args = 1.., default_values_t = servers::SERVERS.map(String::from))]
        servers: Vec<String>,
        /// Flood connections from one address (0: none).
        #[arg(long, default_value_t = 2000)]
        flood: usize,
        /// Requests per client; 2 clients.
        #[arg(long, default_value_t = 500)]
        requests: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// The process `servers` starts for each server: prints its port and CA, serves until killed.
    #[command(hide = true)]
    ServeTarget {
        #[arg(long)]
        server: String,
    },
    /// The webhook's permission checks alone (see sar_cache.rs): `tasks` tasks x `checks`
    /// checks over hot and once-asked questions, against a fake cluster that answers a
    /// SubjectAccessReview after `sar_ms`; throughput, latency, reviews sent and resident memory.
    SarCache {
        #[arg(long, default_value_t = 64)]
        tasks: usize,
        #[arg(long, default_value_t = 5000)]
        checks: usize,
        #[arg(long, default_value_t = 2)]
        sar_ms: u64,
        /// Users in the hot set, each asking 8 questions (one denied).
        #[arg(long, default_value_t = 32)]
        hot_users: usize,
        /// Checks, in percent, that ask a question nobody asked before.
        #[arg(long, default_value_t = 10)]
        distinct_percent: u64,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// The grant TTLs to run, in milliseconds, one scenario each: the webhook's (10 s,
        /// nothing expires during a round) and one short enough to expire and refresh often.
        #[arg(long, num_args = 1.., default_values_t = [10_000, 100])]
        ttl_ms: Vec<u64>,
        /// What is measured, kept in the results (e.g. "before", "after").
        #[arg(long, default_value = "")]
        label: String,
        /// Keep the webhook's bound on SubjectAccessReviews (50/s, a burst of 100) instead of
        /// one the run never reaches.
        #[arg(long)]
        sar_limit: bool,
    },
    /// The webhook at `addr` under a flood of large bodies while a kept-alive client sends
    /// ordinary reviews; the resident memory of process `pid` sampled from /proc, or the memory
    /// cgroups of its containers read (see memory.rs).
    WebhookMemory {
        #[arg(long)]
        addr: std::net::SocketAddr,
        /// PEM of the CA that signed the webhook's serving certificate.
        #[arg(long)]
        ca: PathBuf,
        /// The name the serving certificate must hold, when not the address (a Service's).
        #[arg(long)]
        server_name: Option<String>,
        #[command(flatten)]
        client: ClientCert,
        /// The webhook's process on this host.
        #[arg(long)]
        pid: Option<u32>,
        /// The memory cgroup directory of one of the webhook's containers; repeat it per pod.
        #[arg(long = "cgroup")]
        cgroups: Vec<PathBuf>,
        #[arg(long, default_value_t = 64)]
        attackers: usize,
        #[arg(long, default_value_t = 4 * 1024 * 1024)]
        body_bytes: usize,
        /// How long the flood lasts.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// How long the ordinary client runs alone first.
        #[arg(long, default_value_t = 5)]
        alone_seconds: u64,
        /// Time between the ordinary client's reviews.
        #[arg(long, default_value_t = 10)]
        interval_ms: u64,
        /// An ordinary review, as PATH=FILE (e.g. /validate/memcacheds=bench/bodies/memcached.json);
        /// repeat it to send several in turn.
        #[arg(long = "review", required = true)]
        reviews: Vec<String>,
    },
    /// The flood of webhook-memory alone, which runs it as a process of its own: `attackers`
    /// clients sending large bodies back to back for `seconds`.
    WebhookFlood {
        #[arg(long)]
        addr: std::net::SocketAddr,
        #[arg(long)]
        ca: PathBuf,
        #[arg(long)]
        server_name: Option<String>,
        #[command(flatten)]
        client: ClientCert,
        #[arg(long, default_value_t = 64)]
        attackers: usize,
        #[arg(long, default_value_t = 4 * 1024 * 1024)]
        body_bytes: usize,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
    },
    /// Reads the resident memory, open file descriptors and CPU time of process `pid`.
    Process {
        #[arg(long)]
        pid: u32,
    },
    /// Builds a phase's section of the controller results from the files the other subcommands
    /// wrote into `work` (`<name>.json`), merges it into `out` and prints its scalar fields.
    Report {
        #[arg(value_enum)]
        phase: report::Phase,
        #[arg(long)]
        work: PathBuf,
        #[arg(long, default_value = "bench/results/controller.json")]
        out: PathBuf,
        /// The control plane's Kubernetes version.
        #[arg(long, default_value = "?")]
        k8s: String,
        /// Convergence runs done.
        #[arg(long, default_value_t = 1)]
        repeats: usize,
        /// Memory: Memcacheds of size 1 that the convergence phase left.
        #[arg(long, default_value_t = 0)]
        with_pods: u64,
        /// Idle: the measured time.
        #[arg(long, default_value_t = 0)]
        seconds: u64,
        /// Memory: something that happened, kept beside the figures.
        #[arg(long)]
        note: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Memcacheds, converged when each has condition Ready=True (the controller wrote it after
    /// its Deployment rolled out with every pod Ready and its Service was applied).
    Controller,
    /// The same Deployments and Services as the controller would write, created directly
    /// (POST), converged when each Deployment has rolled out with every pod Ready.
    Ceiling,
    /// The ceiling of any controller: each Memcached created, then its Deployment and Service
    /// created (POST) with the controller owner reference to it, as a controller's children
    /// carry; converged as the ceiling. What a controller cannot avoid, without its own reads,
    /// status writes and events.
    Owned,
    /// The floor of kubesteer's own writes: the owned line plus, per Memcached, its first status
    /// (the JSON patch kubesteer writes) and its Created event, then its Ready status, naming
    /// its pods, as soon as this client's pod watch (which every line runs) sees them Ready, as
    /// kubesteer's controller reads Ready from its pods. What kubesteer writes, with no
    /// reconcile, cache, watch of its own or read; converged when every Ready status is written.
    Writes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Until {
    /// Every Memcached has condition Ready=True.
    Ready,
    /// Every Memcached has a status for its generation: the controller has applied its
    /// Deployment and Service and written the status once (Ready or not).
    Reconciled,
}

// The webhook's and the controller's allocator, so that `reviews` profiles the review path as
// the webhook runs it.
#[global_allocator]
static ALLOCATOR: kubesteer_runtime::Allocator = kubesteer_runtime::Allocator;

#[tokio::main]
async fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let out = match Cli::parse().command {
        Command::Converge {
            mode,
            namespace,
            namespaces,
            count,
            size,
            concurrency,
            until,
            timeout_secs,
        } => {
            let client = Client::try_default().await?;
            converge(
                client,
                mode,
                &Spread::new(namespace, namespaces),
                count,
                size,
                concurrency,
                until,
                Duration::from_secs(timeout_secs),
            )
            .await?
        }
        Command::IdleSetup {
            namespace,
            namespaces,
            count,
            timeout_secs,
        } => {
            let client = Client::try_default().await?;
            idle_setup(
                client,
                &Spread::new(namespace, namespaces),
                count,
                Duration::from_secs(timeout_secs),
            )
            .await?
        }
        Command::Lateness {
            namespace,
            count,
            lead_secs,
            grace_secs,
            controller_log,
        } => {
            let client = Client::try_default().await?;
            let mut out = lateness(
                client,
                &namespace,
                count,
                lead_secs,
                Duration::from_secs(grace_secs),
            )
            .await?;
            if let Some(log) = controller_log {
                out["written"] = written_lateness(&log, &namespace, &out)?;
            }
            out
        }
        Command::Fleet {
            prefix,
            namespaces,
            per_namespace,
            replicas,
            hold,
            concurrency,
            ceiling_concurrency,
            lead_secs,
            audit_dir,
            user,
            controller_pid,
            controller_log,
            setup_timeout_secs,
            settle_timeout_secs,
            nodes,
            commit,
            k8s,
            notes,
            out,
        } => {
            let client = Client::try_default().await?;
            let o = fleet::Options {
                prefix,
                namespaces,
                per_namespace,
                replicas,
                hold,
                concurrency,
                ceiling_concurrency,
                lead_secs,
                audit_dir,
                user,
                controller_pid,
                controller_log,
                setup_timeout: Duration::from_secs(setup_timeout_secs),
                settle_timeout: Duration::from_secs(settle_timeout_secs),
            };
            let started = Instant::now();
            let measured = fleet::run(client, &o).await?;
            let facts = fleet::Facts {
                nodes,
                commit,
                k8s,
                notes,
                took: started.elapsed(),
            };
            let doc = fleet::document(&o, &facts, measured)?;
            std::fs::write(&out, serde_json::to_string_pretty(&doc)? + "\n")
                .with_context(|| format!("writing {}", out.display()))?;
            doc
        }
        Command::Touch {
            namespace,
            concurrency,
            quiet_secs,
        } => {
            let client = Client::try_default().await?;
            touch(
                client,
                &namespace,
                concurrency,
                Duration::from_secs(quiet_secs),
            )
            .await?
        }
        Command::Audit {
            log,
            user,
            since,
            until,
            window_of,
        } => {
            let (since, until) = match window_of {
                Some(converge) => {
                    let (from, to) = report::window(&converge)?;
                    let at = |t: &str| -> Result<DateTime<Utc>> {
                        Ok(DateTime::parse_from_rfc3339(t)
                            .with_context(|| format!("{}: {t:?}", converge.display()))?
                            .to_utc())
                    };
                    (Some(at(&from)?), Some(at(&to)?))
                }
                None => (since, until),
            };
            audit(&log, &user, since, until)?
        }
        Command::EchoWebhook { flags } => {
            echo::serve(flags, kubesteer_runtime::signal::shutdown()).await?;
            return Ok(());
        }
        Command::Stores { samples, count } => stores::run(&samples, count)?,
        Command::Reviews {
            body,
            plural,
            endpoint,
            count,
        } => reviews::run(&body, &plural, &endpoint, count).await?,
        Command::Servers {
            servers,
            flood,
            requests,
            rounds,
        } => servers::run(&servers, flood, requests, rounds).await?,
        Command::ServeTarget { server } => {
            servers::serve_target(&server).await?;
            return Ok(());
        }
        Command::SarCache {
            tasks,
            checks,
            sar_ms,
            hot_users,
            distinct_percent,
            rounds,
            ttl_ms,
            label,
            sar_limit,
        } => {
            sar_cache::run(&sar_cache::Options {
                tasks,
                checks,
                sar: Duration::from_millis(sar_ms),
                hot_users,
                distinct_percent,
                rounds,
                ttls: ttl_ms.into_iter().map(Duration::from_millis).collect(),
                label,
                sar_limit,
            })
            .await?
        }
        Command::WebhookMemory {
            addr,
            ca,
            server_name,
            client,
            pid,
            cgroups,
            attackers,
            body_bytes,
            seconds,
            alone_seconds,
            interval_ms,
            reviews,
        } => {
            let reviews = reviews
                .iter()
                .map(|r| match r.split_once('=') {
                    Some((path, file)) => Ok((path.to_string(), PathBuf::from(file))),
                    None => bail!("--review {r:?}: write PATH=FILE"),
                })
                .collect::<Result<_>>()?;
            memory::run(memory::Options {
                peer: memory::Peer::new(addr, server_name.as_deref())?,
                ca,
                client: client.pair(),
                pid,
                cgroups,
                attackers,
                body_bytes,
                seconds,
                alone_seconds,
                interval: Duration::from_millis(interval_ms),
                reviews,
            })
            .await?
        }
        Command::WebhookFlood {
            addr,
            ca,
            server_name,
            client,
            attackers,
            body_bytes,
            seconds,
        } => {
            memory::flood(
                memory::Peer::new(addr, server_name.as_deref())?,
                &ca,
                client.pair().as_ref(),
                attackers,
                body_bytes,
                seconds,
            )
            .await?
        }
        Command::Process { pid } => serde_json::to_value(report::process(pid)?)?,
        Command::Report {
            phase,
            work,
            out,
            k8s,
            repeats,
            with_pods,
            seconds,
            note,
        } => {
            let facts = report::Facts {
                k8s,
                repeats,
                with_pods,
                seconds,
                note,
            };
            report::assemble(phase, &work, &out, &facts)?
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn log(msg: impl AsRef<str>) {
    eprintln!(
        "[bench {}] {}",
        Utc::now().format("%H:%M:%S%.3f"),
        msg.as_ref()
    );
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The namespaces a benchmark's objects go to: one, or `count` named `BASE-0` .. `BASE-{count-1}`,
/// object `i` in the `i % count`th. The controller-manager's deployment controller lists every
/// ReplicaSet of a Deployment's namespace for each Deployment it syncs, so tens of thousands in
/// one namespace cost it time that grows as the square of their number.
#[derive(Debug, Clone)]
struct Spread {
    names: Vec<String>,
}

impl Spread {
    fn new(base: String, count: usize) -> Self {
        let names = if count <= 1 {
            vec![base]
        } else {
            (0..count).map(|k| format!("{base}-{k}")).collect()
        };
        Spread { names }
    }

    /// The namespace of object `i`.
    fn of(&self, i: usize) -> &str {
        &self.names[i % self.names.len()]
    }

    fn holds(&self, namespace: Option<&str>) -> bool {
        namespace.is_some_and(|ns| self.names.iter().any(|n| n == ns))
    }

    /// An Api over all of them: namespaced for one, cluster-wide (filter with `holds`) for more.
    fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match self.names.as_slice() {
            [one] => Api::namespaced(client.clone(), one),
            _ => Api::all(client.clone()),
        }
    }

    async fn ensure(&self, client: &Client) -> Result<()> {
        for ns in &self.names {
            ensure_namespace(client, ns).await?;
        }
        Ok(())
    }

    /// How many objects of kind K are in them.
    async fn count<K>(&self, client: &Client) -> Result<usize>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + serde::de::DeserializeOwned,
    {
        let mut n = 0;
        for ns in &self.names {
            n += Api::<K>::namespaced(client.clone(), ns)
                .list_metadata(&Default::default())
                .await?
                .items
                .len();
        }
        Ok(n)
    }
}

/// Watches `api` from a fresh list and records, per name, when `done` first held. Returns once
/// the watch is established (list done) with a handle that resolves when `count` names are done.
async fn watch_until<K>(
    api: Api<K>,
    count: usize,
    done: impl Fn(&K) -> bool + Send + 'static,
) -> Result<tokio::task::JoinHandle<HashMap<String, Instant>>>
where
    K: Resource + Clone + Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let (ready_tx, ready_rx) = oneshot::channel();
    let handle = tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        let mut seen: HashMap<String, Instant> = HashMap::new();
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::InitDone) => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    if done(&o) {
                        seen.entry(o.name_any()).or_insert_with(Instant::now);
                    }
                }
                Ok(_) => {}
                Err(e) => log(format!("watch error (retrying): {e}")),
            }
            if seen.len() >= count {
                break;
            }
        }
        seen
    });
    ready_rx
        .await
        .context("the watch ended before its initial list")?;
    Ok(handle)
}

fn has_ready_condition(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == condition::READY && c.status == "True")
}

/// A pod whose Ready condition is True.
fn pod_ready(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| {
        cs.iter()
            .any(|c| c.type_ == condition::READY && c.status == "True")
    })
}

/// A Deployment rolled out with every pod Ready, as the controller's Ready condition reads it.
fn rolled_out(d: &Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(s) = d.status.as_ref() else {
        return false;
    };
    s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
        && s.replicas.unwrap_or(0) == want
        && s.updated_replicas.unwrap_or(0) == want
        && s.ready_replicas.unwrap_or(0) == want
}

fn memcached(name: &str, namespace: &str, size: i32) -> Memcached {
    let mut mc = Memcached::new(
        name,
        MemcachedSpec {
            size: Some(size),
            ..MemcachedSpec::default()
        },
    );
    mc.metadata.namespace = Some(namespace.into());
    mc
}

/// The Deployment and Service the controller would write for a Memcached, without the owner
/// reference (there is no owner here, and the garbage collector would delete orphans).
fn ceiling_objects(name: &str, namespace: &str, size: i32) -> Result<(Deployment, Service)> {
    let mut mc = memcached(name, namespace, size);
    mc.metadata.uid = Some(format!("ceiling-{name}"));
    let mut d = kubesteer_controller::memcached::deployment(&mc)?;
    let mut s = kubesteer_controller::memcached::service(&mc)?;
    d.metadata.owner_references = None;
    s.metadata.owner_references = None;
    Ok((d, s))
}

/// POSTs a Memcached's Deployment and Service, as the ceiling and owned lines make them.
async fn create_children(
    client: &Client,
    pp: &PostParams,
    d: &Deployment,
    s: &Service,
) -> Result<Deployment> {
    let namespace = d.namespace().unwrap_or_default();
    let created = Api::<Deployment>::namespaced(client.clone(), &namespace)
        .create(pp, d)
        .await?;
    Api::<Service>::namespaced(client.clone(), &namespace)
        .create(pp, s)
        .await?;
    Ok(created)
}

/// The writes line's Ready status write of one Memcached: its name and when it was written.
type ReadyWrite = tokio::task::JoinHandle<Result<(String, Instant)>>;

/// The pods of one Memcached seen Ready so far, for its Ready write to wait on (the writes line).
type PodSender = Arc<tokio::sync::watch::Sender<Vec<ListedPod>>>;

/// Per Memcached name (its pods' instance label), its pods seen Ready (the writes line).
#[derive(Default)]
struct ReadyPods(Mutex<HashMap<String, PodSender>>);

impl ReadyPods {
    fn of(&self, name: &str) -> Result<PodSender> {
        let mut map = self.0.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        Ok(map
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(tokio::sync::watch::channel(Vec::new()).0))
            .clone())
    }

    /// Records that `p`, a pod of the instance its label names, is Ready (once per pod).
    fn ready(&self, p: &Pod) {
        let Some(instance) = p.labels().get(kubesteer_api::keys::label::INSTANCE) else {
            return;
        };
        let Ok(tx) = self.of(instance) else { return };
        let name = p.name_any();
        let created = p.creation_timestamp().map(|t| t.0.as_second());
        tx.send_if_modified(|seen| {
            let new = !seen.iter().any(|s| s.name == name);
            if new {
                seen.push(ListedPod {
                    name: name.clone(),
                    ready: true,
                    created,
                });
            }
            new
        });
    }

    /// The pods of `name` once `size` of them have been seen Ready.
    async fn wait(&self, name: &str, size: usize) -> Result<Vec<ListedPod>> {
        let mut rx = self.of(name)?.subscribe();
        let seen = rx.wait_for(|pods| pods.len() >= size).await?;
        Ok(seen.clone())
    }
}

/// Writes the status kubesteer would write for `owner` with `deployment` and its Ready `pods`,
/// as it does: one JSON patch of the whole status under its field manager.
async fn write_status(
    api: &Api<Memcached>,
    owner: &Memcached,
    d: &Deployment,
    pods: &[ListedPod],
) -> Result<Memcached> {
    let status = kubesteer_controller::memcached::status(owner, d, pods, Utc::now());
    let patch = kubesteer_controller::reconcilers::status_patch(&status)?;
    let pp = kubesteer_controller::children::write_params();
    Ok(api.patch_status(&owner.name_any(), &pp, &patch).await?)
}

/// The Normal event kubesteer records when it has created a Memcached's children, with its
/// reporter, reason and note.
async fn created_event(client: &Client, owner: &Memcached) -> Result<()> {
    use kube::runtime::events::{Event as Recorded, EventType, Recorder, Reporter};
    use kubesteer_api::keys::{reason, CONTROLLER_FIELD_MANAGER};
    let reporter = Reporter {
        controller: CONTROLLER_FIELD_MANAGER.into(),
        instance: None,
    };
    let name = owner.name_any();
    let children = [format!("Deployment {name}"), format!("Service {name}")];
    let event = Recorded {
        type_: EventType::Normal,
        reason: reason::CREATED.into(),
        note: kubesteer_controller::reconcilers::created_note(&children),
        action: reason::CREATED.into(),
        secondary: None,
    };
    Recorder::new(client.clone(), reporter)
        .publish(&event, &owner.object_ref(&()))
        .await?;
    Ok(())
}

/// Times, from the start, at which a share of the objects had converged.
fn progress(start: Instant, done: &HashMap<String, Instant>) -> Value {
    let mut t: Vec<f64> = done.values().map(|i| secs(*i - start)).collect();
    t.sort_by(f64::total_cmp);
    let at = |q: f64| -> Value {
        if t.is_empty() {
            return Value::Null;
        }
        let i = ((q * t.len() as f64).ceil() as usize).clamp(1, t.len()) - 1;
        json!(t[i])
    };
    json!({"p10_s": at(0.1), "p50_s": at(0.5), "p90_s": at(0.9), "p100_s": at(1.0)})
}

#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename the same eight settings
async fn converge(
    client: Client,
    mode: Mode,
    spread: &Spread,
    count: usize,
    size: i32,
    concurrency: usize,
    until: Until,
    timeout: Duration,
) -> Result<Value> {
    spread.ensure(&client).await?;
    let watched = spread.clone();
    // The writes line's Ready statuses, each written once its pods are seen Ready.
    let ready_pods = Arc::new(ReadyPods::default());
    let ready_writes = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let watch = match mode {
        Mode::Controller => Some(
            watch_until(spread.api::<Memcached>(&client), count, move |mc| {
                watched.holds(mc.namespace().as_deref())
                    && mc.status.as_ref().is_some_and(|s| match until {
                        Until::Ready => has_ready_condition(&s.conditions),
                        Until::Reconciled => {
                            s.observed_generation.is_some()
                                && s.observed_generation == mc.metadata.generation
                        }
                    })
            })
            .await?,
        ),
        Mode::Ceiling | Mode::Owned => Some(
            watch_until(spread.api::<Deployment>(&client), count, move |d| {
                watched.holds(d.namespace().as_deref()) && rolled_out(d)
            })
            .await?,
        ),
        // Converged by its own Ready writes: no watch beside the pods' below.
        Mode::Writes => None,
    };
    // Every subject's pods, seen Ready by the same watch: when the last one was, whoever reports
    // it (the Memcached's status, a Deployment's roll-up).
    let pods_watched = spread.clone();
    let pod_count = count * usize::try_from(size.max(0))?;
    let seen_ready = ready_pods.clone();
    let pods = watch_until(spread.api::<Pod>(&client), pod_count, move |p: &Pod| {
        let ready = pods_watched.holds(p.namespace().as_deref()) && pod_ready(p);
        // Only the writes line acts on a Ready pod.
        if ready && mode == Mode::Writes {
            seen_ready.ready(p);
        }
        ready
    })
    .await?;
    let wanted_pods = usize::try_from(size.max(0))?;
    log(format!(
        "{mode:?}: creating {count} in {} namespace(s) from {} (size {size}, concurrency {concurrency})",
        spread.names.len(),
        spread.of(0)
    ));
    let started_at = Utc::now();
    let start = Instant::now();
    let pp = PostParams::default();
    let names: Vec<String> = (0..count).map(|i| format!("mc-{i:05}")).collect();
    let (requests, readied) = futures::stream::iter(names.iter().enumerate().map(|(i, name)| {
        let client = client.clone();
        let pp = &pp;
        let namespace = spread.of(i);
        let (ready_pods, ready_writes) = (&ready_pods, &ready_writes);
        async move {
            match mode {
                Mode::Controller => {
                    let api: Api<Memcached> = Api::namespaced(client, namespace);
                    api.create(pp, &memcached(name, namespace, size)).await?;
                    Ok::<_, anyhow::Error>((1, None))
                }
                Mode::Ceiling => {
                    let (d, s) = ceiling_objects(name, namespace, size)?;
                    create_children(&client, pp, &d, &s).await?;
                    Ok((2, None))
                }
                Mode::Owned => {
                    let owner = Api::<Memcached>::namespaced(client.clone(), namespace)
                        .create(pp, &memcached(name, namespace, size))
                        .await?;
                    let d = kubesteer_controller::memcached::deployment(&owner)?;
                    let s = kubesteer_controller::memcached::service(&owner)?;
                    create_children(&client, pp, &d, &s).await?;
                    Ok((3, None))
                }
                Mode::Writes => {
                    let api = Api::<Memcached>::namespaced(client.clone(), namespace);
                    let owner = api.create(pp, &memcached(name, namespace, size)).await?;
                    let d = kubesteer_controller::memcached::deployment(&owner)?;
                    let s = kubesteer_controller::memcached::service(&owner)?;
                    let d = create_children(&client, pp, &d, &s).await?;
                    let owner = write_status(&api, &owner, &d, &[]).await?;
                    created_event(&client, &owner).await?;
                    let (ready_pods, ready_writes) = (ready_pods.clone(), ready_writes.clone());
                    let name = name.clone();
                    let ready: ReadyWrite = tokio::spawn(async move {
                        let pods = ready_pods.wait(&name, wanted_pods).await?;
                        let _permit = ready_writes.acquire().await?;
                        let written = write_status(&api, &owner, &d, &pods).await?;
                        let conditions = written.status.map(|s| s.conditions).unwrap_or_default();
                        if !has_ready_condition(&conditions) {
                            bail!(
                                "{name}: its status written once its pods were Ready is not Ready"
                            );
                        }
                        Ok((name, Instant::now()))
                    });
                    Ok((6, Some(ready)))
                }
            }
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_fold(
        (0usize, Vec::new()),
        |(n, mut readied), (k, ready)| async move {
            readied.extend(ready);
            Ok((n + k, readied))
        },
    )
    .await?;
    let created = start.elapsed();
    log(format!(
        "{mode:?}: {requests} creates accepted in {:.1}s; waiting for convergence",
        created.as_secs_f64()
    ));
    let left = timeout.saturating_sub(created);
    let done = match watch {
        Some(watch) => match tokio::time::timeout(left, watch).await {
            Ok(done) => done?,
            Err(_) => bail!("{mode:?}: not converged within {timeout:?}"),
        },
        // The writes line: converged when its last Ready status is written.
        None => {
            let all = futures::future::try_join_all(readied);
            let written = match tokio::time::timeout(left, all).await {
                Ok(written) => written?,
                Err(_) => bail!("{mode:?}: not converged within {timeout:?}"),
            };
            written.into_iter().collect::<Result<HashMap<_, _>>>()?
        }
    };
    let converged = done.values().max().map(|t| *t - start).unwrap_or_default();
    let converged_at = started_at + TimeDelta::from_std(converged)?;
    log(format!(
        "{mode:?}: {} converged in {:.1}s",
        done.len(),
        converged.as_secs_f64()
    ));
    // The pods were Ready before whatever reports them, so their watch is done or about to be.
    let pods = match tokio::time::timeout(Duration::from_secs(60), pods).await {
        Ok(pods) => pods?,
        Err(_) => bail!("{mode:?}: converged, but not every pod was seen Ready within 60 s more"),
    };
    let pods_ready = pods.values().max().map(|t| *t - start).unwrap_or_default();
    // Counts of what exists, as a check that both sides built the same.
    let deployments = spread.count::<Deployment>(&client).await?;
    let services = spread.count::<Service>(&client).await?;
    Ok(json!({
        "mode": format!("{mode:?}").to_lowercase(),
        "until": match mode {
            Mode::Controller => format!("{until:?}").to_lowercase(),
            Mode::Ceiling | Mode::Owned => "rolled_out".to_string(),
            Mode::Writes => "ready_written".to_string(),
        },
        "namespace": spread.of(0),
        "namespaces": spread.names.len(),
        "count": count,
        "size": size,
        "client_concurrency": concurrency,
        "client_create_requests": requests,
        "started_at": started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "converged_at": converged_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "creates_accepted_s": secs(created),
        "converged_s": secs(converged),
        "converged_progress": progress(start, &done),
        "pods_ready_s": secs(pods_ready),
        "pods_ready_progress": progress(start, &pods),
        "deployments": deployments,
        "services": services,
    }))
}

/// The `touch` subcommand: an annotation on every Memcached of `namespace`, then `quiet` to
/// count the controller's requests in.
async fn touch(
    client: Client,
    namespace: &str,
    concurrency: usize,
    quiet: Duration,
) -> Result<Value> {
    let api: Api<Memcached> = Api::namespaced(client, namespace);
    let names: Vec<String> = api
        .list_metadata(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|m| m.name_any())
        .collect();
    let started_at = Utc::now();
    let stamp = started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let patch =
        Patch::Merge(json!({"metadata": {"annotations": {"bench.kubesteer.io/touch": stamp}}}));
    let pp = PatchParams::default();
    let start = Instant::now();
    futures::stream::iter(names.iter().map(|name| {
        let (api, patch, pp) = (&api, &patch, &pp);
        async move { api.patch(name, pp, patch).await.map(|_| ()) }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect::<Vec<()>>()
    .await?;
    let touched = start.elapsed();
    let touched_at = started_at + TimeDelta::from_std(touched)?;
    log(format!(
        "touched {} Memcacheds in {namespace} in {:.1}s; {}s of quiet",
        names.len(),
        touched.as_secs_f64(),
        quiet.as_secs()
    ));
    tokio::time::sleep(quiet).await;
    let window_end = touched_at + TimeDelta::from_std(quiet)?;
    let at = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    Ok(json!({
        "namespace": namespace,
        "count": names.len(),
        "client_concurrency": concurrency,
        "started_at": at(started_at),
        "touched_at": at(touched_at),
        "window_end": at(window_end),
        "touched_s": secs(touched),
        "quiet_s": quiet.as_secs(),
    }))
}

pub(crate) fn target_deployment(name: &str, namespace: &str, replicas: i32) -> Deployment {
    let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some("registry.k8s.io/pause:3.10".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

fn window_scaler(
    name: &str,
    namespace: &str,
    target: &str,
    start: TimeOfDay,
    end: TimeOfDay,
) -> Scaler {
    let mut s = Scaler::new(
        name,
        ScalerSpec {
            scale_target_refs: vec![ScaleTargetRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: target.into(),
                namespace: None,
            }],
            windows: Some(vec![ScaleWindow {
                start,
                end,
                replicas: Some(1),
                days: None,
            }]),
            // The benchmark measures the controller's own writes, not HPA lookups.
            hpa_cooperation: Some(HpaCooperation::Disabled),
            ..ScalerSpec::default()
        },
    );
    s.metadata.namespace = Some(namespace.into());
    s
}

/// Creates the targets and their Scalers, `concurrency` at a time.
async fn create_scalers(
    client: &Client,
    spread: &Spread,
    count: usize,
    prefix: &str,
    start: TimeOfDay,
    end: TimeOfDay,
) -> Result<()> {
    let pp = PostParams::default();
    futures::stream::iter(0..count)
        .map(|i| {
            let name = format!("{prefix}-{i:03}");
            let namespace = spread.of(i);
            let (start, end, pp) = (start.clone(), end.clone(), &pp);
            async move {
                Api::<Deployment>::namespaced(client.clone(), namespace)
                    .create(pp, &target_deployment(&name, namespace, 0))
                    .await?;
                Api::<Scaler>::namespaced(client.clone(), namespace)
                    .create(pp, &window_scaler(&name, namespace, &name, start, end))
                    .await?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// A Scaler the controller has reconciled since its last spec change.
fn scaler_reconciled(s: &Scaler) -> bool {
    s.status.as_ref().is_some_and(|st| {
        st.observed_generation.is_some()
            && st.observed_generation == s.metadata.generation
            && !st.conditions.is_empty()
    })
}

async fn idle_setup(
    client: Client,
    spread: &Spread,
    count: usize,
    timeout: Duration,
) -> Result<Value> {
    spread.ensure(&client).await?;
    let now = Utc::now();
    // Whole hours 6 to 8 hours ahead: no boundary during any idle measurement.
    let start_hour = (i64::from(now.hour()) + 6) % 24;
    let end_hour = (start_hour + 2) % 24;
    let watched = spread.clone();
    let watch = watch_until(spread.api::<Scaler>(&client), count, move |s: &Scaler| {
        watched.holds(s.namespace().as_deref()) && scaler_reconciled(s)
    })
    .await?;
    let t = Instant::now();
    create_scalers(
        &client,
        spread,
        count,
        "idle",
        TimeOfDay::Hour(start_hour),
        TimeOfDay::Hour(end_hour),
    )
    .await?;
    let done = match tokio::time::timeout(timeout, watch).await {
        Ok(done) => done?,
        Err(_) => bail!("idle Scalers not reconciled within {timeout:?}"),
    };
    log(format!(
        "{} idle Scalers reconciled in {:.1}s",
        done.len(),
        t.elapsed().as_secs_f64()
    ));
    Ok(json!({
        "count": count,
        "namespaces": spread.names.len(),
        "window_utc": {"start": start_hour, "end": end_hour},
        "reconciled_s": secs(t.elapsed()),
    }))
}

/// A Deployment's spec.replicas as a watch saw it, and when.
type Seen = (String, i32, DateTime<Utc>);

fn hh_mm(t: DateTime<Utc>) -> TimeOfDay {
    TimeOfDay::Clock(t.format("%H:%M").to_string())
}

fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[i])
}

fn summary_ms(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    json!({
        "samples": v.len(),
        "min_ms": v.first(),
        "p50_ms": percentile(&v, 0.5),
        "p90_ms": percentile(&v, 0.9),
        "p99_ms": percentile(&v, 0.99),
        "max_ms": v.last(),
    })
}

async fn lateness(
    client: Client,
    namespace: &str,
    count: usize,
    lead_secs: i64,
    grace: Duration,
) -> Result<Value> {
    ensure_namespace(&client, namespace).await?;
    // Every spec.replicas the watch sees, with when it saw it.
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let (ready_tx, ready_rx) = oneshot::channel();
    let recorder = {
        let seen = seen.clone();
        let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            let mut stream = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = stream.next().await {
                let at = Utc::now();
                match event {
                    Ok(Event::InitDone) => {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(Event::Apply(d) | Event::InitApply(d)) => {
                        let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                        if let Ok(mut seen) = seen.lock() {
                            seen.push((d.name_any(), replicas, at));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => log(format!("watch error (retrying): {e}")),
                }
            }
        })
    };
    ready_rx.await.context("the Deployment watch ended early")?;

    let now = Utc::now();
    let open = (now + TimeDelta::seconds(lead_secs + 59)).duration_trunc(TimeDelta::minutes(1))?;
    let close = open + TimeDelta::minutes(1);
    let reconciled = watch_until(
        Api::<Scaler>::namespaced(client.clone(), namespace),
        count,
        scaler_reconciled,
    )
    .await?;
    log(format!(
        "{count} Scalers with the window [{}, {}) UTC",
        open.format("%H:%M"),
        close.format("%H:%M")
    ));
    let spread = Spread::new(namespace.to_string(), 1);
    create_scalers(&client, &spread, count, "late", hh_mm(open), hh_mm(close)).await?;
    let until_open = (open - Utc::now()).to_std().unwrap_or_default();
    let reconciled_before_open = tokio::time::timeout(until_open, reconciled).await.is_ok();
    if !reconciled_before_open {
        log("warning: not every Scaler was reconciled before the window opened");
    }
    let until_end = (close - Utc::now()).to_std().unwrap_or_default() + grace;
    log(format!("watching for {:.0}s", until_end.as_secs_f64()));
    tokio::time::sleep(until_end).await;
    recorder.abort();

    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let mut opening = Vec::new();
    let mut closing = Vec::new();
    let mut missed = Vec::new();
    for i in 0..count {
        let name = format!("late-{i:03}");
        let events: Vec<&Seen> = seen.iter().filter(|(n, _, _)| *n == name).collect();
        let scaled = events.iter().position(|(_, r, _)| *r == 1);
        let restored =
            scaled.and_then(|p| events[p..].iter().find(|(_, r, _)| *r == 0).map(|e| e.2));
        let ms = |at: DateTime<Utc>, boundary: DateTime<Utc>| {
            (at - boundary).num_microseconds().unwrap_or(0) as f64 / 1000.0
        };
        match scaled {
            Some(p) => opening.push(ms(events[p].2, open)),
            None => missed.push(format!("{name}: not scaled up")),
        }
        match restored {
            Some(at) => closing.push(ms(at, close)),
            None => missed.push(format!("{name}: not restored")),
        }
    }
    let all: Vec<f64> = opening.iter().chain(&closing).copied().collect();
    Ok(json!({
        "scalers": count,
        "window_open_at": open.to_rfc3339(),
        "window_close_at": close.to_rfc3339(),
        "reconciled_before_open": reconciled_before_open,
        "opening": summary_ms(opening),
        "closing": summary_ms(closing),
        "all_transitions": summary_ms(all),
        "missed": missed,
    }))
}

/// When the controller's writes to the lateness targets were answered, after each boundary, from
/// its log lines (`Scaled Deployment <ns>/late-...` after the opening, "Restored ..." after the
/// closing): the change was stored by then, whenever a watch delivers it.
fn written_lateness(log: &std::path::Path, namespace: &str, late: &Value) -> Result<Value> {
    let boundary = |key: &str| -> Result<DateTime<Utc>> {
        let at = late[key].as_str().with_context(|| format!("no {key}"))?;
        Ok(DateTime::parse_from_rfc3339(at)?.to_utc())
    };
    let (open, close) = (boundary("window_open_at")?, boundary("window_close_at")?);
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let mut opening = Vec::new();
    let mut closing = Vec::new();
    for line in text.lines() {
        let Some((stamp, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(at) = DateTime::parse_from_rfc3339(stamp) else {
            continue;
        };
        let ms = |boundary: DateTime<Utc>| {
            (at.to_utc() - boundary).num_microseconds().unwrap_or(0) as f64 / 1000.0
        };
        if rest.contains(&format!("Scaled Deployment {namespace}/late-")) && at >= open {
            opening.push(ms(open));
        } else if rest.contains(&format!("Restored Deployment {namespace}/late-")) && at >= close {
            closing.push(ms(close));
        }
    }
    let all: Vec<f64> = opening.iter().chain(&closing).copied().collect();
    Ok(json!({
        "opening": summary_ms(opening),
        "closing": summary_ms(closing),
        "all_transitions": summary_ms(all),
    }))
}

/// Counts requests by verb and resource in a Metadata-level audit log.
fn audit(
    paths: &[PathBuf],
    user: &str,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
) -> Result<Value> {
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    // How often each object was the subject of each verb and resource.
    let mut by_object: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut codes: BTreeMap<String, u64> = BTreeMap::new();
    let mut watches_opened = 0u64;
    let mut non_watch = 0u64;
    let mut ids: HashSet<String> = HashSet::new();
    let mut lines = Vec::new();
    for path in paths {
        let file =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        lines.push(std::io::BufReader::new(file).lines());
    }
    for line in lines.into_iter().flatten() {
        let line = line?;
        let Ok(e) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if e["user"]["username"] != user {
            continue;
        }
        let received = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.to_utc());
        let Some(received) = received else { continue };
        if since.is_some_and(|s| received < s) || until.is_some_and(|u| received > u) {
            continue;
        }
        let verb = e["verb"].as_str().unwrap_or_default();
        let stage = e["stage"].as_str().unwrap_or_default();
        if verb == "watch" {
            if stage == "ResponseStarted" {
                watches_opened += 1;
            }
            continue;
        }
        if stage != "ResponseComplete" {
            continue;
        }
        let id = e["auditID"].as_str().unwrap_or_default().to_string();
        if !ids.insert(id) {
            continue;
        }
        non_watch += 1;
        let o = &e["objectRef"];
        let mut resource = o["resource"].as_str().unwrap_or("-").to_string();
        if let Some(sub) = o["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let what = format!("{verb} {resource}");
        if let Some(name) = o["name"].as_str() {
            let object = match o["namespace"].as_str() {
                Some(ns) => format!("{ns}/{name}"),
                None => name.to_string(),
            };
            *by_object
                .entry(what.clone())
                .or_default()
                .entry(object)
                .or_default() += 1;
        }
        *by_kind.entry(what).or_default() += 1;
        let code = e["responseStatus"]["code"]
            .as_i64()
            .map_or("-".to_string(), |c| c.to_string());
        *codes.entry(code).or_default() += 1;
    }
    Ok(json!({
        "user": user,
        "since": since.map(|t| t.to_rfc3339()),
        "until": until.map(|t| t.to_rfc3339()),
        "non_watch_requests": non_watch,
        "watch_requests": watches_opened,
        "by_verb_resource": by_kind,
        "by_status_code": codes,
        "objects": objects_summary(&by_object),
    }))
}

/// Per verb and resource: how many distinct objects the requests were about, and the three
/// asked about most, to tell one object written again and again from many written once.
fn objects_summary(by_object: &BTreeMap<String, BTreeMap<String, u64>>) -> Value {
    let summary: BTreeMap<&String, Value> = by_object
        .iter()
        .map(|(what, objects)| {
            let mut most: Vec<(&String, &u64)> = objects.iter().collect();
            most.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
            most.truncate(3);
            let most: BTreeMap<&String, &u64> = most.into_iter().collect();
            (what, json!({"distinct": objects.len(), "most": most}))
        })
        .collect();
    json!(summary)
}
