//! Object metadata shared by every kind: [`ObjectMeta`], [`OwnerReference`], the wire form of
//! timestamps ([`Time`]) and status conditions ([`Condition`]) with the one rule for changing
//! them ([`set_condition`]). Also the [`Object`] trait that names each typed kind.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time as Kubernetes writes it: RFC 3339 in UTC with second precision and a `Z`
/// (`2024-05-01T10:00:00Z`). Sub-second parts are dropped when a `Time` is made, so a value
/// compares equal to itself after a trip through JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(DateTime<Utc>);

/// A timestamp that is not RFC 3339.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid timestamp {input:?}: expected RFC 3339, e.g. 2024-05-01T10:00:00Z")]
pub struct TimeParseError {
    /// The text that failed to parse.
    pub input: String,
}

impl Time {
    /// Wraps a UTC instant, dropping anything below a second.
    pub fn new(at: DateTime<Utc>) -> Self {
        Time(Utc.timestamp_opt(at.timestamp(), 0).single().unwrap_or(at))
    }

    /// Parses any RFC 3339 timestamp (any offset, any fraction) into UTC.
    pub fn parse(s: &str) -> Result<Self, TimeParseError> {
        DateTime::parse_from_rfc3339(s.trim())
            .map(|t| Time::new(t.with_timezone(&Utc)))
            .map_err(|_| TimeParseError {
                input: s.to_string(),
            })
    }

    /// The instant as a chrono value.
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }
}

impl From<DateTime<Utc>> for Time {
    fn from(at: DateTime<Utc>) -> Self {
        Time::new(at)
    }
}

impl FromStr for Time {
    type Err = TimeParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Time::parse(s)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Secs, true))
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Time::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Standard object metadata (`metadata`), as Kubernetes' `ObjectMeta`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// Unique name within the namespace (or the whole kind when cluster-scoped).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Prefix for a server-generated name, used when `name` is empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub generate_name: String,
    /// Namespace; empty for cluster-scoped kinds.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Server-assigned unique id.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Opaque version of this object, used for optimistic concurrency.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Sequence number of spec changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// When the object was created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// When deletion was requested; the object goes once its finalizers are gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    /// Grace period granted at deletion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
    /// Labels, used by label selectors.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations: non-identifying metadata.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Objects this one depends on; it is garbage-collected when they go.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    /// Finalizers that must be removed before the object is deleted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// Server-side apply bookkeeping, kept as written and never interpreted here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_fields: Option<serde_json::Value>,
}

impl ObjectMeta {
    /// Metadata with a name and namespace (empty namespace for cluster-scoped kinds).
    pub fn named(namespace: &str, name: &str) -> Self {
        ObjectMeta {
            name: name.to_string(),
            namespace: namespace.to_string(),
            ..ObjectMeta::default()
        }
    }

    /// The value of a label, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// The value of an annotation, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    /// True once deletion has been requested.
    pub fn is_deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    /// True when the finalizer is present.
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

/// A reference from a dependent to its owner (`metadata.ownerReferences[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OwnerReference {
    /// Owner's apiVersion.
    pub api_version: String,
    /// Owner's kind.
    pub kind: String,
    /// Owner's name.
    pub name: String,
    /// Owner's uid.
    pub uid: String,
    /// True when the owner is the managing controller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// True when the owner may not be deleted before this dependent (foreground deletion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// Status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known.
    Unknown,
}

impl ConditionStatus {
    /// The wire spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One status condition (`metav1.Condition`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`, `Scheduled`.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Programmatic CamelCase reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
}

impl Condition {
    /// A condition without observed generation or transition time.
    pub fn new(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Self {
        Condition {
            type_: type_.to_string(),
            status,
            observed_generation: None,
            last_transition_time: None,
            reason: reason.to_string(),
            message: message.to_string(),
        }
    }
}

/// The condition of the given type, if any.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of that type is present with status True.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True)
}

/// Sets `new` in `conditions` the way `meta.SetStatusCondition` does: a new type is appended
/// (its transition time defaults to `now`); an existing one takes the new status, reason,
/// message and observed generation, and its `lastTransitionTime` changes only when the status
/// changes (to `new`'s time if given, else `now`). Returns true when anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition, now: DateTime<Utc>) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        let mut new = new;
        if new.last_transition_time.is_none() {
            new.last_transition_time = Some(Time::new(now));
        }
        conditions.push(new);
        return true;
    };
    let mut changed = false;
    if existing.status != new.status {
        existing.status = new.status;
        existing.last_transition_time = Some(new.last_transition_time.unwrap_or(Time::new(now)));
        changed = true;
    }
    if existing.reason != new.reason {
        existing.reason = new.reason;
        changed = true;
    }
    if existing.message != new.message {
        existing.message = new.message;
        changed = true;
    }
    if existing.observed_generation != new.observed_generation {
        existing.observed_generation = new.observed_generation;
        changed = true;
    }
    changed
}

/// Removes the condition of that type; true when one was removed.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// A typed kind: its `apiVersion`, `kind` and metadata.
pub trait Object {
    /// `group/version` written in `apiVersion`.
    const API_VERSION: &'static str;
    /// CamelCase kind.
    const KIND: &'static str;
    /// The object's metadata.
    fn metadata(&self) -> &ObjectMeta;
    /// The object's metadata, mutable.
    fn metadata_mut(&mut self) -> &mut ObjectMeta;
}

/// Implements [`Object`] for a struct with `metadata`, plus a `new(meta, spec)` constructor
/// that fills `apiVersion` and `kind`.
macro_rules! impl_object {
    ($ty:ty, $api_version:expr, $kind:expr) => {
        impl $crate::meta::Object for $ty {
            const API_VERSION: &'static str = $api_version;
            const KIND: &'static str = $kind;
            fn metadata(&self) -> &$crate::meta::ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut $crate::meta::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use impl_object;

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        Time::parse(s).unwrap().as_datetime()
    }

    #[test]
    fn time_wire_form() {
        let cases = [
            ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z"),
            ("2024-05-01T10:00:00.987654Z", "2024-05-01T10:00:00Z"),
            ("2024-05-01T12:00:00+02:00", "2024-05-01T10:00:00Z"),
            ("2024-05-01t10:00:00z", "2024-05-01T10:00:00Z"),
        ];
        for (input, want) in cases {
            let t = Time::parse(input).unwrap();
            assert_eq!(t.to_string(), want, "{input}");
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{want}\""));
            let back: Time = serde_json::from_str(&json).unwrap();
            assert_eq!(back, t);
        }
        for bad in ["", "2024-05-01", "yesterday", "2024-05-01 10:00:00"] {
            assert!(Time::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn object_meta_omits_empty_fields_and_accepts_kubernetes_nulls() {
        let meta: ObjectMeta =
            serde_json::from_str(r#"{"name":"a","creationTimestamp":null}"#).unwrap();
        assert_eq!(meta.name, "a");
        assert_eq!(serde_json::to_string(&meta).unwrap(), r#"{"name":"a"}"#);
    }

    #[test]
    fn set_condition_changes_transition_time_only_on_status_change() {
        let t0 = at("2024-05-01T10:00:00Z");
        let t1 = at("2024-05-01T11:00:00Z");
        let mut conds = Vec::new();
        assert!(set_condition(
            &mut conds,
            Condition::new("Ready", ConditionStatus::True, "ClusterReady", "ok"),
            t0
        ));
        assert_eq!(conds[0].last_transition_time, Some(Time::new(t0)));
        // Same status, new reason: changed, transition time kept.
        assert!(set_condition(
            &mut conds,
            Condition::new("Ready", ConditionStatus::True, "Other", "ok"),
            t1
        ));
        assert_eq!(conds[0].reason, "Other");
        assert_eq!(conds[0].last_transition_time, Some(Time::new(t0)));
        // Identical: nothing changes.
        assert!(!set_condition(
            &mut conds,
            Condition::new("Ready", ConditionStatus::True, "Other", "ok"),
            t1
        ));
        // Status flips: transition time moves.
        assert!(set_condition(
            &mut conds,
            Condition::new("Ready", ConditionStatus::False, "ClusterNotReachable", "x"),
            t1
        ));
        assert_eq!(conds[0].last_transition_time, Some(Time::new(t1)));
        assert_eq!(conds.len(), 1);
        assert!(!is_condition_true(&conds, "Ready"));
        assert!(remove_condition(&mut conds, "Ready"));
        assert!(conds.is_empty());
    }
}
