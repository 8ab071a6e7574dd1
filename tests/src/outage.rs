//! Outages of the local control plane: stopping and restarting its components, and a TCP proxy
//! that can cut the apiserver off.
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The repository root, for `config/samples` and the like.
use crate::*;

/// The e2e cluster's kwokctl directory (`<state>/kwok/clusters/<name>`).
pub(crate) fn cluster_dir() -> PathBuf {
    let name = std::env::var("KUBESTEER_CLUSTER").unwrap_or_else(|_| E2E_CLUSTER.to_string());
    state_dir().join("kwok/clusters").join(name)
}

/// The pid file of the local control plane's `name` (e.g. `kube-apiserver`), and the pid in it.
fn pid_of(name: &str) -> Result<(PathBuf, u32)> {
    let pid_file = cluster_dir().join(format!("pids/{name}.pid"));
    let pid = read_pid(&pid_file)?;
    Ok((pid_file, pid))
}

/// The pid a pid file holds.
fn read_pid(file: &std::path::Path) -> Result<u32> {
    std::fs::read_to_string(file)
        .with_context(|| format!("reading {}", file.display()))?
        .trim()
        .parse()
        .with_context(|| format!("the pid in {}", file.display()))
}

/// Sends `SIG<signal>` to `pid`, the local control plane's `name`.
fn signal(pid: u32, name: &str, signal: &str) -> Result<()> {
    send_signal(pid, signal).with_context(|| format!("signalling {name}"))
}

/// One component of the local control plane stopped in place (SIGSTOP): its process, its
/// connections and its caches are kept, and it does nothing until [`Paused::resume`] (or drop)
/// continues it, where it left off. For a test of what the others do without it, e.g. the
/// controller-manager (run without leader election here, so no lease runs out meanwhile).
pub struct Paused {
    name: &'static str,
    pid: Option<u32>,
}

impl Paused {
    pub fn begin(name: &'static str) -> Result<Self> {
        let (_, pid) = pid_of(name)?;
        Self::pid(name, pid)
    }

    /// A process of the cluster's real node (hack/node.sh), e.g. `kubelet`, stopped in place.
    pub fn node(name: &'static str) -> Result<Self> {
        Self::pid(
            name,
            read_pid(&state_dir().join(format!("node/{name}.pid")))?,
        )
    }

    fn pid(name: &'static str, pid: u32) -> Result<Self> {
        signal(pid, name, "STOP")?;
        Ok(Self {
            name,
            pid: Some(pid),
        })
    }

    /// Continues the component.
    pub fn resume(mut self) -> Result<()> {
        match self.pid.take() {
            Some(pid) => signal(pid, self.name, "CONT"),
            None => Ok(()),
        }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = signal(pid, self.name, "CONT");
        }
    }
}

/// The components this process started again ([`Component::start`]): once killed, each is
/// reaped here, or its /proc entry would stay (a zombie) and a second restart would wait for it.
static STARTED: std::sync::Mutex<Vec<std::process::Child>> = std::sync::Mutex::new(Vec::new());

/// Reaps the started components that have exited.
fn reap_started() {
    if let Ok(mut started) = STARTED.lock() {
        started.retain_mut(|child| matches!(child.try_wait(), Ok(None)));
    }
}

/// One process of the local control plane, as kwokctl started it: enough to start it again.
pub(crate) struct Component {
    argv: Vec<std::ffi::OsString>,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    cwd: PathBuf,
    pid_file: PathBuf,
    log: PathBuf,
}

impl Component {
    /// Reads the running `name` (e.g. `kube-apiserver`) from its pid file and /proc.
    fn running(name: &str) -> Result<Self> {
        use std::os::unix::ffi::OsStrExt as _;
        let dir = cluster_dir();
        let (pid_file, pid) = pid_of(name)?;
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let split = |bytes: Vec<u8>| -> Vec<std::ffi::OsString> {
            bytes
                .split(|b| *b == 0)
                .filter(|part| !part.is_empty())
                .map(|part| std::ffi::OsStr::from_bytes(part).to_os_string())
                .collect()
        };
        let argv = split(std::fs::read(proc.join("cmdline"))?);
        if argv.is_empty() {
            bail!("{name} ({pid}) has no command line");
        }
        let env = split(std::fs::read(proc.join("environ"))?)
            .into_iter()
            .filter_map(|kv| {
                let bytes = kv.as_bytes();
                let eq = bytes.iter().position(|b| *b == b'=')?;
                Some((
                    std::ffi::OsStr::from_bytes(&bytes[..eq]).to_os_string(),
                    std::ffi::OsStr::from_bytes(&bytes[eq + 1..]).to_os_string(),
                ))
            })
            .collect();
        let cwd = std::fs::read_link(proc.join("cwd"))?;
        // SIGKILL: a crash; SIGTERM would start a graceful shutdown that can take minutes.
        signal(pid, name, "KILL")?;
        eventually_every(
            Duration::from_secs(30),
            Duration::from_millis(20),
            &format!("{name} stopped"),
            || {
                reap_started();
                Ok((!proc.exists()).then_some(()))
            },
        )?;
        Ok(Self {
            argv,
            env,
            cwd,
            pid_file,
            log: dir.join(format!("logs/{name}.log")),
        })
    }

    fn start(&self) -> Result<()> {
        use std::os::unix::process::CommandExt as _;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        // Its own process group, so it outlives this test as kwokctl's own processes do.
        let child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {:?} again", self.argv[0]))?;
        // kwokctl stops the cluster by these pid files.
        std::fs::write(&self.pid_file, child.id().to_string())?;
        if let Ok(mut started) = STARTED.lock() {
            started.push(child);
        }
        Ok(())
    }
}

/// The local control plane restarting as a control-plane node does: kube-apiserver,
/// kube-controller-manager and kube-scheduler are killed, and started again with the same
/// command lines by [`Outage::end`] (or on drop). etcd, kwok and the kubelet stay up and
/// reconnect. (The controller-manager and the scheduler would exit anyway once their leader
/// leases could not be renewed, and nothing else restarts them here; `kwokctl stop cluster`
/// would restart kwok too, which then waits minutes for its old node leases.)
pub struct Outage {
    stopped: Vec<Component>,
}

impl Outage {
    pub fn begin() -> Result<Self> {
        let mut outage = Self {
            stopped: Vec::new(),
        };
        for name in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ] {
            outage.stopped.push(Component::running(name)?);
        }
        Ok(outage)
    }

    /// Starts the control plane again and returns once the apiserver answers `/readyz`.
    pub fn end(mut self) -> Result<Instant> {
        for component in std::mem::take(&mut self.stopped) {
            component.start()?;
        }
        eventually_every(
            Duration::from_secs(60),
            Duration::from_millis(100),
            "the apiserver back",
            || {
                Ok(kubectl(&["get", "--raw", "/readyz"], None)?
                    .ok
                    .then_some(()))
            },
        )?;
        Ok(Instant::now())
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        for component in &self.stopped {
            let _ = component.start();
        }
    }
}

/// One process of the local control plane (`kube-apiserver`, `etcd`) killed, as a crash, and
/// started again with its command line; returns once the apiserver answers `/readyz`.
pub fn restart(name: &str) -> Result<()> {
    let component = Component::running(name)?;
    component.start()?;
    eventually_every(
        Duration::from_secs(90),
        Duration::from_millis(200),
        &format!("the apiserver ready after {name} restarted"),
        || {
            Ok(
                kubectl(&["get", "--raw", "/readyz", "--request-timeout=5s"], None)?
                    .ok
                    .then_some(()),
            )
        },
    )
}

/// The apiserver's address, from the local kubeconfig's server URL.
pub fn apiserver_addr() -> Result<std::net::SocketAddr> {
    let config: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(kubeconfig())?)?;
    let server = config["clusters"][0]["cluster"]["server"]
        .as_str()
        .context("kubeconfig has no server")?;
    let hostport = server
        .strip_prefix("https://")
        .context("the server is not https")?
        .trim_end_matches('/');
    Ok(hostport.parse()?)
}

/// A copy of the local kubeconfig whose server is `https://127.0.0.1:<port>`, e.g. a [`TcpProxy`]
/// (the apiserver certificate is for 127.0.0.1, whatever the port).
pub fn kubeconfig_via(port: u16, file: &str) -> Result<PathBuf> {
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(kubeconfig())?)?;
    let clusters = config
        .get_mut("clusters")
        .and_then(|c| c.as_sequence_mut())
        .context("kubeconfig has no clusters")?;
    for entry in clusters {
        if let Some(c) = entry.get_mut("cluster").and_then(|c| c.as_mapping_mut()) {
            c.insert("server".into(), format!("https://127.0.0.1:{port}").into());
        }
    }
    let path = target_dir().join("e2e").join(file);
    std::fs::create_dir_all(path.parent().context("no parent")?)?;
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

/// A TCP proxy on 127.0.0.1 in front of `upstream`, to cut a process off the apiserver as a
/// network partition would: paused, it forwards nothing either way and connects nothing new,
/// so requests hang rather than fail. Stopped on drop.
pub struct TcpProxy {
    pub port: u16,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    closed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl TcpProxy {
    pub fn start(upstream: std::net::SocketAddr) -> Result<Self> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let paused = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicBool::new(false));
        let (p, c) = (paused.clone(), closed.clone());
        std::thread::spawn(move || {
            while !c.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (p, c) = (p.clone(), c.clone());
                        std::thread::spawn(move || {
                            let _ = Self::connect(client, upstream, &p, &c);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(Self {
            port,
            paused,
            closed,
        })
    }

    /// Stops forwarding: bytes in flight stay where they are, in both directions.
    pub fn pause(&self) {
        self.paused.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn resume(&self) {
        self.paused
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    fn connect(
        client: std::net::TcpStream,
        upstream: std::net::SocketAddr,
        paused: &std::sync::Arc<std::sync::atomic::AtomicBool>,
        closed: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<()> {
        use std::sync::atomic::Ordering;
        client.set_nonblocking(false)?;
        while paused.load(Ordering::Relaxed) && !closed.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let server = std::net::TcpStream::connect_timeout(&upstream, Duration::from_secs(10))?;
        let (c2, s2) = (client.try_clone()?, server.try_clone()?);
        let (p, c) = (paused.clone(), closed.clone());
        std::thread::spawn(move || Self::pipe(c2, s2, &p, &c));
        Self::pipe(server, client, paused, closed);
        Ok(())
    }

    fn pipe(
        mut from: std::net::TcpStream,
        mut to: std::net::TcpStream,
        paused: &std::sync::atomic::AtomicBool,
        closed: &std::sync::atomic::AtomicBool,
    ) {
        use std::io::{ErrorKind, Read, Write};
        use std::sync::atomic::Ordering;
        if from
            .set_read_timeout(Some(Duration::from_millis(50)))
            .is_err()
        {
            return;
        }
        let mut buf = [0u8; 16 * 1024];
        while !closed.load(Ordering::Relaxed) {
            if paused.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
