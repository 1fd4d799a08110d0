//! Basic validation of the objects controllers write: ResourceBinding and
//! ClusterResourceBinding (required fields, eviction tasks), Work (manifests are objects) and
//! Event.

use crate::json_pointer::JsonPointer;
use std::collections::BTreeSet;

use super::meta::validate_object_meta;
use super::{FieldError, Path};
use crate::binding::{ClusterResourceBinding, ResourceBinding, ResourceBindingSpec};
use crate::event::Event;
use crate::names;
use crate::work::Work;

/// Longest eviction reason.
const REASON_MAX: usize = 32;
/// Longest eviction message.
const MESSAGE_MAX: usize = 1024;

/// Validates a ResourceBinding.
pub fn validate_resource_binding(
    new: &ResourceBinding,
    _old: Option<&ResourceBinding>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_object_meta(&new.metadata, true, names::dns1123_subdomain, &mut errs);
    validate_binding_spec(&new.spec, &mut errs);
    errs
}

/// Validates a ClusterResourceBinding.
pub fn validate_cluster_resource_binding(
    new: &ClusterResourceBinding,
    _old: Option<&ClusterResourceBinding>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_object_meta(&new.metadata, false, names::dns1123_subdomain, &mut errs);
    validate_binding_spec(&new.spec, &mut errs);
    errs
}

fn is_camel_reason(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':');
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars().all(ok)
        && s.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
}

fn validate_binding_spec(spec: &ResourceBindingSpec, errs: &mut Vec<FieldError>) {
    let path = Path::new("spec");
    let r = path.child("resource");
    for (field, value) in [
        ("apiVersion", &spec.resource.api_version),
        ("kind", &spec.resource.kind),
        ("name", &spec.resource.name),
    ] {
        if value.is_empty() {
            errs.push(FieldError::required(
                &r.child(field),
                format!("{field} is required"),
            ));
        }
    }
    if spec.replicas < 0 {
        errs.push(FieldError::invalid(
            &path.child("replicas"),
            spec.replicas,
            "must be greater than or equal to 0",
        ));
    }
    let mut names_seen = BTreeSet::new();
    for (i, c) in spec.clusters.iter().enumerate() {
        let p = path.child("clusters").index(i);
        if c.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), "name is required"));
        } else if !names_seen.insert(c.name.as_str()) {
            errs.push(FieldError::duplicate(&p.child("name"), &c.name));
        }
        if c.replicas < 0 {
            errs.push(FieldError::invalid(
                &p.child("replicas"),
                c.replicas,
                "must be greater than or equal to 0",
            ));
        }
    }
    let mut from_seen = BTreeSet::new();
    for (i, t) in spec.graceful_eviction_tasks.iter().enumerate() {
        let p = path.child("gracefulEvictionTasks").index(i);
        if t.from_cluster.is_empty() {
            errs.push(FieldError::required(
                &p.child("fromCluster"),
                "fromCluster is required",
            ));
        } else if !from_seen.insert(t.from_cluster.as_str()) {
            errs.push(FieldError::duplicate(
                &p.child("fromCluster"),
                &t.from_cluster,
            ));
        }
        if t.reason.is_empty() {
            errs.push(FieldError::required(
                &p.child("reason"),
                "reason is required",
            ));
        } else if t.reason.len() > REASON_MAX {
            errs.push(FieldError::too_long(
                &p.child("reason"),
                &t.reason,
                REASON_MAX,
            ));
        } else if !is_camel_reason(&t.reason) {
            errs.push(FieldError::invalid(
                &p.child("reason"),
                &t.reason,
                "must match ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            ));
        }
        if t.message.len() > MESSAGE_MAX {
            errs.push(FieldError::too_long(&p.child("message"), "…", MESSAGE_MAX));
        }
        if t.producer.is_empty() {
            errs.push(FieldError::required(
                &p.child("producer"),
                "producer is required",
            ));
        }
        if let Some(secs) = t.grace_period_seconds {
            if secs <= 0 {
                errs.push(FieldError::invalid(
                    &p.child("gracePeriodSeconds"),
                    secs,
                    "must be greater than 0",
                ));
            }
        }
        if let Some(r) = t.replicas {
            if r < 0 {
                errs.push(FieldError::invalid(
                    &p.child("replicas"),
                    r,
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
}

/// Validates a Work: every manifest must be an object with apiVersion, kind and a name.
pub fn validate_work(new: &Work, _old: Option<&Work>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_object_meta(&new.metadata, true, names::dns1123_subdomain, &mut errs);
    let path = Path::new("spec").child("workload").child("manifests");
    for (i, m) in new.spec.workload.manifests.iter().enumerate() {
        let p = path.index(i);
        if !m.is_object() {
            errs.push(FieldError::invalid(&p, "", "a manifest must be an object"));
            continue;
        }
        let text = |ptr: &str| m.lookup(ptr).and_then(|v| v.as_str()).unwrap_or_default();
        for (field, ptr) in [
            ("apiVersion", "/apiVersion"),
            ("kind", "/kind"),
            ("metadata.name", "/metadata/name"),
        ] {
            if text(ptr).is_empty() {
                errs.push(FieldError::required(
                    &p.child(field),
                    format!("{field} is required"),
                ));
            }
        }
    }
    errs
}

/// Validates an Event: it must name the object it is about.
pub fn validate_event(new: &Event, _old: Option<&Event>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_object_meta(&new.metadata, true, names::dns1123_subdomain, &mut errs);
    let p = Path::new("involvedObject");
    if new.involved_object.kind.is_empty() {
        errs.push(FieldError::required(&p.child("kind"), "kind is required"));
    }
    if new.involved_object.name.is_empty() {
        errs.push(FieldError::required(&p.child("name"), "name is required"));
    }
    errs
}
