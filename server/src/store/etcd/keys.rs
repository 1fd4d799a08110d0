//! Where the etcd engine keeps things: every key of a fleet lies under one prefix
//! (`--etcd-prefix`, `/flotilla` by default), so several fleets can share an etcd cluster.
//!
//! | key | value |
//! | --- | --- |
//! | `<prefix>/objects/<group or core>/<plural>/<namespace>/<name>` (or `/<name>`) | the object's JSON, without `resourceVersion` (it is the key's mod revision) |
//! | `<prefix>/kinds/<group or core>/<plural>` | the kind's `ResourceType` as JSON |
//! | `<prefix>/compact_rev_key` | the compactor's record (see `compactor.rs`) |
//! | `<prefix>/schema_version` | the layout's version, decimal (see `schema.rs`) |
//! | `<prefix>/leader/<lease id>` | a server's election key (see `leadership/elector.rs`) |
//!
//! Objects are ordered by key bytes, as Kubernetes' own keys in etcd are.

/// The key layout of one fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The layout under `prefix` (a trailing `/` is ignored; empty means the root).
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// The fleet's prefix, without a trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Every key of the fleet starts with this.
    pub fn root(&self) -> String {
        format!("{}/", self.prefix)
    }

    /// Every object key starts with this.
    pub fn objects(&self) -> String {
        format!("{}/objects/", self.prefix)
    }

    /// Every object of a kind (by storage name, `apps/deployments`) starts with this.
    pub fn kind(&self, storage: &str) -> String {
        format!("{}/objects/{storage}/", self.prefix)
    }

    /// The key of the object at storage key `key` (`namespace/name` or `name`).
    pub fn object(&self, storage: &str, key: &str) -> String {
        format!("{}/objects/{storage}/{key}", self.prefix)
    }

    /// Every kind record starts with this.
    pub fn kinds(&self) -> String {
        format!("{}/kinds/", self.prefix)
    }

    /// The record of a kind.
    pub fn kind_record(&self, storage: &str) -> String {
        format!("{}/kinds/{storage}", self.prefix)
    }

    /// The key of the layout's version.
    pub fn schema_version(&self) -> String {
        format!("{}/schema_version", self.prefix)
    }

    /// The compactor's key.
    pub fn compact_rev_key(&self) -> String {
        super::compactor::compact_rev_key(&self.prefix)
    }

    /// The storage name and storage key of an object key, or `None` for any other key.
    pub fn parse_object(&self, key: &[u8]) -> Option<(String, String)> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(&self.objects())?;
        let mut parts = rest.splitn(3, '/');
        let group = parts.next()?;
        let plural = parts.next()?;
        let object = parts.next().filter(|k| !k.is_empty())?;
        Some((format!("{group}/{plural}"), object.to_string()))
    }

    /// The storage name of a kind record key, or `None` for any other key.
    pub fn parse_kind_record(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        key.strip_prefix(&self.kinds())
            .filter(|k| !k.is_empty())
            .map(str::to_string)
    }
}

/// The end of the range of every key that starts with `prefix` (etcd's `range_end`).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_round_trip() {
        let keys = Keys::new("/flotilla/");
        let table = [
            ("apps/deployments", "ns/web"),
            ("core/namespaces", "default"),
            ("work.karmada.io/works", "karmada-es-member1/w"),
        ];
        for (storage, key) in table {
            let full = keys.object(storage, key);
            assert!(full.starts_with(&keys.kind(storage)));
            assert!(full.starts_with(&keys.objects()));
            assert_eq!(
                keys.parse_object(full.as_bytes()),
                Some((storage.to_string(), key.to_string()))
            );
        }
        assert_eq!(
            keys.parse_object(keys.kind_record("core/pods").as_bytes()),
            None
        );
        assert_eq!(
            keys.parse_kind_record(keys.kind_record("core/pods").as_bytes()),
            Some("core/pods".to_string())
        );
        assert_eq!(keys.parse_object(b"/flotilla/objects/core/pods/"), None);
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }
}
