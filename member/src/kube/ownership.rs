//! Whose object it is: the rules that keep the kube runtime from changing or deleting what
//! Flotilla did not create, as Karmada's `ObjectWatcher` does (`isManagedResource`,
//! `allowUpdate`), a little stricter.
//!
//! An object is Flotilla's when it carries the label `karmada.io/managed=true`. Applying a
//! manifest to a member that already holds an object of that name:
//!
//! | live object                                    | decision                               |
//! |------------------------------------------------|----------------------------------------|
//! | absent                                         | apply (not forced)                     |
//! | managed, same Work (or either names no Work)   | apply, forced (ours: take drift back)  |
//! | managed by another Work                        | conflict, unless the manifest says overwrite |
//! | not managed                                    | conflict, unless the manifest says overwrite |
//!
//! "Overwrite" is the manifest's annotation `work.karmada.io/conflict-resolution: overwrite`
//! (from the binding's `conflictResolution: Overwrite` or the template); abort is the
//! default. A delete touches only objects that are still managed.

use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::work::{
    CONFLICT_OVERWRITE, CONFLICT_RESOLUTION_ANNOTATION, MANAGED_LABEL, MANAGED_VALUE,
    WORK_NAMESPACE_ANNOTATION, WORK_NAME_ANNOTATION,
};
use serde_json::{Map, Value};

use crate::ObjectRef;

/// What to do with a manifest given the live object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyDecision {
    /// Server-side apply; `force` takes the fields other field managers own.
    Apply {
        /// Force the apply (the object is ours, or the Work asks to take it over).
        force: bool,
    },
    /// Leave the live object alone: the message says why and how to take it over.
    Conflict(String),
}

/// Whether an object carries `karmada.io/managed=true`.
pub fn is_managed(object: &Value) -> bool {
    label(object, MANAGED_LABEL) == Some(MANAGED_VALUE)
}

/// Whether a live object may be deleted by Flotilla: only while it is still managed.
pub fn deletable(live: &Value) -> bool {
    is_managed(live)
}

/// Whether the manifest asks to take over an existing object.
pub fn overwrites(manifest: &Value) -> bool {
    annotation(manifest, CONFLICT_RESOLUTION_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case(CONFLICT_OVERWRITE))
}

/// The Work (namespace, name) an object's annotations name, if both are there.
pub fn work_of(object: &Value) -> Option<(&str, &str)> {
    Some((
        annotation(object, WORK_NAMESPACE_ANNOTATION).filter(|s| !s.is_empty())?,
        annotation(object, WORK_NAME_ANNOTATION).filter(|s| !s.is_empty())?,
    ))
}

/// The decision for applying `manifest` (already marked, [`mark_managed`]) as `object` over
/// `live` (`None`: absent).
pub fn decide(object: &ObjectRef, manifest: &Value, live: Option<&Value>) -> ApplyDecision {
    let Some(live) = live else {
        return ApplyDecision::Apply { force: false };
    };
    let overwrite = overwrites(manifest);
    if !is_managed(live) {
        if overwrite {
            return ApplyDecision::Apply { force: true };
        }
        return ApplyDecision::Conflict(format!(
            "{object} already exists in the member cluster and was not created by Flotilla \
             (it has no {MANAGED_LABEL}={MANAGED_VALUE} label); it is left unchanged. \
             conflictResolution: Overwrite on the propagation policy takes it over"
        ));
    }
    match (work_of(live), work_of(manifest)) {
        (Some(theirs), Some(ours)) if theirs != ours && !overwrite => {
            ApplyDecision::Conflict(format!(
                "{object} in the member cluster belongs to Work {}/{}, not to Work {}/{}; \
                 it is left unchanged. conflictResolution: Overwrite on the propagation policy \
                 takes it over",
                theirs.0, theirs.1, ours.0, ours.1
            ))
        }
        _ => ApplyDecision::Apply { force: true },
    }
}

/// The manifest as it is applied: the managed label added; fields only the member may set
/// (`status`, `metadata.resourceVersion`, `uid`, `generation`, `creationTimestamp`,
/// `deletionTimestamp`, `deletionGracePeriodSeconds`, `selfLink`, `managedFields`) and those
/// that point into the control plane (`ownerReferences`, `finalizers`) removed; the namespace
/// set to `namespace` (`None`: the kind is cluster-scoped, no namespace).
pub fn mark_managed(manifest: &Value, namespace: Option<&str>) -> Value {
    let mut out = manifest.clone();
    let Some(root) = out.as_object_mut() else {
        return out;
    };
    root.remove("status");
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Some(meta) = meta.as_object_mut() {
        for field in [
            "resourceVersion",
            "uid",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
            "ownerReferences",
            "finalizers",
        ] {
            meta.remove(field);
        }
        match namespace {
            Some(ns) => {
                meta.insert("namespace".into(), Value::String(ns.to_string()));
            }
            None => {
                meta.remove("namespace");
            }
        }
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if !labels.is_object() {
            *labels = Value::Object(Map::new());
        }
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(
                MANAGED_LABEL.to_string(),
                Value::String(MANAGED_VALUE.to_string()),
            );
        }
    }
    out
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .lookup("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .lookup("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(
        managed: Option<&str>,
        work: Option<(&str, &str)>,
        resolution: Option<&str>,
    ) -> Value {
        let mut labels = Map::new();
        if let Some(v) = managed {
            labels.insert(MANAGED_LABEL.into(), json!(v));
        }
        let mut annotations = Map::new();
        if let Some((ns, name)) = work {
            annotations.insert(WORK_NAMESPACE_ANNOTATION.into(), json!(ns));
            annotations.insert(WORK_NAME_ANNOTATION.into(), json!(name));
        }
        if let Some(r) = resolution {
            annotations.insert(CONFLICT_RESOLUTION_ANNOTATION.into(), json!(r));
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn the_conflict_table() {
        let r = ObjectRef::new("apps/v1", "Deployment", "shop", "web");
        let w1 = Some(("karmada-es-m1", "web-deployment"));
        let w2 = Some(("karmada-es-m1", "other-deployment"));
        let apply = |force| Some(force);
        let conflict = None;
        #[rustfmt::skip]
        let table: [(&str, Option<Value>, Value, Option<bool>); 12] = [
            ("absent", None, object(Some("true"), w1, None), apply(false)),
            ("absent, overwrite", None, object(Some("true"), w1, Some("overwrite")), apply(false)),
            ("ours", Some(object(Some("true"), w1, None)), object(Some("true"), w1, None), apply(true)),
            ("ours, manifest names no work", Some(object(Some("true"), w1, None)), object(Some("true"), None, None), apply(true)),
            ("managed, live names no work", Some(object(Some("true"), None, None)), object(Some("true"), w1, None), apply(true)),
            ("another work's", Some(object(Some("true"), w2, None)), object(Some("true"), w1, None), conflict),
            ("another work's, overwrite", Some(object(Some("true"), w2, None)), object(Some("true"), w1, Some("overwrite")), apply(true)),
            ("foreign", Some(object(None, None, None)), object(Some("true"), w1, None), conflict),
            ("foreign, label false", Some(object(Some("false"), w1, None)), object(Some("true"), w1, None), conflict),
            ("foreign, abort", Some(object(None, None, None)), object(Some("true"), w1, Some("abort")), conflict),
            ("foreign, overwrite", Some(object(None, None, None)), object(Some("true"), w1, Some("overwrite")), apply(true)),
            ("foreign, Overwrite", Some(object(None, None, None)), object(Some("true"), w1, Some("Overwrite")), apply(true)),
        ];
        for (what, live, manifest, want) in table {
            let got = decide(&r, &manifest, live.as_ref());
            match (got, want) {
                (ApplyDecision::Apply { force }, Some(want)) => assert_eq!(force, want, "{what}"),
                (ApplyDecision::Conflict(message), None) => {
                    assert!(
                        message.starts_with("apps/v1 Deployment shop/web "),
                        "{what}: {message}"
                    );
                    assert!(message.contains("Overwrite"), "{what}: {message}");
                }
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
        let foreign = decide(
            &r,
            &object(Some("true"), w1, None),
            Some(&object(None, None, None)),
        );
        let ApplyDecision::Conflict(message) = foreign else {
            panic!("{foreign:?}")
        };
        assert!(message.contains("not created by Flotilla"), "{message}");
    }

    #[test]
    fn only_managed_objects_are_deleted() {
        let table = [
            (object(Some("true"), None, None), true),
            (object(Some("false"), None, None), false),
            (object(None, None, None), false),
            (
                json!({"metadata": {"labels": {MANAGED_LABEL: true}}}),
                false,
            ),
            (json!({}), false),
        ];
        for (i, (live, want)) in table.into_iter().enumerate() {
            assert_eq!(deletable(&live), want, "row {i}");
        }
    }

    #[test]
    fn manifests_are_marked_and_cleaned() {
        let manifest = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "elsewhere", "resourceVersion": "7", "uid": "u",
                "generation": 3, "creationTimestamp": "2024-01-01T00:00:00Z", "managedFields": [],
                "ownerReferences": [{"uid": "x"}], "finalizers": ["f"],
                "labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {"replicas": 2},
            "status": {"replicas": 9},
        });
        let got = mark_managed(&manifest, Some("shop"));
        assert_eq!(
            got,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop",
                    "labels": {"app": "web", MANAGED_LABEL: "true"}, "annotations": {"a": "b"}},
                "spec": {"replicas": 2},
            })
        );
        assert!(is_managed(&got));
        // Cluster-scoped: no namespace; no labels map yet: one is made; a managed label
        // that says otherwise is corrected.
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "namespace": "default", "labels": {MANAGED_LABEL: "false"}}});
        assert_eq!(
            mark_managed(&ns, None),
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "shop", "labels": {MANAGED_LABEL: "true"}}})
        );
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": null}});
        assert_eq!(
            mark_managed(&bare, Some("default")),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default", "labels": {MANAGED_LABEL: "true"}}})
        );
    }
}
