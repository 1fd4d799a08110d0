//! [`EngineError`]: how the storage under the object rules failed, for both backends: the
//! local engines (sled, the log engine's files, the memory engine; see [`super::local`]) and
//! etcd ([`super::etcd`]). [`super::StoreError::Engine`] carries it; the API maps an etcd
//! failure to 503 and every other to 500.

use std::sync::Arc;

/// Errors of an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// sled failed.
    #[error("sled failed to {op}")]
    Sled {
        /// What the engine was doing.
        op: &'static str,
        #[source]
        source: sled::Error,
    },
    /// The data directory could not be prepared.
    #[error("cannot prepare the data directory {path}")]
    Io {
        /// The directory.
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A file of the log engine could not be read, written, synced or locked.
    #[error("cannot {op} {path}")]
    File {
        /// What the engine was doing.
        op: &'static str,
        /// The file.
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A file of the log engine is damaged where acknowledged data may live; the engine
    /// refuses to open rather than drop it.
    #[error("corrupt store file {path} at byte {offset}: {message}")]
    CorruptFile {
        /// The file.
        path: String,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong.
        message: String,
    },
    /// A batch (or one of its fields) too large for one log record (4 GiB).
    #[error("a write of {bytes} bytes is too large for one log record")]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// A stored record cannot be decoded.
    #[error("corrupt record in tree {tree:?} at key {key:?}: {message}")]
    Corrupt {
        /// The tree.
        tree: String,
        /// The key (lossily decoded).
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A value could not be encoded.
    #[error("cannot encode a record for tree {tree:?}")]
    Encode {
        /// The tree.
        tree: String,
        #[source]
        source: serde_json::Error,
    },
    /// Flushing to disk failed; the write may not survive a crash.
    #[error("flush to disk failed")]
    Flush(#[source] Arc<EngineError>),
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// etcd refused or did not answer (the etcd engine).
    #[error("etcd failed to {op}")]
    Etcd {
        /// What the engine was doing.
        op: &'static str,
        #[source]
        source: etcd_client::Error,
    },
    /// A background thread could not be started.
    #[error("cannot start the {name} thread")]
    Thread {
        /// Which thread.
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
}
