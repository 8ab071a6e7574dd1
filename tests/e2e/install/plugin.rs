//! `kubectl kubesteer`, run as a person runs it: typed into a tmux terminal (200x50) with the
//! plugin on PATH, against the real cluster, its webhook and controller, and read back off the
//! screen with `capture-pane`. Preview, override and wake run against an installed release (the
//! chart's own webhook and controller pods, under its RBAC). And its SVG, opened once in headless
//! Chromium.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kubesteer_tests::release::Release;
use kubesteer_tests::{
    cached_tool, cargo_build, create_deployment, eventually, hh_mm, jsonpath, kubeconfig,
    kubectl_ok, output_within, parse_rfc3339, repo_root, rfc3339, target_dir, unique, unix_now,
    workspace_bin,
};

const WAIT: Duration = Duration::from_secs(90);
/// How long one typed command may take to print its last line.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

static BUILD: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();

/// Builds the workspace's binaries once (the selection hack/e2e.sh builds, so nothing is
/// rebuilt) and returns the plugin's path.
fn plugin() -> Result<PathBuf> {
    BUILD
        .get_or_init(|| {
            let build = cargo_build;
            let mut out = build(&["--workspace", "--bins"])?;
            if !out.status.success() {
                // Some other crate does not build right now; the plugin alone may.
                out = build(&["-p", "kubesteer-plugin", "--bin", "kubectl-kubesteer"])?;
            }
            if !out.status.success() {
                return Err(format!(
                    "cargo build failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(workspace_bin("kubectl-kubesteer"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// A detached tmux session running a plain bash, with the plugin and kubectl on PATH and the
/// e2e cluster's kubeconfig, as a user's terminal would have them. Killed on drop.
struct Terminal {
    session: String,
    typed: usize,
}

/// What one command printed, and how it exited.
#[derive(Debug)]
struct Typed {
    screen: String,
    code: i32,
}

fn tmux(args: &[&str]) -> Result<String> {
    let out = output_within(
        Command::new("tmux").args(args),
        None,
        Duration::from_secs(30),
        &format!("tmux {}", args.join(" ")),
    )
    .context("running tmux (hack/install-prereqs.sh installs it)")?;
    ensure!(
        out.status.success(),
        "tmux {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn dir_of(path: &Path) -> String {
    path.parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

impl Terminal {
    fn open() -> Result<Self> {
        let plugin = plugin()?;
        let path = format!(
            "{}:{}:/usr/local/bin:/usr/bin:/bin",
            dir_of(&plugin),
            dir_of(&cached_tool("kubectl"))
        );
        let session = unique("plugin-");
        let shell = format!(
            "env -i HOME=\"$HOME\" TERM=xterm-256color LANG=C.UTF-8 PATH='{path}' KUBECONFIG='{}' PS1='$ ' bash --norc --noprofile",
            kubeconfig().display()
        );
        tmux(&[
            "new-session",
            "-d",
            "-x",
            "200",
            "-y",
            "50",
            "-s",
            &session,
            &shell,
        ])?;
        Ok(Self { session, typed: 0 })
    }

    /// Types `command` and Enter, waits for it to finish, and returns what it printed (between
    /// the typed line and the exit marker) and its exit code.
    fn run(&mut self, command: &str) -> Result<Typed> {
        self.typed += 1;
        let mark = format!("done-{}", self.typed);
        let line = format!("{command}; echo {mark}=$?");
        tmux(&["send-keys", "-t", &self.session, "-l", &line])?;
        tmux(&["send-keys", "-t", &self.session, "Enter"])?;
        let finished = format!("{mark}=");
        let screen = eventually(COMMAND_TIMEOUT, &format!("{command:?} to finish"), || {
            let screen = tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", &self.session])?;
            let done = screen
                .lines()
                .any(|l| l.starts_with(&finished) && !l.contains('$'));
            Ok(done.then_some(screen))
        })?;
        let lines: Vec<&str> = screen.lines().collect();
        let start = lines
            .iter()
            .rposition(|l| l.contains(&line))
            .context("the typed line is not on the screen")?;
        let end = lines
            .iter()
            .rposition(|l| l.starts_with(&finished))
            .unwrap_or(lines.len());
        let code = lines
            .get(end)
            .and_then(|l| l.strip_prefix(&finished))
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or(-1);
        let screen = lines.get(start + 1..end).unwrap_or_default().join("\n");
        Ok(Typed { screen, code })
    }

    /// Like [`Terminal::run`], failing unless the command exits 0.
    fn ok(&mut self, command: &str) -> Result<String> {
        let typed = self.run(command)?;
        ensure!(
            typed.code == 0,
            "{command} exited {}:\n{}",
            typed.code,
            typed.screen
        );
        Ok(typed.screen)
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = tmux(&["kill-session", "-t", &self.session]);
    }
}

/// A release (the chart's webhook, its conversion too, and controller pods, under its RBAC)
/// named `prefix`, with the sample Scaler office-hours Ready over Deployment web.
fn release_with_the_sample(prefix: &str) -> Result<Release> {
    let release = Release::install(prefix, &[])?;
    release.create_deployment("web")?;
    let sample = std::fs::read_to_string(repo_root().join("config/samples/scaler.yaml"))?;
    let run = release.apply(&sample)?;
    ensure!(run.ok, "{run:?}");
    wait_ready(&release.user_ns, "office-hours")?;
    Ok(release)
}

fn deployment_replicas(ns: &str, name: &str) -> Result<String> {
    jsonpath(ns, &format!("deployment/{name}"), "{.spec.replicas}")
}

fn wait_replicas(ns: &str, name: &str, want: &str) -> Result<()> {
    eventually(WAIT, &format!("deployment/{name} at {want}"), || {
        Ok((deployment_replicas(ns, name)? == want).then_some(()))
    })
}

fn wait_ready(ns: &str, scaler: &str) -> Result<()> {
    kubectl_ok(
        &[
            "wait",
            "-n",
            ns,
            "--for=condition=Ready",
            &format!("scaler/{scaler}"),
            "--timeout=90s",
        ],
        None,
    )?;
    Ok(())
}

/// The lines of a golden picture from its hour scale down, as the terminal shows them: no
/// trailing blanks.
fn golden_rows(name: &str) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(repo_root().join("kubesteer/plugin/tests/golden").join(name))?;
    Ok(text
        .lines()
        .skip(1)
        .map(|l| l.trim_end().to_string())
        .collect())
}

#[test]
fn preview_draws_the_samples_week_and_its_target_as_it_is_now() -> Result<()> {
    let release = release_with_the_sample("preview")?;
    let n = release.user_ns.as_str();
    let mut term = Terminal::open()?;
    // The Christmas week of the sample: the same spec as the golden holiday picture.
    let screen = term.ok(&format!(
        "kubectl kubesteer preview scaler/office-hours -n {n} --from 2026-12-21"
    ))?;
    let lines: Vec<String> = screen
        .lines()
        .map(|l| l.replace('▸', " ").trim_end().to_string())
        .collect();
    ensure!(
        lines.first().is_some_and(|l| l.starts_with(&format!(
            "scaler/office-hours -n {n} · Europe/Berlin · 7 days from Mon 21 Dec 2026 · now "
        ))),
        "title:\n{screen}"
    );
    let want = golden_rows("holiday.txt")?;
    ensure!(
        lines
            .get(1..=want.len())
            .is_some_and(|got| got == want.as_slice()),
        "the terminal shows\n{screen}\nnot the golden rows\n{}",
        want.join("\n")
    );
    // Below the picture: Ready, and the Deployment with its replicas as the cluster has them.
    let rest = lines[want.len() + 1..].join("\n");
    ensure!(rest.contains("Ready: True"), "{screen}");
    let replicas = deployment_replicas(n, "web")?;
    let row = format!("Deployment {n}/web");
    let target = rest
        .lines()
        .find(|l| l.starts_with(&row))
        .with_context(|| format!("no {row} row in\n{screen}"))?;
    ensure!(
        target.split_whitespace().nth(2) == Some(replicas.as_str()),
        "{target:?} should show {replicas} replicas"
    );
    Ok(())
}

#[test]
fn override_for_two_hours_then_why_shows_it_and_its_end_and_a_denial_is_printed() -> Result<()> {
    let release = release_with_the_sample("override")?;
    let n = release.user_ns.as_str();
    let mut term = Terminal::open()?;

    let before = unix_now();
    let said = term.ok(&format!(
        "kubectl kubesteer override scaler/office-hours --replicas 4 --for 2h -n {n}"
    ))?;
    let until = jsonpath(n, "scaler/office-hours", "{.spec.override.until}")?;
    ensure!(
        said.contains("scaler.kubesteer.io/office-hours overridden: 4 replicas until ")
            && said.contains(&format!("({until})")),
        "{said}"
    );
    let held = parse_rfc3339(&until)? - before as f64;
    ensure!(
        (7200.0..7260.0).contains(&held),
        "until {until} is {held}s ahead"
    );
    wait_replicas(n, "web", "4")?;

    // The controller scales, then writes its status and events: why shows each once there.
    let why = eventually(WAIT, "why to show the override at work", || {
        let screen = term.ok(&format!("kubectl kubesteer why deployment/web -n {n}"))?;
        let settled = screen.contains("Current:      4")
            && screen.contains("Ready:        True Override")
            && screen.contains("Scaled");
        Ok(settled.then_some(screen))
    })?;
    for want in [
        format!("Deployment {n}/web"),
        format!("Scaler:       {n}/office-hours"),
        "Desired:      4 replicas (Override)".to_string(),
        "Override:     4 replicas until ".to_string(),
        "Next:".to_string(),
        "Events:".to_string(),
    ] {
        ensure!(why.contains(&want), "{want:?} not in\n{why}");
    }
    ensure!(
        why.contains(&format!("({until}, in 1h 5")) || why.contains(&format!("({until}, in 2h)")),
        "the override's end, about 2h ahead, not in\n{why}"
    );
    // The first next change is the override's end.
    let next = why
        .lines()
        .find(|l| l.trim_start().starts_with("Next:"))
        .context("no Next line")?;
    let end_local = why
        .lines()
        .find(|l| l.trim_start().starts_with("Override:"))
        .and_then(|l| l.split(" until ").nth(1))
        .and_then(|l| l.split(" (").next())
        .context("no Override line")?;
    ensure!(
        next.contains(end_local),
        "{next:?} should be at {end_local}"
    );

    // An override in the past: the webhook says no, the plugin prints it and fails.
    let denied = term.run(&format!(
        "kubectl kubesteer override scaler/office-hours --replicas 2 --until 2020-01-01T00:00:00Z -n {n}"
    ))?;
    ensure!(denied.code == 1, "{denied:?}");
    // The apiserver's answer, word for word as kubectl prints it.
    ensure!(
        denied.screen.trim_end() == "Error from server (Invalid): admission webhook \"validate.scalers.kubesteer.io\" denied the request: Scaler.kubesteer.io \"office-hours\" is invalid: spec.override.until: Invalid value: \"2020-01-01T00:00:00Z\": must be in the future",
        "{denied:?}"
    );
    ensure!(jsonpath(n, "scaler/office-hours", "{.spec.override.until}")? == until);

    term.ok(&format!(
        "kubectl kubesteer override scaler/office-hours --clear -n {n}"
    ))?;
    ensure!(jsonpath(n, "scaler/office-hours", "{.spec.override}")?.is_empty());
    Ok(())
}

/// A Scaler `name` of the Deployment of the same name, scaling it to 0 in a window open now
/// (a night window, as a downscaler's): its replicas are recorded as the original.
fn asleep(name: &str) -> String {
    let now = unix_now();
    format!(
        "apiVersion: kubesteer.io/v1beta1\nkind: Scaler\nmetadata: {{name: {name}}}\nspec:\n  scaleTargetRefs: [{{apiVersion: apps/v1, kind: Deployment, name: {name}}}]\n  windows: [{{start: \"{}\", end: \"{}\", replicas: 0}}]\n",
        hh_mm(now - 3600),
        hh_mm(now + 3600)
    )
}

#[test]
fn wake_holds_every_scaler_of_a_namespace_at_its_original_replicas() -> Result<()> {
    // The installed product: the chart's webhook and controller pods, under its RBAC.
    let release = Release::install("wake", &[])?;
    let n = release.user_ns.as_str();
    let apps = [("api", "2"), ("web", "3"), ("worker", "1")];
    for (name, replicas) in apps {
        create_deployment(n, name, replicas.parse()?)?;
        let run = release.apply(&asleep(name))?;
        ensure!(run.ok, "{run:?}");
    }
    for (name, _) in apps {
        wait_replicas(n, name, "0")?;
    }
    // The status shows the recorded originals once the controller has written it.
    for (name, replicas) in apps {
        eventually(WAIT, &format!("scaler/{name} records {replicas}"), || {
            let got = jsonpath(
                n,
                &format!("scaler/{name}"),
                "{.status.targets[0].originalReplicas}",
            )?;
            Ok((got == replicas).then_some(()))
        })?;
    }
    let mut term = Terminal::open()?;
    let before = unix_now();
    let screen = term.ok(&format!("kubectl kubesteer wake -n {} --for 2h", n))?;
    ensure!(
        screen.starts_with(&format!("Woke namespace {} until ", n)),
        "{screen}"
    );
    for (name, replicas) in apps {
        let row = screen
            .lines()
            .find(|l| l.starts_with(&format!("scaler/{name} ")))
            .with_context(|| format!("no row for scaler/{name} in\n{screen}"))?;
        let cells: Vec<&str> = row.split_whitespace().collect();
        ensure!(cells.get(1) == Some(&replicas), "{row}");
        ensure!(row.ends_with("original replicas"), "{row}");
    }
    let mut untils = Vec::new();
    for (name, replicas) in apps {
        wait_replicas(n, name, replicas)?;
        untils.push(jsonpath(
            n,
            &format!("scaler/{name}"),
            "{.spec.override.until}",
        )?);
    }
    ensure!(untils.iter().all(|u| u == &untils[0]), "{untils:?}");
    let held = parse_rfc3339(&untils[0])? - before as f64;
    ensure!(
        (7200.0..7260.0).contains(&held),
        "until {} is {held}s ahead",
        untils[0]
    );
    // A shorter wake shortens nothing: every override already holds as many, as long.
    let screen = term.ok(&format!("kubectl kubesteer wake -n {} --for 1h", n))?;
    for (name, replicas) in apps {
        let row = screen
            .lines()
            .find(|l| l.starts_with(&format!("scaler/{name} ")))
            .with_context(|| format!("no row for scaler/{name} in\n{screen}"))?;
        ensure!(row.split_whitespace().nth(1) == Some(replicas), "{row}");
        ensure!(
            row.ends_with("kept: its override already holds as many, as long"),
            "{row}"
        );
        let until = jsonpath(n, &format!("scaler/{name}"), "{.spec.override.until}")?;
        ensure!(
            until == untils[0],
            "scaler/{name} until {until}, was {}",
            untils[0]
        );
    }
    // Held at 0 for three days (the holidays): a wake replaces that override, and says how to
    // set it again.
    let holidays = rfc3339(unix_now() + 3 * 86_400);
    term.ok(&format!(
        "kubectl kubesteer override scaler/worker -n {} --replicas 0 --until {holidays}",
        n
    ))?;
    wait_replicas(n, "worker", "0")?;
    let screen = term.ok(&format!("kubectl kubesteer wake -n {} --for 2h", n))?;
    let again = format!(
        "kubectl kubesteer override scaler/worker -n {} --replicas 0 --until {holidays}",
        n
    );
    ensure!(
        screen.lines().any(
            |l| l.starts_with("scaler/worker: replaced its override of 0 until ")
                && l.ends_with(&again)
        ),
        "no note of the replaced override in\n{screen}"
    );
    wait_replicas(n, "worker", "1")?;
    // The command it prints runs as printed.
    term.ok(&again)?;
    wait_replicas(n, "worker", "0")?;
    Ok(())
}

#[test]
fn status_shows_an_installed_release_healthy() -> Result<()> {
    let release = release_with_the_sample("plugin-status")?;
    let (ns, full) = (release.namespace.clone(), release.fullname());
    let holder = eventually(WAIT, "a leader", || {
        let holder = release.lease_holder()?;
        Ok((!holder.is_empty()).then_some(holder))
    })?;
    let mut term = Terminal::open()?;
    let screen = term.ok(&format!("kubectl kubesteer status -n {}", release.user_ns))?;
    let has = |prefix: &str| screen.lines().find(|l| l.starts_with(prefix));
    let scaler =
        has("scaler/office-hours ").with_context(|| format!("no Scaler row in\n{screen}"))?;
    ensure!(scaler.split_whitespace().nth(1) == Some("True"), "{scaler}");
    ensure!(
        has(&format!("Webhook: service {ns}/{full}-webhook")).is_some(),
        "{screen}"
    );
    for component in ["webhook", "controller"] {
        for [pod, ..] in release.pods(component)? {
            let row = has(&format!("{pod} ")).with_context(|| format!("no {pod} in\n{screen}"))?;
            let cells: Vec<&str> = row.split_whitespace().collect();
            ensure!(
                cells.get(1..4) == Some(&[component, "1/1", "Running"][..]),
                "{row}"
            );
        }
    }
    ensure!(
        has(&format!("Leader: {holder} (lease {ns}/{full}-controller")).is_some(),
        "{screen}"
    );
    ensure!(
        has(&format!("Certificate ({ns}/{full}-webhook-tls): expires ")).is_some(),
        "{screen}"
    );
    // This release's eight registrations (four kinds, mutating and validating) trust its CA.
    let ours: Vec<&str> = screen
        .lines()
        .filter(|l| {
            l.starts_with(&format!("mutatingwebhookconfiguration/{full} "))
                || l.starts_with(&format!("validatingwebhookconfiguration/{full} "))
        })
        .collect();
    ensure!(ours.len() == 8, "{screen}");
    for row in ours {
        ensure!(row.ends_with("matches the webhook's CA"), "{row}");
    }
    ensure!(
        !screen
            .lines()
            .any(|l| l.starts_with("  - ") && l.contains(&ns)),
        "a problem with this release:\n{screen}"
    );
    // The everyday writes through this release: an override, let through by its webhook and
    // carried out by its controller under its ServiceAccount; then a shorter wake, which keeps it.
    let user_ns = &release.user_ns;
    term.ok(&format!(
        "kubectl kubesteer override scaler/office-hours -n {user_ns} --replicas 4 --for 2h"
    ))?;
    eventually(WAIT, "deployment/web at the override's 4", || {
        let replicas = jsonpath(user_ns, "deployment/web", "{.spec.replicas}")?;
        Ok((replicas == "4").then_some(()))
    })?;
    let until = jsonpath(user_ns, "scaler/office-hours", "{.spec.override.until}")?;
    let screen = term.ok(&format!("kubectl kubesteer wake -n {user_ns} --for 1h"))?;
    ensure!(
        screen.lines().any(|l| l.starts_with("scaler/office-hours ")
            && l.ends_with("kept: its override already holds as many, as long")),
        "{screen}"
    );
    let after = jsonpath(user_ns, "scaler/office-hours", "{.spec.override.until}")?;
    ensure!(
        after == until,
        "the wake moved the override's end from {until} to {after}"
    );
    Ok(())
}

/// Whether a PNG holds a picture: decodes it, and counts its distinct colours and the share of
/// its pixels that are not the background.
fn png_summary(path: &Path) -> Result<(u32, u32, usize, f64)> {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path)?));
    let mut reader = decoder.read_info()?;
    let size = reader
        .output_buffer_size()
        .context("the PNG is too large to decode")?;
    let mut buffer = vec![0; size];
    let info = reader.next_frame(&mut buffer)?;
    let channels = info.color_type.samples();
    ensure!(
        channels >= 3 && info.bit_depth == png::BitDepth::Eight,
        "{info:?}"
    );
    let pixels: Vec<&[u8]> = buffer[..info.buffer_size()]
        .chunks(channels)
        .map(|p| &p[..3])
        .collect();
    let background = pixels.first().copied().unwrap_or_default();
    let colours: std::collections::BTreeSet<&[u8]> = pixels.iter().copied().collect();
    let drawn = pixels.iter().filter(|p| **p != background).count();
    Ok((
        info.width,
        info.height,
        colours.len(),
        drawn as f64 / pixels.len().max(1) as f64,
    ))
}

#[test]
fn the_svg_renders_in_headless_chromium() -> Result<()> {
    let plugin = plugin()?;
    let dir = target_dir().join("e2e/plugin-svg");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let out = output_within(
        Command::new(&plugin)
            .args(["preview", "-f"])
            .arg(repo_root().join("config/samples/scaler.yaml"))
            .args(["--from", "2026-12-21", "-o", "svg"]),
        None,
        Duration::from_secs(60),
        "kubectl-kubesteer preview -o svg",
    )?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = dir.join("week.svg");
    std::fs::write(&svg, &out.stdout)?;
    let png = dir.join("week.png");
    let chromium = ["chromium", "chromium-browser"].into_iter().find(|c| {
        output_within(
            Command::new(c).arg("--version"),
            None,
            Duration::from_secs(30),
            &format!("{c} --version"),
        )
        .is_ok_and(|o| o.status.success())
    });
    let Some(chromium) = chromium else {
        bail!("chromium is not installed (hack/install-prereqs.sh installs Debian's)");
    };
    let shot = output_within(
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
            ])
            .arg(format!("--screenshot={}", png.display()))
            .arg("--window-size=1200,800")
            .arg(&svg)
            .env("HOME", &dir),
        None,
        Duration::from_secs(120),
        &format!("{chromium} --headless --screenshot"),
    )?;
    ensure!(
        shot.status.success() && png.is_file(),
        "chromium failed: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let (width, height, colours, drawn) = png_summary(&png)?;
    ensure!((width, height) == (1200, 800), "{width}x{height}");
    // Text, five shades of green and grey cells, a yellow holiday band: far from one colour.
    ensure!(colours > 20, "{colours} colours: the screenshot is blank");
    ensure!(
        (0.02..0.9).contains(&drawn),
        "{drawn} of the pixels are drawn"
    );
    Ok(())
}
