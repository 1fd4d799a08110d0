//! State preservation (docs/semantics.md §6.2, §10.3, §11): the labels an
//! eviction carries to the new placement. Each `statePreservation.rules[{aliasLabelName,
//! jsonPath}]` is evaluated against the evicted cluster's reported status
//! (`status.aggregatedStatus[].status` of that cluster, reflected through the interpreter) at
//! eviction time; the results go into the eviction task's `preservedLabelState`, and the binding
//! controller injects them into the new cluster's manifest (binding_works, §10.3). Cluster
//! failover (the taint manager) and application failover call the same [`preserve`], and the
//! failover wing's one effect path (`effects.rs`) makes the same [`report`] after each eviction.
//!
//! Flotilla's decisions, where Karmada is silent or silently wrong:
//! - A rule must give exactly **one** non-empty value that is a valid label value (≤63
//!   characters, `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`). Nothing, an empty string, several
//!   values (Karmada would join them with spaces, which no label value allows) or a value that
//!   is not a label value is a failed rule: that label is left out (never truncated or
//!   rewritten), the other rules' labels are kept.
//! - A failed rule never holds the eviction back: a workload on a failed cluster or an
//!   unhealthy application must not be kept there by a rule (Karmada's application failover
//!   retries instead, for ever if the rule never matches). It is never silent either: a Warning
//!   Event `StatePreservationFailed` per failed rule and the binding condition
//!   `StatePreserved=False` name the label, the rule and what went wrong.
//! - Numbers and booleans are printed as Kubernetes prints them (`2`, `2.5`, `true`); the
//!   template form `{ .a.b }` is Karmada's, and a brace-less `$.a.b` / `.a.b` is read as kubectl
//!   reads it.

use crate::events::{EventRecorder, EventType};
use crate::interpreter::jsonpath::{self, Evaluated, JsonPathError};
use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use flotilla_api::binding::ResourceBindingStatus;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::ResourceType;
use flotilla_api::meta::{set_condition, Condition, ConditionStatus};
use flotilla_api::names;
use flotilla_api::policy::{PurgeMode, StatePreservation};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The binding condition that tells how the last eviction's state preservation went.
pub const CONDITION_STATE_PRESERVED: &str = "StatePreserved";
/// Reason of `StatePreserved=True`: every rule gave its label.
pub const REASON_STATE_PRESERVED: &str = "StatePreserved";
/// Reason of `StatePreserved=False`, and of the Warning Event per failed rule.
pub const REASON_STATE_PRESERVATION_FAILED: &str = "StatePreservationFailed";

/// Why one rule gave no label.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleProblem {
    /// The evicted cluster never reported a status for the workload.
    #[error("the status of the workload on cluster {cluster} was never collected")]
    NotCollected {
        /// The evicted cluster.
        cluster: String,
    },
    /// The path matched nothing (a missing field, an empty list, an empty string).
    #[error("matched nothing ({detail})")]
    NoMatch {
        /// What was missing.
        detail: String,
    },
    /// The path matched several values; a label holds one.
    #[error("matched {count} values ({values}), a label holds one")]
    ManyMatches {
        /// How many.
        count: usize,
        /// The values, space-separated.
        values: String,
    },
    /// The value is not a valid label value.
    #[error("value {value:?} is not a valid label value: {reasons}")]
    InvalidLabelValue {
        /// The value the path gave.
        value: String,
        /// What label-value syntax says about it.
        reasons: String,
    },
    /// The jsonPath is plain text with no `{}` path in it: a constant, not state.
    #[error("has no path to evaluate (write it as {{.a.b}}, $.a.b or .a.b)")]
    NotAPath,
    /// The template does not evaluate (syntax, a list operation on a map, ...).
    #[error("cannot be evaluated")]
    Eval(#[source] JsonPathError),
}

impl RuleProblem {
    /// The problem with its cause, for Events and conditions.
    pub fn describe(&self) -> String {
        match self {
            RuleProblem::Eval(e) => format!("cannot be evaluated: {e}"),
            other => other.to_string(),
        }
    }
}

/// One rule that gave no label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleFailure {
    /// The rule's `aliasLabelName`.
    pub label: String,
    /// The rule's `jsonPath`.
    pub json_path: String,
    /// What went wrong.
    pub problem: RuleProblem,
}

impl RuleFailure {
    fn sentence(&self) -> String {
        format!(
            "label {} (jsonPath {:?}) {}",
            self.label,
            self.json_path,
            self.problem.describe()
        )
    }
}

/// What the rules gave for one evicted cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preservation {
    /// The evicted cluster.
    pub cluster: String,
    /// The labels to record in the task's `preservedLabelState`.
    pub labels: BTreeMap<String, String>,
    /// The rules that gave no label.
    pub failures: Vec<RuleFailure>,
}

/// One rule's label value from a reported status: exactly one non-empty valid label value.
pub fn extract(json_path: &str, status: &Value) -> Result<String, RuleProblem> {
    let template = jsonpath::relaxed(json_path);
    let pieces = jsonpath::eval_pieces(&template, status).map_err(|e| match e {
        JsonPathError::NotFound(_) | JsonPathError::OutOfBounds { .. } => RuleProblem::NoMatch {
            detail: e.to_string(),
        },
        other => RuleProblem::Eval(other),
    })?;
    if !pieces.iter().any(|p| matches!(p, Evaluated::Values(_))) {
        return Err(RuleProblem::NotAPath);
    }
    let mut value = String::new();
    for piece in pieces {
        match piece {
            Evaluated::Text(t) => value.push_str(&t),
            Evaluated::Values(values) => match values.as_slice() {
                [] => {
                    return Err(RuleProblem::NoMatch {
                        detail: "no value".to_string(),
                    })
                }
                [one] => value.push_str(one),
                many => {
                    return Err(RuleProblem::ManyMatches {
                        count: many.len(),
                        values: many.join(" "),
                    })
                }
            },
        }
    }
    if value.is_empty() {
        return Err(RuleProblem::NoMatch {
            detail: "an empty value".to_string(),
        });
    }
    let reasons = names::label_value(&value);
    if !reasons.is_empty() {
        return Err(RuleProblem::InvalidLabelValue {
            value,
            reasons: reasons.join("; "),
        });
    }
    Ok(value)
}

/// Evaluates `rules` against what `cluster` last reported in `status`; `None` when there are
/// no rules (nothing to preserve, nothing to report).
pub fn preserve(
    rules: Option<&StatePreservation>,
    status: &ResourceBindingStatus,
    cluster: &str,
) -> Option<Preservation> {
    let rules = rules.filter(|r| !r.rules.is_empty())?;
    let reported = status
        .aggregated_status
        .iter()
        .find(|i| i.cluster_name == cluster)
        .and_then(|i| i.status.as_ref());
    let mut out = Preservation {
        cluster: cluster.to_string(),
        ..Default::default()
    };
    for rule in &rules.rules {
        let result = match reported {
            None => Err(RuleProblem::NotCollected {
                cluster: cluster.to_string(),
            }),
            Some(s) => extract(&rule.json_path, s),
        };
        match result {
            Ok(v) => {
                out.labels.insert(rule.alias_label_name.clone(), v);
            }
            Err(problem) => out.failures.push(RuleFailure {
                label: rule.alias_label_name.clone(),
                json_path: rule.json_path.clone(),
                problem,
            }),
        }
    }
    Some(out)
}

/// The `StatePreserved` condition after an eviction from `p.cluster` with `purge_mode`.
pub fn condition(p: &Preservation, purge_mode: Option<PurgeMode>) -> Condition {
    let injection = match purge_mode {
        Some(m) if !m.is_immediate() => format!(
            "; purge mode {m}: the labels are recorded in the eviction task but injected only after an Immediately/Directly eviction"
        ),
        _ => String::new(),
    };
    let kept = if p.labels.is_empty() {
        "no label".to_string()
    } else {
        let names: Vec<&str> = p.labels.keys().map(String::as_str).collect();
        format!("labels {}", names.join(", "))
    };
    if p.failures.is_empty() {
        return Condition::new(
            CONDITION_STATE_PRESERVED,
            ConditionStatus::True,
            REASON_STATE_PRESERVED,
            &format!(
                "eviction from cluster {}: state preserved as {kept}{injection}",
                p.cluster
            ),
        );
    }
    let failed: Vec<String> = p.failures.iter().map(RuleFailure::sentence).collect();
    Condition::new(
        CONDITION_STATE_PRESERVED,
        ConditionStatus::False,
        REASON_STATE_PRESERVATION_FAILED,
        &format!(
            "eviction from cluster {}: {}; the workload moved without {}, state preserved as {kept}{injection}",
            p.cluster,
            failed.join("; "),
            if p.failures.len() == 1 { "that label" } else { "those labels" },
        ),
    )
}

/// Reports an eviction's state preservation on the binding (already written with its task):
/// a Warning Event per failed rule, and the `StatePreserved` condition in its status (a
/// conflicting status write is retried on a fresh read, a few times).
#[allow(clippy::too_many_arguments)]
pub async fn report(
    store: &dyn Store,
    events: &EventRecorder,
    rt: &ResourceType,
    binding: &Value,
    p: &Preservation,
    purge_mode: Option<PurgeMode>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let key = format!(
        "{}/{}",
        binding["metadata"]["namespace"].as_str().unwrap_or(""),
        binding["metadata"]["name"].as_str().unwrap_or("")
    );
    for f in &p.failures {
        tracing::warn!(binding = %key, cluster = %p.cluster, label = %f.label, problem = %f.problem.describe(), "state preservation rule gave no label");
        events
            .record(
                binding,
                EventType::Warning,
                REASON_STATE_PRESERVATION_FAILED,
                &format!(
                    "Eviction from cluster {}: {}; the workload moves without it",
                    p.cluster,
                    f.sentence()
                ),
            )
            .await;
    }
    let cond = condition(p, purge_mode);
    let mut current = binding.clone();
    for attempt in 0..3 {
        let mut conditions: Vec<Condition> = current
            .lookup("/status/conditions")
            .cloned()
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        if !set_condition(&mut conditions, cond.clone(), now) {
            return Ok(());
        }
        let mut updated = current.clone();
        crate::controllers::shared::json_edit::set_path(
            &mut updated,
            &["status", "conditions"],
            json!(conditions),
        );
        match store.update_status(rt, updated).await {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict { .. }) if attempt < 2 => {
                current =
                    crate::controllers::shared::binding_keys::reread(store, rt, &current).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::failover::testing::with_reason;
    use flotilla_api::binding::AggregatedStatusItem;
    use flotilla_api::policy::StatePreservationRule;

    fn status() -> Value {
        json!({
            "jobStatus": {"jobID": "a1b2c3", "state": "RUNNING"},
            "availableReplicas": 2,
            "ratio": 2.5,
            "ready": true,
            "items": [{"id": "first"}, {"id": "second"}],
            "empty": [],
            "blank": "",
            "long": "x".repeat(64),
            "spaced": "two words",
            "nested": {"a": 1},
        })
    }

    #[test]
    fn extract_table() {
        let ok: &[(&str, &str)] = &[
            ("{ .jobStatus.jobID }", "a1b2c3"),
            ("{.jobStatus.jobID}", "a1b2c3"),
            ("$.jobStatus.jobID", "a1b2c3"),
            (".jobStatus.jobID", "a1b2c3"),
            ("{.items[0].id}", "first"),
            ("{.items[-1].id}", "second"),
            ("{.items[?(@.id == \"second\")].id}", "second"),
            ("{.availableReplicas}", "2"),
            ("{.ratio}", "2.5"),
            ("{.ready}", "true"),
            ("job-{.jobStatus.jobID}", "job-a1b2c3"),
        ];
        for (path, want) in ok {
            assert_eq!(extract(path, &status()).as_deref(), Ok(*want), "{path}");
        }
        let no_match = |p: &RuleProblem| matches!(p, RuleProblem::NoMatch { .. });
        type Check<'a> = &'a dyn Fn(&RuleProblem) -> bool;
        let cases: &[(&str, Check)] = &[
            ("{.jobStatus.missing}", &no_match),
            ("{.missing.jobID}", &no_match),
            ("{.items[5].id}", &no_match),
            ("{.empty[*]}", &no_match),
            ("{.blank}", &no_match),
            (
                "{.items[*].id}",
                &|p| matches!(p, RuleProblem::ManyMatches { count: 2, values } if values == "first second"),
            ),
            (
                "{.long}",
                &|p| matches!(p, RuleProblem::InvalidLabelValue { value, .. } if value.len() == 64),
            ),
            ("{.spaced}", &|p| {
                matches!(p, RuleProblem::InvalidLabelValue { .. })
            }),
            (
                "{.nested}",
                &|p| matches!(p, RuleProblem::InvalidLabelValue { value, .. } if value == "{\"a\":1}"),
            ),
            ("{.jobStatus[0]}", &|p| matches!(p, RuleProblem::Eval(_))),
            ("{.a", &|p| matches!(p, RuleProblem::Eval(_))),
            // Plain text is a constant, not state read from the cluster.
            ("jobStatus.jobID", &|p| matches!(p, RuleProblem::NotAPath)),
        ];
        for (path, want) in cases {
            match extract(path, &status()) {
                Err(p) => assert!(want(&p), "{path}: {p:?}"),
                Ok(v) => panic!("{path} gave {v}"),
            }
        }
    }

    fn rules(paths: &[(&str, &str)]) -> StatePreservation {
        StatePreservation {
            rules: paths
                .iter()
                .map(|(l, p)| StatePreservationRule {
                    alias_label_name: l.to_string(),
                    json_path: p.to_string(),
                })
                .collect(),
        }
    }

    fn reported(cluster: &str, s: Value) -> ResourceBindingStatus {
        ResourceBindingStatus {
            aggregated_status: vec![AggregatedStatusItem {
                cluster_name: cluster.into(),
                status: Some(s),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn preserve_reads_the_evicted_clusters_last_status() {
        let r = rules(&[
            (
                "application.karmada.io/failover-jobid",
                "{ .jobStatus.jobID }",
            ),
            ("failover.example.io/missing", "{ .nope }"),
        ]);
        let st = reported("member1", status());
        let p = preserve(Some(&r), &st, "member1").expect("rules");
        assert_eq!(
            p.labels
                .get("application.karmada.io/failover-jobid")
                .map(String::as_str),
            Some("a1b2c3")
        );
        assert_eq!(p.failures.len(), 1);
        assert_eq!(p.failures[0].label, "failover.example.io/missing");
        assert!(matches!(p.failures[0].problem, RuleProblem::NoMatch { .. }));
        // Another cluster never reported: every rule fails, nothing is invented.
        let p = preserve(Some(&r), &st, "member2").expect("rules");
        assert!(p.labels.is_empty());
        assert_eq!(p.failures.len(), 2);
        assert!(p.failures.iter().all(
            |f| matches!(&f.problem, RuleProblem::NotCollected { cluster } if cluster == "member2")
        ));
        // No rules: nothing to preserve or report.
        assert_eq!(preserve(None, &st, "member1"), None);
        assert_eq!(preserve(Some(&rules(&[])), &st, "member1"), None);
    }

    #[test]
    fn condition_per_outcome() {
        let ok = Preservation {
            cluster: "member1".into(),
            labels: [("a.io/job".to_string(), "x".to_string())].into(),
            failures: vec![],
        };
        let c = condition(&ok, Some(PurgeMode::Immediately));
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::True, REASON_STATE_PRESERVED)
        );
        assert_eq!(
            c.message,
            "eviction from cluster member1: state preserved as labels a.io/job"
        );
        // A graceful mode records the state but does not inject it: said, not silent.
        let c = condition(&ok, Some(PurgeMode::Graciously));
        assert!(
            c.message
                .contains("injected only after an Immediately/Directly eviction"),
            "{}",
            c.message
        );
        let failed = Preservation {
            failures: vec![RuleFailure {
                label: "a.io/many".into(),
                json_path: "{.items[*].id}".into(),
                problem: RuleProblem::ManyMatches {
                    count: 2,
                    values: "first second".into(),
                },
            }],
            ..ok.clone()
        };
        let c = condition(&failed, Some(PurgeMode::Directly));
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, REASON_STATE_PRESERVATION_FAILED)
        );
        assert_eq!(
            c.message,
            "eviction from cluster member1: label a.io/many (jsonPath \"{.items[*].id}\") matched 2 values (first second), a label holds one; the workload moved without that label, state preserved as labels a.io/job"
        );
    }

    #[tokio::test]
    async fn report_writes_the_condition_and_one_event_per_failed_rule() {
        use crate::controllers::runtime::testing::TestWorld;
        use chrono::TimeZone;
        use flotilla_api::kinds::well_known;
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let world = TestWorld::at(now);
        let (store, events) = (world.store.clone(), world.events());
        let rt = well_known::resource_bindings();
        let b = store
            .create(
                &rt,
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                    "metadata": {"name": "flink", "namespace": "default"},
                    "spec": {"resource": {"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
                                          "namespace": "default", "name": "flink"}}}),
            )
            .await
            .unwrap();
        let mut with_status = b.clone();
        with_status["status"] = json!({"conditions": [{"type": "Scheduled", "status": "True",
            "reason": "Success", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let b = store.update_status(&rt, with_status).await.unwrap();
        let r = rules(&[("a.io/job", "{.jobStatus.jobID}"), ("a.io/x", "{.nope}")]);
        let p = preserve(Some(&r), &reported("m1", status()), "m1").unwrap();
        // Someone else wrote the binding since: the condition is still written.
        let mut bumped = b.clone();
        bumped["metadata"]["annotations"] = json!({"x": "y"});
        store.update(&rt, bumped).await.unwrap();
        report(
            store.as_ref(),
            &events,
            &rt,
            &b,
            &p,
            Some(PurgeMode::Immediately),
            now,
        )
        .await
        .unwrap();
        let got = store.get(&rt, Some("default"), "flink").await.unwrap();
        let conditions = got["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2, "{got}");
        let c = conditions
            .iter()
            .find(|c| c["type"] == CONDITION_STATE_PRESERVED)
            .unwrap();
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], REASON_STATE_PRESERVATION_FAILED);
        let events = world.stored_events().await;
        let failed = with_reason(&events, REASON_STATE_PRESERVATION_FAILED);
        assert_eq!(failed.len(), 1, "{events:?}");
        assert_eq!(failed[0]["type"], "Warning");
        assert!(failed[0]["message"]
            .as_str()
            .unwrap()
            .contains("label a.io/x"));
    }
}
