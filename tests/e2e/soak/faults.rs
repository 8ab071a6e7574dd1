//! The soak's faults, one at a time, each written to the history from its start until the
//! system it broke answers again (the apiserver ready, a new leader, the webhook's pods ready,
//! the node Ready): the checker allows writes to fail and targets to lag only then, and for its
//! grace period after.
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kubesteer_tests::release::{real_node_ready, Release};
use kubesteer_tests::soak::{Event, Fault, History};
use kubesteer_tests::{eventually, jsonpath, output_within, restart, Paused};

/// Every kind, in the order a round of the soak shuffles.
pub const KINDS: [Fault; 7] = [
    Fault::ControllerLeaderKilled,
    Fault::WebhookPodKilled,
    Fault::ApiserverRestarted,
    Fault::EtcdRestarted,
    Fault::KubeletPaused,
    Fault::NetworkDelay,
    Fault::HostileBodies,
];

const HELD: Duration = kubesteer_tests::soak::FAULT_HELD;

/// Injects `kind` at `at` (a Unix time; a leader killed at a window's boundary is killed in the
/// middle of a transition), or now, and records it; fails when the system did not come back.
pub fn inject(
    kind: Fault,
    release: &Release,
    history: &History,
    at: Option<f64>,
    rng: &mut fastrand::Rng,
) -> Result<()> {
    if let Some(at) = at {
        let wait = at - kubesteer_tests::now_seconds();
        if wait > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
    }
    let start = history.now();
    let outcome = match kind {
        Fault::ControllerLeaderKilled => kill_leader(release, rng.bool()),
        Fault::WebhookPodKilled => kill_webhook_pod(release, rng),
        Fault::ApiserverRestarted => restart("kube-apiserver"),
        Fault::EtcdRestarted => restart("etcd"),
        Fault::KubeletPaused => pause_kubelet(),
        Fault::NetworkDelay => slow_network(),
        Fault::HostileBodies => flood(release),
    };
    history.record(&Event::Fault {
        t: start,
        until: history.now(),
        kind,
    });
    outcome.with_context(|| format!("the fault {kind:?}"))
}

/// The leader's pod force-deleted, or (`crash`) its process SIGKILLed on the node, which the
/// kubelet then restarts in the same pod: no chance to give the Lease back, so the standby waits
/// for it to run out.
fn kill_leader(release: &Release, crash: bool) -> Result<()> {
    let leader = release.lease_holder()?;
    ensure!(!leader.is_empty(), "no controller holds the Lease");
    if crash {
        let restarts = restart_count(release, &leader)?;
        let id = jsonpath(
            &release.namespace,
            &format!("pod/{leader}"),
            "{.status.containerStatuses[0].containerID}",
        )?;
        let id = id
            .trim()
            .strip_prefix("containerd://")
            .with_context(|| format!("pod {leader} runs no containerd container: {id}"))?
            .to_string();
        // hack/node.sh runs each container in the cgroup /k8s.io/<container id>.
        let procs = ["pids", "memory", "cpu"]
            .iter()
            .map(|c| format!("/sys/fs/cgroup/{c}/k8s.io/{id}/cgroup.procs"))
            .find_map(|f| std::fs::read_to_string(f).ok())
            .with_context(|| format!("no cgroup of container {id}"))?;
        for pid in procs.split_whitespace() {
            let pid: u32 = pid
                .parse()
                .with_context(|| format!("a pid of {id}: {pid}"))?;
            kubesteer_tests::send_signal(pid, "KILL")?;
        }
        eventually(
            Duration::from_secs(90),
            "the leader's container restarted",
            || Ok((restart_count(release, &leader)? > restarts).then_some(())),
        )?;
        eventually(Duration::from_secs(60), "a Lease holder", || {
            Ok((!release.lease_holder()?.is_empty()).then_some(()))
        })?;
        return both_ready(release, "controller", "");
    }
    release.delete_pod(&leader, true)?;
    eventually(Duration::from_secs(60), "a new Lease holder", || {
        let holder = release.lease_holder()?;
        Ok((!holder.is_empty() && holder != leader).then_some(()))
    })?;
    both_ready(release, "controller", &leader)
}

fn restart_count(release: &Release, pod: &str) -> Result<u64> {
    let n = jsonpath(
        &release.namespace,
        &format!("pod/{pod}"),
        "{.status.containerStatuses[0].restartCount}",
    )?;
    n.trim()
        .parse()
        .with_context(|| format!("pod {pod}'s restart count: {n}"))
}

fn kill_webhook_pod(release: &Release, rng: &mut fastrand::Rng) -> Result<()> {
    let pods = release.pods("webhook")?;
    ensure!(!pods.is_empty(), "no webhook pod");
    let victim = &pods[rng.usize(..pods.len())][0];
    release.delete_pod(victim, true)?;
    both_ready(release, "webhook", victim)
}

/// Waits until the component has two Ready pods again, neither of them `killed` (its
/// replacement made and started).
fn both_ready(release: &Release, component: &str, killed: &str) -> Result<()> {
    eventually(
        Duration::from_secs(120),
        &format!("two {component} pods Ready besides {killed}"),
        || {
            let pods = release.pods(component)?;
            let ready = pods.len() == 2 && pods.iter().all(|p| p[3] == "True" && p[0] != killed);
            Ok(ready.then_some(()))
        },
    )
}

fn pause_kubelet() -> Result<()> {
    let paused = Paused::node("kubelet")?;
    std::thread::sleep(HELD);
    paused.resume()?;
    node_ready()
}

fn node_ready() -> Result<()> {
    eventually(Duration::from_secs(60), "the real node Ready", || {
        Ok((real_node_ready()? == "True").then_some(()))
    })
}

/// The node's network namespace (hack/node.sh writes it to net.env).
fn node_netns() -> Result<String> {
    let state = kubesteer_tests::kubeconfig()
        .parent()
        .map(std::path::PathBuf::from)
        .context("the kubeconfig's directory")?;
    let env = std::fs::read_to_string(state.join("net.env")).context("the node's net.env")?;
    env.lines()
        .find_map(|l| l.strip_prefix("NETNS="))
        .map(String::from)
        .context("net.env names no NETNS")
}

/// Runs `args` inside the node's network namespace.
fn in_netns(netns: &str, args: &[&str]) -> Result<()> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns]).args(args);
    let out = output_within(&mut cmd, None, Duration::from_secs(30), &args.join(" "))?;
    if !out.status.success() {
        bail!(
            "{} in {netns}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Traffic between the node and the host (the apiserver) slowed and lossy for a while: a token
/// bucket of 1 Mbit/s with 200 ms of queue on the node's side of its link, and 5 % of the packets
/// it receives dropped. (This kernel has no netem qdisc: `tc qdisc add ... netem` answers
/// "Specified qdisc kind is unknown".)
fn slow_network() -> Result<()> {
    let netns = node_netns()?;
    let tbf = [
        "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "1mbit", "burst", "32kbit",
        "latency", "200ms",
    ];
    let drop = [
        "-m",
        "statistic",
        "--mode",
        "random",
        "--probability",
        "0.05",
        "-j",
        "DROP",
    ];
    let insert: Vec<&str> = ["iptables", "-w", "-I", "INPUT", "-i", "eth0"]
        .into_iter()
        .chain(drop)
        .collect();
    let delete: Vec<&str> = ["iptables", "-w", "-D", "INPUT", "-i", "eth0"]
        .into_iter()
        .chain(drop)
        .collect();
    in_netns(&netns, &tbf)?;
    let held = in_netns(&netns, &insert).map(|()| std::thread::sleep(HELD));
    let lifted = in_netns(&netns, &delete);
    in_netns(&netns, &["tc", "qdisc", "del", "dev", "eth0", "root"])?;
    held?;
    lifted?;
    node_ready()
}

/// 16 clients send 4 MiB bodies to the webhook Service, as the flood test does, for a while.
fn flood(release: &Release) -> Result<()> {
    let body = 4 * 1024 * 1024;
    release
        .flood(
            kubesteer_tests::soak::FLOOD_CLIENTS,
            body,
            HELD.as_secs(),
            &[],
        )
        .map(drop)
}
