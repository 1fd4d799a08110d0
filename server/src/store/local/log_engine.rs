//! The log engine: every tree in memory, made durable by an append-only write-ahead log plus
//! snapshots (the shape of etcd's WAL + snapshot, or Redis' AOF with rewrites).
//!
//! **What it owns.** One directory (`<data-dir>/store-log` in the server) holding a `LOCK`
//! file, `snapshot-<gen>` files, `log-<gen>` files and, while a snapshot is being written,
//! `snapshot-<gen>.tmp`. `<gen>` is a generation number printed as 20 zero-padded digits, so
//! names sort in generation order. The `LOCK` file is held (`flock`, through `fs2`) while the
//! engine is open, so two processes never append to one log.
//!
//! **Memory cost.** Everything is held in RAM: every tree is a `BTreeMap` of keys to shared
//! values (`Arc<[u8]>`), so the engine costs about the stored bytes plus per-key overhead,
//! plus the encoded batches applied since the last flush. A compaction shares the trees with
//! the snapshot writer instead of copying them (a tree written to while the snapshot is being
//! written is copied once, keys and value pointers only); reopening reads each file whole.
//!
//! **Writes.** [`Engine::apply`] encodes the batch, then under one write lock applies it to
//! the trees and appends its record to an in-memory pending buffer, so the log's order is the
//! order of application; it does not touch the disk. [`Engine::durable_flush`] takes the
//! pending buffer (under a flush mutex, so records reach the file in order), writes it to the
//! current log and `fdatasync`s it; a write is acknowledged only after that (the store's group
//! commit calls it). After a failed write or sync the engine refuses every further write and
//! flush: what reached the file is unknown, and reopening recovers the acknowledged state.
//!
//! **Format.** Both kinds of file are a sequence of records:
//! `[u32 LE payload length][u32 LE CRC-32 (IEEE) of the payload][payload]`. A payload starts
//! with its kind: `1` a batch, `2` a snapshot's header, `3` a snapshot's end. A batch payload is
//! its operations up to the end of the payload, each `[u8 op][u32 LE tree length][tree, UTF-8]
//! [u32 LE key length][key]` followed, for a put (op `1`), by `[u32 LE value length][value]`;
//! op `0` removes the key and op `2` only creates the tree (snapshots use it so that emptied
//! trees survive). A log holds batch records only. A snapshot holds a header (`FLOTLOG1` then
//! its generation as u64 LE), batch records of about 1 MiB that rebuild every tree, and an end
//! record (entry count and tree count, u64 LE) that must be its last record. An unknown kind
//! or op is corruption (a newer format needs a new kind).
//!
//! **Recovery** ([`LogEngine::open`]): `.tmp` files are removed; the newest `snapshot-<S>` is
//! loaded (one is only ever named so once complete and synced, so a bad one is corruption and
//! the open fails); then `log-<S>`, `log-<S+1>`, … are replayed in order (without a snapshot,
//! from `log-0`; a missing generation is corruption). A record that is incomplete or fails its
//! checksum at the very end of the newest log is a write that was never acknowledged: the log
//! is truncated there (with a warning) and the engine appends after it. A damaged record with
//! any valid record after it, or in an older log, is corruption, and so is a valid record that
//! does not decode: the open fails with an error naming the file and offset; acknowledged data
//! is never dropped silently. (A newer log is only created once the older one is synced, so
//! only the newest can end in a torn write. A torn write whose later sectors reached the disk
//! while earlier ones did not is refused too, rather than guessed at.) Files of generations
//! older than the snapshot are removed. As with the memory engine, a tree exists once a batch
//! wrote to it, and stays (empty) when its keys are removed.
//!
//! **Compaction.** When the current log holds more than `max(compact_after_bytes, size of the
//! last snapshot)` bytes and no compaction is running, a flush starts generation `G+1`: under
//! the lock it takes the trees (shared, not copied) and sends new appends to the next pending
//! buffer; it writes and syncs the old buffer to `log-<G>`, then creates `log-<G+1>` (and syncs
//! the directory) before anything is written to it. A background thread owned by the engine
//! (stopped, after finishing its snapshot, when the engine is dropped) writes
//! `snapshot-<G+1>.tmp`, syncs it, renames it to `snapshot-<G+1>`, syncs the directory, and
//! only then deletes older snapshots and logs. A crash at any point leaves either the old
//! snapshot with every log since, or the new snapshot with `log-<G+1>`: both recover the
//! acknowledged state. A failed snapshot leaves the logs as they are and is retried once the
//! new log passes the threshold.
//!
//! **Departures from the first design**, with their reasons: trees are shared with the
//! snapshot per tree (`Arc<Tree>`, copied on the first write while shared) rather than cloned
//! key by key under the lock, so starting a compaction holds the lock for a few pointer copies
//! whatever the store's size; and [`LogOptions`] also has `lock_wait`, because a store closed
//! and opened again in one process may briefly find its lock still held (as the sled engine
//! does), while tests want a refusal at once.

use super::engine::{Engine, EngineError, Entry, Scan, WriteBatch};
use fs2::FileExt;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One tree: keys to values shared with snapshots and readers.
type Tree = BTreeMap<Vec<u8>, Arc<[u8]>>;

/// Every tree by name; a tree is shared with a snapshot being written (copy on write).
type Trees = BTreeMap<String, Arc<Tree>>;

/// Bytes of a record's header: payload length and CRC.
const HEADER: usize = 8;
/// Record kinds (a payload's first byte).
const KIND_BATCH: u8 = 1;
const KIND_SNAPSHOT_BEGIN: u8 = 2;
const KIND_SNAPSHOT_END: u8 = 3;
/// Operations of a batch payload.
const OP_REMOVE: u8 = 0;
const OP_PUT: u8 = 1;
const OP_TREE: u8 = 2;
/// First bytes of a snapshot header's payload (after its kind).
const SNAPSHOT_MAGIC: &[u8; 8] = b"FLOTLOG1";
/// Payload bytes after which a snapshot starts a new batch record.
const SNAPSHOT_RECORD_BYTES: usize = 1 << 20;
/// Name of the lock file.
const LOCK_FILE: &str = "LOCK";

/// Options of [`LogEngine::open`].
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// A new generation (and snapshot) starts once the current log holds more than this many
    /// bytes, or more than the last snapshot's size if that is larger. 64 MiB by default.
    pub compact_after_bytes: u64,
    /// How long opening waits for the directory's lock while another handle (a store closing
    /// in the same process) still holds it. 10 s by default.
    pub lock_wait: Duration,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            compact_after_bytes: 64 << 20,
            lock_wait: Duration::from_secs(10),
        }
    }
}

/// What writers and readers share, under [`Shared::state`].
struct State {
    trees: Trees,
    /// Encoded records applied but not yet handed to the log file.
    pending: Vec<u8>,
    /// The generation appends go to.
    generation: u64,
    /// Bytes of records of the current generation (written or pending).
    log_bytes: u64,
    /// Size of the newest complete snapshot (0 without one).
    snapshot_bytes: u64,
    /// A snapshot is being written.
    compacting: bool,
    /// The first write or sync failure; the engine refuses writes after it.
    broken: Option<Arc<EngineError>>,
}

/// State shared with the compaction thread.
struct Shared {
    dir: PathBuf,
    state: RwLock<State>,
    /// Test hook: snapshots stop after their `.tmp` file is written, as if the process died.
    #[cfg(test)]
    interrupt_snapshots: std::sync::atomic::AtomicBool,
}

/// The log file appends go to, and a reusable buffer for the bytes being written.
struct LogFile {
    path: PathBuf,
    file: File,
    writing: Vec<u8>,
}

/// A snapshot to write: the trees as of the start of `generation`.
struct Job {
    generation: u64,
    trees: Trees,
}

/// An engine keeping every tree in memory, durable through a write-ahead log and snapshots.
pub struct LogEngine {
    shared: Arc<Shared>,
    options: LogOptions,
    /// Held while the pending buffer goes to disk, so records reach the file in order.
    log: Mutex<LogFile>,
    jobs: Option<mpsc::Sender<Job>>,
    compactor: Option<JoinHandle<()>>,
    _lock: File,
}

impl std::fmt::Debug for LogEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogEngine")
            .field("dir", &self.shared.dir)
            .field("generation", &self.shared.state.read().generation)
            .finish_non_exhaustive()
    }
}

fn file_error<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> EngineError + 'a {
    move |source| EngineError::File {
        op,
        path: path.display().to_string(),
        source,
    }
}

fn corrupt(path: &Path, offset: usize, message: impl Into<String>) -> EngineError {
    EngineError::CorruptFile {
        path: path.display().to_string(),
        offset: offset as u64,
        message: message.into(),
    }
}

fn snapshot_name(generation: u64) -> String {
    format!("snapshot-{generation:020}")
}

fn log_name(generation: u64) -> String {
    format!("log-{generation:020}")
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// A record being encoded: header space, then the payload.
struct RecordBuf(Vec<u8>);

impl RecordBuf {
    fn new(kind: u8, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(HEADER + 1 + capacity);
        buf.resize(HEADER, 0);
        buf.push(kind);
        Self(buf)
    }

    /// Bytes of payload so far.
    fn payload_len(&self) -> usize {
        self.0.len() - HEADER
    }

    fn field(&mut self, bytes: &[u8]) -> Result<(), EngineError> {
        let len =
            u32::try_from(bytes.len()).map_err(|_| EngineError::TooLarge { bytes: bytes.len() })?;
        self.0.extend_from_slice(&len.to_le_bytes());
        self.0.extend_from_slice(bytes);
        Ok(())
    }

    fn op(
        &mut self,
        op: u8,
        tree: &str,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), EngineError> {
        self.0.push(op);
        self.field(tree.as_bytes())?;
        self.field(key)?;
        match value {
            Some(value) => self.field(value),
            None => Ok(()),
        }
    }

    /// The framed record: length and CRC filled in.
    fn finish(mut self) -> Result<Vec<u8>, EngineError> {
        let payload = self.payload_len();
        let len = u32::try_from(payload).map_err(|_| EngineError::TooLarge { bytes: payload })?;
        let crc = crc32fast::hash(&self.0[HEADER..]);
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0[4..HEADER].copy_from_slice(&crc.to_le_bytes());
        Ok(self.0)
    }
}

/// The log record of a batch.
fn encode_batch(batch: &WriteBatch) -> Result<Vec<u8>, EngineError> {
    let size: usize = batch
        .ops
        .iter()
        .map(|op| 13 + op.tree.len() + op.key.len() + op.value.as_ref().map_or(0, Vec::len))
        .sum();
    let mut record = RecordBuf::new(KIND_BATCH, size);
    for op in &batch.ops {
        match &op.value {
            Some(value) => record.op(OP_PUT, &op.tree, &op.key, Some(value))?,
            None => record.op(OP_REMOVE, &op.tree, &op.key, None)?,
        }
    }
    record.finish()
}

// ---------------------------------------------------------------------------------------------
// Decoding

fn le_u32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// Reads a payload front to back.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.buf.len() {
            return Err(format!(
                "field of {n} bytes overruns its record ({} left)",
                self.buf.len()
            ));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, String> {
        let bytes = self.take(8)?;
        let mut le = [0; 8];
        le.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(le))
    }

    fn field(&mut self) -> Result<&'a [u8], String> {
        let len = le_u32(self.take(4)?, 0).ok_or("short length")?;
        self.take(len as usize)
    }

    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// One decoded operation of a batch payload.
struct Op<'a> {
    code: u8,
    tree: &'a str,
    key: &'a [u8],
    value: Option<&'a [u8]>,
}

/// Calls `each` for every operation of a batch payload (after its kind byte).
fn decode_batch<'a>(body: &'a [u8], mut each: impl FnMut(Op<'a>)) -> Result<(), String> {
    let mut r = Reader { buf: body };
    while !r.is_empty() {
        let code = r.u8()?;
        if code > OP_TREE {
            return Err(format!("unknown operation {code}"));
        }
        let tree = std::str::from_utf8(r.field()?).map_err(|_| "tree name is not UTF-8")?;
        let key = r.field()?;
        let value = if code == OP_PUT {
            Some(r.field()?)
        } else {
            None
        };
        each(Op {
            code,
            tree,
            key,
            value,
        });
    }
    Ok(())
}

/// How reading a file's records ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Every byte belongs to a valid record.
    Clean,
    /// The record at `offset` is incomplete or fails its checksum.
    Damaged { offset: usize, reason: &'static str },
}

/// The payload of the valid record at `at`, or why there is none.
fn record_at(buf: &[u8], at: usize) -> Result<&[u8], &'static str> {
    let (Some(len), Some(crc)) = (le_u32(buf, at), le_u32(buf, at + 4)) else {
        return Err("incomplete record header");
    };
    if len == 0 {
        return Err("empty record");
    }
    let start = at + HEADER;
    let payload = start
        .checked_add(len as usize)
        .and_then(|end| buf.get(start..end))
        .ok_or("record runs past the end of the file")?;
    if crc32fast::hash(payload) != crc {
        return Err("checksum mismatch");
    }
    Ok(payload)
}

/// Calls `each(offset, payload)` for every valid record from the start of `buf`, stopping at
/// the first damaged one. An error of `each` is returned with the record's offset.
fn read_records(
    buf: &[u8],
    mut each: impl FnMut(usize, &[u8]) -> Result<(), String>,
) -> Result<End, (usize, String)> {
    let mut at = 0;
    while at < buf.len() {
        match record_at(buf, at) {
            Ok(payload) => {
                each(at, payload).map_err(|message| (at, message))?;
                at += HEADER + payload.len();
            }
            Err(reason) => return Ok(End::Damaged { offset: at, reason }),
        }
    }
    Ok(End::Clean)
}

/// True when a valid record of a known kind starts anywhere after `offset`: then the damage at
/// `offset` is not a torn tail.
fn valid_record_after(buf: &[u8], offset: usize) -> bool {
    (offset + 1..buf.len().saturating_sub(HEADER)).any(|at| {
        // The kind byte first: it rules out nearly every position without a checksum.
        matches!(
            buf.get(at + HEADER),
            Some(&(KIND_BATCH | KIND_SNAPSHOT_BEGIN | KIND_SNAPSHOT_END))
        ) && record_at(buf, at).is_ok()
    })
}

/// Applies one operation to the trees (creating its tree).
fn apply_op(trees: &mut Trees, code: u8, tree: &str, key: &[u8], value: Option<&[u8]>) {
    let tree = match trees.get_mut(tree) {
        Some(tree) => tree,
        None => trees.entry(tree.to_string()).or_default(),
    };
    match (code, value) {
        (OP_PUT, Some(value)) => {
            Arc::make_mut(tree).insert(key.to_vec(), Arc::from(value));
        }
        (OP_REMOVE, _) if tree.contains_key(key) => {
            Arc::make_mut(tree).remove(key);
        }
        _ => {}
    }
}

/// Applies a batch payload (after its kind byte) to the trees; returns the puts it held.
fn replay_batch(trees: &mut Trees, body: &[u8]) -> Result<u64, String> {
    let mut puts = 0;
    decode_batch(body, |op| {
        puts += u64::from(op.code == OP_PUT);
        apply_op(trees, op.code, op.tree, op.key, op.value);
    })?;
    Ok(puts)
}

// ---------------------------------------------------------------------------------------------
// Files

fn read_file(path: &Path) -> Result<Vec<u8>, EngineError> {
    std::fs::read(path).map_err(file_error("read", path))
}

fn sync_dir(dir: &Path) -> Result<(), EngineError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(file_error("sync the directory", dir))
}

/// The engine's files in a directory, by generation.
#[derive(Debug, Default)]
struct DirFiles {
    snapshots: Vec<u64>,
    logs: Vec<u64>,
    temporary: Vec<PathBuf>,
}

fn generation_of(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn list_files(dir: &Path) -> Result<DirFiles, EngineError> {
    let mut files = DirFiles::default();
    for entry in std::fs::read_dir(dir).map_err(file_error("list", dir))? {
        let name = entry.map_err(file_error("list", dir))?.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".tmp") && (name.starts_with("snapshot-") || name.starts_with("log-")) {
            files.temporary.push(dir.join(name));
        } else if let Some(generation) = generation_of(name, "snapshot-") {
            files.snapshots.push(generation);
        } else if let Some(generation) = generation_of(name, "log-") {
            files.logs.push(generation);
        }
    }
    files.snapshots.sort_unstable();
    files.logs.sort_unstable();
    Ok(files)
}

/// Removes every snapshot and log of a generation older than `keep`.
fn remove_older(dir: &Path, keep: u64) -> Result<(), EngineError> {
    let files = list_files(dir)?;
    let snapshots = files.snapshots.into_iter().filter(|g| *g < keep);
    let logs = files.logs.into_iter().filter(|g| *g < keep);
    let names = snapshots.map(snapshot_name).chain(logs.map(log_name));
    for name in names {
        let path = dir.join(name);
        std::fs::remove_file(&path).map_err(file_error("remove", &path))?;
    }
    Ok(())
}

/// Takes the directory's lock, waiting up to `wait` for another handle to let go of it.
fn lock_dir(dir: &Path, wait: Duration) -> Result<File, EngineError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(file_error("open", &path))?;
    let deadline = Instant::now() + wait;
    loop {
        match file.try_lock_exclusive() {
            Ok(()) => return Ok(file),
            Err(e)
                if e.raw_os_error() == fs2::lock_contended_error().raw_os_error()
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(file_error("lock (is another server using it?)", &path)(e)),
        }
    }
}

/// Loads a snapshot: its trees and its size. Any damage is corruption.
fn load_snapshot(path: &Path, generation: u64) -> Result<(Trees, u64), EngineError> {
    let buf = read_file(path)?;
    let mut trees = Trees::new();
    let (mut began, mut ended) = (false, false);
    let mut entries = 0;
    let end = read_records(&buf, |_, payload| {
        let mut r = Reader { buf: payload };
        let kind = r.u8()?;
        if ended {
            return Err("record after the snapshot's end".to_string());
        }
        match kind {
            KIND_SNAPSHOT_BEGIN if !began => {
                if r.take(SNAPSHOT_MAGIC.len())? != SNAPSHOT_MAGIC || r.u64()? != generation {
                    return Err("header of another file".to_string());
                }
                began = true;
            }
            KIND_BATCH if began => entries += replay_batch(&mut trees, r.buf)?,
            KIND_SNAPSHOT_END if began => {
                if (r.u64()?, r.u64()?) != (entries, trees.len() as u64) {
                    return Err("entry or tree count differs from its end record".to_string());
                }
                ended = true;
            }
            other => return Err(format!("unexpected record kind {other}")),
        }
        Ok(())
    })
    .map_err(|(offset, message)| corrupt(path, offset, message))?;
    if let End::Damaged { offset, reason } = end {
        return Err(corrupt(path, offset, reason));
    }
    if !ended {
        return Err(corrupt(
            path,
            buf.len(),
            "snapshot ends before its end record",
        ));
    }
    Ok((trees, buf.len() as u64))
}

/// Replays a log onto the trees; returns the length of its valid records. Damage at the end of
/// the newest log (`newest`) with nothing valid after it is a torn, unacknowledged write and
/// is cut off the file; any other damage is corruption.
fn replay_log(path: &Path, trees: &mut Trees, newest: bool) -> Result<u64, EngineError> {
    let buf = read_file(path)?;
    let end = read_records(&buf, |_, payload| match payload.split_first() {
        Some((&KIND_BATCH, body)) => replay_batch(trees, body).map(|_| ()),
        Some((kind, _)) => Err(format!("unexpected record kind {kind} in a log")),
        None => Err("empty record".to_string()),
    })
    .map_err(|(offset, message)| corrupt(path, offset, message))?;
    let End::Damaged { offset, reason } = end else {
        return Ok(buf.len() as u64);
    };
    if !newest {
        return Err(corrupt(
            path,
            offset,
            format!("{reason}, and newer logs follow"),
        ));
    }
    if valid_record_after(&buf, offset) {
        return Err(corrupt(
            path,
            offset,
            format!("{reason}, and valid records follow"),
        ));
    }
    tracing::warn!(
        path = %path.display(),
        offset,
        dropped_bytes = buf.len() - offset,
        reason,
        "the store log ends in a write that was never acknowledged; truncating it"
    );
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(file_error("open", path))?;
    file.set_len(offset as u64)
        .and_then(|()| file.sync_all())
        .map_err(file_error("truncate", path))?;
    Ok(offset as u64)
}

impl LogFile {
    /// Opens a log for appending, creating it (and syncing the directory) if it is missing.
    fn open(dir: &Path, generation: u64) -> Result<Self, EngineError> {
        let path = dir.join(log_name(generation));
        let existed = path.exists();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(file_error("open", &path))?;
        if !existed {
            sync_dir(dir)?;
        }
        Ok(Self {
            path,
            file,
            writing: Vec::new(),
        })
    }

    /// Writes `self.writing` and syncs it.
    fn write_out(&mut self) -> Result<(), EngineError> {
        if self.writing.is_empty() {
            return Ok(());
        }
        self.file
            .write_all(&self.writing)
            .map_err(file_error("append to", &self.path))?;
        self.file
            .sync_data()
            .map_err(file_error("sync", &self.path))?;
        self.writing.clear();
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Snapshots

/// Writes `snapshot-<generation>` (through its `.tmp`, synced, renamed, directory synced);
/// returns its size. Each tree is let go of once written, so writers stop copying it.
fn write_snapshot(shared: &Shared, job: Job) -> Result<u64, EngineError> {
    let tmp = shared
        .dir
        .join(format!("{}.tmp", snapshot_name(job.generation)));
    let file = File::create(&tmp).map_err(file_error("create", &tmp))?;
    let mut out = BufWriter::with_capacity(SNAPSHOT_RECORD_BYTES, file);
    let mut write = |record: Vec<u8>| out.write_all(&record).map_err(file_error("write", &tmp));

    let mut begin = RecordBuf::new(KIND_SNAPSHOT_BEGIN, 16);
    begin.0.extend_from_slice(SNAPSHOT_MAGIC);
    begin.0.extend_from_slice(&job.generation.to_le_bytes());
    write(begin.finish()?)?;
    let (mut entries, trees) = (0u64, job.trees.len() as u64);
    let mut chunk = RecordBuf::new(KIND_BATCH, SNAPSHOT_RECORD_BYTES);
    for (name, tree) in job.trees {
        chunk.op(OP_TREE, &name, b"", None)?;
        for (key, value) in tree.iter() {
            chunk.op(OP_PUT, &name, key, Some(value))?;
            entries += 1;
            if chunk.payload_len() >= SNAPSHOT_RECORD_BYTES {
                let full = std::mem::replace(
                    &mut chunk,
                    RecordBuf::new(KIND_BATCH, SNAPSHOT_RECORD_BYTES),
                );
                write(full.finish()?)?;
            }
        }
    }
    if chunk.payload_len() > 1 {
        write(chunk.finish()?)?;
    }
    let mut end = RecordBuf::new(KIND_SNAPSHOT_END, 16);
    end.0.extend_from_slice(&entries.to_le_bytes());
    end.0.extend_from_slice(&trees.to_le_bytes());
    write(end.finish()?)?;

    let file = out
        .into_inner()
        .map_err(|e| file_error("write", &tmp)(e.into_error()))?;
    file.sync_all().map_err(file_error("sync", &tmp))?;
    let size = file.metadata().map_err(file_error("stat", &tmp))?.len();
    drop(file);
    #[cfg(test)]
    if shared
        .interrupt_snapshots
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return Err(EngineError::Closed);
    }
    let done = shared.dir.join(snapshot_name(job.generation));
    std::fs::rename(&tmp, &done).map_err(file_error("rename", &tmp))?;
    sync_dir(&shared.dir)?;
    Ok(size)
}

/// The compaction thread: writes each snapshot it is sent, then removes older generations.
fn compactor(shared: &Shared, jobs: &mpsc::Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        let generation = job.generation;
        let started = Instant::now();
        let written = write_snapshot(shared, job);
        let result = written.and_then(|size| {
            remove_older(&shared.dir, generation)?;
            Ok(size)
        });
        let mut state = shared.state.write();
        state.compacting = false;
        match result {
            Ok(size) => {
                state.snapshot_bytes = size;
                tracing::info!(
                    generation,
                    bytes = size,
                    duration_ms = started.elapsed().as_millis() as u64,
                    "store snapshot written"
                );
            }
            Err(error) => {
                tracing::error!(
                    generation,
                    error = %error,
                    "store snapshot failed; the logs are kept"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The engine

impl LogEngine {
    /// Opens (or creates) the engine in the directory `path`: takes its lock, removes `.tmp`
    /// files, loads the newest snapshot, replays the logs after it (cutting off a torn tail of
    /// the newest), removes older generations, and starts the compaction thread.
    pub fn open(path: &Path, options: LogOptions) -> Result<Self, EngineError> {
        std::fs::create_dir_all(path).map_err(|source| EngineError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let lock = lock_dir(path, options.lock_wait)?;
        let started = Instant::now();
        let (state, log) = recover(path)?;
        tracing::info!(
            path = %path.display(),
            generation = state.generation,
            trees = state.trees.len(),
            duration_ms = started.elapsed().as_millis() as u64,
            "log store recovered"
        );
        let shared = Arc::new(Shared {
            dir: path.to_path_buf(),
            state: RwLock::new(state),
            #[cfg(test)]
            interrupt_snapshots: std::sync::atomic::AtomicBool::new(false),
        });
        let (jobs, receiver) = mpsc::channel();
        let thread_shared = shared.clone();
        let compactor = std::thread::Builder::new()
            .name("store-compact".to_string())
            .spawn(move || compactor(&thread_shared, &receiver))
            .map_err(|source| EngineError::Thread {
                name: "store-compact",
                source,
            })?;
        Ok(Self {
            shared,
            options,
            log: Mutex::new(log),
            jobs: Some(jobs),
            compactor: Some(compactor),
            _lock: lock,
        })
    }

    /// Takes the pending records for writing (into `log.writing`) and, when the log is due for
    /// compaction, starts the next generation: returns the snapshot to write.
    fn take_pending(&self, log: &mut LogFile) -> Result<Option<Job>, EngineError> {
        let mut state = self.shared.state.write();
        if let Some(error) = &state.broken {
            return Err(EngineError::Flush(error.clone()));
        }
        std::mem::swap(&mut state.pending, &mut log.writing);
        let threshold = self.options.compact_after_bytes.max(state.snapshot_bytes);
        if state.compacting || state.log_bytes <= threshold || self.jobs.is_none() {
            return Ok(None);
        }
        state.generation += 1;
        state.log_bytes = 0;
        state.compacting = true;
        Ok(Some(Job {
            generation: state.generation,
            trees: state.trees.clone(),
        }))
    }

    /// Writes the taken records to the current log and syncs them; on a new generation, then
    /// switches to its log and hands the snapshot to the compaction thread.
    fn write_out(&self, log: &mut LogFile, job: Option<Job>) -> Result<(), EngineError> {
        log.write_out()?;
        let Some(job) = job else { return Ok(()) };
        let next = LogFile::open(&self.shared.dir, job.generation)?;
        *log = next;
        let sent = self.jobs.as_ref().map(|jobs| jobs.send(job));
        if !matches!(sent, Some(Ok(()))) {
            tracing::error!("the store compaction thread is gone; no snapshot written");
            self.shared.state.write().compacting = false;
        }
        Ok(())
    }
}

/// Rebuilds the state from the directory's files and opens the log to append to.
fn recover(dir: &Path) -> Result<(State, LogFile), EngineError> {
    let files = list_files(dir)?;
    for tmp in &files.temporary {
        tracing::warn!(path = %tmp.display(), "removing an unfinished store snapshot");
        std::fs::remove_file(tmp).map_err(file_error("remove", tmp))?;
    }
    let base = files.snapshots.last().copied();
    let (mut trees, snapshot_bytes) = match base {
        Some(generation) => load_snapshot(&dir.join(snapshot_name(generation)), generation)?,
        None => (Trees::new(), 0),
    };
    let first = base.unwrap_or(0);
    let logs: Vec<u64> = files.logs.into_iter().filter(|g| *g >= first).collect();
    if let Some(missing) = (first..).zip(&logs).find(|(want, have)| want != *have) {
        let path = dir.join(log_name(missing.0));
        return Err(corrupt(&path, 0, "missing, though newer logs exist"));
    }
    let mut log_bytes = 0;
    for (i, generation) in logs.iter().enumerate() {
        let path = dir.join(log_name(*generation));
        log_bytes = replay_log(&path, &mut trees, i + 1 == logs.len())?;
    }
    let generation = logs.last().copied().unwrap_or(first);
    remove_older(dir, first)?;
    let log = LogFile::open(dir, generation)?;
    let state = State {
        trees,
        pending: Vec::new(),
        generation,
        log_bytes,
        snapshot_bytes,
        compacting: false,
        broken: None,
    };
    Ok((state, log))
}

impl Engine for LogEngine {
    fn name(&self) -> &'static str {
        "log"
    }

    fn tree_names(&self) -> Result<Vec<String>, EngineError> {
        Ok(self.shared.state.read().trees.keys().cloned().collect())
    }

    fn get(&self, tree: &str, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let state = self.shared.state.read();
        Ok(state
            .trees
            .get(tree)
            .and_then(|t| t.get(key))
            .map(|v| v.to_vec()))
    }

    fn scan(&self, tree: &str, scan: Scan<'_>) -> Result<Vec<Entry>, EngineError> {
        let state = self.shared.state.read();
        Ok(state
            .trees
            .get(tree)
            .map(|t| scan.over(t))
            .unwrap_or_default())
    }

    fn len(&self, tree: &str) -> Result<u64, EngineError> {
        let state = self.shared.state.read();
        Ok(state.trees.get(tree).map_or(0, |t| t.len() as u64))
    }

    fn count(&self, tree: &str, scan: Scan<'_>) -> Result<u64, EngineError> {
        let state = self.shared.state.read();
        Ok(state.trees.get(tree).map_or(0, |t| scan.count_over(t)))
    }

    fn apply(&self, batch: &WriteBatch) -> Result<(), EngineError> {
        if batch.is_empty() {
            return Ok(());
        }
        let record = encode_batch(batch)?;
        let mut state = self.shared.state.write();
        if let Some(error) = &state.broken {
            return Err(EngineError::Flush(error.clone()));
        }
        for op in &batch.ops {
            let code = if op.value.is_some() {
                OP_PUT
            } else {
                OP_REMOVE
            };
            apply_op(
                &mut state.trees,
                code,
                &op.tree,
                &op.key,
                op.value.as_deref(),
            );
        }
        state.pending.extend_from_slice(&record);
        state.log_bytes += record.len() as u64;
        Ok(())
    }

    fn durable_flush(&self) -> Result<(), EngineError> {
        let mut log = self.log.lock();
        let job = self.take_pending(&mut log)?;
        if let Err(error) = self.write_out(&mut log, job) {
            let error = Arc::new(error);
            tracing::error!(error = %error, "the store log cannot be written; refusing writes");
            self.shared.state.write().broken = Some(error.clone());
            return Err(EngineError::Flush(error));
        }
        Ok(())
    }
}

impl Drop for LogEngine {
    fn drop(&mut self) {
        // Batches applied but not flushed go to the log; the snapshot in progress completes.
        let broken = self.shared.state.read().broken.is_some();
        if !broken {
            if let Err(e) = self.durable_flush() {
                tracing::error!(error = %e, "applied store batches could not be written at close");
            }
        }
        self.jobs = None;
        if let Some(thread) = self.compactor.take() {
            if thread.join().is_err() {
                tracing::error!("the store compaction thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Every tree and its entries.
    type Dump = Vec<(String, Vec<Entry>)>;

    fn dump(e: &LogEngine) -> Dump {
        e.tree_names()
            .unwrap()
            .into_iter()
            .map(|t| {
                let entries = e.scan(&t, Scan::default()).unwrap();
                (t, entries)
            })
            .collect()
    }

    fn quick() -> LogOptions {
        LogOptions {
            lock_wait: Duration::from_millis(100),
            ..LogOptions::default()
        }
    }

    /// Options that compact after a few hundred bytes of log.
    fn compacting() -> LogOptions {
        LogOptions {
            compact_after_bytes: 512,
            ..quick()
        }
    }

    fn open(dir: &Path) -> LogEngine {
        LogEngine::open(dir, quick()).unwrap()
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != LOCK_FILE)
            .collect();
        names.sort();
        names
    }

    fn log_path(dir: &Path) -> PathBuf {
        let logs: Vec<String> = files(dir)
            .into_iter()
            .filter(|n| n.starts_with("log-"))
            .collect();
        assert_eq!(logs.len(), 1, "one log: {logs:?}");
        dir.join(&logs[0])
    }

    /// Batch `i` of a varied sequence: puts across trees, overwrites, removals.
    fn batch(i: usize) -> WriteBatch {
        let mut b = WriteBatch::new();
        b.put(
            "objects",
            format!("k{:03}", i % 37),
            format!("value {i} {}", "x".repeat(i % 50)),
        );
        b.put(
            &format!("tree{}", i % 3),
            format!("{i}"),
            vec![i as u8; i % 7],
        );
        if i.is_multiple_of(4) {
            b.remove("objects", format!("k{:03}", (i + 5) % 37));
        }
        if i.is_multiple_of(10) {
            b.remove("emptied", "never-there");
        }
        b
    }

    fn write(e: &LogEngine, range: std::ops::Range<usize>) {
        for i in range {
            e.apply(&batch(i)).unwrap();
            e.durable_flush().unwrap();
        }
    }

    #[test]
    fn log_engine_conformance() {
        let dirs = parking_lot::Mutex::new(Vec::new());
        crate::store::local::engine::conformance::run(|| {
            let dir = tempfile::tempdir().unwrap();
            let engine = open(dir.path());
            dirs.lock().push(dir);
            engine
        });
    }

    #[test]
    fn reopen_keeps_every_flushed_batch() {
        let dir = tempfile::tempdir().unwrap();
        let before = {
            let e = open(dir.path());
            let mut b = WriteBatch::new();
            b.put("a", "k", "v");
            b.put("b", "k", "w");
            b.put("c", "gone", "soon");
            e.apply(&b).unwrap();
            e.durable_flush().unwrap();
            let mut b = WriteBatch::new();
            b.remove("c", "gone");
            b.put("a", "k", "v2");
            b.put("a", vec![0u8, 255], vec![]);
            e.apply(&b).unwrap();
            write(&e, 0..40);
            dump(&e)
        };
        let e = open(dir.path());
        assert_eq!(dump(&e), before);
        assert_eq!(e.get("a", b"k").unwrap().as_deref(), Some(&b"v2"[..]));
        assert_eq!(e.len("c").unwrap(), 0);
        assert!(e.tree_names().unwrap().contains(&"c".to_string()));
        assert!(e.tree_names().unwrap().contains(&"emptied".to_string()));
    }

    #[test]
    fn dropping_the_engine_writes_applied_batches() {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = open(dir.path());
            e.apply(&batch(1)).unwrap();
        }
        let e = open(dir.path());
        assert_eq!(e.len("objects").unwrap(), 1);
    }

    /// Writes batches, then a last one; returns the log's bytes and where the last record
    /// starts, and the state before and after it.
    fn log_with_last_record(dir: &Path) -> (Vec<u8>, usize, Dump, Dump) {
        let e = open(dir);
        write(&e, 0..10);
        let start = std::fs::metadata(log_path(dir)).unwrap().len() as usize;
        let before = dump(&e);
        write(&e, 10..11);
        let after = dump(&e);
        drop(e);
        (std::fs::read(log_path(dir)).unwrap(), start, before, after)
    }

    #[test]
    fn a_torn_last_record_is_cut_off_at_every_length() {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, start, before, _) = log_with_last_record(dir.path());
        let path = log_path(dir.path());
        for len in start..bytes.len() {
            std::fs::write(&path, &bytes[..len]).unwrap();
            let e = open(dir.path());
            assert_eq!(dump(&e), before, "cut at {len}");
            assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, start);
            write(&e, 100..101);
            let expected = dump(&e);
            drop(e);
            assert_eq!(
                dump(&open(dir.path())),
                expected,
                "write after a cut at {len}"
            );
        }
    }

    #[test]
    fn a_flipped_byte_in_the_last_record_is_a_torn_write() {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, start, before, after) = log_with_last_record(dir.path());
        let path = log_path(dir.path());
        for at in start..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            std::fs::write(&path, &damaged).unwrap();
            let e = open(dir.path());
            assert_eq!(dump(&e), before, "byte {at} flipped");
            assert_ne!(dump(&e), after);
        }
    }

    #[test]
    fn a_flipped_byte_before_valid_records_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, _, _, _) = log_with_last_record(dir.path());
        let path = log_path(dir.path());
        let second = HEADER + le_u32(&bytes, 0).unwrap() as usize;
        // The first record's length (low and high byte), checksum, kind and payload, and the
        // second record's header.
        for at in [0, 3, 5, HEADER, HEADER + 3, second - 1, second, second + 4] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            std::fs::write(&path, &damaged).unwrap();
            let err = LogEngine::open(dir.path(), quick()).unwrap_err();
            let message = err.to_string();
            assert!(
                matches!(err, EngineError::CorruptFile { .. })
                    && message.contains(&path.display().to_string()),
                "byte {at}: {message}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), damaged, "left as it was");
        }
    }

    #[test]
    fn a_damaged_snapshot_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let options = LogOptions {
            compact_after_bytes: 1,
            ..quick()
        };
        drop({
            let e = LogEngine::open(dir.path(), options.clone()).unwrap();
            write(&e, 0..5);
            e
        });
        let snapshot = files(dir.path())
            .into_iter()
            .find(|n| n.starts_with("snapshot-"))
            .unwrap();
        let path = dir.path().join(snapshot);
        let bytes = std::fs::read(&path).unwrap();
        for (what, damaged) in [
            ("flipped", {
                let mut b = bytes.clone();
                b[bytes.len() / 2] ^= 1;
                b
            }),
            ("cut", bytes[..bytes.len() - 3].to_vec()),
            (
                "without its end",
                bytes[..bytes.len() - HEADER - 17].to_vec(),
            ),
        ] {
            std::fs::write(&path, &damaged).unwrap();
            let err = LogEngine::open(dir.path(), options.clone()).unwrap_err();
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{what}: {err}"
            );
        }
    }

    #[test]
    fn compaction_keeps_the_state_and_removes_old_generations() {
        let dir = tempfile::tempdir().unwrap();
        let options = compacting();
        let expected = {
            let e = LogEngine::open(dir.path(), options.clone()).unwrap();
            write(&e, 0..300);
            dump(&e)
        };
        let names = files(dir.path());
        let generation: u64 = names[1].trim_start_matches("snapshot-").parse().unwrap();
        assert!(generation >= 3, "compacted several times: {names:?}");
        assert_eq!(
            names,
            [log_name(generation), snapshot_name(generation)],
            "older generations removed"
        );
        // An interrupted compaction left garbage behind.
        let tmp = dir
            .path()
            .join(format!("{}.tmp", snapshot_name(generation + 1)));
        std::fs::write(&tmp, b"half a snapshot").unwrap();
        let e = LogEngine::open(dir.path(), options).unwrap();
        assert_eq!(dump(&e), expected);
        assert!(!tmp.exists(), "the .tmp is removed");
        write(&e, 300..310);
    }

    #[test]
    fn an_interrupted_compaction_recovers_from_the_old_generations() {
        let dir = tempfile::tempdir().unwrap();
        let options = compacting();
        let expected = {
            let e = LogEngine::open(dir.path(), options.clone()).unwrap();
            write(&e, 0..100);
            // From now on every snapshot stops before its rename, as if the process died.
            e.shared.interrupt_snapshots.store(true, Ordering::Relaxed);
            write(&e, 100..300);
            dump(&e)
        };
        let names = files(dir.path());
        assert!(names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
        assert!(
            names.iter().filter(|n| n.starts_with("log-")).count() > 2,
            "{names:?}"
        );
        let e = LogEngine::open(dir.path(), options).unwrap();
        assert_eq!(dump(&e), expected);
        assert!(!files(dir.path()).iter().any(|n| n.ends_with(".tmp")));
    }

    #[test]
    fn a_missing_log_generation_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let options = compacting();
        drop({
            let e = LogEngine::open(dir.path(), options.clone()).unwrap();
            e.shared.interrupt_snapshots.store(true, Ordering::Relaxed);
            write(&e, 0..100);
            e
        });
        std::fs::remove_file(dir.path().join(log_name(1))).unwrap();
        let err = LogEngine::open(dir.path(), options).unwrap_err();
        assert!(err.to_string().contains(&log_name(1)), "{err}");
    }

    #[test]
    fn a_second_handle_is_refused_while_the_first_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let first = open(dir.path());
        let err = LogEngine::open(dir.path(), quick()).unwrap_err();
        assert!(err.to_string().contains("lock"), "{err}");
        drop(first);
        open(dir.path());
    }

    #[test]
    fn records_round_trip_and_refuse_unknown_operations() {
        let record = encode_batch(&batch(20)).unwrap();
        let payload = record_at(&record, 0).unwrap();
        let mut trees = Trees::new();
        assert_eq!(replay_batch(&mut trees, &payload[1..]), Ok(2));
        assert!(trees.contains_key("emptied"));
        let mut unknown = payload[1..].to_vec();
        unknown[0] = 9;
        assert!(replay_batch(&mut Trees::new(), &unknown).is_err());
        assert_eq!(read_records(&record, |_, _| Ok(())), Ok(End::Clean));
        assert_eq!(
            read_records(&[0; 16], |_, _| Ok(())),
            Ok(End::Damaged {
                offset: 0,
                reason: "empty record"
            }),
            "zeroes past a torn write are not records"
        );
    }

    #[tokio::test]
    async fn a_log_store_keeps_objects_across_reopen() {
        use crate::store::{KvStore, Store, StoreConfig};
        let dir = tempfile::tempdir().unwrap();
        let configmaps = flotilla_api::kinds::builtin_by_plural("", "configmaps").unwrap();
        let object = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "one", "namespace": "default"}, "data": {"k": "v"}});
        let created = {
            let store = KvStore::<LogEngine>::open_log(dir.path(), StoreConfig::default()).unwrap();
            let created = store.create(&configmaps, object).await.unwrap();
            store.close().await.unwrap();
            created
        };
        let store = KvStore::<LogEngine>::open_log(dir.path(), StoreConfig::default()).unwrap();
        let read = store
            .get(&configmaps, Some("default"), "one")
            .await
            .unwrap();
        assert_eq!(read, created);
        assert_eq!(store.engine().name(), "log");
        store.close().await.unwrap();
    }
}
