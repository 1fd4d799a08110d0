//! `events.k8s.io/v1` Events over the stored core/v1 Events, as kube-apiserver serves them: one
//! Event, seen through both APIs. An Event written through either API is stored in its core
//! form, so `kubectl get events` lists what kube-runtime's `Recorder` wrote, and Flotilla's own
//! Events read through `events.k8s.io` in its form.
//!
//! The field mapping is Kubernetes' conversion (`pkg/apis/events/v1/conversion.go`):
//!
//! | events.k8s.io/v1 | core/v1 |
//! |---|---|
//! | `regarding` | `involvedObject` |
//! | `note` | `message` |
//! | `reportingController` | `reportingComponent` |
//! | `deprecatedSource` | `source` |
//! | `deprecatedFirstTimestamp`, `deprecatedLastTimestamp`, `deprecatedCount` | `firstTimestamp`, `lastTimestamp`, `count` |
//! | `eventTime`, `series` (count, lastObservedTime), `reportingInstance`, `action`, `reason`, `related`, `type` | the same |
//!
//! A write through `events.k8s.io/v1` is validated as Kubernetes validates it
//! (`ValidateEventCreate` / `ValidateEventUpdate` for that version): the new fields are
//! required, the deprecated ones must stay unset, and an update may change only the series and
//! metadata. The field paths of the errors are Kubernetes' (its internal names: `message`,
//! `count`, `involvedObject.namespace`).
//!
//! Pure functions of JSON objects; `api::views` plugs them into the API.

use crate::api::error::Cause;
use serde_json::{json, Map, Value};

/// The version this module serves.
pub const API_VERSION: &str = "events.k8s.io/v1";

/// (events.k8s.io/v1 field, core/v1 field), in the v1 type's field order.
const FIELDS: &[(&str, &str)] = &[
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("action", "action"),
    ("reason", "reason"),
    ("regarding", "involvedObject"),
    ("related", "related"),
    ("note", "message"),
    ("type", "type"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Kubernetes' length limits of an events.k8s.io Event.
const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

/// Whether a value carries nothing (Go's zero value, which its JSON omits).
fn is_unset(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_i64() == Some(0),
        Value::Object(m) => m.values().all(is_unset),
        _ => false,
    }
}

/// The series as both versions share it: count and lastObservedTime (core's deprecated
/// `state` has no place in v1).
fn series(v: &Value) -> Value {
    let mut out = Map::new();
    for key in ["count", "lastObservedTime"] {
        if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
            out.insert(key.to_string(), x.clone());
        }
    }
    Value::Object(out)
}

/// Copies the mapped fields of `from` into a new object of `api_version`, each under its name
/// in the other version (`pick` chooses which side of [`FIELDS`] is read).
fn convert(
    from: &Value,
    api_version: &str,
    pick: fn(&(&'static str, &'static str)) -> (&'static str, &'static str),
) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    out.insert(
        "metadata".into(),
        from.get("metadata").cloned().unwrap_or_else(|| json!({})),
    );
    for pair in FIELDS {
        let (source, target) = pick(pair);
        let Some(value) = from.get(source).filter(|v| !is_unset(v)) else {
            continue;
        };
        let value = if source == "series" {
            series(value)
        } else {
            value.clone()
        };
        out.insert(target.to_string(), value);
    }
    Value::Object(out)
}

/// A stored core/v1 Event as events.k8s.io/v1 shows it.
pub fn from_core(core: &Value) -> Value {
    convert(core, API_VERSION, |(v1, core)| (*core, *v1))
}

/// An events.k8s.io/v1 Event as it is stored (core/v1). Fields v1 does not have are dropped,
/// as decoding into the v1 type drops them.
pub fn to_core(v1: &Value) -> Value {
    convert(v1, "v1", |(v1, core)| (*v1, *core))
}

fn text<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get(field).and_then(Value::as_str).unwrap_or("")
}

fn required(field: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: "Required value".into(),
        field: field.into(),
    }
}

fn invalid(field: &str, value: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value:?}: {detail}"),
        field: field.into(),
    }
}

/// Whether `name` is a Kubernetes qualified name (`[prefix/]name`, the name at most 63
/// characters of alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric; the prefix a
/// DNS subdomain).
fn is_qualified_name(name: &str) -> bool {
    let (prefix, local) = match name.split_once('/') {
        Some((p, l)) => (Some(p), l),
        None => (None, name),
    };
    let local_ok = !local.is_empty()
        && local.len() <= 63
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && local.starts_with(|c: char| c.is_ascii_alphanumeric())
        && local.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    });
    local_ok && prefix_ok
}

/// The series rules: at least two occurrences and when the last one was seen.
fn series_causes(core: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(series) = core.get("series").filter(|s| !s.is_null()) {
        if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            causes.push(invalid("series.count", "", "should be at least 2"));
        }
        if series.get("lastObservedTime").is_none_or(is_unset) {
            causes.push(required("series.lastObservedTime"));
        }
    }
    causes
}

/// Kubernetes' `legacyValidateEvent` for an Event with an eventTime: who reports it, what it
/// did and why, and the namespace of what it is about.
fn reporting_causes(core: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let namespace = core
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let regarding_ns = core
        .pointer("/involvedObject/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if regarding_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
        causes.push(invalid(
            "involvedObject.namespace",
            regarding_ns,
            "does not match event.namespace",
        ));
    }
    let controller = text(core, "reportingComponent");
    if controller.is_empty() {
        causes.push(required("reportingController"));
    } else if !is_qualified_name(controller) {
        causes.push(invalid(
            "reportingController",
            controller,
            "must be a qualified name: alphanumerics, '-', '_' or '.', with an optional DNS subdomain prefix and '/'",
        ));
    }
    let limited = |causes: &mut Vec<Cause>, field: &str, value: &str, limit: usize| {
        if value.chars().count() > limit {
            causes.push(invalid(
                field,
                "",
                &format!("can have at most {limit} characters"),
            ));
        }
    };
    for (field, limit) in [
        ("reportingInstance", REPORTING_INSTANCE_LIMIT),
        ("action", ACTION_LIMIT),
        ("reason", REASON_LIMIT),
    ] {
        let value = text(core, field);
        if value.is_empty() {
            causes.push(required(field));
        }
        limited(&mut causes, field, value, limit);
    }
    limited(&mut causes, "message", text(core, "message"), NOTE_LIMIT);
    causes
}

/// What Kubernetes refuses in an Event created through events.k8s.io/v1 (given in its core
/// form, as [`to_core`] makes it).
pub fn create_causes(core: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if core.get("eventTime").is_none_or(is_unset) {
        causes.push(required("eventTime"));
    }
    causes.extend(reporting_causes(core));
    causes.extend(series_causes(core));
    let kind = text(core, "type");
    if kind != "Normal" && kind != "Warning" {
        causes.push(invalid("type", "", &format!("has invalid value: {kind}")));
    }
    for field in ["firstTimestamp", "lastTimestamp", "count", "source"] {
        if core.get(field).is_some_and(|v| !is_unset(v)) {
            causes.push(invalid(field, "", "needs to be unset"));
        }
    }
    causes
}

/// What Kubernetes refuses in an update through events.k8s.io/v1 of `old` to `new` (both in
/// core form): every field but the series and metadata is immutable; a changed series is
/// checked.
pub fn update_causes(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    // An Event without eventTime (one written as core/v1) is held to none of these.
    if new.get("eventTime").is_some_and(|v| !is_unset(v)) {
        causes.extend(reporting_causes(new));
    }
    let normalized = |obj: &Value, field: &str| {
        obj.get(field)
            .filter(|v| !is_unset(v))
            .cloned()
            .unwrap_or(Value::Null)
    };
    if normalized(new, "series") != normalized(old, "series") {
        causes.extend(series_causes(new));
    }
    for (v1, core) in FIELDS {
        if *v1 == "series" {
            continue;
        }
        let (now, was) = (normalized(new, core), normalized(old, core));
        if now != was {
            let field = if *v1 == "reportingController" {
                v1
            } else {
                core
            };
            causes.push(invalid(field, &now.to_string(), "field is immutable"));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Event kube-runtime's Recorder creates.
    fn recorded() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "web.17f0", "namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.123456Z",
            "reportingController": "example.com/operator",
            "reportingInstance": "operator-0",
            "action": "Reconcile",
            "reason": "Scaled",
            "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                          "namespace": "default", "uid": "u1"},
            "note": "scaled to 3",
            "type": "Normal",
        })
    }

    #[test]
    fn fields_map_as_kubernetes_converts_them() {
        // (events.k8s.io/v1 field and value, the core/v1 field it is stored as)
        let table: &[(&str, Value, &str)] = &[
            ("note", json!("scaled"), "message"),
            (
                "regarding",
                json!({"kind": "Pod", "name": "p"}),
                "involvedObject",
            ),
            ("reportingController", json!("ctl"), "reportingComponent"),
            ("reportingInstance", json!("ctl-0"), "reportingInstance"),
            (
                "eventTime",
                json!("2026-01-01T00:00:00.000001Z"),
                "eventTime",
            ),
            (
                "series",
                json!({"count": 3, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}),
                "series",
            ),
            (
                "deprecatedSource",
                json!({"component": "kubelet", "host": "n1"}),
                "source",
            ),
            (
                "deprecatedFirstTimestamp",
                json!("2026-01-01T00:00:00Z"),
                "firstTimestamp",
            ),
            (
                "deprecatedLastTimestamp",
                json!("2026-01-01T00:00:09Z"),
                "lastTimestamp",
            ),
            ("deprecatedCount", json!(4), "count"),
            ("action", json!("Scale"), "action"),
            ("reason", json!("Scaled"), "reason"),
            ("related", json!({"kind": "Node", "name": "n1"}), "related"),
            ("type", json!("Warning"), "type"),
        ];
        for (v1_field, value, core_field) in table {
            let v1 = json!({"metadata": {"name": "e"}, *v1_field: value});
            let core = to_core(&v1);
            assert_eq!(core[*core_field], *value, "{v1_field} → {core_field}");
            assert_eq!(
                (core["apiVersion"].as_str(), core["kind"].as_str()),
                (Some("v1"), Some("Event"))
            );
            let back = from_core(&core);
            assert_eq!(back[*v1_field], *value, "{core_field} → {v1_field}");
            assert_eq!(back["apiVersion"], API_VERSION);
            assert_eq!(back["metadata"]["name"], "e");
        }
    }

    #[test]
    fn a_round_trip_keeps_the_event_and_drops_what_v1_lacks() {
        let v1 = recorded();
        assert_eq!(from_core(&to_core(&v1)), v1);
        // core's series.state and unset fields have no place in v1.
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "message": "m", "count": 0, "reportingComponent": "", "eventTime": null,
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z", "state": "Ongoing"},
            "unknownField": 1});
        assert_eq!(
            from_core(&core),
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
                "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"},
                "note": "m"})
        );
    }

    #[test]
    fn a_created_event_is_checked_as_kubernetes_checks_events_v1() {
        assert!(create_causes(&to_core(&recorded())).is_empty());
        // (what is changed in the recorded Event, the fields Kubernetes names)
        let table: &[(&str, Value, &[&str])] = &[
            ("eventTime", Value::Null, &["eventTime"]),
            ("reportingController", Value::Null, &["reportingController"]),
            (
                "reportingController",
                json!("not a name!"),
                &["reportingController"],
            ),
            ("reportingInstance", json!(""), &["reportingInstance"]),
            (
                "reportingInstance",
                json!("i".repeat(129)),
                &["reportingInstance"],
            ),
            ("action", Value::Null, &["action"]),
            ("reason", json!("r".repeat(129)), &["reason"]),
            ("note", json!("n".repeat(1025)), &["message"]),
            ("type", json!("Fatal"), &["type"]),
            ("type", Value::Null, &["type"]),
            ("deprecatedCount", json!(2), &["count"]),
            ("deprecatedSource", json!({"component": "c"}), &["source"]),
            (
                "deprecatedFirstTimestamp",
                json!("2026-01-01T00:00:00Z"),
                &["firstTimestamp"],
            ),
            (
                "deprecatedLastTimestamp",
                json!("2026-01-01T00:00:00Z"),
                &["lastTimestamp"],
            ),
            (
                "series",
                json!({"count": 1}),
                &["series.count", "series.lastObservedTime"],
            ),
            ("regarding", json!({"kind": "Pod", "name": "p"}), &[]),
        ];
        for (field, value, want) in table {
            let mut v1 = recorded();
            v1[*field] = value.clone();
            let got: Vec<String> = create_causes(&to_core(&v1))
                .into_iter()
                .map(|c| c.field)
                .collect();
            assert_eq!(got, *want, "{field} = {value}");
        }
        // A cluster-scoped object's Event lives in "default" (or kube-system), nowhere else.
        let mut v1 = recorded();
        v1["regarding"] = json!({"kind": "Node", "name": "n1"});
        v1["metadata"]["namespace"] = json!("apps");
        let got: Vec<String> = create_causes(&to_core(&v1))
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(got, ["involvedObject.namespace"]);
        assert!(is_qualified_name("example.com/operator") && is_qualified_name("kubelet"));
        assert!(
            !is_qualified_name("-x") && !is_qualified_name("a/") && !is_qualified_name("A_B./x")
        );
    }

    #[test]
    fn an_update_may_change_only_the_series() {
        let old = to_core(&recorded());
        let mut v1 = recorded();
        v1["series"] = json!({"count": 2, "lastObservedTime": "2026-01-01T00:00:05.000000Z"});
        assert!(update_causes(&to_core(&v1), &old).is_empty());
        v1["series"] = json!({"count": 1, "lastObservedTime": "2026-01-01T00:00:05.000000Z"});
        let fields: Vec<String> = update_causes(&to_core(&v1), &old)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["series.count"]);
        for (field, core_field) in [
            ("note", "message"),
            ("reason", "reason"),
            ("reportingController", "reportingController"),
            ("regarding", "involvedObject"),
        ] {
            let mut v1 = recorded();
            v1[field] = json!("changed");
            let causes = update_causes(&to_core(&v1), &old);
            assert!(
                causes
                    .iter()
                    .any(|c| c.field == core_field && c.message.ends_with("field is immutable")),
                "{field}: {causes:?}"
            );
        }
    }
}
