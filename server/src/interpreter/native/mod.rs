//! Flotilla's built-in rules for Kubernetes' own kinds (Karmada's "native" interpreter): which
//! kinds are known ([`WellKnownKind`]), which operations each implements ([`has_rule`]), and the
//! rules themselves, one module per operation. Missing fields read as zero or empty, as a typed
//! Kubernetes object would; a field of the wrong type is a [`FieldError`].

pub mod aggregate;
pub mod dependencies;
pub mod health;
pub mod reflect;
pub mod replica;

use serde_json::{Map, Value};

use super::{Gvk, Operation};

/// The Kubernetes kinds with native rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WellKnownKind {
    /// `apps/v1 Deployment`.
    Deployment,
    /// `apps/v1 StatefulSet`.
    StatefulSet,
    /// `apps/v1 ReplicaSet`.
    ReplicaSet,
    /// `apps/v1 DaemonSet`.
    DaemonSet,
    /// `batch/v1 Job`.
    Job,
    /// `batch/v1 CronJob`.
    CronJob,
    /// `v1 Pod`.
    Pod,
    /// `v1 Service`.
    Service,
    /// `networking.k8s.io/v1 Ingress`.
    Ingress,
    /// `v1 PersistentVolumeClaim`.
    PersistentVolumeClaim,
    /// `v1 PersistentVolume`.
    PersistentVolume,
    /// `policy/v1 PodDisruptionBudget`.
    PodDisruptionBudget,
    /// `autoscaling/v2 HorizontalPodAutoscaler`.
    HorizontalPodAutoscaler,
    /// `multicluster.x-k8s.io/v1alpha1 ServiceImport`.
    ServiceImport,
}

impl WellKnownKind {
    /// Every well-known kind.
    pub const ALL: [WellKnownKind; 14] = [
        WellKnownKind::Deployment,
        WellKnownKind::StatefulSet,
        WellKnownKind::ReplicaSet,
        WellKnownKind::DaemonSet,
        WellKnownKind::Job,
        WellKnownKind::CronJob,
        WellKnownKind::Pod,
        WellKnownKind::Service,
        WellKnownKind::Ingress,
        WellKnownKind::PersistentVolumeClaim,
        WellKnownKind::PersistentVolume,
        WellKnownKind::PodDisruptionBudget,
        WellKnownKind::HorizontalPodAutoscaler,
        WellKnownKind::ServiceImport,
    ];

    /// `(apiVersion, kind)` of this kind.
    pub fn api_version_kind(self) -> (&'static str, &'static str) {
        match self {
            WellKnownKind::Deployment => ("apps/v1", "Deployment"),
            WellKnownKind::StatefulSet => ("apps/v1", "StatefulSet"),
            WellKnownKind::ReplicaSet => ("apps/v1", "ReplicaSet"),
            WellKnownKind::DaemonSet => ("apps/v1", "DaemonSet"),
            WellKnownKind::Job => ("batch/v1", "Job"),
            WellKnownKind::CronJob => ("batch/v1", "CronJob"),
            WellKnownKind::Pod => ("v1", "Pod"),
            WellKnownKind::Service => ("v1", "Service"),
            WellKnownKind::Ingress => ("networking.k8s.io/v1", "Ingress"),
            WellKnownKind::PersistentVolumeClaim => ("v1", "PersistentVolumeClaim"),
            WellKnownKind::PersistentVolume => ("v1", "PersistentVolume"),
            WellKnownKind::PodDisruptionBudget => ("policy/v1", "PodDisruptionBudget"),
            WellKnownKind::HorizontalPodAutoscaler => ("autoscaling/v2", "HorizontalPodAutoscaler"),
            WellKnownKind::ServiceImport => ("multicluster.x-k8s.io/v1alpha1", "ServiceImport"),
        }
    }

    /// This kind's GVK.
    pub fn gvk(self) -> Gvk {
        let (api_version, kind) = self.api_version_kind();
        Gvk::new(api_version, kind)
    }

    /// The well-known kind a GVK is, if any.
    pub fn of(gvk: &Gvk) -> Option<WellKnownKind> {
        WellKnownKind::ALL.into_iter().find(|k| {
            let (api_version, kind) = k.api_version_kind();
            gvk.api_version == api_version && gvk.kind == kind
        })
    }

    /// Where the pod template's `spec` is (`spec.template.spec` for workloads); `None` for
    /// kinds without pods.
    pub fn pod_spec_path(self) -> Option<&'static [&'static str]> {
        match self {
            WellKnownKind::Deployment
            | WellKnownKind::StatefulSet
            | WellKnownKind::ReplicaSet
            | WellKnownKind::DaemonSet
            | WellKnownKind::Job => Some(&["spec", "template", "spec"]),
            WellKnownKind::CronJob => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
            WellKnownKind::Pod => Some(&["spec"]),
            _ => None,
        }
    }
}

/// The counters of a DaemonSet's status, in the order Kubernetes lists them: what the
/// aggregate rule sums over the members and the reflect rule copies from one.
pub const DAEMON_SET_COUNTERS: &[&str] = &[
    "currentNumberScheduled",
    "desiredNumberScheduled",
    "numberAvailable",
    "numberMisscheduled",
    "numberReady",
    "updatedNumberScheduled",
    "numberUnavailable",
];

/// Whether the native rules implement `operation` for `kind` (the tables of Karmada's
/// `pkg/resourceinterpreter/default/native`, plus ReplicaSet replicas/aggregation).
pub fn has_rule(kind: WellKnownKind, operation: Operation) -> bool {
    use WellKnownKind as K;
    match operation {
        Operation::InterpretReplica => matches!(
            kind,
            K::Deployment | K::StatefulSet | K::ReplicaSet | K::Job | K::Pod
        ),
        Operation::ReviseReplica => {
            matches!(
                kind,
                K::Deployment | K::StatefulSet | K::ReplicaSet | K::Job
            )
        }
        Operation::Retain => false,
        Operation::AggregateStatus => {
            !matches!(kind, K::HorizontalPodAutoscaler | K::ServiceImport)
        }
        Operation::InterpretStatus => matches!(
            kind,
            K::Deployment
                | K::StatefulSet
                | K::ReplicaSet
                | K::DaemonSet
                | K::Job
                | K::Service
                | K::Ingress
                | K::PodDisruptionBudget
                | K::HorizontalPodAutoscaler
        ),
        Operation::InterpretHealth => health::has_rule(kind),
        Operation::InterpretDependency => {
            kind.pod_spec_path().is_some() || matches!(kind, K::Ingress | K::ServiceImport)
        }
    }
}

/// A field of the wrong shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field {path}: {problem}")]
pub struct FieldError {
    /// Dotted path of the field (`status.readyReplicas`).
    pub path: String,
    /// What was wrong.
    pub problem: String,
}

impl FieldError {
    pub(crate) fn new(path: &[&str], problem: impl Into<String>) -> Self {
        FieldError {
            path: path.join("."),
            problem: problem.into(),
        }
    }
}

/// The value at `path`; `Ok(None)` when a step is missing or null; an error when a step
/// that must be an object is something else.
pub(crate) fn lookup<'a>(v: &'a Value, path: &[&str]) -> Result<Option<&'a Value>, FieldError> {
    let mut cur = v;
    for (i, key) in path.iter().enumerate() {
        match cur {
            Value::Object(map) => match map.get(*key) {
                None | Some(Value::Null) => return Ok(None),
                Some(next) => cur = next,
            },
            Value::Null => return Ok(None),
            _ => return Err(FieldError::new(&path[..i], "expected an object")),
        }
    }
    Ok(Some(cur))
}

/// An integer field; missing reads as `None`. Whole-number floats (`2.0`) are accepted.
pub(crate) fn opt_int(v: &Value, path: &[&str]) -> Result<Option<i64>, FieldError> {
    match lookup(v, path)? {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            })
            .map(Some)
            .ok_or_else(|| FieldError::new(path, format!("expected an integer, got {n}"))),
        Some(other) => Err(FieldError::new(
            path,
            format!("expected an integer, got {other}"),
        )),
    }
}

/// An integer field; missing reads as 0.
pub(crate) fn int(v: &Value, path: &[&str]) -> Result<i64, FieldError> {
    Ok(opt_int(v, path)?.unwrap_or(0))
}

/// An `int32` field (replica counts); missing reads as `None`.
pub(crate) fn opt_i32(v: &Value, path: &[&str]) -> Result<Option<i32>, FieldError> {
    opt_int(v, path)?
        .map(|n| {
            i32::try_from(n).map_err(|_| FieldError::new(path, format!("{n} is out of range")))
        })
        .transpose()
}

/// A string field; missing reads as `""`.
pub(crate) fn string<'a>(v: &'a Value, path: &[&str]) -> Result<&'a str, FieldError> {
    match lookup(v, path)? {
        None => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(FieldError::new(
            path,
            format!("expected a string, got {other}"),
        )),
    }
}

/// A list field; missing reads as empty.
pub(crate) fn array<'a>(v: &'a Value, path: &[&str]) -> Result<&'a [Value], FieldError> {
    match lookup(v, path)? {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(FieldError::new(
            path,
            format!("expected a list, got {other}"),
        )),
    }
}

/// An object field; missing reads as `None`.
pub(crate) fn object<'a>(
    v: &'a Value,
    path: &[&str],
) -> Result<Option<&'a Map<String, Value>>, FieldError> {
    match lookup(v, path)? {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(FieldError::new(
            path,
            format!("expected an object, got {other}"),
        )),
    }
}

/// The object's `status` as a map (empty when absent).
pub(crate) fn status_map(v: &Value) -> Result<Map<String, Value>, FieldError> {
    Ok(object(v, &["status"])?.cloned().unwrap_or_default())
}

/// `metadata.namespace`.
pub(crate) fn namespace(v: &Value) -> Result<&str, FieldError> {
    string(v, &["metadata", "namespace"])
}

/// Sets `path` (creating objects on the way) to `value`.
pub(crate) fn set(v: &mut Value, path: &[&str], value: Value) -> Result<(), FieldError> {
    let Some((last, parents)) = path.split_last() else {
        *v = value;
        return Ok(());
    };
    let mut cur = v;
    for (i, key) in parents.iter().enumerate() {
        if cur.is_null() {
            *cur = Value::Object(Map::new());
        }
        let Value::Object(map) = cur else {
            return Err(FieldError::new(&path[..i], "expected an object"));
        };
        cur = map
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if cur.is_null() {
        *cur = Value::Object(Map::new());
    }
    let Value::Object(map) = cur else {
        return Err(FieldError::new(parents, "expected an object"));
    };
    map.insert(last.to_string(), value);
    Ok(())
}
