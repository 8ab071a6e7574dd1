//! `preview`: a Scaler's days as a picture, from a file (no cluster) or from the cluster (with
//! each target's replicas and HPA as they are now).
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

use chrono::NaiveDate;
use chrono_tz::Tz;
use kube::Client;
use kubesteer_api::field::summarize;
use kubesteer_api::scaler::schedule::Instant;
use kubesteer_api::scaler::target::Target;
use kubesteer_api::ScalerSpec;

use crate::cluster::{get_scaler, holidays, look, ready_of, scaler_name, Connection};
use crate::table::table;
use crate::text::{render, Paint};
use crate::week::{day_label, local_date, local_time, Week};
use crate::{Error, Result};
use kubesteer_api::scaler::calendar::Holiday;

/// How the picture is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Svg,
}

/// What to preview and how.
#[derive(Debug, Clone)]
pub struct Request {
    pub days: u32,
    pub from: Option<String>,
    pub output: Output,
    pub now: Instant,
}

/// The local date the picture starts on: `--from` read on the Scaler's clock, else today.
pub fn start_date(from: Option<&str>, tz: Tz, now: Instant) -> Result<NaiveDate> {
    match from {
        None => Ok(local_date(tz, now)),
        Some(text) => crate::when::parse(text, tz, now)
            .map(|at| local_date(tz, at))
            .map_err(|e| Error::Input(format!("--from: {e}"))),
    }
}

fn zone(spec: &ScalerSpec) -> Tz {
    spec.time_zone().parse().unwrap_or(Tz::UTC)
}

/// The picture of `spec` with its calendar's `holidays` as the request asks, headed by `what`
/// (`scaler/NAME -n NS`).
pub fn picture(
    spec: &ScalerSpec,
    holidays: &[Holiday],
    what: &str,
    request: &Request,
    paint: Paint,
) -> Result<String> {
    let tz = zone(spec);
    let from = start_date(request.from.as_deref(), tz, request.now)?;
    let week = Week::of(spec, holidays, from, request.days, request.now)
        .map_err(|errors| Error::Input(summarize("Scaler", what, &errors)))?;
    let days = week.rows.len();
    let title = format!(
        "{what} · {tz} · {days} day{} from {} {} · now {}",
        if days == 1 { "" } else { "s" },
        day_label(from),
        from.format("%Y"),
        local_time(tz, request.now)
    );
    Ok(match request.output {
        Output::Text => render(&week, &title, paint),
        Output::Svg => crate::svg::render(&week, &title),
    })
}

/// `preview -f FILE`: no cluster at all; the file is checked as the webhook would.
pub fn from_file(path: &Path, namespace: &str, request: &Request, paint: Paint) -> Result<String> {
    let source = path.display().to_string();
    let text = if source == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Error::Input(format!("reading stdin: {e}")))?;
        text
    } else {
        std::fs::read_to_string(path).map_err(|e| Error::Input(format!("{source}: {e}")))?
    };
    let scalers =
        crate::file::read(&text, &source, namespace, request.now).map_err(Error::Input)?;
    if request.output == Output::Svg && scalers.len() > 1 {
        return Err(Error::Input(format!(
            "{source} holds {} Scalers; an SVG shows one: give a file with one",
            scalers.len()
        )));
    }
    let mut out = String::new();
    for (i, s) in scalers.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let what = format!("scaler/{} -n {} ({source})", s.name, s.namespace);
        out.push_str(&picture(&s.spec, &[], &what, request, paint)?);
        if let (Some(c), Output::Text) = (&s.spec.exclude_calendar, request.output) {
            // No cluster here: the calendar's holidays are not in this picture.
            out.push_str(&format!(
                "(without the holidays of ConfigMap {}, spec.excludeCalendar: preview scaler/{} reads it from the cluster)\n",
                c.name, s.name
            ));
        }
    }
    Ok(out)
}

/// `preview scaler/NAME`: the picture, then the Scaler's Ready condition and each target now.
pub async fn live(
    connection: &Connection,
    scaler: &str,
    request: &Request,
    paint: Paint,
) -> Result<String> {
    let name = scaler_name(scaler)?;
    let (client, namespace) = connection.connect().await?;
    let scaler = get_scaler(&client, &namespace, &name).await?;
    let what = format!("scaler/{name} -n {namespace}");
    let holidays = holidays(&client, &namespace, &scaler.spec, request.now).await?;
    let mut out = picture(&scaler.spec, &holidays, &what, request, paint)?;
    if request.output == Output::Svg {
        return Ok(out);
    }
    out.push('\n');
    out.push_str(&targets_now(&client, &scaler, &namespace).await);
    Ok(out)
}

/// The Scaler's Ready condition and a table of its targets as they are now.
async fn targets_now(client: &Client, scaler: &kubesteer_api::Scaler, namespace: &str) -> String {
    let mut out = String::new();
    let status = scaler
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok());
    match ready_of(status.as_ref()) {
        Some((s, reason, message)) => {
            let _ = writeln!(out, "Ready: {s} ({reason}) {message}");
        }
        None => {
            let _ = writeln!(out, "Ready: not reported yet (is the controller running?)");
        }
    }
    let mut rows = Vec::new();
    let named = scaler
        .spec
        .targets(namespace)
        .map(|(target, ns)| (target.api_version.clone(), target.target(ns)));
    // And those its selector picked, as its status lists them.
    let selected = scaler.status.iter().flat_map(|s| &s.targets).map(|t| {
        (
            t.api_version.clone(),
            Target::new(&t.api_version, &t.kind, &t.namespace, &t.name),
        )
    });
    let mut seen_targets = std::collections::BTreeSet::new();
    for (api_version, t) in named.chain(selected) {
        if !seen_targets.insert(t.clone()) {
            continue;
        }
        let seen = look(client, &api_version, &t).await;
        let replicas = match (&seen.error, seen.replicas) {
            (Some(e), _) => format!("error: {e}"),
            (None, Some(r)) => r.to_string(),
            (None, None) => "not found".to_string(),
        };
        let original = seen
            .original
            .as_ref()
            .map(|(r, _)| r.clone())
            .unwrap_or_else(|| "-".to_string());
        let hpa = seen
            .hpa
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_else(|| "-".to_string());
        rows.push(vec![
            format!("{} {}/{}", t.kind, t.namespace, t.name),
            replicas,
            original,
            hpa,
        ]);
    }
    out.push_str(&table(&["TARGET", "REPLICAS", "ORIGINAL", "HPA"], &rows));
    out
}
