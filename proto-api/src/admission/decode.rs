//! Decoding JSON into typed objects with errors that name the field at fault, by the rules of
//! the Kubernetes API server (see [`super::value_de`]): a struct must be a JSON object, a null
//! struct field means "absent", a null map value or list item is an error of the typed field
//! (raw JSON parts such as Work manifests keep their nulls).

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::value_de::{self, De};
use crate::validation::{FieldError, Path};

/// Decodes the object `value` as `T`, treating null struct fields as absent. Unknown fields are
/// ignored.
pub fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, FieldError> {
    if !value.is_object() {
        return Err(FieldError::invalid(
            &Path::new(""),
            "",
            "the object must be a JSON object",
        ));
    }
    T::deserialize(De::root(value)).map_err(decode_error)
}

/// Text between each pair of backticks.
fn backticked(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

fn decode_error(err: value_de::Error) -> FieldError {
    let path = err.path.unwrap_or_else(|| Path::new(""));
    // A JSON null reaches serde's visitors as a unit value; say it as JSON does.
    let msg = err.message.replace("unit value", "null");
    let msg = msg.as_str();
    if let Some(field) = msg
        .strip_prefix("missing field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        return FieldError::required(&path.child(field), "Required value");
    }
    if let Some(rest) = msg.strip_prefix("unknown variant ") {
        let (variant, expected) = rest.split_once(", expected").unwrap_or((rest, ""));
        let variant = variant.trim_matches('`');
        return FieldError::not_supported(&path, variant, &backticked(expected));
    }
    FieldError::invalid(&path, "", msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PropagationPolicy;
    use crate::validation::FieldErrorKind;
    use serde_json::json;

    #[test]
    fn decode_errors_name_the_field() {
        let cases = [
            (
                json!({"spec": {"placement": {"spreadConstraints": [{}, {"maxGroups": "two"}]}}}),
                "spec.placement.spreadConstraints[1].maxGroups",
                FieldErrorKind::Invalid,
                "invalid type",
            ),
            (
                json!({"spec": {"failover": {"application": {"purgeMode": "Soon"}}}}),
                "spec.failover.application.purgeMode",
                FieldErrorKind::NotSupported,
                "\"Immediately\", \"Directly\", \"Graciously\", \"Gracefully\", \"Never\"",
            ),
            (
                json!({"spec": {"placement": {"clusterTolerations": [{"operator": "Maybe"}]}}}),
                "spec.placement.clusterTolerations[0].operator",
                FieldErrorKind::NotSupported,
                "Unsupported value: \"Maybe\"",
            ),
            (
                json!({"spec": {"placement": {"clusterAffinity": {"fieldSelector": {
                    "matchExpressions": [{"key": "region", "values": ["a"]}]}}}}}),
                "spec.placement.clusterAffinity.fieldSelector.matchExpressions[0].operator",
                FieldErrorKind::Required,
                "Required value",
            ),
            (
                json!({"metadata": {"labels": {"a": 1}}}),
                "metadata.labels.a",
                FieldErrorKind::Invalid,
                "expected a string",
            ),
            (
                json!([]),
                "",
                FieldErrorKind::Invalid,
                "must be a JSON object",
            ),
        ];
        for (value, path, kind, msg) in cases {
            let err = decode::<PropagationPolicy>(&value).expect_err(path);
            assert_eq!(err.path, path, "{err:?}");
            assert_eq!(err.kind, kind, "{err:?}");
            assert!(err.message.contains(msg), "{err:?}");
        }
    }

    #[test]
    fn structs_must_be_objects_and_typed_maps_take_no_nulls() {
        use crate::binding::ResourceBinding;
        use crate::cluster::Cluster;
        use crate::work::Work;
        let rb = |v: Value| decode::<ResourceBinding>(&v).err();
        let table: [(Option<FieldError>, &str, &str); 6] = [
            (rb(json!({"status": [1]})), "status", "invalid type: sequence"),
            (rb(json!({"status": "x"})), "status", "invalid type: string"),
            (
                rb(json!({"status": {"aggregatedStatus": [[1]]}})),
                "status.aggregatedStatus[0]",
                "invalid type: sequence",
            ),
            (
                decode::<Work>(&json!({"status": {"conditions": [7]}})).err(),
                "status.conditions[0]",
                "invalid type: integer",
            ),
            (
                decode::<Cluster>(&json!({"status": [true]})).err(),
                "status",
                "invalid type: sequence",
            ),
            (
                decode::<PropagationPolicy>(&json!({"spec": {"resourceSelectors": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchLabels": {"a": null}}}]}}))
                .err(),
                "spec.resourceSelectors[0].labelSelector.matchLabels.a",
                "invalid type: null, expected a string",
            ),
        ];
        for (err, path, msg) in table {
            let err = err.expect(path);
            assert_eq!(err.path, path, "{err:?}");
            assert!(err.message.contains(msg), "{err:?}");
        }
    }

    #[test]
    fn raw_json_keeps_its_nulls() {
        use crate::work::Work;
        let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": null}});
        let w: Work = decode(&json!({"metadata": {"labels": null},
            "spec": {"workload": {"manifests": [manifest.clone()]}}}))
        .unwrap();
        assert_eq!(
            serde_json::to_value(&w).unwrap()["spec"]["workload"]["manifests"][0],
            manifest
        );
    }

    #[test]
    fn nulls_mean_absent() {
        let pp: PropagationPolicy = decode(&json!({
            "metadata": {"name": "a", "labels": null, "creationTimestamp": null},
            "spec": {"resourceSelectors": null, "placement": {"clusterTolerations": null},
                     "failover": null}
        }))
        .unwrap();
        assert_eq!(pp.metadata.name, "a");
        assert!(pp.spec.failover.is_none());
    }
}
