//! The writes: `override`, `suspend`, `resume`, `wake`. Each is the merge patch a user could
//! send with `kubectl patch --type=merge`, through the apiserver, so RBAC and the webhook judge it
//! exactly as they judge that; a refusal comes back with the apiserver's own message.
use std::fmt::Write as _;
use std::time::Duration;

use chrono::TimeDelta;
use chrono_tz::Tz;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use kubesteer_api::scaler::schedule::Instant;
use kubesteer_api::Scaler;
use serde_json::{json, Value};

use crate::cluster::{get_scaler, scaler_name, Connection};
use crate::table::table;
use crate::week::local_time;
use crate::when::rfc3339;
use crate::{Error, Result};

/// The field manager of the plugin's patches, as `kubectl get --show-managed-fields` shows it.
pub const FIELD_MANAGER: &str = "kubectl-kubesteer";

/// Until when an override holds.
#[derive(Debug, Clone)]
pub enum Until {
    For(Duration),
    At(String),
}

impl Until {
    /// The instant, on the Scaler's clock for local forms; whole seconds, as a Time keeps it.
    pub fn resolve(&self, tz: Tz, now: Instant) -> Result<Instant> {
        let at = match self {
            Until::For(d) => TimeDelta::from_std(*d)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .ok_or_else(|| {
                    Error::Input(format!(
                        "--for {}: too long",
                        humantime::format_duration(*d)
                    ))
                })?,
            Until::At(text) => crate::when::parse(text, tz, now)
                .map_err(|e| Error::Input(format!("--until: {e}")))?,
        };
        // Round up, so that "--for 2h" holds at least two hours.
        let secs = at.timestamp() + i64::from(at.timestamp_subsec_nanos() > 0);
        chrono::DateTime::from_timestamp(secs, 0)
            .ok_or_else(|| Error::Input("--until: out of range".into()))
    }
}

async fn patch(client: &Client, namespace: &str, name: &str, body: Value) -> Result<Scaler> {
    let api: Api<Scaler> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    Ok(api.patch(name, &params, &Patch::Merge(body)).await?)
}

/// The merge patch that sets an override.
pub fn override_patch(replicas: i32, until: Instant) -> Value {
    json!({"spec": {"override": {"replicas": replicas, "until": rfc3339(until)}}})
}

/// `override scaler/NAME --replicas N (--for D | --until T)`, or `--clear` (None).
pub async fn set_override(
    connection: &Connection,
    scaler: &str,
    hold: Option<(i32, Until)>,
    now: Instant,
) -> Result<String> {
    let name = scaler_name(scaler)?;
    let (client, namespace) = connection.connect().await?;
    let Some((replicas, until)) = hold else {
        patch(
            &client,
            &namespace,
            &name,
            json!({"spec": {"override": null}}),
        )
        .await?;
        return Ok(format!(
            "scaler.kubesteer.io/{name} override cleared: the schedule applies again\n"
        ));
    };
    let current = get_scaler(&client, &namespace, &name).await?;
    let tz: Tz = current.spec.time_zone().parse().unwrap_or(Tz::UTC);
    let until = until.resolve(tz, now)?;
    patch(&client, &namespace, &name, override_patch(replicas, until)).await?;
    Ok(format!(
        "scaler.kubesteer.io/{name} overridden: {replicas} replicas until {} ({})\n",
        local_time(tz, until),
        rfc3339(until)
    ))
}

/// `suspend` (true) or `resume` (false) `scaler/NAME`.
pub async fn suspend(connection: &Connection, scaler: &str, on: bool) -> Result<String> {
    let name = scaler_name(scaler)?;
    let (client, namespace) = connection.connect().await?;
    patch(&client, &namespace, &name, json!({"spec": {"suspend": on}})).await?;
    Ok(if on {
        format!("scaler.kubesteer.io/{name} suspended: its targets are left as they are\n")
    } else {
        format!("scaler.kubesteer.io/{name} resumed: the schedule applies again\n")
    })
}

/// The replicas a wake holds a Scaler's targets at, and why: at least what they had before the
/// Scaler scaled them, never less than they have now; when that is nothing (all at 0, none
/// recorded), the highest replicas its schedule sets next. None when there is nothing to go by.
pub fn wake_replicas(scaler: &Scaler, now: Instant) -> Option<(i32, &'static str)> {
    let targets = scaler.status.iter().flat_map(|s| &s.targets);
    let original = targets.clone().filter_map(|t| t.original_replicas).max();
    let current = targets.filter_map(|t| t.replicas).max();
    match (original, current) {
        (Some(o), c) if o > 0 && c.is_none_or(|c| o >= c) => Some((o, "original replicas")),
        (_, Some(c)) if c > 0 => Some((c, "current replicas")),
        _ => {
            let plan = scaler.spec.plan(now).ok()?;
            plan.next
                .iter()
                .filter_map(|t| t.replicas)
                .max()
                .filter(|&r| r > 0)
                .map(|r| (r, "the schedule's next replicas"))
        }
    }
}

/// What a wake does to one Scaler.
#[derive(Debug, PartialEq, Eq)]
pub enum WakeStep {
    /// Its override already holds at least the wake's replicas for at least as long: no write.
    Keep { replicas: i32, until: Instant },
    /// Set an override of `replicas` (for `why`); `replaces` is the override in force that this
    /// one takes the place of, when it would have held on after the wake: that part is lost.
    Set {
        replicas: i32,
        why: &'static str,
        replaces: Option<(i32, Instant)>,
    },
    /// Nothing to go by: no replicas recorded, current or scheduled.
    Skip,
}

/// What a wake until `until` does to `scaler` (see [`wake_replicas`]). An override in force that
/// holds as many replicas or more, as long or longer, is kept: a wake never shortens one. Any
/// other override in force is replaced; one that would have held on after the wake is named, as
/// it is gone once the wake ends.
pub fn wake_step(scaler: &Scaler, now: Instant, until: Instant) -> WakeStep {
    let held = scaler
        .spec
        .override_
        .as_ref()
        .and_then(|o| o.end().map(|end| (o.replicas, end)))
        .filter(|&(_, end)| end > now);
    match (held, wake_replicas(scaler, now)) {
        (Some((r, end)), wake) if end >= until && wake.is_none_or(|(w, _)| r >= w) => {
            WakeStep::Keep {
                replicas: r,
                until: end,
            }
        }
        (held, Some((replicas, why))) => WakeStep::Set {
            replicas,
            why,
            replaces: held.filter(|&(_, end)| end > until),
        },
        (_, None) => WakeStep::Skip,
    }
}

/// `wake -n NS --for D`: every Scaler of the namespace overridden at its targets' original
/// replicas for `hold` (see [`wake_step`]). One Scaler refused does not stop the others; the
/// result is then an error.
pub async fn wake(connection: &Connection, hold: Duration, now: Instant) -> Result<String> {
    let (client, namespace) = connection.connect().await?;
    let api: Api<Scaler> = Api::namespaced(client.clone(), &namespace);
    let scalers = api.list(&ListParams::default()).await?.items;
    if scalers.is_empty() {
        return Err(Error::Input(format!("no Scalers in namespace {namespace}")));
    }
    let until = Until::For(hold).resolve(chrono_tz::UTC, now)?;
    let mut rows = Vec::new();
    let mut replaced = Vec::new();
    let mut failures = Vec::new();
    for scaler in &scalers {
        let name = scaler.name_any();
        let tz: Tz = scaler.spec.time_zone().parse().unwrap_or(Tz::UTC);
        // REPLICAS, UNTIL and FROM of its row.
        let cells: [String; 3] = match wake_step(scaler, now, until) {
            WakeStep::Skip => [
                "-".into(),
                "-".into(),
                "skipped: no replicas recorded, current or scheduled to wake to".into(),
            ],
            WakeStep::Keep { replicas, until } => [
                replicas.to_string(),
                local_time(tz, until),
                "kept: its override already holds as many, as long".into(),
            ],
            WakeStep::Set {
                replicas,
                why,
                replaces,
            } => match patch(&client, &namespace, &name, override_patch(replicas, until)).await {
                Ok(_) => {
                    if let Some((r, end)) = replaces {
                        replaced.push((name.clone(), r, end, tz));
                    }
                    [replicas.to_string(), local_time(tz, until), why.to_string()]
                }
                Err(e) => {
                    failures.push(format!("scaler/{name}: {e}"));
                    [replicas.to_string(), "-".into(), "refused".into()]
                }
            },
        };
        let mut row = vec![format!("scaler/{name}")];
        row.extend(cells);
        rows.push(row);
    }
    let mut out = format!(
        "Woke namespace {namespace} until {} ({}):\n",
        local_time(chrono_tz::UTC, until),
        rfc3339(until)
    );
    out.push_str(&table(&["SCALER", "REPLICAS", "UNTIL", "FROM"], &rows));
    for (name, r, end, tz) in &replaced {
        let _ = writeln!(
            out,
            "scaler/{name}: replaced its override of {r} until {}; to set it again once the wake \
             ends: kubectl kubesteer override scaler/{name} -n {namespace} --replicas {r} --until {}",
            local_time(*tz, *end),
            rfc3339(*end)
        );
    }
    if failures.is_empty() {
        Ok(out)
    } else {
        let mut message = out;
        for f in &failures {
            let _ = writeln!(message, "{f}");
        }
        Err(Error::Client(message.trim_end().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn scaler(status: Value) -> Scaler {
        serde_json::from_value(json!({
            "apiVersion": "kubesteer.io/v1beta1", "kind": "Scaler",
            "metadata": {"name": "s", "namespace": "team"},
            "spec": {
                "scaleTargetRefs": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                "windows": [{"start": 9, "end": 17, "replicas": 4}],
                "outsideReplicas": 0
            },
            "status": status
        }))
        .unwrap_or_else(|_| Scaler::new("s", Default::default()))
    }

    fn target(replicas: Option<i32>, original: Option<i32>) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "team",
               "replicas": replicas, "originalReplicas": original})
    }

    #[test]
    fn a_wake_holds_at_least_the_original_and_never_less_than_now() {
        let now = Utc.with_ymd_and_hms(2026, 6, 1, 20, 0, 0).unwrap();
        // Scaled down at night: back to the recorded 3.
        let s = scaler(json!({"targets": [target(Some(0), Some(3))]}));
        assert_eq!(wake_replicas(&s, now), Some((3, "original replicas")));
        // Scaled up by day: kept where it is.
        let s = scaler(json!({"targets": [target(Some(4), Some(1))]}));
        assert_eq!(wake_replicas(&s, now), Some((4, "current replicas")));
        // At outsideReplicas 0, nothing recorded: the next window's 4.
        let s = scaler(json!({"targets": [target(Some(0), None)]}));
        assert_eq!(
            wake_replicas(&s, now),
            Some((4, "the schedule's next replicas"))
        );
    }

    fn overridden(mut s: Scaler, replicas: i32, until: &str) -> Scaler {
        s.spec.override_ = serde_json::from_value(json!({"replicas": replicas, "until": until}))
            .unwrap_or_else(|e| panic!("override: {e}"));
        s
    }

    #[test]
    fn a_wake_keeps_an_override_that_holds_as_many_as_long_and_names_one_it_cuts_short() {
        let now = Utc.with_ymd_and_hms(2026, 6, 1, 20, 0, 0).unwrap();
        let until = Utc.with_ymd_and_hms(2026, 6, 1, 22, 0, 0).unwrap();
        let awake = scaler(json!({"targets": [target(Some(6), Some(3))]}));
        // Overridden at 6 until midnight: a 2-hour wake at 6 would only shorten it.
        let s = overridden(awake.clone(), 6, "2026-06-02T00:00:00Z");
        let end = Utc.with_ymd_and_hms(2026, 6, 2, 0, 0, 0).unwrap();
        assert_eq!(
            wake_step(&s, now, until),
            WakeStep::Keep {
                replicas: 6,
                until: end
            }
        );
        // One that ends before the wake does: replaced, and nothing of it is lost.
        let s = overridden(awake.clone(), 6, "2026-06-01T21:00:00Z");
        assert_eq!(
            wake_step(&s, now, until),
            WakeStep::Set {
                replicas: 6,
                why: "current replicas",
                replaces: None
            }
        );
        // An override that has ended counts for nothing.
        let s = overridden(awake, 9, "2026-06-01T19:00:00Z");
        assert!(matches!(
            wake_step(&s, now, until),
            WakeStep::Set { replaces: None, .. }
        ));
        // Held at 0 over the holidays: the wake sets the original 3 and names the override it
        // cuts short.
        let asleep = scaler(json!({"targets": [target(Some(0), Some(3))]}));
        let s = overridden(asleep, 0, "2027-01-07T00:00:00Z");
        let holidays = Utc.with_ymd_and_hms(2027, 1, 7, 0, 0, 0).unwrap();
        assert_eq!(
            wake_step(&s, now, until),
            WakeStep::Set {
                replicas: 3,
                why: "original replicas",
                replaces: Some((0, holidays))
            }
        );
        // Nothing to wake to, but an override holding longer: kept, not skipped.
        let nothing = scaler(json!({"targets": [target(Some(0), None)]}));
        let mut s = overridden(nothing, 2, "2026-06-02T00:00:00Z");
        s.spec.windows = None;
        s.spec.outside_replicas = None;
        assert_eq!(wake_replicas(&s, now), None);
        assert!(matches!(
            wake_step(&s, now, until),
            WakeStep::Keep { replicas: 2, .. }
        ));
    }

    #[test]
    fn a_duration_rounds_up_to_whole_seconds() {
        let now =
            Utc.with_ymd_and_hms(2026, 6, 1, 20, 0, 0).unwrap() + TimeDelta::milliseconds(300);
        let until = Until::For(Duration::from_secs(7200)).resolve(chrono_tz::UTC, now);
        assert_eq!(
            until.ok(),
            Some(Utc.with_ymd_and_hms(2026, 6, 1, 22, 0, 1).unwrap())
        );
        assert_eq!(
            override_patch(2, Utc.with_ymd_and_hms(2026, 6, 1, 22, 0, 0).unwrap()),
            json!({"spec": {"override": {"replicas": 2, "until": "2026-06-01T22:00:00Z"}}})
        );
    }
}
