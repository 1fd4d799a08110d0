//! `meta.k8s.io/v1 Table` answers for `kubectl get`: per-kind columns (clusters show NAME,
//! VERSION, MODE, READY, AGE as Karmada prints them; ClusterTaintPolicies their taints and
//! conditions; events LAST SEEN, TYPE, REASON, OBJECT, MESSAGE as Kubernetes prints them),
//! NAME and AGE for everything else. The kinds computed on read bring their own columns
//! ([`crate::api::computed`]), rendered by [`render`]. Columns with priority 1 appear only with
//! `-o wide`.

use chrono::{DateTime, Utc};
use flotilla_api::json_pointer::JsonPointer;
use serde_json::{json, Value};

/// Whether an Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

/// One column of a Table: its definition and how a cell of it is read from an object at a time.
pub struct Column {
    /// The header (`Name`, `Ready`).
    pub name: &'static str,
    /// The cell type (`string`, `integer`).
    pub kind: &'static str,
    /// 0: always shown; 1: only with `-o wide`.
    pub priority: u8,
    /// What the column says.
    pub description: &'static str,
    /// The cell of an object, given the time of the answer.
    pub cell: fn(&Value, DateTime<Utc>) -> Value,
}

/// The NAME column every Table starts with.
pub fn name_column() -> Column {
    Column {
        name: "Name",
        kind: "string",
        priority: 0,
        description: "Name must be unique within a namespace.",
        cell: name_cell,
    }
}

/// The AGE column (time since `metadata.creationTimestamp`).
pub fn age_column() -> Column {
    Column {
        name: "Age",
        kind: "string",
        priority: 0,
        description: "Time since creation.",
        cell: age_cell,
    }
}

/// The value at `pointer` as a string cell (empty when absent or null).
pub fn text(obj: &Value, pointer: &str) -> Value {
    obj.lookup(pointer)
        .map(|v| match v {
            Value::String(s) => Value::String(s.clone()),
            Value::Null => Value::String(String::new()),
            other => Value::String(other.to_string()),
        })
        .unwrap_or_else(|| Value::String(String::new()))
}

fn condition_status(obj: &Value, kind: &str) -> Value {
    let status = obj
        .lookup("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("");
    Value::String(status.to_string())
}

fn name_cell(obj: &Value, _: DateTime<Utc>) -> Value {
    text(obj, "/metadata/name")
}

fn age_cell(obj: &Value, now: DateTime<Utc>) -> Value {
    let created = obj
        .lookup("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok());
    match created {
        Some(t) => Value::String(human_duration(now - t.with_timezone(&Utc))),
        None => Value::String("<unknown>".into()),
    }
}

/// Kubernetes' short human form of a duration: `45s`, `5m3s`, `2h10m`, `3d4h`, `2y`.
pub fn human_duration(d: chrono::Duration) -> String {
    let secs = d.num_seconds().max(0);
    if secs < 120 {
        return format!("{secs}s");
    }
    // `5m3s`: a count of one unit and the rest in the next smaller one, left out when 0.
    let two_units = |count: i64, unit: &str, rest: i64, rest_unit: &str| {
        if rest == 0 {
            format!("{count}{unit}")
        } else {
            format!("{count}{unit}{rest}{rest_unit}")
        }
    };
    let minutes = secs / 60;
    if minutes < 10 {
        return two_units(minutes, "m", secs % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return two_units(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if days < 8 {
        return two_units(days, "d", hours % 24, "h");
    }
    if days < 365 * 2 {
        return format!("{days}d");
    }
    format!("{}y", days / 365)
}

fn parse_time(obj: &Value, pointer: &str) -> Option<DateTime<Utc>> {
    obj.lookup(pointer)
        .and_then(Value::as_str)
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

fn since(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Value {
    Value::String(match t {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    })
}

/// When an Event was first seen: `firstTimestamp`, else (events.k8s.io style) `eventTime`.
fn event_first_seen(ev: &Value) -> Option<DateTime<Utc>> {
    parse_time(ev, "/firstTimestamp").or_else(|| parse_time(ev, "/eventTime"))
}

/// When an Event was last seen: its series' `lastObservedTime`, else `lastTimestamp`, else
/// when it was first seen (as kubectl's printer reads them).
fn event_last_seen(ev: &Value) -> Option<DateTime<Utc>> {
    if ev.get("series").is_some_and(Value::is_object) {
        return parse_time(ev, "/series/lastObservedTime");
    }
    parse_time(ev, "/lastTimestamp").or_else(|| event_first_seen(ev))
}

/// The OBJECT cell: `deployment/nginx` (the kind lowercased), or the kind alone.
fn event_object(ev: &Value) -> Value {
    let kind = ev
        .lookup("/involvedObject/kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_lowercase();
    match ev
        .lookup("/involvedObject/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        Some(name) => Value::String(format!("{kind}/{name}")),
        None => Value::String(kind),
    }
}

/// The SOURCE cell: `component, host`, falling back to reportingController/Instance.
fn event_source(ev: &Value) -> Value {
    let first = |a: &str, b: &str| -> String {
        [a, b]
            .iter()
            .filter_map(|p| ev.lookup(p).and_then(Value::as_str))
            .find(|s| !s.is_empty())
            .unwrap_or("")
            .to_string()
    };
    let component = [
        "/source/component",
        "/reportingComponent",
        "/reportingController",
    ]
    .iter()
    .filter_map(|p| ev.lookup(p).and_then(Value::as_str))
    .find(|s| !s.is_empty())
    .unwrap_or("")
    .to_string();
    let host = first("/source/host", "/reportingInstance");
    Value::String(match (component.is_empty(), host.is_empty()) {
        (true, _) => String::new(),
        (false, true) => component,
        (false, false) => format!("{component}, {host}"),
    })
}

/// The COUNT cell: the series' count, else `count`, else 1 (a singleton).
fn event_count(ev: &Value) -> Value {
    let count = ev
        .lookup("/series/count")
        .or_else(|| ev.get("count"))
        .and_then(Value::as_i64)
        .filter(|c| *c > 0)
        .unwrap_or(1);
    json!(count)
}

/// core/v1 Event columns, in Kubernetes' order (`kubectl get events` prints the priority-0
/// ones: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE).
fn event_columns() -> Vec<Column> {
    fn col(
        name: &'static str,
        priority: u8,
        description: &'static str,
        cell: fn(&Value, DateTime<Utc>) -> Value,
    ) -> Column {
        Column {
            name,
            kind: "string",
            priority,
            description,
            cell,
        }
    }
    vec![
        col(
            "Last Seen",
            0,
            "The time at which the most recent occurrence of this event was recorded.",
            |o, now| since(event_last_seen(o), now),
        ),
        col(
            "Type",
            0,
            "Type of this event (Normal, Warning).",
            |o, _| text(o, "/type"),
        ),
        col("Reason", 0, "Why the action was taken.", |o, _| {
            text(o, "/reason")
        }),
        col(
            "Object",
            0,
            "The object that this event is about.",
            |o, _| event_object(o),
        ),
        col(
            "Subobject",
            1,
            "The part of the object this event is about.",
            |o, _| text(o, "/involvedObject/fieldPath"),
        ),
        col(
            "Source",
            1,
            "The component reporting this event.",
            |o, _| event_source(o),
        ),
        col(
            "Message",
            0,
            "A human-readable description of the status of this operation.",
            |o, _| {
                Value::String(
                    text(o, "/message")
                        .as_str()
                        .unwrap_or("")
                        .trim()
                        .to_string(),
                )
            },
        ),
        col(
            "First Seen",
            1,
            "The time at which the event was first recorded.",
            |o, now| since(event_first_seen(o), now),
        ),
        col(
            "Count",
            1,
            "The number of times this event has occurred.",
            |o, _| event_count(o),
        ),
        col(
            "Name",
            1,
            "Name must be unique within a namespace.",
            name_cell,
        ),
    ]
}

fn columns(group: &str, kind: &str) -> Vec<Column> {
    if (group, kind) == ("", "Event") {
        return event_columns();
    }
    let age = age_column();
    let mut out = vec![name_column()];
    match (group, kind) {
        ("cluster.karmada.io", "Cluster") => {
            out.push(Column {
                name: "Version",
                kind: "string",
                priority: 0,
                description: "Kubernetes version of the member.",
                cell: |o, _| text(o, "/status/kubernetesVersion"),
            });
            out.push(Column {
                name: "Mode",
                kind: "string",
                priority: 0,
                description: "Push or Pull.",
                cell: |o, _| text(o, "/spec/syncMode"),
            });
            out.push(Column {
                name: "Ready",
                kind: "string",
                priority: 0,
                description: "The Ready condition.",
                cell: |o, _| condition_status(o, "Ready"),
            });
            out.push(age);
            out.push(Column {
                name: "API-Endpoint",
                kind: "string",
                priority: 1,
                description: "Push members' endpoint.",
                cell: |o, _| text(o, "/spec/apiEndpoint"),
            });
            out.push(Column {
                name: "Region",
                kind: "string",
                priority: 1,
                description: "Region of the member.",
                cell: |o, _| text(o, "/spec/region"),
            });
        }
        ("work.karmada.io", "ResourceBinding" | "ClusterResourceBinding") => {
            out.push(Column {
                name: "Scheduled",
                kind: "string",
                priority: 0,
                description: "The Scheduled condition.",
                cell: |o, _| condition_status(o, "Scheduled"),
            });
            out.push(Column {
                name: "FullyApplied",
                kind: "string",
                priority: 0,
                description: "The FullyApplied condition.",
                cell: |o, _| condition_status(o, "FullyApplied"),
            });
            out.push(age);
            out.push(Column {
                name: "Clusters",
                kind: "string",
                priority: 1,
                description: "Target clusters and their replicas.",
                cell: |o, _| {
                    let targets = o
                        .lookup("/spec/clusters")
                        .and_then(Value::as_array)
                        .map(|cs| {
                            cs.iter()
                                .map(|c| {
                                    format!(
                                        "{}:{}",
                                        c["name"].as_str().unwrap_or(""),
                                        c["replicas"].as_i64().unwrap_or(0)
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join(",")
                        })
                        .unwrap_or_default();
                    Value::String(targets)
                },
            });
        }
        ("work.karmada.io", "Work") => {
            out.push(Column {
                name: "Workload-Kind",
                kind: "string",
                priority: 0,
                description: "Kind of the first manifest.",
                cell: |o, _| text(o, "/spec/workload/manifests/0/kind"),
            });
            out.push(Column {
                name: "Applied",
                kind: "string",
                priority: 0,
                description: "The Applied condition.",
                cell: |o, _| condition_status(o, "Applied"),
            });
            out.push(age);
        }
        ("policy.karmada.io", "PropagationPolicy" | "ClusterPropagationPolicy") => {
            out.push(Column {
                name: "Conflict-Resolution",
                kind: "string",
                priority: 0,
                description: "What happens when a resource exists on the member.",
                cell: |o, _| {
                    let v = text(o, "/spec/conflictResolution");
                    if v == "" {
                        Value::String("Abort".into())
                    } else {
                        v
                    }
                },
            });
            out.push(Column {
                name: "Priority",
                kind: "integer",
                priority: 0,
                description: "Explicit priority.",
                cell: |o, _| {
                    json!(o
                        .lookup("/spec/priority")
                        .and_then(Value::as_i64)
                        .unwrap_or(0))
                },
            });
            out.push(age);
        }
        ("policy.karmada.io", "ClusterTaintPolicy") => taint_policy_columns(&mut out, age),
        ("", "Namespace") => {
            out.push(Column {
                name: "Status",
                kind: "string",
                priority: 0,
                description: "The phase of the namespace (Active, Terminating).",
                cell: |o, _| text(o, "/status/phase"),
            });
            out.push(age);
        }
        ("", "Node") => {
            out.push(Column {
                name: "Status",
                kind: "string",
                priority: 0,
                description: "Ready or NotReady (the Ready condition), and SchedulingDisabled.",
                cell: |o, _| node_status(o),
            });
            out.push(Column {
                name: "Roles",
                kind: "string",
                priority: 0,
                description: "The node-role.kubernetes.io/<role> labels.",
                cell: |o, _| node_roles(o),
            });
            out.push(age);
            out.push(Column {
                name: "Version",
                kind: "string",
                priority: 0,
                description: "Kubelet version.",
                cell: |o, _| text(o, "/status/nodeInfo/kubeletVersion"),
            });
        }
        _ => out.push(age),
    }
    out
}

/// A Node's STATUS cell, as kubectl prints it: `Ready`, `NotReady` or `Unknown`, with
/// `,SchedulingDisabled` when it is cordoned.
fn node_status(node: &Value) -> Value {
    let ready = match condition_status(node, "Ready").as_str() {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    };
    let cordoned = node
        .lookup("/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Value::String(if cordoned {
        format!("{ready},SchedulingDisabled")
    } else {
        ready.to_string()
    })
}

/// A Node's ROLES cell: the roles of its `node-role.kubernetes.io/<role>` labels, or `<none>`.
fn node_roles(node: &Value) -> Value {
    let mut roles: Vec<&str> = node
        .lookup("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .keys()
                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                .filter(|r| !r.is_empty())
                .collect()
        })
        .unwrap_or_default();
    roles.sort_unstable();
    Value::String(if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    })
}

/// ClusterTaintPolicy: its taints and the conditions that add and remove them, e.g.
/// `example.com/down:NoExecute` and `NetworkOK In (False)`.
fn taint_policy_columns(out: &mut Vec<Column>, age: Column) {
    fn conditions(o: &Value, pointer: &str) -> Value {
        let list = o.lookup(pointer).and_then(Value::as_array);
        let text = list.map_or_else(Vec::new, |cs| {
            cs.iter()
                .map(|c| {
                    let values: Vec<&str> = c["statusValues"]
                        .as_array()
                        .map_or_else(Vec::new, |v| v.iter().filter_map(Value::as_str).collect());
                    format!(
                        "{} {} ({})",
                        c["conditionType"].as_str().unwrap_or(""),
                        c["operator"].as_str().unwrap_or(""),
                        values.join(",")
                    )
                })
                .collect()
        });
        Value::String(text.join(" && "))
    }
    out.push(Column {
        name: "Taints",
        kind: "string",
        priority: 0,
        description: "Taints the policy adds and removes.",
        cell: |o, _| {
            let taints = o.lookup("/spec/taints").and_then(Value::as_array);
            let text: Vec<String> = taints.map_or_else(Vec::new, |ts| {
                ts.iter()
                    .map(|t| {
                        let key = t["key"].as_str().unwrap_or("");
                        let effect = t["effect"].as_str().unwrap_or("");
                        match t["value"].as_str().filter(|v| !v.is_empty()) {
                            Some(v) => format!("{key}={v}:{effect}"),
                            None => format!("{key}:{effect}"),
                        }
                    })
                    .collect()
            });
            Value::String(text.join(","))
        },
    });
    out.push(Column {
        name: "Add-On",
        kind: "string",
        priority: 0,
        description: "Conditions (ANDed) that add the taints.",
        cell: |o, _| conditions(o, "/spec/addOnConditions"),
    });
    out.push(Column {
        name: "Remove-On",
        kind: "string",
        priority: 0,
        description: "Conditions (ANDed) that remove the taints.",
        cell: |o, _| conditions(o, "/spec/removeOnConditions"),
    });
    out.push(age);
    out.push(Column {
        name: "Target-Clusters",
        kind: "string",
        priority: 1,
        description: "Clusters named by targetClusters (empty: every cluster the rest allows).",
        cell: |o, _| {
            let names = o
                .lookup("/spec/targetClusters/clusterNames")
                .and_then(Value::as_array);
            let text: Vec<&str> =
                names.map_or_else(Vec::new, |n| n.iter().filter_map(Value::as_str).collect());
            Value::String(text.join(","))
        },
    });
}

/// Builds a Table of `items` (all of one stored kind) for `kubectl get`.
pub fn table(
    group: &str,
    kind: &str,
    items: &[Value],
    resource_version: u64,
    continue_token: Option<&str>,
    now: DateTime<Utc>,
) -> Value {
    render(
        &columns(group, kind),
        items,
        resource_version,
        continue_token,
        now,
    )
}

/// Builds a Table of `items` with the given columns (a computed kind brings its own, see
/// [`crate::api::computed`]).
pub fn render(
    cols: &[Column],
    items: &[Value],
    resource_version: u64,
    continue_token: Option<&str>,
    now: DateTime<Utc>,
) -> Value {
    let definitions: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "type": c.kind, "format": if c.name == "Name" { "name" } else { "" },
                "description": c.description, "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let cells: Vec<Value> = cols.iter().map(|c| (c.cell)(obj, now)).collect();
            json!({
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
                },
            })
        })
        .collect();
    let mut metadata = json!({"resourceVersion": resource_version.to_string()});
    if let Some(c) = continue_token {
        metadata["continue"] = json!(c);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn human_durations_like_kubectl() {
        let table = [
            (5, "5s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 + 600, "3h10m"),
            (20 * 3600, "20h"),
            (3 * 86400 + 3600, "3d1h"),
            (30 * 86400, "30d"),
            (800 * 86400, "2y"),
        ];
        for (secs, want) in table {
            assert_eq!(human_duration(chrono::Duration::seconds(secs)), want);
        }
    }

    #[test]
    fn cluster_table_has_mode_and_ready() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 10, 0).unwrap();
        let cluster = json!({
            "metadata": {"name": "member1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"syncMode": "Push"},
            "status": {"kubernetesVersion": "v1.32.0", "conditions": [{"type": "Ready", "status": "True"}]}
        });
        let t = table("cluster.karmada.io", "Cluster", &[cluster], 7, None, now);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Version", "Mode", "Ready", "Age"]);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["member1", "v1.32.0", "Push", "True", "10m", "", ""])
        );
        assert_eq!(t["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn node_and_namespace_tables_are_kubectls() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 10, 0).unwrap();
        let node = |labels: Value, ready: Option<&str>, cordoned: bool| {
            let mut n = json!({
                "metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z",
                             "labels": labels},
                "spec": {"unschedulable": cordoned},
                "status": {"nodeInfo": {"kubeletVersion": "v1.33.1"}},
            });
            if let Some(r) = ready {
                n["status"]["conditions"] = json!([{"type": "Ready", "status": r}]);
            }
            table("", "Node", &[n], 7, None, now)["rows"][0]["cells"].clone()
        };
        // (labels, Ready condition, cordoned, cells)
        let rows = [
            (
                json!({}),
                Some("True"),
                false,
                json!(["n1", "Ready", "<none>", "10m", "v1.33.1"]),
            ),
            (
                json!({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": ""}),
                Some("False"),
                false,
                json!(["n1", "NotReady", "control-plane,worker", "10m", "v1.33.1"]),
            ),
            (
                json!({}),
                None,
                true,
                json!([
                    "n1",
                    "Unknown,SchedulingDisabled",
                    "<none>",
                    "10m",
                    "v1.33.1"
                ]),
            ),
        ];
        for (labels, ready, cordoned, want) in rows {
            assert_eq!(node(labels, ready, cordoned), want);
        }
        let ns = json!({"metadata": {"name": "apps", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Active"}});
        assert_eq!(
            table("", "Namespace", &[ns], 7, None, now)["rows"][0]["cells"],
            json!(["apps", "Active", "10m"])
        );
    }

    #[test]
    fn cluster_taint_policy_table_shows_taints_and_conditions() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 1, 0).unwrap();
        let policy = json!({
            "metadata": {"name": "network-down", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "targetClusters": {"clusterNames": ["member1", "member2"]},
                "addOnConditions": [{"conditionType": "NetworkOK", "operator": "In", "statusValues": ["False", "Unknown"]},
                                    {"conditionType": "Ready", "operator": "NotIn", "statusValues": ["False"]}],
                "removeOnConditions": [{"conditionType": "NetworkOK", "operator": "In", "statusValues": ["True"]}],
                "taints": [{"key": "example.com/network-down", "effect": "NoExecute"},
                           {"key": "example.com/degraded", "effect": "NoSchedule", "value": "net"}]
            }
        });
        let t = table(
            "policy.karmada.io",
            "ClusterTaintPolicy",
            &[policy],
            3,
            None,
            now,
        );
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Taints",
                "Add-On",
                "Remove-On",
                "Age",
                "Target-Clusters"
            ]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "network-down",
                "example.com/network-down:NoExecute,example.com/degraded=net:NoSchedule",
                "NetworkOK In (False,Unknown) && Ready NotIn (False)",
                "NetworkOK In (True)",
                "60s",
                "member1,member2"
            ])
        );
    }

    #[test]
    fn event_table_has_kubectl_columns() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 10, 0).unwrap();
        let t = table("", "Event", &[], 1, None, now);
        let cols: Vec<(&str, u64)> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            cols,
            [
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Subobject", 1),
                ("Source", 1),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1),
            ]
        );
    }

    #[test]
    fn event_rows_like_kubectl() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 10, 0).unwrap();
        let base = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "nginx.1", "namespace": "default"},
            "involvedObject": {"kind": "ResourceBinding", "name": "nginx-deployment"},
            "type": "Normal", "reason": "ScheduleBindingSucceed", "message": " Binding has been scheduled \n"});
        let with = |patch: Value| {
            let mut e = base.clone();
            json_patch::merge(&mut e, &patch);
            e
        };
        // (event, LAST SEEN, OBJECT, SOURCE, FIRST SEEN, COUNT)
        let table_rows = [
            // lastTimestamp and firstTimestamp, as Flotilla records them.
            (
                with(json!({"firstTimestamp": "2026-01-01T00:00:00Z",
                    "lastTimestamp": "2026-01-01T00:09:30Z", "count": 3,
                    "source": {"component": "default-scheduler"}})),
                "30s",
                "resourcebinding/nginx-deployment",
                "default-scheduler",
                "10m",
                json!(3),
            ),
            // events.k8s.io style: eventTime only, a series, reporting controller and instance.
            (
                with(json!({"eventTime": "2026-01-01T00:05:00.000000Z",
                    "series": {"count": 7, "lastObservedTime": "2026-01-01T00:08:00.000000Z"},
                    "reportingController": "flotilla-agent", "reportingInstance": "member1"})),
                "2m",
                "resourcebinding/nginx-deployment",
                "flotilla-agent, member1",
                "5m",
                json!(7),
            ),
            // No last timestamp: the first one; no count: a singleton.
            (
                with(json!({"firstTimestamp": "2026-01-01T00:09:55Z",
                    "source": {"component": "c", "host": "h"}})),
                "5s",
                "resourcebinding/nginx-deployment",
                "c, h",
                "5s",
                json!(1),
            ),
            // No time at all, and an object without a name.
            (
                with(json!({"involvedObject": {"kind": "Cluster", "name": null}})),
                "<unknown>",
                "cluster",
                "",
                "<unknown>",
                json!(1),
            ),
        ];
        for (i, (event, last, object, source, first, count)) in table_rows.into_iter().enumerate() {
            let t = table("", "Event", &[event], 1, None, now);
            assert_eq!(
                t["rows"][0]["cells"],
                json!([
                    last,
                    "Normal",
                    "ScheduleBindingSucceed",
                    object,
                    "",
                    source,
                    "Binding has been scheduled",
                    first,
                    count,
                    "nginx.1"
                ]),
                "row {i}"
            );
        }
    }

    #[test]
    fn table_accept_detection() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }
}
