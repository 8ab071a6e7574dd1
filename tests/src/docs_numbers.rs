//! The numbers the docs state are the code's: every limit, default, cap, timeout and interval
//! that README.md, docs/*.md (but the measured docs/benchmarks.md), the chart's README and
//! values.yaml state is a row here, the sentence around it and the value from the code (a
//! constant of the crates, a binary's flag default as clap declares it, a default of a `hack/`
//! script, a pin). A row fails when either side changes alone, and says which doc says what and
//! where the code's value comes from. Offline and fast: it reads files and asks no cluster.
//!
//! A number the docs state that no crate exposes is not here yet: the controller's backoff (1 s
//! to 300 s, `context.rs`), /metrics decisions (10 s, 1,024 tokens, runtime's `metrics_auth.rs`),
//! the boundary gate (0.5 s, `scaler/boundary.rs`), the lateness buckets (0.1 s to 900 s), the
//! fold's tries (4, `children/apply.rs`), the storage migration's tries and progress (5, 500),
//! Memcached's status and pod-name graces (30 s, 5 min), and the webhook's denial cache (2 s,
//! `permissions.rs`). Made `pub`, each is one more row.
use std::collections::BTreeMap;
use std::time::Duration;

use clap::CommandFactory;
use kubesteer_api::rules;

use crate::repo_root;

/// One number as a doc states it: the doc must contain `before`, `value`, `after` in a row
/// (whitespace and line breaks collapsed, and `#` of YAML comments dropped).
struct Row {
    file: &'static str,
    before: String,
    value: String,
    after: &'static str,
    /// Where `value` comes from, as the failure names it.
    source: String,
}

fn row(
    file: &'static str,
    before: impl Into<String>,
    value: impl ToString,
    after: &'static str,
    source: impl Into<String>,
) -> Row {
    Row {
        file,
        before: before.into(),
        value: value.to_string(),
        after,
        source: source.into(),
    }
}

/// A doc's text with line breaks and runs of whitespace as one space; in YAML, a comment's `#`
/// is dropped, so that a sentence wrapped over comment lines reads as one.
fn normalized(file: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(file))
        .unwrap_or_else(|e| panic!("reading {file}: {e}"));
    normalized_text(&text, file.ends_with(".yaml"))
}

fn normalized_text(text: &str, yaml: bool) -> String {
    text.lines()
        .map(|line| {
            let line = line.trim();
            if yaml {
                line.trim_start_matches('#').trim()
            } else {
                line
            }
        })
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Row {
    fn said(&self) -> String {
        format!("{}{}{}", self.before, self.value, self.after)
    }

    /// None when the doc says it; otherwise what is wrong, for a person to fix.
    fn check(&self, text: &str) -> Option<String> {
        if text.contains(&self.said()) {
            return None;
        }
        let found = text.find(&self.before).map(|at| {
            let rest = &text[at..];
            let end = rest
                .char_indices()
                .nth(self.before.chars().count() + self.value.chars().count() + 30)
                .map_or(rest.len(), |(i, _)| i);
            &rest[..end]
        });
        Some(match found {
            Some(says) => format!(
                "{} says {says:?}…, but {} is {}: it should say {:?}",
                self.file,
                self.source,
                self.value,
                self.said()
            ),
            None => format!(
                "{} no longer says {:?}…; {} is {}, which it said as {:?}: put the number back or \
                 change this row (tests/src/docs_numbers.rs) to the new sentence",
                self.file,
                self.before,
                self.source,
                self.value,
                self.said()
            ),
        })
    }
}

/// The Prometheus release of the pinned module: its v0.3MM.P is Prometheus 3.MM.P.
fn prometheus_release() -> String {
    let v = script_value("versions.env", "PROMTOOL_VERSION");
    v.strip_prefix("v0.")
        .and_then(|v| v.split_once('.'))
        .map(|(mm, p)| format!("{}.{}.{p}", &mm[..1], mm[1..].trim_start_matches('0')))
        .unwrap_or_else(|| panic!("versions.env PROMTOOL_VERSION {v:?} is not v0.3MM.P"))
}

/// A duration in whole seconds, or with the fraction it has ("0.5").
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", d.as_secs())
    } else {
        format!("{s}")
    }
}

/// A duration as a flag or a field takes it: "300ms", "3s", "15m", "2h".
fn short(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, len) in [("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms >= len && ms.is_multiple_of(len) {
            return format!("{}{unit}", ms / len);
        }
    }
    format!("{ms}ms")
}

/// A byte count as a quantity: the largest of Gi, Mi, Ki it is a whole number of.
fn quantity(bytes: usize) -> String {
    for (unit, len) in [("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes >= len && bytes.is_multiple_of(len) {
            return format!("{}{unit}", bytes / len);
        }
    }
    bytes.to_string()
}

/// Whole MiB, as the docs say a size ("7 MiB").
fn mib(bytes: usize) -> usize {
    assert!(
        bytes.is_multiple_of(1 << 20),
        "{bytes} bytes is no whole number of MiB"
    );
    bytes >> 20
}

/// A small count in words, as prose says it.
fn word(n: usize) -> &'static str {
    [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ]
    .get(n)
    .copied()
    .unwrap_or_else(|| panic!("{n} has no word here; say it in digits"))
}

/// The flags of one binary, by long name: the default as clap declares it (no environment
/// variable can change it here) and the variable it falls back to.
struct Flags {
    binary: &'static str,
    defaults: BTreeMap<String, (String, String)>,
}

impl Flags {
    fn of(binary: &'static str, command: clap::Command) -> Self {
        let defaults = command
            .get_arguments()
            .filter_map(|a| {
                let long = a.get_long()?.to_string();
                let default = a
                    .get_default_values()
                    .first()
                    .map(|v| v.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let env = a
                    .get_env()
                    .map(|v| v.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Some((long, (default, env)))
            })
            .collect();
        Self { binary, defaults }
    }

    fn default(&self, flag: &str) -> String {
        self.defaults
            .get(flag)
            .unwrap_or_else(|| panic!("{} has no flag --{flag}", self.binary))
            .0
            .clone()
    }

    fn duration(&self, flag: &str) -> Duration {
        let text = self.default(flag);
        humantime::parse_duration(&text)
            .unwrap_or_else(|e| panic!("{} --{flag} default {text:?}: {e}", self.binary))
    }

    fn env(&self, flag: &str) -> String {
        self.defaults[flag].1.clone()
    }

    fn port(&self, flag: &str) -> u16 {
        let addr: std::net::SocketAddr = self.default(flag).parse().unwrap();
        addr.port()
    }

    fn source(&self, flag: &str) -> String {
        format!("{} --{flag}'s default", self.binary)
    }
}

/// `NAME=value` or the default of `${NAME:-value}` in a `hack/` script.
fn script_value(file: &str, name: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(file))
        .unwrap_or_else(|e| panic!("reading {file}: {e}"));
    let default = format!("${{{name}:-");
    if let Some(at) = text.find(&default) {
        let rest = &text[at + default.len()..];
        return rest[..rest.find('}').unwrap()].to_string();
    }
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{file} sets no {name}"))
        .trim()
        .to_string()
}

/// A value of values.yaml by its dotted path.
fn chart_value(values: &serde_json::Value, path: &str) -> String {
    let v = path.split('.').fold(values, |v, key| &v[key]).clone();
    match v {
        serde_json::Value::String(s) => s,
        serde_json::Value::Null => panic!("values.yaml has no {path}"),
        other => other.to_string(),
    }
}

/// The smallest and largest `--request-body-budget` the webhook takes, found by asking its
/// parser, as the docs say them ("1Mi to 1Gi").
fn budget_range() -> String {
    use kubesteer_webhook::budget::{parse_bytes, DEFAULT_BUDGET};
    let takes = |n: usize| parse_bytes(&n.to_string()).is_ok();
    assert!(takes(DEFAULT_BUDGET));
    // The first byte count taken, and the first past the last one taken.
    let edge = |mut no: usize, mut yes: usize| {
        while no.abs_diff(yes) > 1 {
            let mid = no.min(yes) + no.abs_diff(yes) / 2;
            if takes(mid) {
                yes = mid;
            } else {
                no = mid;
            }
        }
        yes
    };
    let min = edge(0, DEFAULT_BUDGET);
    let max = edge(1 << 50, DEFAULT_BUDGET);
    format!("{} to {}", quantity(min), quantity(max))
}

fn rows() -> Vec<Row> {
    use kubesteer_api::scaler::v1beta1::{DEFAULT_GRACE_PERIOD, MAX_GRACE_PERIOD};
    use kubesteer_runtime::lease::{LEASE_DURATION_SECONDS, RENEW_DEADLINE, RETRY_PERIOD};
    use kubesteer_webhook::budget::{DEFAULT_BUDGET, MAX_BODY_BYTES};
    use kubesteer_webhook::permissions::{CAPACITY, MAX_WAIT, TTL};

    let webhook = Flags::of(
        "kubesteer-webhook",
        kubesteer_webhook::args::Args::command(),
    );
    let controller = Flags::of(
        "kubesteer-controller",
        kubesteer_controller::args::Args::command(),
    );
    let values: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("charts/kubesteer/values.yaml")).unwrap(),
    )
    .unwrap();
    let value = |path: &str| chart_value(&values, path);
    let in_values = |path: &str| format!("charts/kubesteer/values.yaml {path}");
    let shell =
        |file: &'static str, name: &str| (script_value(file, name), format!("{file} {name}"));

    let (qps, burst) = (
        webhook.default("subject-access-review-qps"),
        webhook.default("subject-access-review-burst"),
    );
    let sar_source = "kubesteer-webhook --subject-access-review-qps and -burst defaults";
    let webhook_port = webhook.port("addr");
    let metrics_port = controller.port("metrics-bind-address");
    let max_body = mib(MAX_BODY_BYTES);
    let next = word(rules::scaler::NEXT_TRANSITIONS);

    let mut rows = Vec::new();

    // README.md
    let f = "README.md";
    rows.push(row(
        f,
        "first sleeps ",
        value("webhook.preStopSleepSeconds"),
        " s in `preStop`",
        in_values("webhook.preStopSleepSeconds"),
    ));
    rows.push(row(
        f,
        "answers `/readyz` with 503 for `--shutdown-delay` (",
        secs(webhook.duration("shutdown-delay")),
        " s)",
        webhook.source("shutdown-delay"),
    ));
    rows.push(row(
        f,
        "in-flight requests within `--drain-timeout` (",
        secs(webhook.duration("drain-timeout")),
        " s)",
        webhook.source("drain-timeout"),
    ));
    rows.push(row(
        f,
        "takes over at its next read, within ",
        secs(RETRY_PERIOD),
        " s",
        "kubesteer_runtime::lease::RETRY_PERIOD",
    ));
    rows.push(row(
        f,
        "and the owner looks again every ",
        secs(kubesteer_controller::reconcilers::NAME_CONFLICT_REQUEUE),
        " s.",
        "kubesteer_controller::reconcilers::NAME_CONFLICT_REQUEUE",
    ));
    rows.push(row(
        f,
        "configurations pointed at `https://127.0.0.1:",
        webhook_port,
        "`)",
        webhook.source("addr"),
    ));
    let (v, s) = shell("hack/run.sh", "KUBESTEER_READY_TIMEOUT");
    rows.push(row(f, "`KUBESTEER_READY_TIMEOUT` seconds (", v, ";", s));
    let (v, s) = shell("hack/run.sh", "KUBESTEER_SAMPLES_TIMEOUT");
    let v = v.strip_suffix('s').map(str::to_string).unwrap_or(v);
    rows.push(row(f, "or a sample is not Ready within ", v, " s.", s));
    for (file, name, after) in [
        ("hack/e2e.sh", "KUBESTEER_E2E_GROUP_TIMEOUT", " s;"),
        ("hack/e2e.sh", "KUBESTEER_IMAGE_BUILD_TIMEOUT", " s;"),
        ("hack/test.sh", "KUBESTEER_HOST_LANE_TIMEOUT", " s;"),
        ("hack/test-run.sh", "KUBESTEER_TEST_RUN_TIMEOUT", " s)"),
    ] {
        let (v, s) = shell(file, name);
        rows.push(row(f, format!("`{name}`, "), v, after, s));
    }

    // docs/scaler.md
    let f = "docs/scaler.md";
    rows.push(row(
        f,
        "alone for `gracePeriod` (default `",
        short(DEFAULT_GRACE_PERIOD),
        "`, at most",
        "kubesteer_api::scaler::v1beta1::DEFAULT_GRACE_PERIOD",
    ));
    assert_eq!(
        MAX_GRACE_PERIOD.as_secs() % 86_400,
        0,
        "MAX_GRACE_PERIOD in whole days"
    );
    rows.push(row(
        f,
        "`, at most ",
        MAX_GRACE_PERIOD.as_secs() / 86_400,
        " days) after its creation",
        "kubesteer_api::scaler::v1beta1::MAX_GRACE_PERIOD",
    ));
    for (before, value, after, source) in [
        (
            "`): at most ",
            rules::scaler::MAX_PATCHES,
            " patches of at most",
            "MAX_PATCHES",
        ),
        (
            " patches of at most ",
            rules::scaler::MAX_PATCH_BYTES,
            " bytes and",
            "MAX_PATCH_BYTES",
        ),
        (
            " bytes and ",
            rules::scaler::MAX_PATCH_EDITS,
            " paths each,",
            "MAX_PATCH_EDITS",
        ),
    ] {
        let source = format!("kubesteer_api::rules::scaler::{source}");
        rows.push(row(f, before, value, after, source));
    }
    {
        use kubesteer_api::scaler::calendar::{DAYS_AHEAD, DAYS_BEHIND, MAX_HOLIDAYS, RECHECK};
        let source = |name: &str| format!("kubesteer_api::scaler::calendar::{name}");
        let minutes = RECHECK.as_secs() / 60;
        for file in [f, "charts/kubesteer/files/crds/scalers.kubesteer.io.yaml"] {
            rows.push(row(
                file,
                "are expanded from ",
                DAYS_BEHIND,
                " days back",
                source("DAYS_BEHIND"),
            ));
            rows.push(row(
                file,
                " days back to ",
                DAYS_AHEAD,
                " days ahead",
                source("DAYS_AHEAD"),
            ));
            rows.push(row(
                file,
                "at least every ",
                minutes,
                " minutes",
                source("RECHECK"),
            ));
        }
        rows.push(row(
            f,
            "days ahead, at most ",
            MAX_HOLIDAYS,
            " holidays;",
            source("MAX_HOLIDAYS"),
        ));
    }
    {
        use kubesteer_api::scaler::savings::DAYS_KEPT;
        let source = "kubesteer_api::scaler::savings::DAYS_KEPT";
        rows.push(row(
            f,
            "per day of `timeZone`, the last ",
            DAYS_KEPT,
            " days)",
            source,
        ));
        let plugin = "docs/plugin.md";
        rows.push(row(
            plugin,
            "today included, `1d` to `",
            DAYS_KEPT,
            "d`: what",
            source,
        ));
        let crd = "charts/kubesteer/files/crds/scalers.kubesteer.io.yaml";
        rows.push(row(
            crd,
            "time zone, oldest first, the last ",
            DAYS_KEPT,
            " days at most",
            source,
        ));
    }
    rows.push(row(
        f,
        "`status.targets` lists at most ",
        rules::scaler::MAX_STATUS_TARGETS,
        " (failing ones first)",
        "kubesteer_api::rules::scaler::MAX_STATUS_TARGETS",
    ));
    rows.push(row(
        f,
        "`nextTransitions` (the next ",
        next,
        ", each with",
        "kubesteer_api::rules::scaler::NEXT_TRANSITIONS",
    ));
    // The Scaler CRD's descriptions (what `kubectl explain` prints), generated from api/.
    let crd = "charts/kubesteer/files/crds/scalers.kubesteer.io.yaml";
    rows.push(row(
        crd,
        "allowed to patch the target. At most ",
        rules::scaler::MAX_PATCHES,
        ".'",
        "kubesteer_api::rules::scaler::MAX_PATCHES",
    ));
    rows.push(row(
        crd,
        "Defaults to 15m; at most ",
        format!("{}h", MAX_GRACE_PERIOD.as_secs() / 3600),
        " (7 days).",
        "kubesteer_api::scaler::v1beta1::MAX_GRACE_PERIOD",
    ));
    rows.push(row(
        crd,
        "a yearly date \"--12-25\"; at most ",
        rules::scaler::MAX_EXCLUDE_DATES,
        " entries.",
        "kubesteer_api::rules::scaler::MAX_EXCLUDE_DATES",
    ));
    rows.push(row(
        crd,
        "the highest replicas of the open windows wins. At most ",
        rules::scaler::MAX_WINDOWS,
        " windows.",
        "kubesteer_api::rules::scaler::MAX_WINDOWS",
    ));
    let (v, s) = shell("hack/keda.sh", "KEDA_VERSION");
    rows.push(row(f, "the real KEDA operator (", v, ", built from", s));

    // docs/controller.md
    let f = "docs/controller.md";
    rows.push(row(
        f,
        "(`KUBESTEER_METRICS_ADDR`, default `",
        controller.default("metrics-bind-address"),
        "`;",
        controller.source("metrics-bind-address"),
    ));
    rows.push(row(
        f,
        "at most `MAX_STATUS_TARGETS` (",
        rules::scaler::MAX_STATUS_TARGETS,
        ") targets",
        "kubesteer_api::rules::scaler::MAX_STATUS_TARGETS",
    ));
    rows.push(row(
        f,
        "caches' first lists (at most ",
        secs(kubesteer_controller::children::SYNC_WAIT),
        " s after their watches start",
        "kubesteer_controller::children::SYNC_WAIT",
    ));
    rows.push(row(
        f,
        "(added, changed or deleted), or for ",
        secs(kubesteer_controller::children::UNSEEN_FOR),
        " s;",
        "kubesteer_controller::children::UNSEEN_FOR",
    ));
    rows.push(row(
        f,
        "At most `--concurrency` (",
        controller.default("concurrency"),
        ") reconciles run per kind",
        controller.source("concurrency"),
    ));
    rows.push(row(
        f,
        "once `--debounce` (",
        short(controller.duration("debounce")),
        ") passed",
        controller.source("debounce"),
    ));
    rows.push(row(
        f,
        "by at most `--debounce-max` (",
        short(controller.duration("debounce-max")),
        ") from the first",
        controller.source("debounce-max"),
    ));
    rows.push(row(
        f,
        "not applied yet (its status does not show it) retries every ",
        secs(kubesteer_controller::scaler::OUTAGE_RETRY),
        " s:",
        "kubesteer_controller::scaler::OUTAGE_RETRY",
    ));
    rows.push(row(
        f,
        "(`--leader-election`): a ",
        LEASE_DURATION_SECONDS,
        " s Lease",
        "kubesteer_runtime::lease::LEASE_DURATION_SECONDS",
    ));
    rows.push(row(
        f,
        "s Lease, renewed every ",
        secs(RETRY_PERIOD),
        " s.",
        "kubesteer_runtime::lease::RETRY_PERIOD",
    ));
    rows.push(row(
        f,
        "When it could not be renewed for ",
        secs(RENEW_DEADLINE),
        " s (the renew deadline)",
        "kubesteer_runtime::lease::RENEW_DEADLINE",
    ));
    rows.push(row(
        f,
        "dropping reconciles in flight, ",
        LEASE_DURATION_SECONDS - RENEW_DEADLINE.as_secs(),
        " s before another replica may take the Lease",
        "LEASE_DURATION_SECONDS - RENEW_DEADLINE (kubesteer_runtime::lease)",
    ));

    // docs/application.md
    let f = "docs/application.md";
    rows.push(row(
        f,
        "Application for the host, and for ",
        secs(kubesteer_api::application::hosts::IN_FLIGHT),
        " s after it was made",
        "kubesteer_api::application::hosts::IN_FLIGHT",
    ));
    rows.push(row(
        f,
        "exactly one is admitted (`make test` races them ",
        crate::hosts::ROUNDS,
        " times,",
        "kubesteer_tests::hosts::ROUNDS",
    ));
    rows.push(row(
        f,
        "replicas: 2 # ",
        format!(
            "{}-{}, default {}",
            rules::MIN_REPLICAS,
            rules::application::MAX_REPLICAS,
            kubesteer_api::application::DEFAULT_REPLICAS
        ),
        " port:",
        "kubesteer_api::rules::{MIN_REPLICAS, application::MAX_REPLICAS}, application::DEFAULT_REPLICAS",
    ));
    rows.push(row(
        f,
        "# the container's port, default ",
        kubesteer_api::application::DEFAULT_PORT,
        " servicePort:",
        "kubesteer_api::application::DEFAULT_PORT",
    ));
    rows.push(row(
        f,
        "(and the Ingress backend's) port, default ",
        kubesteer_api::application::DEFAULT_SERVICE_PORT,
        " env:",
        "kubesteer_api::application::DEFAULT_SERVICE_PORT",
    ));
    rows.push(row(
        f,
        "path: / # default ",
        kubesteer_api::application::DEFAULT_PATH,
        " pathType:",
        "kubesteer_api::application::DEFAULT_PATH",
    ));
    rows.push(row(
        f,
        "pathType: Prefix # default ",
        kubesteer_api::application::DEFAULT_PATH_TYPE.as_str(),
        ";",
        "kubesteer_api::application::DEFAULT_PATH_TYPE",
    ));

    // A Scaler's author's rights, asked again (docs/scaler.md and docs/security.md).
    {
        use kubesteer_api::access::author::{GRANT_TTL, RECHECK};
        let source = "kubesteer_api::access::author::{RECHECK, GRANT_TTL}";
        for (f, before) in [
            ("docs/scaler.md", "at least every "),
            ("docs/security.md", "apiserver again, at least every "),
            ("CHANGELOG.md", "apiserver again at least every "),
            (
                "charts/kubesteer/files/alerts.yaml",
                "The controller asks again at least every ",
            ),
        ] {
            rows.push(row(f, before, secs(RECHECK), " s", source));
        }
        rows.push(row(
            "docs/scaler.md",
            "s and trusting a yes for ",
            secs(GRANT_TTL),
            " s,",
            source,
        ));
        for (f, before) in [
            ("docs/scaler.md", "When one is gone, within "),
            ("docs/security.md", "their Scalers within "),
            ("CHANGELOG.md", "Within "),
        ] {
            rows.push(row(
                f,
                before,
                secs(RECHECK + GRANT_TTL),
                " s",
                "RECHECK + GRANT_TTL (kubesteer_api::access::author)",
            ));
        }
    }

    // docs/security.md
    let f = "docs/security.md";
    rows.push(row(
        f,
        "doubling to 5 min, not the ",
        secs(kubesteer_controller::context::CONFLICT_REQUEUE),
        " s conflict retry",
        "kubesteer_controller::context::CONFLICT_REQUEUE",
    ));
    rows.push(row(
        f,
        "Any pod can reach port ",
        webhook_port,
        ",",
        webhook.source("addr"),
    ));
    rows.push(row(
        f,
        "and the webhook's port ",
        webhook_port,
        " is open to every",
        webhook.source("addr"),
    ));
    rows.push(row(
        f,
        "`webhook.requestBodyBudget`, ",
        quantity(DEFAULT_BUDGET),
        "):",
        "kubesteer_webhook::budget::DEFAULT_BUDGET",
    ));
    rows.push(row(
        f,
        "one over ",
        max_body,
        " MiB (two objects",
        "kubesteer_webhook::budget::MAX_BODY_BYTES",
    ));
    rows.push(row(
        f,
        "old CA for ",
        kubesteer_webhook::selfmanaged::CA_OVERLAP_ROUNDS,
        " check intervals",
        "kubesteer_webhook::selfmanaged::CA_OVERLAP_ROUNDS",
    ));
    let horizon = kubesteer_api::scaler::schedule::FIRING_HORIZON_YEARS;
    let horizon_source = "kubesteer_api::scaler::schedule::FIRING_HORIZON_YEARS";
    rows.push(row(
        f,
        "never fires within ",
        horizon,
        " years`)",
        horizon_source,
    ));
    rows.push(row(
        f,
        "bounded by that ",
        horizon,
        "-year horizon",
        horizon_source,
    ));
    rows.push(row(
        f,
        "`webhook.subjectAccessReviews.burst` (",
        &burst,
        ") at once",
        webhook.source("subject-access-review-burst"),
    ));
    rows.push(row(
        f,
        "and `.qps` (",
        &qps,
        ") per second",
        webhook.source("subject-access-review-qps"),
    ));
    rows.push(row(
        f,
        "the webhook's bound of ",
        format!("{qps} SubjectAccessReviews per second (burst {burst})"),
        " is reached",
        sar_source,
    ));
    rows.push(row(
        f,
        "A check over the bound waits at most ",
        secs(MAX_WAIT),
        " s for its turn",
        "kubesteer_webhook::permissions::MAX_WAIT",
    ));

    // docs/plugin.md
    let f = "docs/plugin.md";
    rows.push(row(
        f,
        "one row per day in the Scaler's time zone, ",
        word(kubesteer_plugin::week::CELLS_PER_HOUR as usize),
        " cells per hour",
        "kubesteer_plugin::week::CELLS_PER_HOUR",
    ));
    rows.push(row(
        f,
        "Ready, the next ",
        next,
        " changes",
        "kubesteer_api::rules::scaler::NEXT_TRANSITIONS",
    ));

    // docs/framework.md
    let f = "docs/framework.md";
    rows.push(row(
        f,
        "On the answer cache above (a found kind kept ",
        secs(kubesteer_runtime::scale::FOUND_TTL),
        " s, a refusal",
        "kubesteer_runtime::scale::FOUND_TTL",
    ));
    rows.push(row(
        f,
        " s, a refusal ",
        secs(kubesteer_runtime::scale::MISSING_TTL),
        " s), 256 resolves",
        "kubesteer_runtime::scale::MISSING_TTL",
    ));

    // docs/soak.md
    let f = "docs/soak.md";
    let (v, s) = shell("hack/soak.sh", "DURATION");
    rows.push(row(f, "$ make soak # ", v, " of faults", s));
    let (v, s) = shell("hack/soak.sh", "TARGETS");
    rows.push(row(
        f,
        " of faults, ",
        v,
        " targets, each fault kind at least",
        s,
    ));
    let (v, s) = shell("hack/soak.sh", "MIN_FAULTS");
    rows.push(row(f, "each fault kind at least ", v, " times", s));
    rows.push(row(
        f,
        "`make test` runs a short soak (",
        crate::soak::SHORT_DURATION.as_secs() / 60,
        " minutes of faults,",
        "kubesteer_tests::soak::SHORT_DURATION",
    ));
    rows.push(row(
        f,
        " minutes of faults, ",
        crate::soak::SHORT_TARGETS,
        " targets) as the last",
        "kubesteer_tests::soak::SHORT_TARGETS",
    ));
    let gap = crate::soak::FAULT_GAP_SECONDS;
    rows.push(row(
        f,
        "one at a time, ",
        format!("{} to {}", gap.start(), gap.end()),
        " s apart",
        "kubesteer_tests::soak::FAULT_GAP_SECONDS",
    ));
    let range = |r: (String, String)| format!("{} to {}", r.0, r.1);
    let (group, period) = (crate::soak::GROUP_SIZE, crate::soak::WINDOW_PERIOD_MINUTES);
    rows.push(row(
        f,
        "**Targets**: groups of ",
        range((group.start().to_string(), group.end().to_string())),
        ", each under one Scaler",
        "kubesteer_tests::soak::GROUP_SIZE",
    ));
    rows.push(row(
        f,
        "Windows are 1 or 2 minutes long, every ",
        format!("{} or {}", period.start(), period.end()),
        " minutes, in UTC",
        "kubesteer_tests::soak::WINDOW_PERIOD_MINUTES",
    ));
    let (actor, writer) = (
        crate::soak::ACTOR_PAUSE_SECONDS,
        crate::soak::WRITER_PAUSE_SECONDS,
    );
    rows.push(row(
        f,
        "**The workload**, every ",
        range((actor.start.to_string(), actor.end.to_string())),
        " s: a Scaler's",
        "kubesteer_tests::soak::ACTOR_PAUSE_SECONDS",
    ));
    rows.push(row(
        f,
        "through the webhook every ",
        range((writer.start.to_string(), writer.end.to_string())),
        " s and reads",
        "kubesteer_tests::soak::WRITER_PAUSE_SECONDS",
    ));
    let length = crate::soak::OVERRIDE_SECONDS;
    rows.push(row(
        f,
        "an override of ",
        range((length.start().to_string(), length.end().to_string())),
        " s set",
        "kubesteer_tests::soak::OVERRIDE_SECONDS",
    ));
    rows.push(row(
        f,
        "SIGSTOP for ",
        secs(crate::soak::FAULT_HELD),
        " s, then SIGCONT",
        "kubesteer_tests::soak::FAULT_HELD",
    ));
    rows.push(row(
        f,
        "| hostile bodies | ",
        crate::soak::FLOOD_CLIENTS,
        " clients send 4 MiB",
        "kubesteer_tests::soak::FLOOD_CLIENTS",
    ));
    rows.push(row(
        f,
        "a target read when no fault was active for ",
        secs(Duration::from_secs_f64(crate::soak::GRACE_SECONDS)),
        " s, and",
        "kubesteer_tests::soak::GRACE_SECONDS",
    ));

    // docs/upgrading.md
    let f = "docs/upgrading.md";
    let (v, s) = shell("hack/registry.sh", "KUBESTEER_REGISTRY_PORT");
    rows.push(row(f, "`10.214.<slot>.1:", v, "`", s));
    let (v, s) = shell("versions.env", "PREVIOUS_RELEASE_VERSION");
    rows.push(row(f, "**From ", v, "** (`", s));
    let (v, s) = shell("versions.env", "PREVIOUS_RELEASE_COMMIT");
    rows.push(row(f, "** (`", &v[..7], "`), whose chart", s));

    // docs/webhook.md
    let f = "docs/webhook.md";
    rows.push(row(
        f,
        "Grants are cached per replica for ",
        secs(TTL),
        " s (keyed",
        "kubesteer_webhook::permissions::TTL",
    ));
    rows.push(row(
        f,
        "the exact permission; at most ",
        CAPACITY,
        "), denials",
        "kubesteer_webhook::permissions::CAPACITY",
    ));
    rows.push(row(
        f,
        "`--watch-stale-after` (",
        secs(webhook.duration("watch-stale-after")),
        " s) or longer",
        webhook.source("watch-stale-after"),
    ));
    rows.push(row(
        f,
        "an AdmissionReview gets 400 with the reason, over ",
        max_body,
        " MiB",
        "kubesteer_webhook::budget::MAX_BODY_BYTES",
    ));
    for (flag, after) in [
        ("handshake-timeout", " s, "),
        ("header-timeout", " s, "),
        ("idle-timeout", " s, "),
        ("request-timeout", " s)"),
    ] {
        rows.push(row(
            f,
            format!("`--{flag}` "),
            secs(webhook.duration(flag)),
            after,
            webhook.source(flag),
        ));
    }
    for (flag, after) in [
        ("max-connections-per-ip", ") or"),
        ("max-connections", "), room"),
    ] {
        rows.push(row(
            f,
            format!("`--{flag}` ("),
            webhook.default(flag),
            after,
            webhook.source(flag),
        ));
    }
    rows.push(row(
        f,
        "`--tls-key-file`), re-read every ",
        secs(webhook.duration("cert-reload-interval")),
        " s",
        webhook.source("cert-reload-interval"),
    ));

    // docs/development.md
    let f = "docs/development.md";
    let gib = |(mib, source): (String, String)| {
        let mib: u64 = mib.parse().unwrap_or_else(|e| panic!("{source}: {e}"));
        (mib / 1024, source)
    };
    let (v, s) = gib(shell("hack/image.sh", "KUBESTEER_IMAGE_TARGET_MIB"));
    rows.push(row(
        f,
        "The directory is cleared when it passes ",
        v,
        " GiB",
        s,
    ));
    let (v, s) = gib(shell(".ci/run", "KUBESTEER_CI_TARGET_MIB"));
    rows.push(row(f, "cleared past ", v, " GiB.", s));

    // docs/operating.md
    let f = "docs/operating.md";
    rows.push(row(
        f,
        "(`certs.certManager.duration` `",
        value("certs.certManager.duration"),
        "`,",
        in_values("certs.certManager.duration"),
    ));
    rows.push(row(
        f,
        "renewed `certs.certManager.renewBefore` `",
        value("certs.certManager.renewBefore"),
        "` before",
        in_values("certs.certManager.renewBefore"),
    ));
    rows.push(row(
        f,
        "`/tls/tls.key` every ",
        secs(webhook.duration("cert-reload-interval")),
        " s",
        webhook.source("cert-reload-interval"),
    ));
    let (v, s) = shell("versions.env", "CERT_MANAGER_VERSION");
    rows.push(row(f, "`release.rs`): cert-manager ", v, ", built", s));
    let (v, s) = shell("versions.env", "PROMETHEUS_OPERATOR_VERSION");
    rows.push(row(f, "with the Prometheus Operator ", v, " and", s));
    rows.push(row(
        f,
        "and Prometheus ",
        prometheus_release(),
        " on",
        "versions.env PROMTOOL_VERSION",
    ));

    // charts/kubesteer/README.md
    let f = "charts/kubesteer/README.md";
    rows.push(row(
        f,
        "| `webhook.subjectAccessReviews.qps`, `.burst` | `",
        format!("{qps}`, `{burst}"),
        "` |",
        sar_source,
    ));
    rows.push(row(
        f,
        "over it a check waits up to ",
        secs(MAX_WAIT),
        " s, then",
        "kubesteer_webhook::permissions::MAX_WAIT",
    ));
    rows.push(row(
        f,
        "| `webhook.requestBodyBudget` | `",
        quantity(DEFAULT_BUDGET),
        "` |",
        "kubesteer_webhook::budget::DEFAULT_BUDGET",
    ));
    rows.push(row(
        f,
        "(`--request-body-budget`, ",
        budget_range(),
        ");",
        "the range kubesteer_webhook::budget::parse_bytes takes",
    ));
    rows.push(row(
        f,
        "bodies over ",
        max_body,
        " MiB get 413",
        "kubesteer_webhook::budget::MAX_BODY_BYTES",
    ));
    rows.push(row(
        f,
        format!(
            "`{}` (reconciles per kind at once, default ",
            controller.env("concurrency")
        ),
        controller.default("concurrency"),
        "),",
        controller.source("concurrency"),
    ));
    for flag in ["debounce", "debounce-max"] {
        rows.push(row(
            f,
            format!("`{}` (default `", controller.env(flag)),
            short(controller.duration(flag)),
            "`)",
            controller.source(flag),
        ));
    }
    rows.push(row(
        f,
        "| `/metrics` on ",
        metrics_port,
        " over HTTPS",
        controller.source("metrics-bind-address"),
    ));
    rows.push(row(
        f,
        "reach the controller's `/metrics` on ",
        metrics_port,
        " |",
        controller.source("metrics-bind-address"),
    ));
    rows.push(row(
        f,
        "- webhook pods: TCP ",
        webhook_port,
        " (admission",
        webhook.source("addr"),
    ));
    rows.push(row(
        f,
        "- controller pods: TCP ",
        metrics_port,
        " (`/metrics`",
        controller.source("metrics-bind-address"),
    ));
    for key in [
        "webhook.timeoutSeconds",
        "webhook.preStopSleepSeconds",
        "webhook.shutdownDelaySeconds",
        "webhook.drainTimeoutSeconds",
        "webhook.terminationGracePeriodSeconds",
    ] {
        rows.push(row(
            f,
            format!("| `{key}` | `"),
            value(key),
            "` |",
            in_values(key),
        ));
    }
    rows.push(row(
        f,
        "| `tests.retries`, `tests.interval` | `",
        format!("{}`, `{}", value("tests.retries"), value("tests.interval")),
        "` |",
        in_values("tests.retries and tests.interval"),
    ));
    rows.push(row(
        f,
        "proves them with promtool ",
        prometheus_release(),
        " (",
        "versions.env PROMTOOL_VERSION",
    ));
    let (v, s) = shell("versions.env", "PROMETHEUS_OPERATOR_VERSION");
    rows.push(row(f, "the prometheus-operator ", v, " CRDs", s));

    // charts/kubesteer/values.yaml: the flags' defaults the chart passes on, and its comments.
    let f = "charts/kubesteer/values.yaml";
    rows.push(row(
        f,
        "requestBodyBudget: ",
        quantity(DEFAULT_BUDGET),
        " ",
        "kubesteer_webhook::budget::DEFAULT_BUDGET",
    ));
    rows.push(row(
        f,
        "(Ki, Mi, Gi; ",
        budget_range(),
        ")",
        "the range kubesteer_webhook::budget::parse_bytes takes",
    ));
    rows.push(row(
        f,
        "subjectAccessReviews: qps: ",
        format!("{qps} burst: {burst}"),
        " ",
        sar_source,
    ));
    rows.push(row(
        f,
        "Over the bound a check waits up to ",
        secs(MAX_WAIT),
        " s",
        "kubesteer_webhook::permissions::MAX_WAIT",
    ));
    rows.push(row(
        f,
        "shutdownDelaySeconds: ",
        secs(webhook.duration("shutdown-delay")),
        " ",
        webhook.source("shutdown-delay"),
    ));
    rows.push(row(
        f,
        "drainTimeoutSeconds: ",
        secs(webhook.duration("drain-timeout")),
        " ",
        webhook.source("drain-timeout"),
    ));
    rows.push(row(
        f,
        "and port ",
        webhook_port,
        " is open to every pod",
        webhook.source("addr"),
    ));
    rows.push(row(
        f,
        "true: /metrics (port ",
        metrics_port,
        ")",
        controller.source("metrics-bind-address"),
    ));
    rows.push(row(
        f,
        "webhook: ingress to ",
        webhook_port,
        " (admission",
        webhook.source("addr"),
    ));
    rows.push(row(
        f,
        "controller: ingress to ",
        metrics_port,
        " (/metrics",
        controller.source("metrics-bind-address"),
    ));
    rows
}

#[test]
fn every_number_the_docs_state_is_the_codes() {
    let rows = rows();
    let mut texts = BTreeMap::new();
    let mut wrong = Vec::new();
    for r in &rows {
        let text = texts.entry(r.file).or_insert_with(|| normalized(r.file));
        wrong.extend(r.check(text));
    }
    assert!(
        wrong.is_empty(),
        "{} of {} numbers in the docs differ from the code:\n{}",
        wrong.len(),
        rows.len(),
        wrong.join("\n")
    );
}

#[test]
fn a_row_names_the_doc_the_sentence_and_the_code_when_they_differ() {
    let r = row(
        "docs/x.md",
        "lists at most ",
        100,
        " targets",
        "kubesteer_api::rules::scaler::MAX_STATUS_TARGETS",
    );
    assert_eq!(
        r.check("it lists at most 100 targets, failing ones first"),
        None
    );
    let e = r
        .check("it lists at most 120 targets, failing ones first")
        .unwrap();
    assert!(
        e.contains("docs/x.md says \"lists at most 120 targets")
            && e.contains("MAX_STATUS_TARGETS is 100")
            && e.contains("should say \"lists at most 100 targets\""),
        "{e}"
    );
    let e = r.check("it lists every target").unwrap();
    assert!(e.contains("no longer says \"lists at most \""), "{e}");
    assert_eq!(normalized_text("a\n  # b\n c", true), "a b c");
}

/// Bytes of a Kubernetes memory quantity written with a binary suffix (`128Mi`).
fn binary_bytes(quantity: &str) -> Option<u64> {
    let units = [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)];
    units.iter().find_map(|(suffix, unit)| {
        quantity
            .strip_suffix(suffix)
            .and_then(|n| n.parse::<u64>().ok())
            .map(|n| n * unit)
    })
}

/// The chart's webhook memory limit follows the flood measured at its pods (values.yaml says
/// how): at least twice the highest container peak in bench/results/webhook-memory-chart.json,
/// and above twice the default request body budget (what a flood can hold).
#[test]
fn the_webhooks_memory_limit_follows_the_flood_measured_at_its_pods() {
    let values: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("charts/kubesteer/values.yaml")).unwrap(),
    )
    .unwrap();
    let webhook = &values["webhook"];
    let limit = binary_bytes(webhook["resources"]["limits"]["memory"].as_str().unwrap()).unwrap();
    let budget = binary_bytes(webhook["requestBodyBudget"].as_str().unwrap()).unwrap();
    assert_eq!(
        budget,
        kubesteer_webhook::budget::DEFAULT_BUDGET as u64,
        "values.yaml's requestBodyBudget is the webhook's default"
    );
    let measured: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("bench/results/webhook-memory-chart.json"))
            .unwrap(),
    )
    .unwrap();
    let peak = measured["cgroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["peak_bytes"].as_u64())
        .max()
        .unwrap();
    assert!(
        limit >= 2 * peak,
        "limit {limit} under twice the peak {peak}"
    );
    assert!(
        limit > 2 * budget,
        "limit {limit} not above twice the budget {budget}"
    );
    // The sentence in values.yaml quotes the peak, in MiB.
    let text = normalized("charts/kubesteer/values.yaml");
    let said = format!("peaked at {} MiB", (peak as f64 / (1 << 20) as f64).round());
    assert!(text.contains(&said), "values.yaml should say {said:?}");
}
