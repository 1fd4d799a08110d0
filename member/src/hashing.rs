//! Content hashes of JSON objects that do not depend on key order: the sim's pod-template
//! revisions and the applied-objects record's manifest hashes both use [`canonical_hash`], so
//! a manifest that comes back from the server with its keys reordered hashes the same.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Hex SHA-256 of the value's canonical form (object keys sorted, no whitespace).
pub fn canonical_hash(value: &Value) -> String {
    let mut hasher = Sha256::new();
    feed(&mut hasher, value);
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The first ten characters of [`canonical_hash`], the length of Kubernetes' template hashes.
pub fn short_hash(value: &Value) -> String {
    let mut h = canonical_hash(value);
    h.truncate(10);
    h
}

fn feed(hasher: &mut Sha256, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            hasher.update(b"{");
            for k in keys {
                feed(hasher, &Value::String(k.clone()));
                hasher.update(b":");
                feed(hasher, &map[k]);
                hasher.update(b",");
            }
            hasher.update(b"}");
        }
        Value::Array(items) => {
            hasher.update(b"[");
            for item in items {
                feed(hasher, item);
                hasher.update(b",");
            }
            hasher.update(b"]");
        }
        other => hasher.update(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":{"x":[1,"2"],"y":null}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":{"y":null,"x":[1,"2"]},"a":1}"#).unwrap();
        let c: Value = serde_json::from_str(r#"{"b":{"y":null,"x":["2",1]},"a":1}"#).unwrap();
        assert_eq!(canonical_hash(&a), canonical_hash(&b));
        assert_ne!(canonical_hash(&a), canonical_hash(&c));
        assert_eq!(canonical_hash(&a).len(), 64);
        assert_eq!(short_hash(&a).len(), 10);
        // Strings and numbers that print alike do not collide.
        assert_ne!(
            canonical_hash(&Value::from(1)),
            canonical_hash(&Value::from("1"))
        );
    }
}
