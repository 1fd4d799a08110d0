//! The local record of what the agent applied (`<data-dir>/applied.json`): for each Work
//! (`namespace/name`) the objects applied from it and a hash of each manifest. It is what
//! lets a restarted agent skip manifests that did not change (so member objects keep their uid
//! and creation time), delete objects whose manifest left a Work, and delete the objects of
//! Works deleted while it was down. Written atomically after every change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil;
use crate::runtime::ObjectRef;

/// One object applied from a Work.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedObject {
    /// Which object.
    #[serde(flatten)]
    pub object: ObjectRef,
    /// [`crate::hashing::canonical_hash`] of the manifest last applied.
    pub hash: String,
}

/// What was applied from one Work.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkRecord {
    /// The Work's uid when it was last applied.
    #[serde(default)]
    pub uid: String,
    /// The objects.
    #[serde(default)]
    pub objects: Vec<AppliedObject>,
}

/// The whole record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedRecord {
    /// Format version.
    #[serde(default)]
    pub version: u32,
    /// Work key (`namespace/name`) → what was applied.
    #[serde(default)]
    pub works: BTreeMap<String, WorkRecord>,
}

/// Errors reading or writing the record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file could not be read or written.
    #[error("{path}")]
    Io {
        /// The record file.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a record.
    #[error("{path} is not an applied-objects record")]
    Corrupt {
        /// The record file.
        path: String,
        /// What failed.
        #[source]
        source: serde_json::Error,
    },
}

/// What to do with one Work's manifests given what the record says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncPlan {
    /// Indexes of manifests to apply (new or changed).
    pub apply: Vec<usize>,
    /// Indexes of manifests already applied with the same hash (apply only if the object is
    /// missing from the runtime).
    pub unchanged: Vec<usize>,
    /// Recorded objects no manifest names any more.
    pub delete: Vec<ObjectRef>,
}

/// Plans the sync of a Work whose manifests are `manifests` (reference and hash each, by
/// ordinal) against what was recorded for it.
pub fn plan_sync(recorded: Option<&WorkRecord>, manifests: &[(ObjectRef, String)]) -> SyncPlan {
    let mut plan = SyncPlan::default();
    let previous = recorded.map(|r| r.objects.as_slice()).unwrap_or_default();
    for (i, (r, hash)) in manifests.iter().enumerate() {
        let same = previous
            .iter()
            .any(|p| p.object.same_object(r) && &p.hash == hash);
        if same {
            plan.unchanged.push(i);
        } else {
            plan.apply.push(i);
        }
    }
    for p in previous {
        if !manifests.iter().any(|(r, _)| r.same_object(&p.object)) {
            plan.delete.push(p.object.clone());
        }
    }
    plan
}

impl AppliedRecord {
    /// True when a Work other than `work` recorded this object.
    pub fn claimed_elsewhere(&self, work: &str, object: &ObjectRef) -> bool {
        self.works
            .iter()
            .filter(|(k, _)| k.as_str() != work)
            .any(|(_, w)| w.objects.iter().any(|o| o.object.same_object(object)))
    }
}

/// The record and its file.
#[derive(Debug)]
pub struct RecordFile {
    path: PathBuf,
    record: AppliedRecord,
    saved: AppliedRecord,
}

impl RecordFile {
    /// Loads the record at `path` (empty when the file does not exist).
    pub fn load(path: &Path) -> Result<Self, RecordError> {
        let bytes = fsutil::read_optional(path).map_err(|source| RecordError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let record: AppliedRecord = match bytes {
            Some(b) => serde_json::from_slice(&b).map_err(|source| RecordError::Corrupt {
                path: path.display().to_string(),
                source,
            })?,
            None => AppliedRecord::default(),
        };
        Ok(RecordFile {
            path: path.to_path_buf(),
            saved: record.clone(),
            record,
        })
    }

    /// The record.
    pub fn record(&self) -> &AppliedRecord {
        &self.record
    }

    /// What was applied from a Work.
    pub fn get(&self, work: &str) -> Option<&WorkRecord> {
        self.record.works.get(work)
    }

    /// Replaces what was applied from a Work (an empty record removes it).
    pub fn set(&mut self, work: &str, rec: WorkRecord) {
        if rec.objects.is_empty() {
            self.record.works.remove(work);
        } else {
            self.record.works.insert(work.to_string(), rec);
        }
    }

    /// Forgets a Work.
    pub fn remove(&mut self, work: &str) -> Option<WorkRecord> {
        self.record.works.remove(work)
    }

    /// The recorded Work keys.
    pub fn work_keys(&self) -> Vec<String> {
        self.record.works.keys().cloned().collect()
    }

    /// Writes the file if the record changed since the last save.
    pub fn save(&mut self) -> Result<(), RecordError> {
        if self.record == self.saved {
            return Ok(());
        }
        self.record.version = 1;
        let io = |source| RecordError::Io {
            path: self.path.display().to_string(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(&self.record)
            .map_err(std::io::Error::other)
            .map_err(io)?;
        fsutil::write_atomic(&self.path, &bytes, false).map_err(io)?;
        self.saved = self.record.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(kind: &str, name: &str) -> ObjectRef {
        ObjectRef::new("apps/v1", kind, "default", name)
    }

    fn applied(kind: &str, name: &str, hash: &str) -> AppliedObject {
        AppliedObject {
            object: r(kind, name),
            hash: hash.into(),
        }
    }

    #[test]
    fn plans() {
        let recorded = WorkRecord {
            uid: "u".into(),
            objects: vec![
                applied("Deployment", "a", "h1"),
                applied("Service", "b", "h2"),
            ],
        };
        let cases = [
            (
                "first time",
                None,
                vec![(r("Deployment", "a"), "h1")],
                vec![0],
                vec![],
                vec![],
            ),
            (
                "unchanged",
                Some(&recorded),
                vec![(r("Deployment", "a"), "h1"), (r("Service", "b"), "h2")],
                vec![],
                vec![0, 1],
                vec![],
            ),
            (
                "changed hash",
                Some(&recorded),
                vec![(r("Deployment", "a"), "h9"), (r("Service", "b"), "h2")],
                vec![0],
                vec![1],
                vec![],
            ),
            (
                "manifest removed",
                Some(&recorded),
                vec![(r("Deployment", "a"), "h1")],
                vec![],
                vec![0],
                vec![r("Service", "b")],
            ),
            (
                "all removed",
                Some(&recorded),
                vec![],
                vec![],
                vec![],
                vec![r("Deployment", "a"), r("Service", "b")],
            ),
            (
                "other version, same object",
                Some(&recorded),
                vec![(
                    ObjectRef::new("apps/v1beta2", "Deployment", "default", "a"),
                    "h1",
                )],
                vec![],
                vec![0],
                vec![r("Service", "b")],
            ),
        ];
        for (name, rec, manifests, apply, unchanged, delete) in cases {
            let manifests: Vec<(ObjectRef, String)> = manifests
                .into_iter()
                .map(|(o, h)| (o, h.to_string()))
                .collect();
            let plan = plan_sync(rec, &manifests);
            assert_eq!(
                plan,
                SyncPlan {
                    apply,
                    unchanged,
                    delete
                },
                "{name}"
            );
        }
    }

    #[test]
    fn file_round_trip_and_claims() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("applied.json");
        let mut f = RecordFile::load(&path).unwrap();
        assert!(f.record().works.is_empty());
        f.save().unwrap();
        assert!(!path.exists(), "nothing to save, nothing written");
        f.set(
            "ns/w1",
            WorkRecord {
                uid: "1".into(),
                objects: vec![applied("Deployment", "a", "h")],
            },
        );
        f.set(
            "ns/w2",
            WorkRecord {
                uid: "2".into(),
                objects: vec![applied("Deployment", "a", "h")],
            },
        );
        f.save().unwrap();
        let mut g = RecordFile::load(&path).unwrap();
        assert_eq!(g.work_keys(), ["ns/w1", "ns/w2"]);
        assert!(g.record().claimed_elsewhere("ns/w1", &r("Deployment", "a")));
        g.remove("ns/w2");
        assert!(!g.record().claimed_elsewhere("ns/w1", &r("Deployment", "a")));
        g.set("ns/w1", WorkRecord::default());
        g.save().unwrap();
        assert!(RecordFile::load(&path).unwrap().record().works.is_empty());
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            RecordFile::load(&path),
            Err(RecordError::Corrupt { .. })
        ));
    }
}
