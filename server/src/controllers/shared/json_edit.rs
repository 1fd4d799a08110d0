//! Panic-free edits of stored JSON. `value["status"]["x"] = v` panics when `status` holds
//! something other than an object or null (a malformed status stored before validation, or by
//! a bug), and a controller that panics on one object stops reconciling it for good. These
//! helpers make each step of the path an object first, so a controller that owns a field
//! overwrites a malformed parent instead of crashing on it.

use serde_json::{Map, Value};

/// `v` as an object, replacing it with an empty one when it is anything else.
pub fn object_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(map) => map,
        _ => unreachable!("replaced by an object above"),
    }
}

/// Sets `obj.<path>` to `value`, making every step on the way an object.
pub fn set_path(obj: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *obj = value;
        return;
    };
    let mut at = obj;
    for step in parents {
        at = object_mut(at)
            .entry(step.to_string())
            .or_insert(Value::Null);
    }
    object_mut(at).insert(last.to_string(), value);
}

/// `old` (an object, or anything else, read as an empty one) with the top-level `fields` set:
/// in place where `old` has them, after its own fields where it has not, as [`set_path`] would
/// put them on a copy, but without copying the values the fields replace.
pub fn with_fields(old: Option<&Value>, fields: Vec<(&str, Value)>) -> Value {
    let mut fields: Vec<(&str, Option<Value>)> =
        fields.into_iter().map(|(k, v)| (k, Some(v))).collect();
    let mut out = Map::new();
    for (k, v) in old.and_then(Value::as_object).into_iter().flatten() {
        let new = fields
            .iter_mut()
            .find(|(name, _)| *name == k)
            .and_then(|(_, v)| v.take());
        out.insert(k.clone(), new.unwrap_or_else(|| v.clone()));
    }
    for (k, v) in fields {
        if let Some(v) = v {
            out.insert(k.to_string(), v);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn with_fields_sets_as_set_path_on_a_copy() {
        let table = [
            json!({"a": 1, "b": {"x": 1}, "c": 3}),
            json!({"c": 3}),
            json!({}),
            json!(null),
            json!([1]),
        ];
        for (i, old) in table.into_iter().enumerate() {
            let mut want = old.clone();
            set_path(&mut want, &["b"], json!(2));
            set_path(&mut want, &["d"], json!(4));
            let got = with_fields(Some(&old), vec![("b", json!(2)), ("d", json!(4))]);
            // The same fields in the same order.
            assert_eq!(got.to_string(), want.to_string(), "row {i}");
        }
        assert_eq!(with_fields(None, vec![("a", json!(1))]), json!({"a": 1}));
    }

    #[test]
    fn set_path_table() {
        let table = [
            (json!({}), vec!["status", "x"], json!({"status": {"x": 1}})),
            (
                json!({"status": [1]}),
                vec!["status", "x"],
                json!({"status": {"x": 1}}),
            ),
            (
                json!({"status": "bad"}),
                vec!["status", "x"],
                json!({"status": {"x": 1}}),
            ),
            (
                json!({"status": {"y": 2}}),
                vec!["status", "x"],
                json!({"status": {"y": 2, "x": 1}}),
            ),
            (
                json!({"metadata": {"annotations": 7}}),
                vec!["metadata", "annotations", "a/b"],
                json!({"metadata": {"annotations": {"a/b": 1}}}),
            ),
            (json!([]), vec!["spec"], json!({"spec": 1})),
            (json!({"a": 0}), vec![], json!(1)),
        ];
        for (mut obj, path, want) in table {
            set_path(&mut obj, &path, json!(1));
            assert_eq!(obj, want, "{path:?}");
        }
    }
}
