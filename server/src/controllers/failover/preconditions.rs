//! No silent no-ops (docs/semantics.md Part 1): whether a binding's `failover.application`
//! can act at all. Application failover moves a workload by its health, so a kind with no health
//! rule (batch/v1 Job, ConfigMap, a custom kind without a customization) reads Healthy for ever
//! and is never failed over — Karmada accepts such a policy and silently does nothing
//! (karmada-io/karmada#7843). Nor can it act with `propagateDeps` false (policies are refused
//! that at admission; a binding written by hand is not). The binding says so: the condition
//! `ApplicationFailoverActive` (True `HealthRuleFound`, or False `NoHealthRule` /
//! `PropagateDepsDisabled`), written by the binding status controller, which also records a
//! Warning Event `ApplicationFailoverInactive` when the condition turns False.

use flotilla_api::binding::ResourceBindingSpec;
use flotilla_api::meta::{Condition, ConditionStatus};

/// The binding condition saying whether application failover can act.
pub const CONDITION_APPLICATION_FAILOVER_ACTIVE: &str = "ApplicationFailoverActive";
/// The kind has a health rule: application failover watches its health.
pub const REASON_HEALTH_RULE_FOUND: &str = "HealthRuleFound";
/// The kind has no health rule: its health is never Unhealthy, failover never acts.
pub const REASON_NO_HEALTH_RULE: &str = "NoHealthRule";
/// `spec.propagateDeps` is false on the binding.
pub const REASON_PROPAGATE_DEPS_DISABLED: &str = "PropagateDepsDisabled";
/// The Warning Event recorded when the condition turns False.
pub const EVENT_APPLICATION_FAILOVER_INACTIVE: &str = "ApplicationFailoverInactive";

/// The `ApplicationFailoverActive` condition of a binding, given whether its resource kind has
/// a health rule; `None` when the binding has no `failover.application` (the condition is then
/// removed).
pub fn application_failover_condition(
    spec: &ResourceBindingSpec,
    has_health_rule: bool,
) -> Option<Condition> {
    spec.failover.as_ref()?.application.as_ref()?;
    let r = &spec.resource;
    let kind = format!("{} {}", r.api_version, r.kind);
    let (status, reason, message) = if !has_health_rule {
        (
            ConditionStatus::False,
            REASON_NO_HEALTH_RULE,
            format!(
                "application failover cannot act: {kind} has no health rule, so its health never reads Unhealthy; add a health customization for the kind or remove failover.application"
            ),
        )
    } else if !spec.propagate_deps {
        (
            ConditionStatus::False,
            REASON_PROPAGATE_DEPS_DISABLED,
            "application failover cannot act: spec.propagateDeps is false (application failover requires it)".to_string(),
        )
    } else {
        (
            ConditionStatus::True,
            REASON_HEALTH_RULE_FOUND,
            format!("application failover watches the health of {kind}"),
        )
    };
    Some(Condition::new(
        CONDITION_APPLICATION_FAILOVER_ACTIVE,
        status,
        reason,
        &message,
    ))
}

/// Whether setting `new` over `old` deserves the Warning Event: it is False and was not False
/// for the same reason before (one Event per cause, not one per reconcile).
pub fn warrants_event(old: Option<&Condition>, new: &Condition) -> bool {
    new.status == ConditionStatus::False
        && !old.is_some_and(|o| o.status == ConditionStatus::False && o.reason == new.reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(app: bool, deps: bool, kind: &str) -> ResourceBindingSpec {
        let mut s = json!({"resource": {"apiVersion": "batch/v1", "kind": kind, "namespace": "d", "name": "x"},
                           "propagateDeps": deps});
        if app {
            s["failover"] = json!({"application": {"purgeMode": "Never"}});
        }
        serde_json::from_value(s).unwrap()
    }

    #[test]
    fn condition_table() {
        use ConditionStatus::{False, True};
        let rows = [
            (
                "no application failover",
                spec(false, true, "Job"),
                false,
                None,
            ),
            (
                "no health rule (Karmada #7843)",
                spec(true, true, "Job"),
                false,
                Some((False, REASON_NO_HEALTH_RULE)),
            ),
            (
                "no health rule wins over propagateDeps",
                spec(true, false, "Job"),
                false,
                Some((False, REASON_NO_HEALTH_RULE)),
            ),
            (
                "propagateDeps false",
                spec(true, false, "Deployment"),
                true,
                Some((False, REASON_PROPAGATE_DEPS_DISABLED)),
            ),
            (
                "armed",
                spec(true, true, "Deployment"),
                true,
                Some((True, REASON_HEALTH_RULE_FOUND)),
            ),
        ];
        for (what, spec, rule, want) in rows {
            let got = application_failover_condition(&spec, rule);
            assert_eq!(
                got.as_ref().map(|c| (c.status, c.reason.as_str())),
                want,
                "{what}"
            );
            if let Some(c) = got {
                assert_eq!(c.type_, CONDITION_APPLICATION_FAILOVER_ACTIVE);
            }
        }
        let c = application_failover_condition(&spec(true, true, "Job"), false).unwrap();
        assert!(
            c.message
                .starts_with("application failover cannot act: batch/v1 Job has no health rule"),
            "{}",
            c.message
        );
    }

    #[test]
    fn one_event_per_cause() {
        let cond = |s: ConditionStatus, r: &str| Condition::new("T", s, r, "m");
        let no_rule = cond(ConditionStatus::False, REASON_NO_HEALTH_RULE);
        let deps = cond(ConditionStatus::False, REASON_PROPAGATE_DEPS_DISABLED);
        let ok = cond(ConditionStatus::True, REASON_HEALTH_RULE_FOUND);
        assert!(warrants_event(None, &no_rule));
        assert!(warrants_event(Some(&ok), &no_rule));
        assert!(warrants_event(Some(&deps), &no_rule));
        assert!(!warrants_event(Some(&no_rule), &no_rule));
        assert!(!warrants_event(None, &ok));
        assert!(!warrants_event(Some(&no_rule), &ok));
    }
}
