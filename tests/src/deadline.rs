//! Deadlines for the child processes the tests run: a test fails, it never hangs.
//!
//! Every `Command` a test runs to completion goes through [`output_within`], which gives up after
//! a deadline with an error naming what it waited for; a long-lived child is stopped with
//! [`stop_child`] (SIGTERM, a grace period, then SIGKILL). `checker` greps `hack/` and the tests
//! for a wait without a deadline, so that none can come back; `lib_sh` tests `hack/lib.sh`'s
//! deadline and signal helpers themselves.
use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use wait_timeout::ChildExt as _;

/// How much of the end of a child's stderr an error quotes.
const TAIL: usize = 2000;

/// Runs `cmd` to completion with `stdin` (or nothing) as its standard input and returns its
/// output, as [`Command::output`] does, but for at most `limit`: past it the child is killed
/// (SIGKILL) and reaped, and the error says that `what` did not finish and quotes the end of its
/// stderr. A non-zero exit is no error here: the caller reads `status`.
///
/// Stdin is written and stdout and stderr are read by threads of their own, so a child that
/// fills one pipe while this writes the other cannot deadlock. When the child exits but a
/// process it started keeps its stdout or stderr open, that too fails at the deadline.
/// (Only the child itself is killed: processes it started are left to their own deadlines.)
pub fn output_within(
    cmd: &mut Command,
    stdin: Option<&[u8]>,
    limit: Duration,
    what: &str,
) -> Result<Output> {
    let deadline = Instant::now() + limit;
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("starting {what:?}"))?;
    let (done, finished) = mpsc::channel::<std::io::Result<()>>();
    let mut pending = 0;
    let stdout = Shared::default();
    let stderr = Shared::default();
    if let Some(pipe) = child.stdout.take() {
        pending += 1;
        drain(pipe, stdout.clone(), done.clone());
    }
    if let Some(pipe) = child.stderr.take() {
        pending += 1;
        drain(pipe, stderr.clone(), done.clone());
    }
    if let (Some(mut pipe), Some(bytes)) = (child.stdin.take(), stdin) {
        pending += 1;
        let bytes = bytes.to_vec();
        let done = done.clone();
        std::thread::spawn(move || {
            // A child that exits without reading all of its input is no error of the feeding:
            // its exit status tells.
            let fed = match pipe.write_all(&bytes) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                fed => fed,
            };
            drop(pipe);
            let _ = done.send(fed);
        });
    }
    drop(done);
    let status = match child.wait_timeout(limit) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{what:?} did not finish within {limit:?}; its last stderr: {}",
                stderr.tail()
            );
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e).with_context(|| format!("waiting for {what:?}"));
        }
    };
    for _ in 0..pending {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(500));
        match finished.recv_timeout(left) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(e).with_context(|| format!("the pipes of {what:?} ({status})"));
            }
            Err(_) => bail!(
                "{what:?} exited ({status}), but a process it started still held its output open \
                 {limit:?} after it started; its last stderr: {}",
                stderr.tail()
            ),
        }
    }
    Ok(Output {
        status,
        stdout: stdout.take(),
        stderr: stderr.take(),
    })
}

/// Stops a child that runs until told: SIGTERM, up to `grace` for it to exit, then SIGKILL; it is
/// reaped in every case. True when it exited (or had exited) before the SIGKILL.
pub fn stop_child(child: &mut Child, grace: Duration) -> bool {
    if let Ok(Some(_)) = child.try_wait() {
        return true;
    }
    if send_signal(child.id(), "TERM").is_ok() {
        if let Ok(Some(_)) = child.wait_timeout(grace) {
            return true;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Sends `SIG<signal>` (e.g. `TERM`, `STOP`) to `pid` with the `kill` command.
pub fn send_signal(pid: u32, signal: &str) -> Result<()> {
    let what = format!("kill -{signal} {pid}");
    let out = output_within(
        Command::new("kill").args([format!("-{signal}"), pid.to_string()]),
        None,
        Duration::from_secs(10),
        &what,
    )?;
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The value of a `--timeout X` or `--timeout=X` in `args` (kubectl's and helm's flag, a Go
/// duration such as `60s`, `2m` or `1m30s`), before any `--`. None without one, or with a negative
/// one (kubectl's "wait for a week").
pub fn timeout_flag(args: &[&str]) -> Option<Duration> {
    let mut args = args.iter().take_while(|a| **a != "--");
    while let Some(arg) = args.next() {
        if *arg == "--timeout" {
            return go_duration(args.next()?);
        }
        if let Some(value) = arg.strip_prefix("--timeout=") {
            return go_duration(value);
        }
    }
    None
}

/// Parses a non-negative Go duration (`time.ParseDuration`): `0`, or numbers with units `ns`,
/// `us`, `µs`, `ms`, `s`, `m`, `h`, e.g. `1m30s`, `1.5h`, `500ms`.
pub fn go_duration(text: &str) -> Option<Duration> {
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, seconds) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("μs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .into_iter()
        .find(|(unit, _)| rest.starts_with(unit))?;
        rest = &rest[unit.len()..];
        total += number * seconds;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// A child's output as it arrives, readable before the pipe closes.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Shared {
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The last [`TAIL`] bytes, as text.
    fn tail(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(TAIL)..]);
        match text.trim() {
            "" => "(none)".to_string(),
            text => text.to_string(),
        }
    }
}

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Copies `pipe` into `into` on a thread of its own until it closes, then says so on `done`.
fn drain(
    mut pipe: impl std::io::Read + Send + 'static,
    mut into: Shared,
    done: mpsc::Sender<std::io::Result<()>>,
) {
    std::thread::spawn(move || {
        let copied = std::io::copy(&mut pipe, &mut into).map(|_| ());
        let _ = done.send(copied);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[test]
    fn a_child_that_finishes_gives_its_output() -> Result<()> {
        let out = output_within(
            &mut sh("cat; echo err >&2; exit 3"),
            Some(b"in"),
            Duration::from_secs(10),
            "cat",
        )?;
        assert_eq!(out.stdout, b"in");
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(3));
        Ok(())
    }

    #[test]
    fn full_pipes_both_ways_do_not_deadlock() -> Result<()> {
        let input = vec![b'x'; 4 << 20];
        let out = output_within(
            &mut sh("cat; cat /dev/null >&2"),
            Some(&input),
            Duration::from_secs(30),
            "cat",
        )?;
        assert_eq!(out.stdout.len(), input.len());
        Ok(())
    }

    #[test]
    fn a_child_past_its_deadline_is_killed_and_named() {
        let started = Instant::now();
        let err = output_within(
            &mut sh("echo almost there >&2; exec sleep 30"),
            None,
            Duration::from_millis(300),
            "the sleeper",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            err.contains("\"the sleeper\" did not finish within 300ms")
                && err.contains("almost there"),
            "{err}"
        );
    }

    #[test]
    fn a_grandchild_holding_the_output_open_fails_at_the_deadline() {
        let started = Instant::now();
        let err = output_within(
            &mut sh("sleep 5 & echo started"),
            None,
            Duration::from_millis(500),
            "the parent",
        );
        assert!(err.is_err(), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(4));
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let err = output_within(
            &mut Command::new("/nonexistent/kubesteer-tool"),
            None,
            Duration::from_secs(1),
            "the tool",
        );
        assert!(format!("{err:?}").contains("the tool"), "{err:?}");
    }

    #[test]
    fn a_child_is_stopped_with_sigterm_first() -> Result<()> {
        let quiet = |cmd: &mut Command| {
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
        };
        let mut child = quiet(Command::new("sleep").arg("30"))?;
        let started = Instant::now();
        assert!(stop_child(&mut child, Duration::from_secs(10)));
        assert!(started.elapsed() < Duration::from_secs(10));
        // One that ignores SIGTERM is killed after the grace period. It says when its trap is
        // set: a SIGTERM before that would end it.
        let mut stubborn = sh("trap '' TERM; echo trapped; exec sleep 30")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut said = String::new();
        if let Some(out) = stubborn.stdout.take() {
            std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut said)?;
        }
        assert_eq!(said, "trapped\n");
        assert!(!stop_child(&mut stubborn, Duration::from_millis(300)));
        Ok(())
    }

    #[test]
    fn go_durations_parse_as_kubectl_and_helm_read_them() {
        let secs = |s: u64| Some(Duration::from_secs(s));
        assert_eq!(go_duration("60s"), secs(60));
        assert_eq!(go_duration("2m"), secs(120));
        assert_eq!(go_duration("1m30s"), secs(90));
        assert_eq!(go_duration("1h"), secs(3600));
        assert_eq!(go_duration("0"), secs(0));
        assert_eq!(go_duration("1.5m"), secs(90));
        assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
        for bad in ["", "60", "-1s", "s", "1x", "1m30"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
        assert_eq!(timeout_flag(&["wait", "--timeout=90s"]), secs(90));
        assert_eq!(
            timeout_flag(&["install", "--timeout", "3m", "x"]),
            secs(180)
        );
        assert_eq!(timeout_flag(&["delete", "--request-timeout=5s"]), None);
        assert_eq!(timeout_flag(&["wait", "--timeout=-1s"]), None);
        assert_eq!(
            timeout_flag(&["exec", "p", "--", "x", "--timeout=9s"]),
            None
        );
    }
}

/// The checker: every wait in `hack/` (and `.ci/run`) and in the tests has a deadline. Each rule
/// is a function over one file's text that returns its findings `(line, reason)`; each has unit
/// tests with a snippet it must catch and one it must accept, and
/// `no_wait_without_a_deadline_in_hack_or_the_tests` runs them all over the repository.
#[cfg(test)]
mod checker;
#[cfg(test)]
mod lib_sh;

/// `curl` `url` with `extra` arguments, the bearer `token` given on stdin so it stays out of the
/// process list: the status code and the body. curl has 10 s (`--max-time`), and 10 s more.
pub fn curl(url: &str, extra: &[&str], token: Option<&str>) -> Result<(u16, String)> {
    let config = token
        .map(|token| format!("header = \"Authorization: Bearer {token}\"\n"))
        .unwrap_or_default();
    let out = output_within(
        std::process::Command::new("curl")
            .args(["--silent", "--max-time", "10", "--config", "-"])
            .args(["--write-out", "\n%{http_code}"])
            .args(extra)
            .arg(url),
        Some(config.as_bytes()),
        Duration::from_secs(20),
        &format!("curl {url}"),
    )?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').context("curl wrote no status")?;
    let code = code.trim().parse().with_context(|| {
        format!(
            "curl {url}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((code, body.to_string()))
}
