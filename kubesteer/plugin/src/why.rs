//! `why KIND/NAME`: which Scaler claims a workload and which were refused, its current, desired
//! and original replicas, its HPA, the next changes and the last events, on one screen.
use std::fmt::Write as _;

use chrono_tz::Tz;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use kubesteer_api::keys::reason;
use kubesteer_api::scaler::claims::{ClaimIndex, Claimant};
use kubesteer_api::scaler::scaler_id;
use kubesteer_api::scaler::schedule::Instant;
use kubesteer_api::scaler::target::Target;
use kubesteer_api::Scaler;

use crate::cluster::{events, look, ready_of, Connection};
use crate::table::{age, table};
use crate::text::replicas_words;
use crate::week::local_time;
use crate::{Error, Result};

/// How many events are shown.
const EVENTS: usize = 8;

/// A kind as typed: `deployment`, `deploy`, `sts`, `StatefulSet.apps`, `rollouts.argoproj.io`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindQuery {
    /// Lower case, singular or plural.
    kind: String,
    group: Option<String>,
}

impl KindQuery {
    pub fn parse(text: &str) -> Self {
        let lower = text.to_ascii_lowercase();
        let (kind, group) = match lower.split_once('.') {
            Some((k, g)) => (k.to_string(), Some(g.to_string())),
            None => (lower, None),
        };
        let alias = match kind.as_str() {
            "deploy" | "deployments" => Some(("deployment", "apps")),
            "sts" | "statefulsets" => Some(("statefulset", "apps")),
            "rs" | "replicasets" => Some(("replicaset", "apps")),
            "deployment" | "statefulset" | "replicaset" => Some((kind.as_str(), "apps")),
            _ => None,
        };
        match alias {
            Some((k, g)) => Self {
                kind: k.to_string(),
                group: Some(group.unwrap_or_else(|| g.to_string())),
            },
            None => Self { kind, group },
        }
    }

    /// Whether a target of `group` and `kind` is what was asked for.
    pub fn matches(&self, group: &str, kind: &str) -> bool {
        let k = kind.to_ascii_lowercase();
        let kind_ok =
            self.kind == k || self.kind == format!("{k}s") || self.kind == format!("{k}es");
        kind_ok && self.group.as_deref().is_none_or(|g| g == group)
    }
}

/// What `why` says.
pub async fn why(connection: &Connection, object: &str, now: Instant) -> Result<String> {
    let Some((kind, name)) = object
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty())
    else {
        return Err(Error::Input(format!(
            "{object:?}: give KIND/NAME, e.g. deployment/web"
        )));
    };
    let query = KindQuery::parse(kind);
    let (client, namespace) = connection.connect().await?;
    let (scalers, partial) = all_scalers(&client, &namespace).await?;
    let mut index = ClaimIndex::default();
    for s in &scalers {
        index.upsert(s);
    }
    let claimed: Option<(Target, String)> = scalers.iter().find_map(|s| {
        let own = s.namespace().unwrap_or_default();
        let found = s.spec.targets(&own).find_map(|(t, ns)| {
            let target = t.target(ns);
            (target.namespace == namespace
                && target.name == name
                && query.matches(&target.group, &target.kind))
            .then(|| (target, t.api_version.clone()))
        });
        // A target its selector picked is listed in its status.
        let selected = || {
            s.status.iter().flat_map(|st| &st.targets).find_map(|t| {
                let target = Target::new(&t.api_version, &t.kind, &t.namespace, &t.name);
                (target.namespace == namespace
                    && target.name == name
                    && query.matches(&target.group, &target.kind))
                .then(|| (target, t.api_version.clone()))
            })
        };
        found.or_else(selected)
    });
    let mut out = String::new();
    let Some((target, api_version)) = claimed else {
        let _ = writeln!(
            out,
            "No Scaler{} names {kind}/{name} in namespace {namespace}: kubesteer leaves its replicas alone.",
            if partial { " in this namespace" } else { "" }
        );
        return Ok(out);
    };
    let _ = writeln!(out, "{target}");
    let claimants: Vec<Claimant> = index.claimants(&target).cloned().collect();
    let find = |c: &Claimant| {
        scalers.iter().find(|s| {
            s.namespace().as_deref() == Some(c.namespace.as_str()) && s.name_any() == c.name
        })
    };
    let owner = claimants.first().and_then(find);
    let mut field = |label: &str, value: String| {
        let _ = writeln!(out, "  {:<13} {value}", format!("{label}:"));
    };
    if let Some(owner) = owner {
        let id = scaler_id(&owner.namespace().unwrap_or_default(), &owner.name_any());
        let of = if claimants.len() > 1 {
            format!(
                " (the oldest of {} that claim it, so it owns it)",
                claimants.len()
            )
        } else {
            String::new()
        };
        field("Scaler", format!("{id}{of}"));
    }
    for other in claimants.iter().skip(1) {
        let why = find(other)
            .and_then(|s| {
                ready_of(
                    s.status
                        .as_ref()
                        .and_then(|st| serde_json::to_value(st).ok())
                        .as_ref(),
                )
            })
            .map(|(_, r, m)| format!("{r}: {m}"))
            .unwrap_or_else(|| "younger, so it leaves the target alone".to_string());
        field("Refused", format!("{}: {why}", other.id()));
    }
    let seen = look(&client, &api_version, &target).await;
    let current = match (&seen.error, seen.replicas) {
        (Some(e), _) => format!("unknown ({e})"),
        (None, Some(r)) => r.to_string(),
        (None, None) => "the object does not exist".to_string(),
    };
    let original = match &seen.original {
        Some((r, Some(by))) => {
            format!("{r} (recorded by {by}, given back when the Scaler lets go)")
        }
        Some((r, None)) => format!("{r} (recorded)"),
        None => "none recorded (the Scaler has not scaled it)".to_string(),
    };
    let Some(owner) = owner else {
        field("Replicas", current);
        return Ok(out);
    };
    let tz: Tz = owner.spec.time_zone().parse().unwrap_or(Tz::UTC);
    let owner_ns = owner.namespace().unwrap_or_default();
    let holidays = crate::cluster::holidays(&client, &owner_ns, &owner.spec, now).await?;
    let plan = owner
        .spec
        .schedule()
        .map(|s| s.with_holidays(&holidays).plan(now))
        .map_err(|errors| {
            Error::Input(kubesteer_api::field::summarize(
                "Scaler",
                &owner.name_any(),
                &errors,
            ))
        });
    let desired = match &plan {
        _ if owner.spec.suspend() => {
            "none: the Scaler is suspended and leaves it as it is".to_string()
        }
        Ok(p) if owner.spec.dry_run() => format!(
            "{} ({}; dry run: the Scaler only reports it and writes nothing)",
            replicas_words(p.replicas, owner.spec.outside_replicas),
            p.reason
        ),
        Ok(p) => format!(
            "{} ({})",
            replicas_words(p.replicas, owner.spec.outside_replicas),
            p.reason
        ),
        Err(e) => format!("none: {e}"),
    };
    field("Current", current);
    field("Desired", desired);
    field("Original", original);
    match &seen.hpa {
        Some(h) => {
            let now_at = h
                .current
                .map(|c| format!(", at {c} now"))
                .unwrap_or_default();
            field(
                "HPA",
                format!("{h}{now_at}: the Scaler sets its minReplicas"),
            );
        }
        None => field("HPA", "none".to_string()),
    }
    if let Some(o) = &owner.spec.override_ {
        if let Some(until) = chrono::DateTime::from_timestamp(o.until.0.as_second(), 0) {
            let left = (until - now).num_seconds();
            let state = if left > 0 {
                // To the minute: seconds would be stale by the time it is read.
                let minutes = (left.unsigned_abs() / 60).max(1) * 60;
                format!(
                    "in {}",
                    humantime::format_duration(std::time::Duration::from_secs(minutes))
                )
            } else {
                "over".to_string()
            };
            field(
                "Override",
                format!(
                    "{} replicas until {} ({}, {state})",
                    o.replicas,
                    local_time(tz, until),
                    crate::when::rfc3339(until)
                ),
            );
        }
    }
    let status = owner
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok());
    if let Some((s, r, m)) = ready_of(status.as_ref()) {
        field("Ready", format!("{s} {r}: {m}"));
    }
    if let Ok(p) = &plan {
        let mut first = true;
        for t in &p.next {
            let label = if first { "Next" } else { "" };
            first = false;
            let after = owner
                .spec
                .plan(t.at)
                .map(|q| q.reason)
                .unwrap_or(reason::WINDOW_CLOSED);
            let _ = writeln!(
                out,
                "  {:<13} {}  {} ({after})",
                if label.is_empty() {
                    String::new()
                } else {
                    format!("{label}:")
                },
                local_time(tz, t.at),
                replicas_words(t.replicas, owner.spec.outside_replicas)
            );
        }
    }
    let mut happened = events(&client, &target.namespace, &target.kind, &target.name).await?;
    happened.extend(
        events(
            &client,
            &owner.namespace().unwrap_or_default(),
            "Scaler",
            &owner.name_any(),
        )
        .await?,
    );
    happened.sort_by_key(|h| h.at);
    let last: Vec<Vec<String>> = happened
        .iter()
        .rev()
        .take(EVENTS)
        .rev()
        .map(|h| {
            vec![
                h.at.map(|at| age((now - at).num_seconds()))
                    .unwrap_or_else(|| "-".into()),
                h.type_.clone(),
                h.reason.clone(),
                h.object.clone(),
                h.message.clone(),
            ]
        })
        .collect();
    let _ = writeln!(out);
    if last.is_empty() {
        let _ = writeln!(out, "No events.");
    } else {
        let _ = writeln!(out, "Events:");
        out.push_str(&table(
            &["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
            &last,
        ));
    }
    Ok(out)
}

/// Every Scaler the user may list: cluster-wide, else the namespace's (then `true`), since a
/// Scaler elsewhere may claim a target here.
async fn all_scalers(client: &Client, namespace: &str) -> Result<(Vec<Scaler>, bool)> {
    let all: Api<Scaler> = Api::all(client.clone());
    match all.list(&ListParams::default()).await {
        Ok(list) => Ok((list.items, false)),
        Err(e) if Error::is_code(&e, 403) => {
            let here: Api<Scaler> = Api::namespaced(client.clone(), namespace);
            Ok((here.list(&ListParams::default()).await?.items, true))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_matched_as_kubectl_users_type_them() {
        for typed in [
            "deployment",
            "deploy",
            "deployments",
            "Deployment",
            "deployment.apps",
        ] {
            assert!(
                KindQuery::parse(typed).matches("apps", "Deployment"),
                "{typed}"
            );
        }
        assert!(KindQuery::parse("sts").matches("apps", "StatefulSet"));
        assert!(!KindQuery::parse("sts").matches("apps", "Deployment"));
        assert!(KindQuery::parse("rollouts.argoproj.io").matches("argoproj.io", "Rollout"));
        assert!(!KindQuery::parse("deployment").matches("example.com", "Deployment"));
        assert!(KindQuery::parse("widget").matches("example.com", "Widget"));
    }
}
