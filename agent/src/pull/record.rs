//! The local record of what the agent applied (`<data-dir>/applied.json`): for each Work
//! (`namespace/name`) the objects applied from it and a hash of each manifest. It is what
//! lets a restarted agent skip manifests that did not change (so member objects keep their uid
//! and creation time), delete objects whose manifest left a Work, and delete the objects of
//! Works deleted while it was down.
//!
//! On disk it is a snapshot (`applied.json`, written atomically) and a journal beside it
//! (`applied.json.journal`, one JSON line per changed Work, appended and synced once per
//! burst of Works). Loading reads the snapshot and replays the journal; a last line cut short
//! by a crash is dropped (its burst was never acknowledged). When the journal outgrows the
//! record it is folded into a new snapshot. A save thus costs the Works that changed, not
//! every Work the member holds.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use flotilla_member::ObjectRef;
use flotilla_support::files;

/// One object applied from a Work.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedObject {
    /// Which object.
    #[serde(flatten)]
    pub object: ObjectRef,
    /// [`flotilla_member::hashing::canonical_hash`] of the manifest last applied.
    pub hash: String,
    /// The object's `metadata.generation` right after that apply. A runtime found behind it
    /// (a simulated member that lost its last writes in a crash) gets the manifest again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
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

/// The record as a snapshot writes it (the form [`AppliedRecord`] reads back), borrowed.
#[derive(Serialize)]
struct RecordSnapshot<'a> {
    version: u32,
    works: &'a BTreeMap<String, WorkRecord>,
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

/// One journal line: a Work's new record, or `None` when it was forgotten.
#[derive(Debug, Serialize, Deserialize)]
struct JournalEntry {
    work: String,
    record: Option<WorkRecord>,
}

/// Journal lines always allowed before the journal is folded into the snapshot.
const MIN_JOURNAL_LINES: usize = 256;

/// The record and its files.
#[derive(Debug)]
pub struct RecordFile {
    path: PathBuf,
    journal: PathBuf,
    record: AppliedRecord,
    /// Works changed since the last save, in order.
    pending: Vec<String>,
    /// Lines in the journal file.
    journal_lines: usize,
}

impl RecordFile {
    /// Loads the record at `path` and its journal (empty when neither exists).
    pub fn load(path: &Path) -> Result<Self, RecordError> {
        let journal = journal_path(path);
        let read = |p: &Path| {
            files::read_optional(p).map_err(|source| RecordError::Io {
                path: p.display().to_string(),
                source,
            })
        };
        let corrupt = |p: &Path, source| RecordError::Corrupt {
            path: p.display().to_string(),
            source,
        };
        let mut record: AppliedRecord = match read(path)? {
            Some(b) => serde_json::from_slice(&b).map_err(|e| corrupt(path, e))?,
            None => AppliedRecord::default(),
        };
        let mut journal_lines = 0;
        if let Some(bytes) = read(&journal)? {
            let complete = bytes.ends_with(b"\n");
            let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
            for (i, line) in lines.iter().enumerate() {
                if line.is_empty() {
                    continue;
                }
                let entry: JournalEntry = match serde_json::from_slice(line) {
                    Ok(entry) => entry,
                    // The line a crash cut short: its burst was never acknowledged.
                    Err(_) if !complete && i + 1 == lines.len() => break,
                    Err(e) => return Err(corrupt(&journal, e)),
                };
                journal_lines += 1;
                match entry.record {
                    Some(rec) => record.works.insert(entry.work, rec),
                    None => record.works.remove(&entry.work),
                };
            }
        }
        Ok(RecordFile {
            path: path.to_path_buf(),
            journal,
            record,
            pending: Vec::new(),
            journal_lines,
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
            self.remove(work);
        } else if self.record.works.get(work) != Some(&rec) {
            self.record.works.insert(work.to_string(), rec);
            self.pending.push(work.to_string());
        }
    }

    /// Forgets a Work.
    pub fn remove(&mut self, work: &str) -> Option<WorkRecord> {
        let removed = self.record.works.remove(work);
        if removed.is_some() {
            self.pending.push(work.to_string());
        }
        removed
    }

    /// The recorded Work keys.
    pub fn work_keys(&self) -> Vec<String> {
        self.record.works.keys().cloned().collect()
    }

    /// Makes the changes since the last save durable by appending them to the journal; folds
    /// the journal into a new snapshot once it has grown past twice the record's size. The
    /// file I/O runs on the calling thread; [`Self::prepare_save`] lets an async caller run it
    /// on a blocking thread instead.
    pub fn save(&mut self) -> Result<(), RecordError> {
        match self.prepare_save()? {
            None => Ok(()),
            Some(save) => {
                let done = save.write()?;
                self.saved(done);
                Ok(())
            }
        }
    }

    /// What a save writes (nothing when nothing changed), encoded on the calling thread:
    /// the pending Works' journal lines and, when the journal has grown long enough, the new
    /// snapshot. Nothing changes here until [`Self::saved`] is told the writes succeeded, so a
    /// failed save is retried whole by the next one.
    pub fn prepare_save(&self) -> Result<Option<PendingSave>, RecordError> {
        if self.pending.is_empty() {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        for work in &self.pending {
            let entry = JournalEntry {
                work: work.clone(),
                record: self.record.works.get(work).cloned(),
            };
            serde_json::to_writer(&mut bytes, &entry)
                .map_err(std::io::Error::other)
                .map_err(|source| self.io_error(&self.journal, source))?;
            bytes.push(b'\n');
        }
        let lines = self.journal_lines + self.pending.len();
        let snapshot = if lines > MIN_JOURNAL_LINES.max(2 * self.record.works.len()) {
            let bytes = serde_json::to_vec(&RecordSnapshot {
                version: 1,
                works: &self.record.works,
            })
            .map_err(std::io::Error::other)
            .map_err(|source| self.io_error(&self.path, source))?;
            Some((self.path.clone(), bytes))
        } else {
            None
        };
        Ok(Some(PendingSave {
            journal: self.journal.clone(),
            lines: self.pending.len(),
            bytes,
            snapshot,
        }))
    }

    /// The writes of a prepared save succeeded.
    pub fn saved(&mut self, done: SavedRecord) {
        self.pending.clear();
        self.journal_lines = if done.snapshotted {
            self.record.version = 1;
            0
        } else {
            self.journal_lines + done.lines
        };
    }

    fn io_error(&self, path: &Path, source: std::io::Error) -> RecordError {
        RecordError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// A save encoded by [`RecordFile::prepare_save`], to be written by [`PendingSave::write`]
/// (blocking file I/O, so an async caller runs it on a blocking thread).
#[derive(Debug)]
pub struct PendingSave {
    journal: PathBuf,
    lines: usize,
    bytes: Vec<u8>,
    /// The new snapshot's path and bytes, when the journal is folded into it.
    snapshot: Option<(PathBuf, Vec<u8>)>,
}

/// What a written save did, for [`RecordFile::saved`].
#[derive(Clone, Copy, Debug)]
pub struct SavedRecord {
    lines: usize,
    snapshotted: bool,
}

impl PendingSave {
    /// Appends the journal lines and syncs them; then, when due, writes the new snapshot
    /// atomically and removes the journal it replaces. Every change is in the journal before
    /// it is in a snapshot, so a crash between the two replays lines whose last word on each
    /// Work is what the snapshot holds: the same record.
    pub fn write(self) -> Result<SavedRecord, RecordError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| RecordError::Io { path, source }
        };
        let append = || -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.journal)?;
            file.write_all(&self.bytes)?;
            file.sync_data()
        };
        append().map_err(io(&self.journal))?;
        let snapshotted = self.snapshot.is_some();
        if let Some((path, bytes)) = &self.snapshot {
            files::write_atomic(path, bytes).map_err(io(path))?;
            match std::fs::remove_file(&self.journal) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(io(&self.journal)(source)),
            }
        }
        Ok(SavedRecord {
            lines: self.lines,
            snapshotted,
        })
    }
}

/// The journal beside a record file.
fn journal_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".journal");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(kind: &str, name: &str) -> ObjectRef {
        ObjectRef::new("apps/v1", kind, "default", name)
    }

    fn applied(kind: &str, name: &str, hash: &str) -> AppliedObject {
        AppliedObject {
            generation: None,
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

    fn work(uid: &str, name: &str) -> WorkRecord {
        WorkRecord {
            uid: uid.into(),
            objects: vec![applied("Deployment", name, "h")],
        }
    }

    /// A prepared save changes nothing until it is confirmed: one whose writes never happened
    /// (a failed write, a stopped thread) is written whole by the next save.
    #[test]
    fn a_save_that_was_not_written_is_retried_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("applied.json");
        let mut f = RecordFile::load(&path).unwrap();
        assert!(f.prepare_save().unwrap().is_none(), "nothing to save");
        f.set("ns/w1", work("1", "a"));
        let lost = f.prepare_save().unwrap().unwrap();
        drop(lost);
        f.set("ns/w2", work("2", "b"));
        let save = f.prepare_save().unwrap().unwrap();
        let done = save.write().unwrap();
        f.saved(done);
        assert!(
            f.prepare_save().unwrap().is_none(),
            "confirmed: nothing pending"
        );
        let g = RecordFile::load(&path).unwrap();
        assert_eq!(g.work_keys(), ["ns/w1", "ns/w2"]);
    }

    #[test]
    fn saves_append_to_the_journal_and_a_torn_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("applied.json");
        let journal = journal_path(&path);
        let mut f = RecordFile::load(&path).unwrap();
        f.set("ns/w1", work("1", "a"));
        f.save().unwrap();
        f.set("ns/w2", work("2", "b"));
        f.remove("ns/w1");
        f.save().unwrap();
        assert!(!path.exists(), "small changes go to the journal only");
        assert_eq!(
            std::fs::read_to_string(&journal).unwrap().lines().count(),
            3
        );
        // A crash in the middle of the next append leaves half a line.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&journal)
            .unwrap();
        file.write_all(br#"{"work":"ns/w3","rec"#).unwrap();
        let g = RecordFile::load(&path).unwrap();
        assert_eq!(g.work_keys(), ["ns/w2"]);
        assert_eq!(g.get("ns/w2"), Some(&work("2", "b")));
        // A broken line followed by others is corruption, not a torn write.
        std::fs::write(&journal, b"{oops\n{\"work\":\"ns/w2\",\"record\":null}\n").unwrap();
        assert!(matches!(
            RecordFile::load(&path),
            Err(RecordError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_long_journal_is_folded_into_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("applied.json");
        let journal = journal_path(&path);
        let mut f = RecordFile::load(&path).unwrap();
        let mut before_fold = Vec::new();
        for round in 0..=MIN_JOURNAL_LINES {
            before_fold = std::fs::read(&journal).unwrap_or_default();
            f.set("ns/w1", work(&round.to_string(), "a"));
            f.save().unwrap();
        }
        assert!(path.exists(), "the snapshot was written");
        assert!(!journal.exists(), "and the journal emptied");
        assert_eq!(RecordFile::load(&path).unwrap().record(), f.record());
        // A crash after the snapshot but before the journal was emptied: the journal holds
        // every line, the last change included, so replaying it over the snapshot changes
        // nothing.
        let mut last_line = serde_json::to_vec(&JournalEntry {
            work: "ns/w1".into(),
            record: f.get("ns/w1").cloned(),
        })
        .unwrap();
        last_line.push(b'\n');
        std::fs::write(&journal, [before_fold, last_line].concat()).unwrap();
        assert_eq!(RecordFile::load(&path).unwrap().record(), f.record());
        f.set("ns/w2", work("x", "b"));
        f.save().unwrap();
        assert_eq!(
            RecordFile::load(&path).unwrap().work_keys(),
            ["ns/w1", "ns/w2"]
        );
    }
}
