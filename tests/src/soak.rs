//! The history of a fault soak (issue 63 item 1) and the checker that holds it to what kubesteer
//! promises. A soak writes one JSON object a line: each target's values before any Scaler touched
//! it, what its Scalers say it should be at from some moment on, every read of it, every fault
//! with its start and end, every write sent through the apiserver, and the moment every Scaler
//! was deleted. [`check`] then reports each broken promise with the lines that show it:
//!
//! - **converged**: a target read when no fault was active for [`Rules::grace`] before, and its
//!   expectation unchanged that long, is at what its Scalers say (its original when they say
//!   nothing);
//! - **record kept**: a target's recorded original (`kubesteer.io/original-replicas`) is always its
//!   original, and a target at a Scaler's replicas other than its own carries that record;
//! - **given back**: after every Scaler is deleted, every target is read at its original, and no
//!   object read then holds a kubesteer finalizer;
//! - **admissions**: a write refused or failed only while a fault that keeps the apiserver from
//!   the webhook was active, and a write that was admitted is stored.
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// How long after a fault, or after what a target should be at changed, the soak's checker
/// wants it there.
pub const GRACE_SECONDS: f64 = 20.0;
/// The short soak `make test` runs: faults for this long, over this many targets.
pub const SHORT_DURATION: std::time::Duration = std::time::Duration::from_secs(300);
pub const SHORT_TARGETS: usize = 40;
/// How long a paused kubelet, a degraded network or a flood lasts.
pub const FAULT_HELD: std::time::Duration = std::time::Duration::from_secs(12);
/// The pause before each fault, in seconds.
pub const FAULT_GAP_SECONDS: std::ops::RangeInclusive<u64> = 15..=35;
/// The clients a hostile-bodies fault runs.
pub const FLOOD_CLIENTS: usize = 16;

/// The soak's workload: targets per Scaler, minutes between a Scaler's windows (each open
/// for 1 minute up to one less than that), seconds between the actor's and the writer's
/// steps, and an override's length in seconds.
pub const GROUP_SIZE: std::ops::RangeInclusive<usize> = 4..=8;
pub const WINDOW_PERIOD_MINUTES: std::ops::RangeInclusive<i64> = 2..=3;
pub const ACTOR_PAUSE_SECONDS: std::ops::Range<u64> = 3..8;
pub const WRITER_PAUSE_SECONDS: std::ops::Range<u64> = 1..3;
pub const OVERRIDE_SECONDS: std::ops::RangeInclusive<i64> = 40..=90;

/// One line of a soak's history. Times are seconds since the soak started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A target's replicas before any Scaler touched it.
    Original {
        t: f64,
        target: String,
        replicas: i32,
    },
    /// What the target's Scalers say it should be at from `t` on; None: nothing (its own).
    Expect {
        t: f64,
        target: String,
        replicas: Option<i32>,
    },
    /// An object as read: a target's replicas and recorded original, or any object's
    /// finalizers (a Scaler's).
    Observed {
        t: f64,
        target: String,
        #[serde(default)]
        replicas: Option<i32>,
        #[serde(default)]
        recorded: Option<i32>,
        #[serde(default)]
        finalizers: Vec<String>,
    },
    /// A fault, active from `t` until `until`.
    Fault { t: f64, until: f64, kind: Fault },
    /// A write sent through the apiserver at `sent`, and what came of it at `t`.
    Write {
        t: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sent: Option<f64>,
        object: String,
        admitted: bool,
        /// Whether a read after it found it stored (None: not read).
        #[serde(default)]
        stored: Option<bool>,
        #[serde(default)]
        error: Option<String>,
    },
    /// Every Scaler deleted: the reads after this are the end state.
    End { t: f64 },
}

/// The faults a soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    ControllerLeaderKilled,
    WebhookPodKilled,
    ApiserverRestarted,
    EtcdRestarted,
    KubeletPaused,
    NetworkDelay,
    HostileBodies,
}

impl Fault {
    /// Whether, while active, the apiserver may fail a write: itself or etcd down, or the
    /// webhook Service without a ready endpoint (its pods killed, their node paused or cut off).
    pub fn may_fail_writes(self) -> bool {
        !matches!(self, Fault::ControllerLeaderKilled | Fault::HostileBodies)
    }

    /// Whether, while active, targets may lag behind their Scalers (every fault may).
    pub fn may_delay_targets(self) -> bool {
        let _ = self;
        true
    }
}

/// How the checker reads a history.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// How long after a fault, or after its expectation changed, a target must have converged.
    pub grace: f64,
}

/// A broken promise, with the history lines (1-based) that show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub rule: &'static str,
    pub message: String,
    pub lines: Vec<usize>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.lines.iter().map(usize::to_string).collect();
        write!(
            f,
            "{}: {} (history lines {})",
            self.rule,
            self.message,
            lines.join(", ")
        )
    }
}

/// Reads a history (one JSON event a line; blank lines skipped); an error names the line.
pub fn parse(text: &str) -> Result<Vec<(usize, Event)>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map(|e| (i + 1, e))
                .map_err(|e| format!("history line {}: {e}", i + 1))
        })
        .collect()
}

/// Every broken promise of `history`.
pub fn check(history: &[(usize, Event)], rules: Rules) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut originals: BTreeMap<&str, (usize, i32)> = BTreeMap::new();
    let mut expected: BTreeMap<&str, (usize, f64, Option<i32>)> = BTreeMap::new();
    // A fault may be written when it ends, after the reads it covers: all of them first.
    let faults: Vec<(usize, f64, f64, Fault)> = history
        .iter()
        .filter_map(|(line, event)| match event {
            Event::Fault { t, until, kind } => Some((*line, *t, *until, *kind)),
            _ => None,
        })
        .collect();
    let mut end: Option<(usize, f64)> = None;
    let mut seen_at_end: BTreeMap<&str, (usize, Option<i32>)> = BTreeMap::new();
    let fault_near = |from: f64, to: f64, pick: fn(Fault) -> bool| {
        faults
            .iter()
            .find(|(_, start, until, kind)| pick(*kind) && *start <= to && *until >= from)
            .map(|(line, ..)| *line)
    };
    for (line, event) in history {
        let line = *line;
        match event {
            Event::Original {
                target, replicas, ..
            } => {
                originals.insert(target, (line, *replicas));
            }
            Event::Expect {
                t,
                target,
                replicas,
            } => {
                expected.insert(target, (line, *t, *replicas));
            }
            Event::End { t } => end = Some((line, *t)),
            Event::Fault { .. } => {}
            Event::Write {
                t,
                sent,
                object,
                admitted,
                stored,
                error,
            } => {
                let from = sent.unwrap_or(*t);
                if !admitted && fault_near(from, *t, Fault::may_fail_writes).is_none() {
                    violations.push(Violation {
                        rule: "admissions",
                        message: format!(
                            "a write of {object} failed with no fault active: {}",
                            error.as_deref().unwrap_or("(no error)")
                        ),
                        lines: vec![line],
                    });
                }
                if *admitted && *stored == Some(false) {
                    violations.push(Violation {
                        rule: "admissions",
                        message: format!("an admitted write of {object} is not stored"),
                        lines: vec![line],
                    });
                }
            }
            Event::Observed {
                t,
                target,
                replicas,
                recorded,
                finalizers,
            } => {
                if let Some((end_line, _)) = end {
                    if let Some(kept) = finalizers.iter().find(|f| f.starts_with("kubesteer.io/")) {
                        violations.push(Violation {
                            rule: "given back",
                            message: format!(
                                "{target} still holds the finalizer {kept} after every Scaler was deleted"
                            ),
                            lines: vec![end_line, line],
                        });
                    }
                    seen_at_end.insert(target, (line, *replicas));
                    continue;
                }
                let Some(&(original_line, original)) = originals.get(target.as_str()) else {
                    continue;
                };
                if let Some(recorded) = recorded {
                    if *recorded != original {
                        violations.push(Violation {
                            rule: "record kept",
                            message: format!(
                                "{target}'s recorded original is {recorded}, its original {original}"
                            ),
                            lines: vec![original_line, line],
                        });
                    }
                }
                let Some(&(expect_line, since, wanted)) = expected.get(target.as_str()) else {
                    continue;
                };
                // A target is always read with its replicas (1 or 0 for the kinds that sleep).
                let Some(replicas) = replicas else {
                    violations.push(Violation {
                        rule: "converged",
                        message: format!("{target} read without replicas"),
                        lines: vec![line],
                    });
                    continue;
                };
                if let (None, Some(scaled)) = (recorded, wanted) {
                    if *replicas == scaled && scaled != original {
                        violations.push(Violation {
                            rule: "record kept",
                            message: format!(
                                "{target} is at its Scaler's {scaled} (its own: {original}) with no record of its original"
                            ),
                            lines: vec![original_line, expect_line, line],
                        });
                    }
                }
                let settled = *t - since >= rules.grace;
                let quiet = fault_near(*t - rules.grace, *t, Fault::may_delay_targets).is_none();
                let want = wanted.unwrap_or(original);
                if settled && quiet && *replicas != want {
                    violations.push(Violation {
                        rule: "converged",
                        message: format!(
                            "{target} read at {replicas} replicas, {:.0} s after its Scalers said {want}, with no fault for {:.0} s",
                            *t - since,
                            rules.grace
                        ),
                        lines: vec![expect_line, line],
                    });
                }
            }
        }
    }
    if let Some((end_line, _)) = end {
        for (target, &(original_line, original)) in &originals {
            match seen_at_end.get(target) {
                None => violations.push(Violation {
                    rule: "given back",
                    message: format!("{target} was not read after every Scaler was deleted"),
                    lines: vec![original_line, end_line],
                }),
                Some(&(line, replicas)) if replicas != Some(original) => {
                    violations.push(Violation {
                        rule: "given back",
                        message: format!(
                            "{target} ends at {} replicas, its original {original}",
                            replicas.map_or("no".to_string(), |r| r.to_string())
                        ),
                        lines: vec![original_line, end_line, line],
                    })
                }
                Some(_) => {}
            }
        }
    }
    violations
}

/// A soak's history as it is written: one [`Event`] a line, flushed as it goes (a soak stopped
/// by its deadline keeps what it saw), times counted from [`History::create`].
pub struct History {
    start: std::time::Instant,
    file: std::sync::Mutex<std::io::BufWriter<std::fs::File>>,
}

impl History {
    pub fn create(path: &std::path::Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        Ok(Self {
            start: std::time::Instant::now(),
            file: std::sync::Mutex::new(std::io::BufWriter::new(std::fs::File::create(path)?)),
        })
    }

    /// Seconds since the history began.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Appends `event`; a line that cannot be written fails the soak later, when the checker
    /// reads the history (a missing end, a missing original).
    pub fn record(&self, event: &Event) {
        use std::io::Write as _;
        let Ok(line) = serde_json::to_string(event) else {
            return;
        };
        if let Ok(mut file) = self.file.lock() {
            let _ = writeln!(file, "{line}");
            let _ = file.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules { grace: 30.0 };

    /// A clean soak of one target: its original 2, a Scaler at 0 from t=10, a leader killed at
    /// t=50-55, given back after the end.
    fn clean() -> Vec<Event> {
        let web = "team/Deployment/web".to_string();
        vec![
            Event::Original {
                t: 0.0,
                target: web.clone(),
                replicas: 2,
            },
            Event::Expect {
                t: 10.0,
                target: web.clone(),
                replicas: Some(0),
            },
            // Not converged yet, within its grace: no violation.
            Event::Observed {
                t: 12.0,
                target: web.clone(),
                replicas: Some(2),
                recorded: None,
                finalizers: vec![],
            },
            Event::Observed {
                t: 45.0,
                target: web.clone(),
                replicas: Some(0),
                recorded: Some(2),
                finalizers: vec![],
            },
            Event::Fault {
                t: 50.0,
                until: 55.0,
                kind: Fault::ControllerLeaderKilled,
            },
            Event::Write {
                t: 52.0,
                sent: None,
                object: "team/Memcached/cache".into(),
                admitted: true,
                stored: Some(true),
                error: None,
            },
            Event::Fault {
                t: 60.0,
                until: 70.0,
                kind: Fault::ApiserverRestarted,
            },
            Event::Write {
                t: 61.0,
                sent: None,
                object: "team/Welcome/hi".into(),
                admitted: false,
                stored: None,
                error: Some("connection refused".into()),
            },
            Event::End { t: 100.0 },
            Event::Observed {
                t: 110.0,
                target: web,
                replicas: Some(2),
                recorded: None,
                finalizers: vec![],
            },
            Event::Observed {
                t: 110.0,
                target: "team/Scaler/nightly".into(),
                replicas: None,
                recorded: None,
                finalizers: vec![],
            },
        ]
    }

    fn numbered(events: Vec<Event>) -> Vec<(usize, Event)> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, e)| (i + 1, e))
            .collect()
    }

    /// The violations of `events`, by rule.
    fn rules_broken(events: Vec<Event>) -> Vec<&'static str> {
        check(&numbered(events), RULES)
            .into_iter()
            .map(|v| v.rule)
            .collect()
    }

    #[test]
    fn a_clean_history_breaks_nothing_and_reads_back_from_its_lines() {
        let events = clean();
        assert_eq!(rules_broken(events.clone()), Vec::<&str>::new());
        let text: String = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        assert_eq!(parse(&text).unwrap(), numbered(events));
        assert!(parse("{\"event\": \"nope\"}")
            .unwrap_err()
            .starts_with("history line 1:"));
    }

    #[test]
    fn a_target_read_without_replicas_is_reported() {
        let mut events = clean();
        events[3] = Event::Observed {
            t: 45.0,
            target: "team/Deployment/web".into(),
            replicas: None,
            recorded: Some(2),
            finalizers: vec![],
        };
        assert_eq!(rules_broken(events), vec!["converged"]);
    }

    #[test]
    fn a_lost_original_is_reported_with_its_lines() {
        let mut events = clean();
        // At the Scaler's 0 with no record: the original is lost.
        events[3] = Event::Observed {
            t: 45.0,
            target: "team/Deployment/web".into(),
            replicas: Some(0),
            recorded: None,
            finalizers: vec![],
        };
        let found = check(&numbered(events.clone()), RULES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, "record kept");
        assert_eq!(found[0].lines, vec![1, 2, 4]);
        assert!(found[0].to_string().contains("no record of its original"));
        // A record overwritten by a value kubesteer set.
        events[3] = Event::Observed {
            t: 45.0,
            target: "team/Deployment/web".into(),
            replicas: Some(0),
            recorded: Some(0),
            finalizers: vec![],
        };
        assert_eq!(rules_broken(events), vec!["record kept"]);
    }

    #[test]
    fn a_wrong_replica_count_is_reported_once_settled_and_not_during_a_fault() {
        let mut events = clean();
        events[3] = Event::Observed {
            t: 45.0,
            target: "team/Deployment/web".into(),
            replicas: Some(1),
            recorded: Some(2),
            finalizers: vec![],
        };
        let found = check(&numbered(events.clone()), RULES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, "converged");
        assert!(found[0].message.contains("read at 1 replicas"), "{found:?}");
        // The same read during a fault (or within its grace after) is no violation.
        events.insert(
            3,
            Event::Fault {
                t: 30.0,
                until: 40.0,
                kind: Fault::EtcdRestarted,
            },
        );
        assert_eq!(rules_broken(events), Vec::<&str>::new());
    }

    #[test]
    fn a_stuck_finalizer_and_a_target_not_given_back_are_reported() {
        let mut events = clean();
        events[10] = Event::Observed {
            t: 110.0,
            target: "team/Scaler/nightly".into(),
            replicas: None,
            recorded: None,
            finalizers: vec!["kubesteer.io/restore-targets".into()],
        };
        events[9] = Event::Observed {
            t: 110.0,
            target: "team/Deployment/web".into(),
            replicas: Some(0),
            recorded: Some(2),
            finalizers: vec![],
        };
        let mut broken = rules_broken(events.clone());
        broken.sort_unstable();
        assert_eq!(broken, vec!["given back", "given back"]);
        // Not read at all after the end.
        events.remove(9);
        let found = check(&numbered(events), RULES);
        assert!(
            found.iter().any(|v| v
                .message
                .contains("was not read after every Scaler was deleted")),
            "{found:?}"
        );
    }

    #[test]
    fn a_write_refused_with_no_fault_or_admitted_and_lost_is_reported() {
        let mut events = clean();
        // The apiserver-restart fault gone: the failed write has no excuse.
        events.remove(6);
        let found = check(&numbered(events.clone()), RULES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, "admissions");
        assert!(found[0].message.contains("connection refused"));
        // A leader killed does not excuse a refused admission either.
        events[5] = Event::Write {
            t: 52.0,
            sent: None,
            object: "team/Memcached/cache".into(),
            admitted: true,
            stored: Some(false),
            error: None,
        };
        let found = check(&numbered(events), RULES);
        assert!(
            found.iter().any(|v| v.message.contains("is not stored")),
            "{found:?}"
        );
    }
}
