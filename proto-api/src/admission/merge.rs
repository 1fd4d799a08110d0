//! Writing a defaulted typed object back over the JSON the user sent without losing anything
//! they wrote. Known fields come from the typed encoding (so defaults appear and values are
//! normalised); fields the typed struct does not know, and known fields the encoding left out
//! because they were empty (`insecureSkipTLSVerification: false`), are kept as written. A known
//! field that defaulting removed (a migrated `zone`) stays removed, and `null` for a known
//! field is dropped (it means absent).

use serde_json::{Map, Value};

use crate::shape::Shape;

/// Merges `defaulted` (the typed encoding after defaulting) over `original`. `before` is the
/// typed encoding before defaulting; `shape` is the known structure of `defaulted`.
pub(crate) fn merge(
    original: &Value,
    defaulted: Value,
    before: Option<&Value>,
    shape: &Shape,
) -> Value {
    match (original, defaulted) {
        (Value::Object(orig), Value::Object(mut out)) => {
            let before = before.and_then(Value::as_object);
            let mut result = Map::new();
            for (key, ov) in orig {
                if let Some(dv) = out.remove(key) {
                    let merged = merge(ov, dv, before.and_then(|b| b.get(key)), shape.child(key));
                    result.insert(key.clone(), merged);
                } else if before.is_some_and(|b| b.contains_key(key)) {
                    // Defaulting removed a known field.
                } else if ov.is_null() && shape.declares(key) {
                    // `null` for a known field means absent.
                } else {
                    result.insert(key.clone(), ov.clone());
                }
            }
            result.extend(out);
            Value::Object(result)
        }
        (Value::Array(orig), Value::Array(out)) => {
            let before = before.and_then(Value::as_array);
            Value::Array(
                out.into_iter()
                    .enumerate()
                    .map(|(i, dv)| match orig.get(i) {
                        Some(ov) => merge(ov, dv, before.and_then(|b| b.get(i)), shape.element(i)),
                        None => dv,
                    })
                    .collect(),
            )
        }
        (_, defaulted) => defaulted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::shape::shape_of;
    use serde_json::json;

    #[test]
    fn keeps_unknown_and_explicit_empty_fields_drops_removed_ones() {
        let original = json!({
            "metadata": {"name": "m1", "creationTimestamp": null, "x-extra": {"a": null}},
            "spec": {"syncMode": "Push", "zone": "z1", "insecureSkipTLSVerification": false,
                     "futureField": [1, null]},
            "status": null
        });
        let mut c: Cluster = crate::admission::decode::decode(&original).unwrap();
        let before = serde_json::to_value(&c).unwrap();
        crate::defaulting::default_cluster(&mut c, chrono::Utc::now());
        let shape = shape_of(&c);
        let after = serde_json::to_value(&c).unwrap();
        let merged = merge(&original, after, Some(&before), &shape);
        assert_eq!(
            merged,
            json!({
                "metadata": {"name": "m1", "x-extra": {"a": null}},
                "spec": {"syncMode": "Push", "zones": ["z1"],
                         "insecureSkipTLSVerification": false, "futureField": [1, null]}
            })
        );
    }
}
