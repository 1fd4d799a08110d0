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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
