//! The CRD schema and api/'s validation agree. Every object below, most of them violating one
//! rule of `api/src/rules.rs` (each limit just past its edge, and wrong types, enums and
//! patterns), some good, goes to both judges:
//!
//! - the real apiserver, by a server-side dry-run create in a namespace that no admission webhook
//!   configuration selects (checked before and after), so only the CRD's schema and CEL rules
//!   decide;
//! - api/, as the webhook runs it: defaulting first, then `Kind::validate`.
//!
//! The test fails when one accepts what the other refuses, naming the object and the field, or
//! when both agree against what the case expects. [`ON_PURPOSE`] lists the differences that are
//! meant, with the reason; each must still differ, so a list that outlives its reason fails too.
//! Rules that need the cluster (the author's permissions, a target claimed by another Scaler,
//! the image policy) are the webhook's alone and are not api/ validation, so they are not here.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kubesteer_api::kind::{Kind, ALL};
use kubesteer_api::rules::{
    application as app, memcached as mc, scaler as sc, welcome as wl, MAX_IMAGE, MAX_INT32,
    MAX_LABEL, MAX_PORT, MAX_SUBDOMAIN, MIN_PORT, MIN_REPLICAS,
};
use kubesteer_tests::{kubectl, kubectl_ok, Namespace};
use serde_json::{json, Map, Value};

/// Meant differences: the case (by its description) that only api/ refuses, and why.
const ON_PURPOSE: &[(&str, &str)] = &[
    (
        "Scaler two identical targets",
        "a target is the same object once its namespace is resolved against the Scaler's, which the schema cannot know; api/ judges it, resolved",
    ),
    (
        "Scaler spec.timeZone = \"Mars/Olympus\"",
        "the IANA time zone database is in api/ (chrono-tz); CEL has none",
    ),
    (
        "Scaler spec.jobs[0].schedule = \"not cron\"",
        "cron syntax is parsed by api/ (croner); CEL has no cron parser",
    ),
    (
        "Scaler spec.jobs[0].schedule = \"0 0 30 2 *\"",
        "a schedule that never fires is found by walking 5 years of dates, beyond CEL's cost budget",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accept,
    Refuse,
}
use Verdict::{Accept, Refuse};

struct Case {
    kind: Kind,
    /// `Kind spec.field = value`: names the field, unique among the cases.
    what: String,
    /// The spec; `None` leaves it out.
    spec: Option<Value>,
    want: Verdict,
    /// The field both judges must name when they refuse (or a field above or below it); `None`
    /// for cases about the whole spec.
    names: Option<String>,
}

/// The dotted field path of a JSON pointer below the spec: `/deployments/0/name` is
/// `spec.deployments[0].name`.
fn field(pointer: &str) -> String {
    let mut path = "spec".to_string();
    for token in pointer.split('/').skip(1) {
        if token.parse::<usize>().is_ok() {
            path.push_str(&format!("[{token}]"));
        } else {
            path.push('.');
            path.push_str(token);
        }
    }
    path
}

/// A value as the case describes it: long strings and lists by their size.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) if s.chars().count() > 24 => {
            let head: String = s.chars().take(8).collect();
            format!("{head:?}… ({} characters)", s.chars().count())
        }
        Value::Array(items) if value.to_string().len() > 48 => format!("[{} items]", items.len()),
        other => other.to_string(),
    }
}

/// `base` with the value at `pointer` set, creating missing objects on the way.
fn with(base: &Value, pointer: &str, value: Value) -> Value {
    let mut spec = base.clone();
    let mut at = &mut spec;
    let tokens: Vec<&str> = pointer.split('/').skip(1).collect();
    for (i, token) in tokens.iter().enumerate() {
        let last = i + 1 == tokens.len();
        at = match at {
            Value::Array(items) => {
                let index: usize = token.parse().unwrap_or(usize::MAX);
                if last && index < items.len() {
                    items[index] = value;
                    return spec;
                }
                match items.get_mut(index) {
                    Some(item) => item,
                    None => panic!("{pointer}: no item {token} in the base spec"),
                }
            }
            other => {
                if !other.is_object() {
                    *other = json!({});
                }
                let Value::Object(map) = other else {
                    unreachable!()
                };
                if last {
                    map.insert(token.to_string(), value);
                    return spec;
                }
                map.entry(token.to_string()).or_insert_with(|| json!({}))
            }
        };
    }
    value
}

struct Cases {
    kind: Kind,
    base: Value,
    all: Vec<Case>,
}

impl Cases {
    fn new(kind: Kind, base: Value) -> Self {
        Self {
            kind,
            base,
            all: Vec::new(),
        }
    }

    fn push(&mut self, what: String, spec: Option<Value>, want: Verdict) {
        let what = format!("{} {what}", self.kind.name());
        self.all.push(Case {
            kind: self.kind,
            what,
            spec,
            want,
            names: None,
        });
    }

    /// The base spec with one value set.
    fn set(&mut self, pointer: &str, value: Value, want: Verdict) {
        let what = format!("{} = {}", field(pointer), show(&value));
        let spec = with(&self.base, pointer, value);
        self.push(what, Some(spec), want);
        if let Some(case) = self.all.last_mut() {
            case.names = Some(field(pointer));
        }
    }

    /// A whole spec, described by `what`.
    fn spec(&mut self, what: &str, spec: Value, want: Verdict) {
        self.push(what.to_string(), Some(spec), want);
    }

    /// An integer in `min..=max`: both edges in, one past each out, and wrong types.
    fn int(&mut self, pointer: &str, min: i64, max: i64) {
        self.set(pointer, json!(min), Accept);
        self.set(pointer, json!(max), Accept);
        self.set(pointer, json!(min - 1), Refuse);
        self.set(pointer, json!(max + 1), Refuse);
        self.set(pointer, json!(min.to_string()), Refuse);
        self.set(pointer, json!(min as f64 + 0.5), Refuse);
    }

    /// A string of `min..=max` characters made by `fill`: the longest in, one longer out, one
    /// shorter out when there is one, and a wrong type.
    fn length(&mut self, pointer: &str, min: usize, max: usize, fill: impl Fn(usize) -> String) {
        self.set(pointer, json!(fill(max)), Accept);
        self.set(pointer, json!(fill(max + 1)), Refuse);
        if min > 0 {
            self.set(pointer, json!(fill(min - 1)), Refuse);
        }
        self.set(pointer, json!(7), Refuse);
    }

    /// A list of `min..=max` items made by `item`: the longest in, one longer out, one shorter
    /// out when there is one, and a wrong type.
    fn items(&mut self, pointer: &str, min: usize, max: usize, item: impl Fn(usize) -> Value) {
        let list = |n: usize| Value::Array((0..n).map(&item).collect());
        self.set(pointer, list(max), Accept);
        self.set(pointer, list(max + 1), Refuse);
        if min > 0 {
            self.set(pointer, list(min - 1), Refuse);
        }
        self.set(pointer, json!("x"), Refuse);
    }

    fn strings(&mut self, pointer: &str, values: &[&str], want: Verdict) {
        for v in values {
            self.set(pointer, json!(v), want);
        }
    }
}

fn letters(c: char) -> impl Fn(usize) -> String {
    move |n| std::iter::repeat_n(c, n).collect()
}

/// A valid email address of `n` characters (at least 130): a 64-character local part and a
/// domain of at least two labels of at most 63.
fn email(n: usize) -> String {
    let mut rest = n.saturating_sub(65);
    let mut labels = Vec::new();
    while rest > 0 {
        let take = if rest <= 63 { rest } else { 63.min(rest - 2) };
        labels.push("b".repeat(take));
        rest -= take;
        rest = rest.saturating_sub(1);
    }
    let address = format!("{}@{}", "a".repeat(64), labels.join("."));
    assert_eq!(address.len(), n, "{address}");
    address
}

/// A valid DNS-1123 subdomain of `n` characters: labels of at most 63, joined by dots.
fn subdomain(n: usize) -> String {
    let mut s = String::new();
    while s.len() < n {
        if !s.is_empty() {
            s.push('.');
        }
        let left = n - s.len();
        // Never leave a single character, which could only be a dot.
        let take = match left {
            0..=63 => left,
            64 => 61,
            _ => 63,
        };
        s.push_str(&"h".repeat(take));
    }
    s
}

fn image(n: usize) -> String {
    "i".repeat(n)
}

fn scaler_cases() -> Vec<Case> {
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    let window = json!({"scaleTargetRefs": [web], "windows": [{"start": 9, "end": 17}]});
    let cron = json!({"scaleTargetRefs": [web], "jobs": [{"name": "a", "schedule": "@daily", "replicas": 1}]});
    let mut c = Cases::new(Kind::Scaler, window.clone());
    c.spec("a window", window.clone(), Accept);
    c.spec("cron jobs", cron.clone(), Accept);
    c.spec(
        "every field",
        json!({"scaleTargetRefs": [web, {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "namespace": "data"}],
               "timeZone": "Europe/Berlin",
               "windows": [{"days": ["Mon", "Fri"], "start": "08:00", "end": 18, "replicas": 3}, {"start": 22, "end": "02:30"}],
               "excludeDates": ["2026-12-24..2026-12-26", "--01-01", "2027-05-01"],
               "override": {"replicas": 5, "until": "2099-01-01T00:00:00Z"},
               "outsideReplicas": 0, "suspend": false, "hpaCooperation": "Disabled"}),
        Accept,
    );
    c.items(
        "/scaleTargetRefs",
        sc::MIN_TARGETS,
        sc::MAX_TARGETS,
        |i| json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": format!("web-{i}")}),
    );
    c.spec(
        "a selector instead of targets",
        json!({"selector": {"matchLabels": {"tier": "web"}, "namespaces": ["a", "b"], "exclude": [{"name": "keep"}]},
               "windows": [{"start": 9, "end": 17}]}),
        Accept,
    );
    c.spec(
        "neither targets nor a selector",
        json!({"windows": [{"start": 9, "end": 17}]}),
        Refuse,
    );
    c.items(
        "/selector/namespaces",
        1,
        sc::MAX_SELECTED_NAMESPACES,
        |i| json!(format!("ns-{i}")),
    );
    c.items(
        "/selector/kinds",
        1,
        sc::MAX_SELECTED_KINDS,
        |i| json!({"apiVersion": "apps/v1", "kind": format!("Kind{i}")}),
    );
    c.spec(
        "two identical targets",
        json!({"scaleTargetRefs": [web, web], "windows": [{"start": 9, "end": 17}]}),
        Refuse,
    );
    c.set(
        "/scaleTargetRefs/0",
        json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
        Refuse,
    );
    c.set(
        "/scaleTargetRefs/0",
        json!({"apiVersion": "apps/v1", "name": "web"}),
        Refuse,
    );
    c.set(
        "/scaleTargetRefs/0",
        json!({"kind": "Deployment", "name": "web"}),
        Refuse,
    );
    c.length("/scaleTargetRefs/0/name", 1, MAX_SUBDOMAIN, letters('a'));
    c.strings(
        "/scaleTargetRefs/0/name",
        &["Web", "-web", "web_1", "a..b"],
        Refuse,
    );
    c.strings("/scaleTargetRefs/0/name", &["web.v2", "0"], Accept);
    c.length("/scaleTargetRefs/0/namespace", 1, MAX_LABEL, letters('n'));
    c.strings(
        "/scaleTargetRefs/0/namespace",
        &["Team", "team.a", "-x"],
        Refuse,
    );
    c.strings("/scaleTargetRefs/0/namespace", &["team-2"], Accept);
    c.strings(
        "/scaleTargetRefs/0/kind",
        &["deployment", "Deploy-ment", ""],
        Refuse,
    );
    c.strings(
        "/scaleTargetRefs/0/kind",
        &["StatefulSet", "ReplicaSet"],
        Accept,
    );
    c.strings(
        "/scaleTargetRefs/0/apiVersion",
        &["apps/v1/x", "", "/v1"],
        Refuse,
    );
    c.strings(
        "/scaleTargetRefs/0/apiVersion",
        &["v1", "example.com/v1alpha1"],
        Accept,
    );
    for time in ["/windows/0/start", "/windows/0/end"] {
        c.set(time, json!(0), Accept);
        c.set(time, json!(sc::MAX_HOUR), Accept);
        c.set(time, json!(-1), Refuse);
        c.set(time, json!(sc::END_OF_DAY_HOUR + 1), Refuse);
        c.set(time, json!(9.5), Refuse);
        c.set(time, json!(true), Refuse);
        c.strings(time, &["23:59", "00:00"], Accept);
        c.strings(time, &["7:00", "24:01", "12:60", "noon", ""], Refuse);
    }
    // The end of the day ends a window, and never starts one.
    c.set("/windows/0/start", json!(sc::END_OF_DAY_HOUR), Refuse);
    c.set("/windows/0/start", json!("24:00"), Refuse);
    c.set("/windows/0/end", json!(sc::END_OF_DAY_HOUR), Accept);
    c.set("/windows/0/end", json!("24:00"), Accept);
    c.set(
        "/windows/0",
        json!({"start": "00:00", "end": "24:00"}),
        Accept,
    );
    c.set("/windows/0/end", json!("09:00"), Refuse);
    c.set("/windows/0/end", json!(9), Refuse);
    c.set("/windows/0/end", json!("09:01"), Accept);
    c.set("/windows/0/start", json!("17:00"), Refuse);
    // Both judges blame the end for a window that ends where it starts.
    if let Some(case) = c.all.last_mut() {
        case.names = Some("spec.windows[0].end".into());
    }
    c.set("/windows/0", json!({"start": 9}), Refuse);
    c.items(
        "/windows",
        sc::MIN_WINDOWS,
        sc::MAX_WINDOWS,
        |i| json!({"start": i % 24, "end": (i + 1) % 24}),
    );
    c.spec(
        "spec.scaleTargetRefs alone",
        json!({"scaleTargetRefs": [web]}),
        Refuse,
    );
    c.int("/windows/0/replicas", MIN_REPLICAS.into(), MAX_INT32.into());
    c.int("/outsideReplicas", MIN_REPLICAS.into(), MAX_INT32.into());
    c.items("/windows/0/days", sc::MIN_DAYS, sc::MAX_DAYS, |i| {
        json!(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"][i % 7])
    });
    c.set("/windows/0/days", json!(["Mon", "Mon"]), Refuse);
    c.set("/windows/0/days", json!(["Funday"]), Refuse);
    c.set("/windows/0/days", json!(["mon"]), Refuse);
    c.strings("/timeZone", &["Europe/Berlin", "UTC"], Accept);
    c.strings("/timeZone", &["", "Mars/Olympus"], Refuse);
    c.set(
        "/timeZone",
        json!("x".repeat(sc::MAX_TIME_ZONE + 1)),
        Refuse,
    );
    c.set("/suspend", json!(true), Accept);
    c.set("/suspend", json!("yes"), Refuse);
    c.strings("/hpaCooperation", &["Enabled", "Disabled"], Accept);
    c.strings("/hpaCooperation", &["enabled", "Off"], Refuse);
    c.items("/excludeDates", 0, sc::MAX_EXCLUDE_DATES, |i| {
        json!(format!("--{:02}-{:02}", i / 28 % 12 + 1, i % 28 + 1))
    });
    for date in ["2026-12-24", "2026-12-24..2026-12-26", "--02-29"] {
        c.set("/excludeDates", json!([date]), Accept);
    }
    c.set(
        "/override",
        json!({"replicas": 2, "until": "2099-01-01T00:00:00Z"}),
        Accept,
    );
    c.set(
        "/override",
        json!({"replicas": -1, "until": "2099-01-01T00:00:00Z"}),
        Refuse,
    );
    c.set("/override", json!({"replicas": 2}), Refuse);
    c.set(
        "/override",
        json!({"replicas": 2, "until": "tomorrow"}),
        Refuse,
    );
    c.spec(
        "spec.jobs with spec.windows",
        with(&window, "/jobs", cron["jobs"].clone()),
        Refuse,
    );
    c.base = cron;
    c.items(
        "/jobs",
        sc::MIN_JOBS,
        sc::MAX_JOBS,
        |i| json!({"name": format!("j{i}"), "schedule": "@hourly", "replicas": 1}),
    );
    c.set(
        "/jobs",
        json!([{"name": "a", "schedule": "@daily", "replicas": 1}, {"name": "a", "schedule": "@hourly", "replicas": 2}]),
        Refuse,
    );
    c.set("/jobs/0", json!({"name": "a", "replicas": 1}), Refuse);
    c.length("/jobs/0/name", 1, sc::MAX_JOB_NAME, letters('j'));
    c.length("/jobs/0/schedule", 1, sc::MAX_SCHEDULE, |n| {
        // "0,0,…,0 9 * * *": a valid cron expression of exactly n characters.
        if n < 9 {
            return "*".repeat(n);
        }
        let tail = if n % 2 == 0 { " 09 * * *" } else { " 9 * * *" };
        // n - tail.len() is odd either way: "0," repeated, then "0".
        let s = format!("{}0", "0,".repeat((n - tail.len()) / 2));
        format!("{s}{tail}")
    });
    c.strings(
        "/jobs/0/schedule",
        &["0 9 * * 1-5", "@weekly", "*/15 * * * *"],
        Accept,
    );
    c.strings("/jobs/0/schedule", &["not cron", "0 0 30 2 *"], Refuse);
    c.int("/jobs/0/replicas", MIN_REPLICAS.into(), MAX_INT32.into());
    c.all
}

fn welcome_cases() -> Vec<Case> {
    let base = json!({"name": "kubesteer"});
    let mut c = Cases::new(Kind::Welcome, base.clone());
    c.spec("a name", base.clone(), Accept);
    c.spec(
        "every field",
        json!({"name": "kubesteer", "userID": 1000, "groups": ["dev", "ops"],
               "email": "a@example.com", "passwordSecretRef": {"name": "creds", "key": "password"},
               "replicas": 2, "port": 8080, "serviceType": "ClusterIP", "image": "registry.example.com/echo:1"}),
        Accept,
    );
    c.spec("spec.name missing", json!({"replicas": 1}), Refuse);
    c.length("/name", wl::MIN_NAME, wl::MAX_NAME, letters('x'));
    // Characters, not bytes, on both sides.
    c.set("/name", json!("é".repeat(wl::MAX_NAME)), Accept);
    c.set("/name", json!("é".repeat(wl::MAX_NAME + 1)), Refuse);
    c.int("/userID", wl::MIN_USER_ID.into(), wl::MAX_USER_ID.into());
    c.items("/groups", 0, wl::MAX_GROUPS, |i| json!(format!("g{i}")));
    c.set("/groups", json!(["a", "a"]), Refuse);
    c.set("/groups", json!([]), Accept);
    c.base = with(&base, "/groups", json!(["dev"]));
    c.length("/groups/0", wl::MIN_GROUP, wl::MAX_GROUP, letters('g'));
    c.base = base.clone();
    c.set("/email", json!(email(wl::MAX_EMAIL)), Accept);
    c.set("/email", json!(email(wl::MAX_EMAIL + 1)), Refuse);
    c.strings(
        "/email",
        &["first.last+tag@sub.example.com", "a@b.io"],
        Accept,
    );
    c.strings(
        "/email",
        &[
            "not-an-email",
            "a@b",
            "a b@c.io",
            "@b.io",
            "a@-b.io",
            "a@b..io",
            "a@b@c.io",
            "",
        ],
        Refuse,
    );
    c.set("/email", json!(format!("{}@b.io", "a".repeat(65))), Refuse);
    c.length(
        "/password",
        wl::MIN_PASSWORD,
        wl::MAX_PASSWORD,
        letters('p'),
    );
    c.spec(
        "spec.password with spec.passwordSecretRef",
        json!({"name": "x", "password": "hunter2", "passwordSecretRef": {"name": "creds", "key": "pw"}}),
        Refuse,
    );
    c.base =
        json!({"name": "kubesteer", "passwordSecretRef": {"name": "creds", "key": "password"}});
    c.length("/passwordSecretRef/name", 1, MAX_SUBDOMAIN, letters('s'));
    c.strings(
        "/passwordSecretRef/name",
        &["Creds", "creds_1", "-c"],
        Refuse,
    );
    c.length("/passwordSecretRef/key", 1, MAX_SUBDOMAIN, letters('k'));
    c.strings("/passwordSecretRef/key", &["a/b", "a b", "ключ"], Refuse);
    c.strings("/passwordSecretRef/key", &["pass.word_1-X"], Accept);
    c.set("/passwordSecretRef", json!({"name": "creds"}), Refuse);
    c.base = base;
    c.int("/replicas", MIN_REPLICAS.into(), wl::MAX_REPLICAS.into());
    c.int("/port", MIN_PORT.into(), MAX_PORT.into());
    c.strings(
        "/serviceType",
        &["NodePort", "ClusterIP", "LoadBalancer"],
        Accept,
    );
    c.strings("/serviceType", &["Internal", "nodeport", ""], Refuse);
    image_cases(&mut c);
    c.all
}

fn image_cases(c: &mut Cases) {
    c.length("/image", 1, MAX_IMAGE, image);
    c.strings(
        "/image",
        &[
            "a b",
            "a\tb",
            " a",
            "a\u{7}",
            "Nginx",
            "a:tag:x",
            "a//b",
            "a@sha256:00ff",
        ],
        Refuse,
    );
    let digest = format!("sha256:{}", "00ff".repeat(16));
    c.strings(
        "/image",
        &[
            &format!("registry.example.com:5000/team/app:1.2@{digest}"),
            "localhost/app_x:v1",
        ],
        Accept,
    );
}

fn memcached_cases() -> Vec<Case> {
    let mut c = Cases::new(Kind::Memcached, json!({}));
    c.spec("an empty spec", json!({}), Accept);
    c.int("/size", MIN_REPLICAS.into(), mc::MAX_SIZE.into());
    c.int("/port", MIN_PORT.into(), MAX_PORT.into());
    c.int(
        "/memoryMB",
        mc::MIN_MEMORY_MB.into(),
        mc::MAX_MEMORY_MB.into(),
    );
    image_cases(&mut c);
    c.set("/resources", json!("lots"), Refuse);
    c.set(
        "/resources",
        json!({"requests": {"cpu": "250m", "memory": "64Mi"}}),
        Accept,
    );
    c.set("/resources/requests", json!(["cpu"]), Refuse);
    c.set("/resources/requests/cpu", json!(1), Accept);
    c.set("/resources/requests/cpu", json!(0.5), Refuse);
    c.set("/resources/limits/memory", json!("1e3"), Accept);
    c.strings(
        "/resources/limits/memory",
        &["lots", "1 Gi", "64MiB", ""],
        Refuse,
    );
    c.all
}

fn application_cases() -> Vec<Case> {
    let base = json!({"image": "nginx", "ingress": {"host": "example.foo.com"}, "env": [{"name": "A", "value": "1"}]});
    let mut c = Cases::new(Kind::Application, base.clone());
    c.spec("the tutorial's spec", base, Accept);
    c.spec("no image", json!({"replicas": 1}), Refuse);
    c.int("/replicas", MIN_REPLICAS.into(), app::MAX_REPLICAS.into());
    c.int("/port", MIN_PORT.into(), MAX_PORT.into());
    c.int("/servicePort", MIN_PORT.into(), MAX_PORT.into());
    image_cases(&mut c);
    c.length("/ingress/host", 1, MAX_SUBDOMAIN, subdomain);
    c.strings(
        "/ingress/host",
        &["*.foo.com", "a", "xn--bcher-kva.example"],
        Accept,
    );
    c.strings(
        "/ingress/host",
        &[
            "Example.com",
            "*",
            "a.*.com",
            "a_b.com",
            "-a.com",
            "a..b",
            "10.0.0.1",
        ],
        Refuse,
    );
    c.strings("/ingress/path", &["/", "/shop/cart", "/a%20b"], Accept);
    c.strings(
        "/ingress/path",
        &["shop", "/a b", "", "/a;b", "/{x}", "/a$", "/a\"b"],
        Refuse,
    );
    let path = |n: usize| json!(format!("/{}", "p".repeat(n - 1)));
    c.set("/ingress/path", path(app::MAX_PATH), Accept);
    c.set("/ingress/path", path(app::MAX_PATH + 1), Refuse);
    c.strings(
        "/ingress/pathType",
        &["Prefix", "Exact", "ImplementationSpecific"],
        Accept,
    );
    c.strings("/ingress/pathType", &["prefix", "Regex"], Refuse);
    c.strings("/ingress/className", &["nginx", "a.b-c"], Accept);
    c.strings("/ingress/className", &["Nginx", "a_b", ""], Refuse);
    c.set("/ingress/tls", json!({"secretName": "site-tls"}), Accept);
    c.set("/ingress/tls", json!({}), Refuse);
    c.strings("/ingress/tls/secretName", &["Bad_Name", ""], Refuse);
    c.items(
        "/env",
        0,
        app::MAX_ENV,
        |i| json!({"name": format!("V{i}"), "value": "x"}),
    );
    c.strings("/env/0/name", &["with space", "a.b-c_d", "$HOME"], Accept);
    c.strings("/env/0/name", &["A=B", "", "ünïcode", " lead"], Refuse);
    c.set(
        "/env/0/valueFrom",
        json!({"fieldRef": {"fieldPath": "metadata.name"}}),
        Refuse,
    );
    for (what, from, want) in [
        (
            "a Secret",
            json!({"secretKeyRef": {"name": "db", "key": "pw"}}),
            Accept,
        ),
        ("no source", json!({}), Refuse),
        (
            "two sources",
            json!({"fieldRef": {"fieldPath": "metadata.name"}, "configMapKeyRef": {"name": "c", "key": "k"}}),
            Refuse,
        ),
        (
            "a file",
            json!({"fileKeyRef": {"path": "a", "key": "k", "volumeName": "v"}}),
            Refuse,
        ),
    ] {
        let spec = json!({"image": "nginx", "env": [{"name": "A", "valueFrom": from}]});
        c.spec(&format!("an env var from {what}"), spec, want);
    }
    c.set("/resources/requests/cpu", json!("250m"), Accept);
    c.set("/resources/requests/cpu", json!("lots"), Refuse);
    c.all
}

/// Every case, each kind also without a spec and with a spec that is no object.
fn cases() -> Vec<Case> {
    let mut all = scaler_cases();
    all.extend(welcome_cases());
    all.extend(memcached_cases());
    all.extend(application_cases());
    for kind in ALL {
        let mut c = Cases::new(kind, Value::Null);
        c.push("spec missing".into(), None, Refuse);
        c.spec("spec = \"x\"", json!("x"), Refuse);
        c.spec("spec = []", json!([]), Refuse);
        all.extend(c.all);
    }
    all
}

/// Whether `message` names `field`, a field above it (but not the whole spec) or one below it.
fn names(message: &str, field: &str) -> bool {
    let mut above = Vec::new();
    for (i, c) in field.char_indices().skip("spec".len() + 1) {
        if c == '.' || c == '[' {
            above.push(&field[..i]);
        }
    }
    above.push(field);
    above.iter().any(|f| message.contains(f))
}

/// What api/ decides, as the webhook runs it: defaults, then validation.
fn api_verdict(kind: Kind, object: &Value) -> (Verdict, String) {
    let checked = kind
        .defaulted(object)
        .and_then(|defaulted| kind.validate(&defaulted, chrono::Utc::now()));
    match checked {
        Ok(_) => (Accept, String::new()),
        Err(errors) => (
            Refuse,
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

/// What the apiserver decides: a server-side dry-run create.
fn server_verdict(object: &Value) -> Result<(Verdict, String)> {
    let run = kubectl(
        &["create", "--dry-run=server", "-o", "name", "-f", "-"],
        Some(&object.to_string()),
    )?;
    if run.ok {
        return Ok((Accept, String::new()));
    }
    let message = run.stderr.trim().to_string();
    if message.contains("admission webhook") {
        bail!("an admission webhook answered, so the schema was not judged alone: {message}");
    }
    if message.contains(" is invalid") || message.contains("BadRequest") {
        return Ok((Refuse, message));
    }
    bail!("the dry-run create failed for another reason: {message}")
}

/// Whether a label selector (absent or empty: everything) selects `labels`.
fn selects(selector: &Value, labels: &Map<String, Value>) -> bool {
    let labels_match = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_match = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let value = e["key"].as_str().and_then(|k| labels.get(k));
            let listed = |v: &Value| {
                e["values"]
                    .as_array()
                    .is_some_and(|values| values.contains(v))
            };
            match e["operator"].as_str() {
                Some("In") => value.is_some_and(listed),
                Some("NotIn") => !value.is_some_and(listed),
                Some("Exists") => value.is_some(),
                Some("DoesNotExist") => value.is_none(),
                _ => true,
            }
        });
    labels_match && expressions_match
}

/// The admission webhooks that would see a kubesteer object created in `namespace`.
fn webhooks_selecting(namespace: &str) -> Result<Vec<String>> {
    let ns: Value = serde_json::from_str(&kubectl_ok(
        &["get", "namespace", namespace, "-o", "json"],
        None,
    )?)?;
    let labels = ns["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let configs: Value = serde_json::from_str(&kubectl_ok(
        &[
            "get",
            "mutatingwebhookconfigurations,validatingwebhookconfigurations",
            "-o",
            "json",
        ],
        None,
    )?)?;
    let mut found = Vec::new();
    for config in configs["items"].as_array().into_iter().flatten() {
        for hook in config["webhooks"].as_array().into_iter().flatten() {
            let covers = hook["rules"].as_array().into_iter().flatten().any(|r| {
                r["apiGroups"].as_array().into_iter().flatten().any(|g| {
                    g.as_str()
                        .is_some_and(|g| g == kubesteer_api::GROUP || g == "*")
                })
            });
            if covers
                && selects(&hook["namespaceSelector"], &labels)
                && selects(&hook["objectSelector"], &Map::new())
            {
                found.push(format!(
                    "{} {}: {}",
                    config["kind"].as_str().unwrap_or("webhook configuration"),
                    config["metadata"]["name"].as_str().unwrap_or_default(),
                    hook["name"].as_str().unwrap_or_default()
                ));
            }
        }
    }
    Ok(found)
}

fn expect_no_webhook(namespace: &str, when: &str) -> Result<()> {
    let hooks = webhooks_selecting(namespace)?;
    if !hooks.is_empty() {
        bail!(
            "{when}, admission webhooks select namespace {namespace}, so the schema cannot be judged alone: {hooks:?}; \
             run this test on a cluster without a kubesteer install that selects every namespace"
        );
    }
    Ok(())
}

/// The committed CRDs, applied; true when the cluster's differed (their generation moved).
fn install_committed_crds() -> Result<bool> {
    let generations = || -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for kind in ALL {
            let crd = format!("{}.{}", kind.plural(), kubesteer_api::GROUP);
            let run = kubectl(
                &["get", "crd", &crd, "-o", "jsonpath={.metadata.generation}"],
                None,
            )?;
            out.insert(crd, run.stdout);
        }
        Ok(out)
    };
    let before = generations()?;
    kubesteer_tests::install_crds()?;
    Ok(generations()? != before)
}

/// Every disagreement, one line each.
fn disagreements(cases: &[Case], namespace: &str) -> Result<Vec<String>> {
    let objects: Vec<Value> = cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            let mut object = json!({
                "apiVersion": format!("{}/{}", kubesteer_api::GROUP, case.kind.version()),
                "kind": case.kind.name(),
                "metadata": {"name": format!("{}-{i}", case.kind.name().to_lowercase()), "namespace": namespace},
            });
            if let Some(spec) = &case.spec {
                object["spec"] = spec.clone();
            }
            object
        })
        .collect();
    // Four kubectl processes at a time; each case is one dry-run create.
    let verdicts: Vec<Result<(Verdict, String)>> = std::thread::scope(|s| {
        let chunks: Vec<_> = objects
            .chunks(objects.len().div_ceil(4))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|object| {
                            // The webhook would have defaulted the object before the schema saw it.
                            let kind = ALL
                                .into_iter()
                                .find(|k| object["kind"] == k.name())
                                .context("kind")?;
                            let defaulted =
                                kind.defaulted(object).unwrap_or_else(|_| object.clone());
                            server_verdict(&defaulted)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        chunks
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec![Err(anyhow::anyhow!("a worker panicked"))])
            })
            .collect()
    });
    let mut failures = Vec::new();
    for ((case, object), server) in cases.iter().zip(&objects).zip(verdicts) {
        let (server, server_says) = server?;
        let (api, api_says) = api_verdict(case.kind, object);
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let on_purpose = ON_PURPOSE.iter().find(|(what, _)| *what == case.what);
        let describe = |v: Verdict, says: &str| match v {
            Accept => "accepts".to_string(),
            Refuse => format!("refuses ({says})"),
        };
        if let Some((_, reason)) = on_purpose {
            if (api, server) != (Refuse, Accept) {
                failures.push(format!(
                    "{name}: {}: listed as refused by api/ alone ({reason}), but the apiserver {} and api/ {}",
                    case.what,
                    describe(server, &server_says),
                    describe(api, &api_says)
                ));
            }
        } else if api != server {
            failures.push(format!(
                "{name}: {}: the apiserver {} but api/ {}",
                case.what,
                describe(server, &server_says),
                describe(api, &api_says)
            ));
        } else if let Some(field) = case.names.as_deref().filter(|_| api == Refuse) {
            for (judge, says) in [("the apiserver", &server_says), ("api/", &api_says)] {
                if !names(says, field) {
                    failures.push(format!(
                        "{name}: {}: {judge} refuses without naming {field}: {says}",
                        case.what
                    ));
                }
            }
        }
        if on_purpose.is_none() && api == server && api != case.want {
            failures.push(format!(
                "{name}: {}: both {} but the case expects {:?}",
                case.what,
                describe(api, &api_says),
                case.want
            ));
        }
    }
    Ok(failures)
}

#[test]
fn the_crd_schema_and_api_validation_agree() -> Result<()> {
    let cases = cases();
    let mut seen = std::collections::BTreeSet::new();
    for case in &cases {
        assert!(seen.insert(&case.what), "two cases are {:?}", case.what);
    }
    for kind in ALL {
        for want in [Accept, Refuse] {
            assert!(
                cases
                    .iter()
                    .filter(|c| c.kind == kind && c.want == want)
                    .count()
                    >= 3,
                "{kind:?} needs cases that expect {want:?}"
            );
        }
    }
    for (what, _) in ON_PURPOSE {
        assert!(
            cases.iter().any(|c| c.what == *what),
            "ON_PURPOSE lists {what:?}, which is no case"
        );
    }

    let ns = Namespace::new("agreement")?;
    let changed = install_committed_crds()?;
    expect_no_webhook(ns.name(), "before the comparison")?;
    // Right after a CRD update the apiserver may judge by the old schema for a moment: then the
    // comparison is repeated until it agrees, for at most 30 s. Unchanged CRDs get one run.
    let deadline = Instant::now() + Duration::from_secs(30);
    let failures = loop {
        let failures = disagreements(&cases, ns.name())?;
        if failures.is_empty() || !changed || Instant::now() > deadline {
            break failures;
        }
    };
    expect_no_webhook(ns.name(), "after the comparison")?;
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!(
        "{} cases agree ({} accepted, {} refused; {} refused by api/ alone on purpose)",
        cases.len(),
        cases.iter().filter(|c| c.want == Accept).count(),
        cases.iter().filter(|c| c.want == Refuse).count(),
        ON_PURPOSE.len()
    );
    Ok(())
}

#[test]
fn a_refusal_names_the_field_itself_one_above_or_one_below() {
    assert_eq!(field("/deployments/0/name"), "spec.deployments[0].name");
    let field = "spec.resources.requests.cpu";
    assert!(names("spec.resources.requests.cpu: Invalid value", field));
    assert!(names("spec.resources: Invalid value", field));
    assert!(names("spec.resources.requests.cpu.x: Invalid value", field));
    assert!(
        !names("spec: Invalid value", field),
        "the whole spec names no field"
    );
    assert!(!names("spec.image: Invalid value", field));
    assert!(names(
        "spec.jobs[0]: missing field",
        "spec.jobs[0].schedule"
    ));
}

#[test]
fn generated_values_have_the_length_they_claim() {
    for n in [wl::MAX_EMAIL, wl::MAX_EMAIL + 1, 130] {
        let address = email(n);
        assert_eq!(address.chars().count(), n);
        assert!(wl::EMAIL.is_match(&address), "{address}");
    }
    let spec = with(&json!({"a": [{"b": 1}]}), "/a/0/c/d", json!(2));
    assert_eq!(spec, json!({"a": [{"b": 1, "c": {"d": 2}}]}));
}
