//! The owner index both backends keep: who owns whom, by uid, from
//! `metadata.ownerReferences`. The local store ([`super::local`]) keeps it inside its write
//! state, so it changes in step with every commit; the etcd store ([`super::etcd`]) keeps it in
//! its watch-fed mirror. Every change reports the [`GcJob`]s it calls for, and each backend's
//! collector runs them:
//! - an owner is gone: each dependent whose owners are *all* gone is deleted (Background);
//! - an owner waits in foreground deletion (`foregroundDeletion` finalizer and
//!   deletionTimestamp): its dependents are deleted in foreground too, except that a dependent
//!   with another live owner only loses its reference to this one; once no dependent is left,
//!   the finalizer is removed and the owner goes (if no other finalizer holds it);
//! - orphaning is not a job: `delete` removes the owner references in its own write.
//!
//! Jobs are not persisted: at open the index is rebuilt from every object and
//! [`OwnerIndex::recovery_jobs`] finds again the work a crash may have interrupted.

use super::meta::{self, FOREGROUND_FINALIZER};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet};

/// An object, by kind (storage name) and storage key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjRef {
    pub(crate) resource: String,
    pub(crate) key: String,
}

/// One unit of collection work.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GcJob {
    /// Delete this object if all its owners are gone.
    Dependent(ObjRef),
    /// The owner with this uid is gone: look at each of its dependents.
    OwnerGone(String),
    /// The owner with this uid waits in foreground deletion: advance it.
    Foreground(String),
}

/// Who owns whom.
#[derive(Debug, Default)]
pub(crate) struct OwnerIndex {
    /// Every stored object by uid.
    objects: HashMap<String, ObjRef>,
    /// Owner uids of every object that has owner references.
    owners: HashMap<ObjRef, Vec<String>>,
    /// Dependents by owner uid (the owner may be gone).
    dependents: HashMap<String, BTreeSet<ObjRef>>,
    /// Uids of objects waiting in foreground deletion.
    foreground: HashSet<String>,
}

impl OwnerIndex {
    /// Records the stored state of an object; returns the jobs it calls for.
    pub(crate) fn put(&mut self, r: &ObjRef, obj: &Value) -> Vec<GcJob> {
        let mut jobs = Vec::new();
        let uid = meta::uid(obj).map(str::to_string);
        if let Some(uid) = &uid {
            self.objects.insert(uid.clone(), r.clone());
        }
        let new_owners = meta::owner_uids(obj);
        let old_owners = self.owners.remove(r).unwrap_or_default();
        for owner in old_owners.iter().filter(|o| !new_owners.contains(o)) {
            self.unlink(owner, r, &mut jobs);
        }
        for owner in &new_owners {
            self.dependents
                .entry(owner.clone())
                .or_default()
                .insert(r.clone());
        }
        if !new_owners.is_empty() {
            if !new_owners.iter().any(|o| self.exists(o)) {
                jobs.push(GcJob::Dependent(r.clone()));
            }
            self.owners.insert(r.clone(), new_owners);
        }
        if let Some(uid) = uid {
            let waiting = meta::is_deleting(obj)
                && meta::finalizers(obj)
                    .iter()
                    .any(|f| f == FOREGROUND_FINALIZER);
            if waiting {
                self.foreground.insert(uid.clone());
                jobs.push(GcJob::Foreground(uid));
            } else {
                self.foreground.remove(&uid);
            }
        }
        jobs
    }

    /// Forgets a removed object (`last` is its last state); returns the jobs it calls for.
    pub(crate) fn remove(&mut self, r: &ObjRef, last: &Value) -> Vec<GcJob> {
        let mut jobs = Vec::new();
        if let Some(uid) = meta::uid(last) {
            self.objects.remove(uid);
            self.foreground.remove(uid);
            if self.dependents.get(uid).is_some_and(|d| !d.is_empty()) {
                jobs.push(GcJob::OwnerGone(uid.to_string()));
            }
        }
        for owner in self.owners.remove(r).unwrap_or_default() {
            self.unlink(&owner, r, &mut jobs);
        }
        jobs
    }

    fn unlink(&mut self, owner: &str, r: &ObjRef, jobs: &mut Vec<GcJob>) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(r);
            if set.is_empty() {
                self.dependents.remove(owner);
                if self.foreground.contains(owner) {
                    jobs.push(GcJob::Foreground(owner.to_string()));
                }
            }
        }
    }

    /// True when an object with this uid is stored.
    pub(crate) fn exists(&self, uid: &str) -> bool {
        self.objects.contains_key(uid)
    }

    /// The object with this uid.
    pub(crate) fn locate(&self, uid: &str) -> Option<&ObjRef> {
        self.objects.get(uid)
    }

    /// The owner uids of an object (empty when it has none or is gone).
    pub(crate) fn owners_of(&self, r: &ObjRef) -> &[String] {
        self.owners.get(r).map(Vec::as_slice).unwrap_or_default()
    }

    /// The dependents of an owner.
    pub(crate) fn dependents_of(&self, uid: &str) -> Vec<ObjRef> {
        self.dependents
            .get(uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// True when the object with this uid waits in foreground deletion.
    pub(crate) fn is_foreground(&self, uid: &str) -> bool {
        self.foreground.contains(uid)
    }

    /// The work a crash may have interrupted: dependents whose owners are all gone, and
    /// owners waiting in foreground deletion.
    pub(crate) fn recovery_jobs(&self) -> Vec<GcJob> {
        let mut jobs: Vec<GcJob> = self
            .owners
            .iter()
            .filter(|(_, owners)| !owners.iter().any(|o| self.exists(o)))
            .map(|(r, _)| GcJob::Dependent(r.clone()))
            .collect();
        jobs.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        let mut waiting: Vec<&String> = self.foreground.iter().collect();
        waiting.sort();
        jobs.extend(waiting.into_iter().map(|u| GcJob::Foreground(u.clone())));
        jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(key: &str) -> ObjRef {
        ObjRef {
            resource: "core/configmaps".to_string(),
            key: key.to_string(),
        }
    }

    fn obj(uid: &str, owners: &[&str]) -> Value {
        let refs: Vec<Value> = owners.iter().map(|o| json!({"uid": o})).collect();
        json!({"metadata": {"uid": uid, "ownerReferences": refs}})
    }

    #[test]
    fn index_tracks_owners_and_reports_work() {
        let mut index = OwnerIndex::default();
        assert!(index.put(&r("o1"), &obj("u1", &[])).is_empty());
        assert!(index.put(&r("o2"), &obj("u2", &[])).is_empty());
        assert!(index.put(&r("d"), &obj("ud", &["u1", "u2"])).is_empty());
        assert_eq!(index.dependents_of("u1"), [r("d")]);
        // One owner gone: the dependent is looked at (and kept: u2 lives).
        assert_eq!(
            index.remove(&r("o1"), &obj("u1", &[])),
            [GcJob::OwnerGone("u1".to_string())]
        );
        assert!(index.exists("u2") && !index.exists("u1"));
        assert_eq!(
            index.recovery_jobs(),
            Vec::<GcJob>::new(),
            "d still has a live owner"
        );
        index.remove(&r("o2"), &obj("u2", &[]));
        assert_eq!(index.recovery_jobs(), [GcJob::Dependent(r("d"))]);
        // A dependent created for a missing owner is collected.
        assert_eq!(
            index.put(&r("e"), &obj("ue", &["nobody"])),
            [GcJob::Dependent(r("e"))]
        );
    }

    #[test]
    fn foreground_owner_is_advanced_when_its_last_dependent_goes() {
        let mut index = OwnerIndex::default();
        index.put(&r("d"), &obj("ud", &["uo"]));
        let mut owner = obj("uo", &[]);
        owner["metadata"]["deletionTimestamp"] = json!("2024-05-01T10:00:00Z");
        owner["metadata"]["finalizers"] = json!([FOREGROUND_FINALIZER]);
        assert_eq!(
            index.put(&r("o"), &owner),
            [GcJob::Foreground("uo".to_string())]
        );
        assert_eq!(
            index.remove(&r("d"), &obj("ud", &["uo"])),
            [GcJob::Foreground("uo".to_string())]
        );
        assert_eq!(index.recovery_jobs(), [GcJob::Foreground("uo".to_string())]);
    }
}
