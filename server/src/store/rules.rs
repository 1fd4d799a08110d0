//! The object rules of the store, with no engine, lock or clock in them: given the stored
//! object (as read, with its resourceVersion), the incoming one and the time, what to write and
//! under which precondition. Both commit paths apply them: `KvStore` under its process-local
//! write lock, and the etcd engine in a transaction that compares each key's revision, so a
//! rule decided on a stale read never commits.
//!
//! The preconditions a commit must check are always the same: a create writes a key that
//! must be absent, and an update or a delete writes a key that must still hold the revision
//! the rule read ([`Precondition`]).

use super::meta::{self, invalid, FOREGROUND_FINALIZER};
use super::{DeleteOptions, Propagation, StoreError};
use flotilla_api::kinds::ResourceType;
use serde_json::Value;

/// Attempts at a free name for `generateName` before giving up.
pub(crate) const GENERATE_NAME_ATTEMPTS: usize = 8;

/// The reason of a Conflict on a stale resourceVersion (kube-apiserver's wording).
pub(crate) const STALE_REASON: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// What a commit checks of a key before it writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// The key holds nothing (a create).
    Absent,
    /// The key holds the object at this resourceVersion (an update or a delete).
    At(u64),
}

/// What of an object an update replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Everything but the status of a kind with a status subresource (`update`).
    Object,
    /// Only the status (`update_status`).
    Status,
    /// Everything, the status too (`update_with_status`).
    ObjectAndStatus,
}

/// Where a create goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateName {
    /// The object names itself: this name, at this storage key.
    Named { name: String, key: String },
    /// `metadata.generateName`: a name is this prefix and a random suffix
    /// ([`generated_name`]), tried until one is free.
    Generate { prefix: String },
}

/// Where a create goes: the namespace it is stored in (`None` for cluster-scoped kinds, whose
/// objects lose any namespace) and its name. Validates the metadata first.
pub fn create_target(
    res: &ResourceType,
    obj: &Value,
) -> Result<(Option<String>, CreateName), StoreError> {
    if !obj.is_object() {
        return Err(invalid("", "an object must be a JSON object"));
    }
    meta::validate_metadata(obj)?;
    let namespace = if res.namespaced {
        meta::namespace(obj).map(str::to_string)
    } else {
        None
    };
    let target = match meta::name(obj) {
        Some(name) => CreateName::Named {
            key: meta::object_key(res, namespace.as_deref(), name)?,
            name: name.to_string(),
        },
        None => match meta::meta_str(obj, "generateName").filter(|p| !p.is_empty()) {
            Some(prefix) => CreateName::Generate {
                prefix: prefix.to_string(),
            },
            None => return Err(invalid("metadata.name", "name or generateName is required")),
        },
    };
    Ok((namespace, target))
}

/// A fresh name for `generateName` and its storage key.
pub fn generated_name(
    res: &ResourceType,
    namespace: Option<&str>,
    prefix: &str,
) -> Result<(String, String), StoreError> {
    let name = format!("{prefix}{}", meta::generated_suffix());
    let key = meta::object_key(res, namespace, &name)?;
    Ok((name, key))
}

/// The object a create stores (its precondition is [`Precondition::Absent`]): the incoming one
/// with its name and namespace, a new `uid`, `creationTimestamp` `now` (RFC 3339, whole
/// seconds), `generation` 1, no deletion fields, `apiVersion` and `kind` filled in, and no
/// `status` when the kind has a status subresource. The resourceVersion is the commit's.
pub fn created(
    res: &ResourceType,
    mut obj: Value,
    name: &str,
    namespace: Option<&str>,
    now: &str,
    uid: &str,
) -> Result<Value, StoreError> {
    fill_type_meta(&mut obj, &res.api_version(), &res.kind)?;
    meta::set_meta(&mut obj, "name", Some(Value::from(name)))?;
    meta::set_meta(&mut obj, "namespace", namespace.map(Value::from))?;
    meta::set_meta(&mut obj, "uid", Some(Value::from(uid)))?;
    meta::set_meta(&mut obj, "creationTimestamp", Some(Value::from(now)))?;
    meta::set_meta(&mut obj, "generation", Some(Value::from(1)))?;
    meta::set_meta(&mut obj, "deletionTimestamp", None)?;
    meta::set_meta(&mut obj, "deletionGracePeriodSeconds", None)?;
    meta::set_meta(&mut obj, "resourceVersion", None)?;
    if res.status_subresource {
        meta::object_mut(&mut obj)?.remove("status");
    }
    Ok(obj)
}

/// The name and storage key an update names. Validates the metadata first.
pub fn update_target(res: &ResourceType, obj: &Value) -> Result<(String, String), StoreError> {
    if !obj.is_object() {
        return Err(invalid("", "an object must be a JSON object"));
    }
    meta::validate_metadata(obj)?;
    let Some(name) = meta::name(obj) else {
        return Err(invalid("metadata.name", "required"));
    };
    let namespace = if res.namespaced {
        meta::namespace(obj)
    } else {
        None
    };
    Ok((name.to_string(), meta::object_key(res, namespace, name)?))
}

/// The preconditions an update states itself: a non-empty `metadata.resourceVersion` must be
/// the stored one and a non-empty `metadata.uid` the stored uid (else Conflict).
pub fn check_update_preconditions(
    res: &ResourceType,
    name: &str,
    incoming: &Value,
    stored: &Value,
) -> Result<(), StoreError> {
    if let Some(wanted) = meta::resource_version(incoming)? {
        let current = meta::resource_version(stored)?.unwrap_or(0);
        if wanted != current {
            return Err(conflict(res, name, STALE_REASON));
        }
    }
    if let (Some(wanted), Some(current)) = (meta::uid(incoming), meta::uid(stored)) {
        if wanted != current {
            return Err(uid_conflict(res, name, wanted, current));
        }
    }
    Ok(())
}

/// What an update writes (its precondition is [`Precondition::At`] the stored resourceVersion).
#[derive(Clone, Debug, PartialEq)]
pub enum Updated {
    /// Nothing changes: the stored object is the answer, with no new resourceVersion.
    Unchanged,
    /// The object as it is stored next.
    Put(Value),
    /// The update removed the last finalizer of an object being deleted: it goes, and this is
    /// its last state.
    Remove(Value),
}

/// What an update of `stored` with `incoming` writes, for the part it replaces: `uid`,
/// `creationTimestamp`, the deletion fields and the namespace are kept; `generation` bumps when
/// anything outside `metadata` and `status` changed; a kind with a status subresource keeps its
/// stored status unless the status is what is written. While the object is being deleted no
/// finalizer may be added (Invalid), and removing the last one removes the object.
/// [`check_update_preconditions`] comes first.
pub fn updated(
    res: &ResourceType,
    stored: &Value,
    incoming: Value,
    part: Part,
) -> Result<Updated, StoreError> {
    let new = if part == Part::Status {
        meta::with_status_of(stored, incoming)?
    } else {
        let mut new = incoming;
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "resourceVersion",
        ] {
            meta::keep_meta(&mut new, stored, field)?;
        }
        let api_version = stored
            .get("apiVersion")
            .and_then(Value::as_str)
            .map_or_else(|| res.api_version(), str::to_string);
        let kind = stored
            .get("kind")
            .and_then(Value::as_str)
            .map_or_else(|| res.kind.clone(), str::to_string);
        fill_type_meta(&mut new, &api_version, &kind)?;
        if res.status_subresource && part == Part::Object {
            meta::keep_status(&mut new, stored)?;
        }
        let generation = super::generation_after_update(stored, &new);
        if generation != meta::generation(stored) {
            meta::set_meta(&mut new, "generation", Some(Value::from(generation)))?;
        }
        new
    };
    if new == *stored {
        return Ok(Updated::Unchanged);
    }
    if meta::is_deleting(stored) {
        let before = meta::finalizers(stored);
        let after = meta::finalizers(&new);
        if let Some(added) = after.iter().find(|f| !before.contains(f)) {
            return Err(invalid(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers [{added}]"
                ),
            ));
        }
        if after.is_empty() {
            return Ok(Updated::Remove(new));
        }
    }
    Ok(Updated::Put(new))
}

/// The preconditions a delete states: the stored uid and resourceVersion (Conflict).
pub fn check_delete_preconditions(
    res: &ResourceType,
    name: &str,
    stored: &Value,
    opts: &DeleteOptions,
) -> Result<(), StoreError> {
    if let Some(wanted) = &opts.precondition_uid {
        let current = meta::uid(stored).unwrap_or_default();
        if wanted != current {
            return Err(uid_conflict(res, name, wanted, current));
        }
    }
    if let Some(wanted) = opts.precondition_resource_version {
        let current = meta::resource_version(stored)?.unwrap_or(0);
        if wanted != current {
            return Err(conflict(
                res,
                name,
                format!(
                    "Precondition failed: ResourceVersion in precondition: {wanted}, ResourceVersion in object meta: {current}"
                ),
            ));
        }
    }
    Ok(())
}

/// What a delete does to the stored object (its precondition is [`Precondition::At`] the
/// stored resourceVersion). Orphaning the dependents is the caller's, in the same commit.
#[derive(Clone, Debug, PartialEq)]
pub enum Deletion {
    /// The object is already being deleted: nothing changes for it.
    AlreadyDeleting,
    /// No finalizer holds it: it is removed.
    Remove,
    /// Finalizers hold it (a foreground deletion with dependents adds
    /// `foregroundDeletion`): it is stored like this, with `deletionTimestamp` `now`,
    /// `deletionGracePeriodSeconds` 0 and its generation bumped, and goes with its last
    /// finalizer.
    MarkDeleting(Value),
}

/// What a delete of `stored` does; `has_dependents` says whether any object names it as an
/// owner (only a foreground deletion asks).
pub fn deletion(
    stored: &Value,
    propagation: Propagation,
    has_dependents: bool,
    now: &str,
) -> Result<Deletion, StoreError> {
    if meta::is_deleting(stored) {
        return Ok(Deletion::AlreadyDeleting);
    }
    let mut finalizers = meta::finalizers(stored);
    let wait_for_dependents = propagation == Propagation::Foreground && has_dependents;
    if wait_for_dependents && !finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
        finalizers.push(FOREGROUND_FINALIZER.to_string());
    }
    if finalizers.is_empty() {
        return Ok(Deletion::Remove);
    }
    let mut obj = stored.clone();
    let generation = meta::generation(&obj) + 1;
    meta::set_finalizers(&mut obj, &finalizers)?;
    meta::set_meta(&mut obj, "deletionTimestamp", Some(Value::from(now)))?;
    meta::set_meta(&mut obj, "deletionGracePeriodSeconds", Some(Value::from(0)))?;
    meta::set_meta(&mut obj, "generation", Some(Value::from(generation)))?;
    Ok(Deletion::MarkDeleting(obj))
}

/// What garbage collection does to an owner in foreground deletion once none of its
/// dependents is left: the `foregroundDeletion` finalizer goes, and with it the object when no
/// other finalizer holds it ([`Updated::Remove`]).
pub fn foreground_released(owner: &Value) -> Result<Updated, StoreError> {
    let mut released = owner.clone();
    let mut finalizers = meta::finalizers(owner);
    finalizers.retain(|f| f != FOREGROUND_FINALIZER);
    meta::set_finalizers(&mut released, &finalizers)?;
    if finalizers.is_empty() {
        Ok(Updated::Remove(released))
    } else if released == *owner {
        Ok(Updated::Unchanged)
    } else {
        Ok(Updated::Put(released))
    }
}

/// Sets `apiVersion` and `kind` when the object lacks them (or has them empty).
pub(crate) fn fill_type_meta(
    obj: &mut Value,
    api_version: &str,
    kind: &str,
) -> Result<(), StoreError> {
    let map = meta::object_mut(obj)?;
    for (field, value) in [("apiVersion", api_version), ("kind", kind)] {
        let missing = map
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if missing {
            map.insert(field.to_string(), Value::String(value.to_string()));
        }
    }
    Ok(())
}

/// Version tag of continue tokens that carry the list's revision: `k2:<revision>:<key>`.
const CONTINUE_TAG: &str = "k2:";
/// Version tag of the first tokens, which carry the key alone (still read: a token handed out
/// before an upgrade goes on working, at the current revision, as before).
const CONTINUE_TAG_V1: &str = "k1:";

/// The continue token of a page of a list read at `revision` that ended at storage key `key`
/// (the next page starts after it, read at the same revision where the backend can).
pub(crate) fn encode_continue(key: &str, revision: u64) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("{CONTINUE_TAG}{revision}:{key}"))
}

/// The storage key a continue token ends at and the revision its list was read at (none in a
/// first-version token); Invalid (`continue`) unless it is a token of a list of keys under
/// `prefix`.
pub(crate) fn decode_continue(
    token: &str,
    prefix: &str,
) -> Result<(String, Option<u64>), StoreError> {
    use base64::Engine as _;
    let bad = || invalid("continue", "not a continue token of this list");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (key, revision) = match text.strip_prefix(CONTINUE_TAG) {
        Some(rest) => {
            let (revision, key) = rest.split_once(':').ok_or_else(bad)?;
            let revision = revision.parse::<u64>().map_err(|_| bad())?;
            (key, Some(revision).filter(|r| *r > 0))
        }
        None => (text.strip_prefix(CONTINUE_TAG_V1).ok_or_else(bad)?, None),
    };
    if !key.starts_with(prefix) {
        return Err(bad());
    }
    Ok((key.to_string(), revision))
}

/// A Conflict on `name`.
pub(crate) fn conflict(res: &ResourceType, name: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Conflict {
        resource: res.qualified_name(),
        name: name.to_string(),
        reason: reason.into(),
    }
}

fn uid_conflict(res: &ResourceType, name: &str, wanted: &str, current: &str) -> StoreError {
    conflict(
        res,
        name,
        format!(
            "Precondition failed: UID in precondition: {wanted}, UID in object meta: {current}"
        ),
    )
}

/// A NotFound of `name`.
pub(crate) fn not_found(res: &ResourceType, name: &str) -> StoreError {
    StoreError::NotFound {
        resource: res.qualified_name(),
        name: name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use flotilla_api::kinds::{builtin_by_plural, well_known};
    use serde_json::json;

    const NOW: &str = "2024-05-01T10:00:00Z";

    fn deployments() -> ResourceType {
        builtin_by_plural("apps", "deployments").unwrap()
    }

    fn stored(extra: Value) -> Value {
        let mut obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "generation": 2, "creationTimestamp": NOW},
            "spec": {"replicas": 1}, "status": {"readyReplicas": 1}
        });
        json_merge(&mut obj, extra);
        obj
    }

    fn json_merge(into: &mut Value, from: Value) {
        if let (Value::Object(a), Value::Object(b)) = (&mut *into, &from) {
            for (k, v) in b {
                json_merge(a.entry(k.clone()).or_insert(Value::Null), v.clone());
            }
        } else {
            *into = from;
        }
    }

    /// A create's expected target: its namespace and name, or the field at fault.
    type WantTarget<'a> = Result<(Option<&'a str>, CreateName), &'a str>;

    #[test]
    fn create_targets() {
        let res = deployments();
        let table: Vec<(Value, WantTarget)> = vec![
            (
                json!({"metadata": {"name": "a", "namespace": "ns"}}),
                Ok((
                    Some("ns"),
                    CreateName::Named {
                        name: "a".into(),
                        key: "ns/a".into(),
                    },
                )),
            ),
            (
                json!({"metadata": {"generateName": "a-", "namespace": "ns"}}),
                Ok((
                    Some("ns"),
                    CreateName::Generate {
                        prefix: "a-".into(),
                    },
                )),
            ),
            (
                json!({"metadata": {"namespace": "ns"}}),
                Err("metadata.name"),
            ),
            (json!([1]), Err("")),
        ];
        for (obj, want) in table {
            let got = create_target(&res, &obj);
            match (got, want) {
                (Ok((ns, target)), Ok((want_ns, want_target))) => {
                    assert_eq!((ns.as_deref(), target), (want_ns, want_target), "{obj}")
                }
                (Err(StoreError::Invalid { field, .. }), Err(want_field)) => {
                    assert_eq!(field, want_field, "{obj}")
                }
                (got, want) => panic!("{obj}: got {got:?}, want {want:?}"),
            }
        }
        // A cluster-scoped kind drops the namespace.
        let (ns, _) = create_target(
            &well_known::clusters(),
            &json!({"metadata": {"name": "m1", "namespace": "ns"}}),
        )
        .unwrap();
        assert_eq!(ns, None);
    }

    #[test]
    fn created_sets_server_fields_and_drops_status() {
        let res = deployments();
        let obj = json!({"metadata": {"name": "a", "uid": "client", "generation": 9,
                                      "resourceVersion": "3", "deletionTimestamp": NOW},
                         "status": {"x": 1}});
        let out = created(&res, obj, "a", Some("ns"), NOW, "u-new").unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "a", "uid": "u-new", "generation": 1,
                                "namespace": "ns", "creationTimestamp": NOW},
                   "apiVersion": "apps/v1", "kind": "Deployment"})
        );
    }

    #[test]
    fn update_rules() {
        let res = deployments();
        let base = stored(json!({}));
        // (incoming, part, expected outcome: None = Unchanged, Some(generation) = Put)
        let table: Vec<(&str, Value, Part, Option<i64>)> = vec![
            ("same object", base.clone(), Part::Object, None),
            (
                "spec change bumps generation",
                stored(json!({"spec": {"replicas": 3}})),
                Part::Object,
                Some(3),
            ),
            (
                "label change keeps generation",
                stored(json!({"metadata": {"labels": {"a": "b"}}})),
                Part::Object,
                Some(2),
            ),
            (
                "status ignored by update",
                stored(json!({"status": {"readyReplicas": 5}})),
                Part::Object,
                None,
            ),
            (
                "status written by update_status",
                json!({"metadata": {"name": "web", "namespace": "ns"}, "status": {"readyReplicas": 5}}),
                Part::Status,
                Some(2),
            ),
        ];
        for (what, incoming, part, want) in table {
            let got = updated(&res, &base, incoming, part).unwrap();
            match (got, want) {
                (Updated::Unchanged, None) => {}
                (Updated::Put(new), Some(generation)) => {
                    assert_eq!(meta::generation(&new), generation, "{what}");
                    assert_eq!(meta::uid(&new), Some("u1"), "{what}");
                }
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn finalizers_while_deleting() {
        let res = deployments();
        let deleting =
            stored(json!({"metadata": {"deletionTimestamp": NOW, "finalizers": ["a", "b"]}}));
        let add = stored(json!({"metadata": {"finalizers": ["a", "b", "c"]}}));
        assert!(matches!(
            updated(&res, &deleting, add, Part::Object),
            Err(StoreError::Invalid { field, .. }) if field == "metadata.finalizers"
        ));
        let fewer = stored(json!({"metadata": {"finalizers": ["a"]}}));
        assert!(matches!(
            updated(&res, &deleting, fewer, Part::Object),
            Ok(Updated::Put(_))
        ));
        let none = stored(json!({"metadata": {"finalizers": []}}));
        assert!(matches!(
            updated(&res, &deleting, none, Part::Object),
            Ok(Updated::Remove(_))
        ));
    }

    #[test]
    fn preconditions() {
        let res = deployments();
        let base = stored(json!({}));
        let stale = stored(json!({"metadata": {"resourceVersion": "6"}}));
        assert!(matches!(
            check_update_preconditions(&res, "web", &stale, &base),
            Err(StoreError::Conflict { .. })
        ));
        let other_uid = stored(json!({"metadata": {"uid": "u2"}}));
        assert!(check_update_preconditions(&res, "web", &other_uid, &base).is_err());
        assert!(check_update_preconditions(&res, "web", &base, &base).is_ok());
        let opts = DeleteOptions {
            precondition_resource_version: Some(6),
            ..DeleteOptions::default()
        };
        assert!(check_delete_preconditions(&res, "web", &base, &opts).is_err());
        let opts = DeleteOptions {
            precondition_uid: Some("u1".into()),
            precondition_resource_version: Some(7),
            ..DeleteOptions::default()
        };
        assert!(check_delete_preconditions(&res, "web", &base, &opts).is_ok());
    }

    #[test]
    fn deletions() {
        let plain = stored(json!({}));
        let held = stored(json!({"metadata": {"finalizers": ["x"]}}));
        let deleting = stored(json!({"metadata": {"deletionTimestamp": NOW}}));
        let table: Vec<(&str, &Value, Propagation, bool, &str)> = vec![
            (
                "plain background",
                &plain,
                Propagation::Background,
                true,
                "remove",
            ),
            (
                "plain foreground without dependents",
                &plain,
                Propagation::Foreground,
                false,
                "remove",
            ),
            (
                "plain foreground with dependents",
                &plain,
                Propagation::Foreground,
                true,
                "mark",
            ),
            (
                "finalizer holds",
                &held,
                Propagation::Background,
                false,
                "mark",
            ),
            (
                "already deleting",
                &deleting,
                Propagation::Background,
                false,
                "already",
            ),
        ];
        for (what, obj, propagation, deps, want) in table {
            let got = deletion(obj, propagation, deps, NOW).unwrap();
            let kind = match &got {
                Deletion::Remove => "remove",
                Deletion::MarkDeleting(marked) => {
                    assert_eq!(meta::generation(marked), 3, "{what}");
                    assert!(meta::is_deleting(marked), "{what}");
                    "mark"
                }
                Deletion::AlreadyDeleting => "already",
            };
            assert_eq!(kind, want, "{what}");
        }
        let Deletion::MarkDeleting(marked) =
            deletion(&plain, Propagation::Foreground, true, NOW).unwrap()
        else {
            unreachable!()
        };
        assert_eq!(meta::finalizers(&marked), [FOREGROUND_FINALIZER]);
        assert!(matches!(
            foreground_released(&marked),
            Ok(Updated::Remove(_))
        ));
    }
}
