//! core/v1 Event: a record of a decision or a problem about one object, as controllers emit
//! them and `kubectl get events` / `kubectl describe` show them.

use serde::{Deserialize, Serialize};

use crate::meta::{impl_object, ObjectMeta, Time};

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

/// A core/v1 Event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Event {
    /// `v1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `Event`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata.
    pub metadata: ObjectMeta,
    /// The object the event is about.
    pub involved_object: EventObjectReference,
    /// Short CamelCase reason.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Component that reported it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<EventSource>,
    /// First occurrence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_timestamp: Option<Time>,
    /// Latest occurrence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_timestamp: Option<Time>,
    /// Occurrences.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Normal or Warning.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<EventType>,
    /// MicroTime of first observation (events.k8s.io style), kept as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_time: Option<serde_json::Value>,
    /// Series data, kept as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<serde_json::Value>,
    /// What was done.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// A secondary object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub related: Option<EventObjectReference>,
    /// Controller that emitted it, e.g. `flotilla-scheduler`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reporting_component: String,
    /// Instance of that controller.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reporting_instance: String,
}

impl_object!(Event, "v1", "Event");

/// `corev1.ObjectReference` as used by events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EventObjectReference {
    /// Kind.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Namespace.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// uid.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// apiVersion.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// resourceVersion.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Field within the object.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field_path: String,
}

/// `source` of an event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EventSource {
    /// Component.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub component: String,
    /// Host.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
}
