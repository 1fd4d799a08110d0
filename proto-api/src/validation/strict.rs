//! Strict field validation (`?fieldValidation=Strict`): the fields of an object that its typed
//! kind does not know. The object is decoded into its kind and the JSON keys are compared with
//! the fields each struct declares (see [`crate::shape`]); raw JSON parts (manifests, member
//! status) accept anything.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::{FieldError, FieldErrorKind, Path};
use crate::admission::{decode, AdmittedKind};
use crate::binding::{ClusterResourceBinding, ResourceBinding};
use crate::cluster::Cluster;
use crate::event::Event;
use crate::policy::{ClusterPropagationPolicy, ClusterTaintPolicy, PropagationPolicy};
use crate::shape::{shape_of, Shape};
use crate::work::Work;

/// The fields of `obj` unknown to the typed `kind` (one error each, path `spec.foo`).
/// Kinds Flotilla does not own have no unknown fields; an object that does not decode yields
/// its decode error.
pub fn strict_unknown_fields(kind: AdmittedKind, obj: &Value) -> Vec<FieldError> {
    match kind {
        AdmittedKind::Cluster => unknown::<Cluster>(obj),
        AdmittedKind::PropagationPolicy => unknown::<PropagationPolicy>(obj),
        AdmittedKind::ClusterPropagationPolicy => unknown::<ClusterPropagationPolicy>(obj),
        AdmittedKind::ClusterTaintPolicy => unknown::<ClusterTaintPolicy>(obj),
        AdmittedKind::ResourceBinding => unknown::<ResourceBinding>(obj),
        AdmittedKind::ClusterResourceBinding => unknown::<ClusterResourceBinding>(obj),
        AdmittedKind::Work => unknown::<Work>(obj),
        AdmittedKind::Event => unknown::<Event>(obj),
    }
}

fn unknown<T: Serialize + DeserializeOwned>(obj: &Value) -> Vec<FieldError> {
    let typed: T = match decode(obj) {
        Ok(t) => t,
        Err(e) => return vec![e],
    };
    let mut out = Vec::new();
    walk(obj, &shape_of(&typed), &Path::new(""), &mut out);
    out
}

fn walk(value: &Value, shape: &Shape, path: &Path, out: &mut Vec<FieldError>) {
    match (value, shape) {
        (Value::Object(map), Shape::Struct(_)) => {
            for (k, v) in map {
                let p = path.child(k);
                if shape.declares(k) {
                    walk(v, shape.child(k), &p, out);
                } else {
                    out.push(FieldError {
                        path: p.as_str().to_string(),
                        kind: FieldErrorKind::Invalid,
                        value: None,
                        message: format!("unknown field \"{}\"", p.as_str()),
                    });
                }
            }
        }
        (Value::Object(map), Shape::Map(_)) => {
            for (k, v) in map {
                walk(v, shape.child(k), &path.child(k), out);
            }
        }
        (Value::Array(items), Shape::Seq(_)) => {
            for (i, v) in items.iter().enumerate() {
                walk(v, shape.element(i), &path.index(i), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_each_unknown_field_with_its_path() {
        let pp = json!({
            "apiVersion": "policy.karmada.io/v1alpha1",
            "kind": "PropagationPolicy",
            "metadata": {"name": "p", "namespace": "default", "colour": "red"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "nmae": "x"}],
                "propagateDeps": false,
                "placement": {"clusterAffinity": {"clusterNames": ["a"], "exclude": []},
                              "spreadConstraints": [{"maxgroups": 1, "minGroups": 0}]},
                "failover": {"cluster": {"purgeMode": "Never", "gracePeriod": 5}}
            }
        });
        let errs = strict_unknown_fields(AdmittedKind::PropagationPolicy, &pp);
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "metadata.colour",
                "spec.resourceSelectors[0].nmae",
                "spec.placement.spreadConstraints[0].maxgroups",
                "spec.failover.cluster.gracePeriod",
            ]
        );
        assert_eq!(
            errs[0].to_string(),
            "metadata.colour: unknown field \"metadata.colour\""
        );
    }

    #[test]
    fn raw_json_parts_accept_anything() {
        let work = json!({
            "metadata": {"name": "w", "namespace": "karmada-es-m1"},
            "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": "c"}, "anything": 1}]}},
            "status": {"manifestStatuses": [{"identifier": {"ordinal": 0, "kind": "ConfigMap"},
                                             "status": {"whatever": true}, "bogus": 1}]}
        });
        let errs = strict_unknown_fields(AdmittedKind::Work, &work);
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["status.manifestStatuses[0].bogus"]);
    }

    #[test]
    fn decode_errors_are_reported() {
        let errs = strict_unknown_fields(
            AdmittedKind::Cluster,
            &json!({"spec": {"syncMode": "Sideways"}}),
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "spec.syncMode");
    }
}
