//! The etcd engine's commit path: reads that carry the key's revision, and one transaction
//! whose every write carries its precondition (the key is absent, or still at the revision the
//! rule read), as kube-apiserver's etcd3 store writes. A transaction that fails a precondition
//! writes nothing, and the caller reads again.
//!
//! etcd refuses transactions of more than 128 operations or about 1.5 MiB
//! ([`MAX_TXN_OPS`], [`MAX_TXN_BYTES`] keep a margin): a caller with more to write splits it,
//! in an order whose every prefix is safe to commit alone.

use super::super::rules::Precondition;
use super::super::{EngineError, StoreError};
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use serde_json::Value;
use std::sync::Arc;

/// Operations one transaction may carry (etcd's `--max-txn-ops` is 128).
pub const MAX_TXN_OPS: usize = 100;

/// Bytes of values one transaction may carry (etcd's request limit is 1.5 MiB).
pub const MAX_TXN_BYTES: usize = 1 << 20;

/// One write of a transaction.
#[derive(Clone, Debug)]
pub struct Write {
    /// The etcd key.
    pub key: String,
    /// What the key must hold for the transaction to commit; `None` writes it whatever it
    /// holds (records that are the same whoever writes them, such as a kind's).
    pub precondition: Option<Precondition>,
    /// The value to store, or `None` to delete the key.
    pub value: Option<Vec<u8>>,
}

impl Write {
    /// Stores `value` at `key` if it holds what `precondition` says.
    pub fn put(key: String, precondition: Precondition, value: Vec<u8>) -> Self {
        Self {
            key,
            precondition: Some(precondition),
            value: Some(value),
        }
    }

    /// Stores `value` at `key` whatever it holds.
    pub fn overwrite(key: String, value: Vec<u8>) -> Self {
        Self {
            key,
            precondition: None,
            value: Some(value),
        }
    }

    /// Deletes `key` if it is still at revision `revision`.
    pub fn delete(key: String, revision: u64) -> Self {
        Self {
            key,
            precondition: Some(Precondition::At(revision)),
            value: None,
        }
    }

    /// The bytes this write sends.
    pub fn size(&self) -> usize {
        self.key.len() + self.value.as_ref().map_or(0, Vec::len)
    }
}

/// An object as read, with its mod revision (its resourceVersion).
#[derive(Clone, Debug)]
pub struct Read {
    /// The etcd key.
    pub key: String,
    /// The object, `metadata.resourceVersion` set to its revision.
    pub object: Value,
    /// The key's mod revision.
    pub revision: u64,
}

/// Attempts of a request etcd refused without acting on it.
const ATTEMPTS: u32 = 5;

/// Whether a request may be sent again after `error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Reads: any failure of the connection or the member (down, without a leader, a reset
    /// stream) is retried, as reads change nothing; a compacted or future revision is not.
    Read,
    /// Writes: only refusals that prove nothing was proposed (no connection was made, or the
    /// member had no leader and refused the request up front, `--require-leader`); a timeout
    /// leaves the outcome unknown and is never retried.
    Write,
}

/// True when `error` says the request may be sent again under `retry`.
pub fn retryable(error: &etcd_client::Error, retry: Retry) -> bool {
    let text = error.to_string();
    let never_sent = text.contains("no leader")
        || text.contains("connect error")
        || text.contains("Connection refused");
    match (error, retry) {
        (_, Retry::Write) => never_sent,
        (etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_), Retry::Read) => {
            true
        }
        (etcd_client::Error::GRpcStatus(status), Retry::Read) => {
            let code = format!("{:?}", status.code());
            !text.contains("compacted")
                && !text.contains("future revision")
                && matches!(
                    code.as_str(),
                    "Unavailable"
                        | "Unknown"
                        | "DeadlineExceeded"
                        | "Cancelled"
                        | "Aborted"
                        | "Internal"
                )
        }
        _ => false,
    }
}

/// Runs `request` until it succeeds, fails in a way `retry` does not retry, or has been tried
/// [`ATTEMPTS`] times (50 ms, then doubling, between tries).
pub async fn retrying<T, F, Fut>(retry: Retry, mut request: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let mut pause = std::time::Duration::from_millis(50);
    let mut attempt = 1;
    loop {
        match request().await {
            Err(error) if attempt < ATTEMPTS && retryable(&error, retry) => {
                tracing::debug!(error = %error, attempt, "etcd refused a request; trying again");
                tokio::time::sleep(pause).await;
                pause *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Wraps an etcd failure, while doing `op`, as the store's engine error.
pub fn etcd_error(op: &'static str) -> impl Fn(etcd_client::Error) -> StoreError {
    move |source| StoreError::Engine(Box::new(EngineError::Etcd { op, source }))
}

/// Decodes a stored value and stamps its revision as `metadata.resourceVersion`.
pub fn decode(key: &[u8], value: &[u8], revision: i64) -> Result<Value, StoreError> {
    let mut object: Value = serde_json::from_slice(value).map_err(|e| {
        StoreError::Engine(Box::new(EngineError::Corrupt {
            tree: "etcd".to_string(),
            key: String::from_utf8_lossy(key).into_owned(),
            message: e.to_string(),
        }))
    })?;
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert(
            "resourceVersion".to_string(),
            Value::String(revision.to_string()),
        );
    }
    Ok(object)
}

/// Encodes an object for storage: its JSON without `metadata.resourceVersion`, which etcd
/// keeps as the key's mod revision.
pub fn encode(object: &Value) -> Result<Vec<u8>, StoreError> {
    let mut object = object.clone();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("resourceVersion");
    }
    serde_json::to_vec(&object).map_err(|source| {
        StoreError::Engine(Box::new(EngineError::Encode {
            tree: "etcd".to_string(),
            source,
        }))
    })
}

/// Reads one key, linearizably.
pub async fn read(client: &Client, key: &str) -> Result<Option<Read>, StoreError> {
    let response = retrying(Retry::Read, || {
        let mut kv = client.kv_client();
        async move { kv.get(key, None).await }
    })
    .await
    .map_err(etcd_error("read"))?;
    match response.kvs().first() {
        None => Ok(None),
        Some(kv) => Ok(Some(Read {
            key: key.to_string(),
            object: decode(kv.key(), kv.value(), kv.mod_revision())?,
            revision: revision_of(kv.mod_revision()),
        })),
    }
}

/// Reads several keys in one transaction (at one revision); absent keys are left out.
pub async fn read_many(client: &Client, keys: &[String]) -> Result<Vec<Read>, StoreError> {
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(MAX_TXN_OPS) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|key| TxnOp::get(key.as_str(), None::<GetOptions>))
            .collect();
        let mut kv = client.kv_client();
        let response = kv
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(etcd_error("read"))?;
        for op in response.op_responses() {
            if let etcd_client::TxnOpResponse::Get(get) = op {
                for kv in get.kvs() {
                    out.push(Read {
                        key: String::from_utf8_lossy(kv.key()).into_owned(),
                        object: decode(kv.key(), kv.value(), kv.mod_revision())?,
                        revision: revision_of(kv.mod_revision()),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The cluster's current revision (a linearizable read of one key).
pub async fn current_revision(client: &Client, any_key: &str) -> Result<u64, StoreError> {
    let response = retrying(Retry::Read, || {
        let mut kv = client.kv_client();
        async move {
            kv.get(any_key, Some(GetOptions::new().with_count_only()))
                .await
        }
    })
    .await
    .map_err(etcd_error("read the revision"))?;
    Ok(response.header().map_or(0, |h| revision_of(h.revision())))
}

/// A leader's fence: a transaction it guards commits only while the election key `key` still
/// has create revision `revision`, i.e. while this server's term lasts (etcd's `LeaderKey`).
/// A deposed leader, one paused past its lease for instance, commits nothing.
#[derive(Clone)]
pub struct Fence {
    /// The election key of the term.
    pub key: Vec<u8>,
    /// Its create revision.
    pub revision: i64,
    /// Called for every write the fence refused (the term is over: stop the controllers).
    pub refused: Arc<dyn Fn() + Send + Sync>,
    /// Called with the revision of every transaction committed through the fence.
    pub committed: Arc<dyn Fn(u64) + Send + Sync>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

/// Commits `writes` in one transaction, guarded by `checks` (compares of keys it reads but does
/// not write) and by the fence, when there is one. Answers the transaction's revision, or
/// `None` when a precondition failed and nothing was written; `Fenced` when the fence refused
/// it.
pub async fn commit(
    client: &Client,
    fence: Option<&Fence>,
    checks: &[Compare],
    writes: &[Write],
) -> Result<Option<u64>, StoreError> {
    let mut compares: Vec<Compare> = checks.to_vec();
    if let Some(fence) = fence {
        compares.push(Compare::create_revision(
            fence.key.clone(),
            CompareOp::Equal,
            fence.revision,
        ));
    }
    let mut ops = Vec::with_capacity(writes.len());
    for write in writes {
        let revision = match write.precondition {
            None => None,
            Some(Precondition::Absent) => Some(0),
            Some(Precondition::At(revision)) => Some(i64::try_from(revision).unwrap_or(i64::MAX)),
        };
        if let Some(revision) = revision {
            compares.push(Compare::mod_revision(
                write.key.as_str(),
                CompareOp::Equal,
                revision,
            ));
        }
        ops.push(match &write.value {
            Some(value) => TxnOp::put(write.key.as_str(), value.clone(), None),
            None => TxnOp::delete(write.key.as_str(), None),
        });
    }
    let response = retrying(Retry::Write, || {
        let mut txn = Txn::new().when(compares.clone()).and_then(ops.clone());
        if let Some(fence) = fence {
            txn = txn.or_else(vec![TxnOp::get(fence.key.clone(), None)]);
        }
        let mut kv = client.kv_client();
        async move { kv.txn(txn).await }
    })
    .await
    .map_err(etcd_error("commit"))?;
    let revision = response.header().map_or(0, |h| revision_of(h.revision()));
    if !response.succeeded() {
        if let Some(fence) = fence {
            let held = response.op_responses().iter().any(|op| match op {
                etcd_client::TxnOpResponse::Get(get) => get
                    .kvs()
                    .iter()
                    .any(|kv| kv.create_revision() == fence.revision),
                _ => false,
            });
            if !held {
                (fence.refused)();
                return Err(StoreError::Fenced {
                    key: String::from_utf8_lossy(&fence.key).into_owned(),
                    revision: fence.revision,
                });
            }
        }
        return Ok(None);
    }
    if let Some(fence) = fence {
        (fence.committed)(revision);
    }
    Ok(Some(revision))
}

/// Confirms that `fence`'s term still lasts with a transaction that compares its election key
/// and writes nothing (linearizable, as every etcd transaction): a term another server's
/// replaced is refused as a write through the fence would be, and ends.
pub async fn confirm(client: &Client, fence: &Fence) -> Result<(), StoreError> {
    let held = Compare::create_revision(fence.key.clone(), CompareOp::Equal, fence.revision);
    let response = retrying(Retry::Read, || {
        let txn = Txn::new().when(vec![held.clone()]);
        let mut kv = client.kv_client();
        async move { kv.txn(txn).await }
    })
    .await
    .map_err(etcd_error("confirm the term"))?;
    if response.succeeded() {
        return Ok(());
    }
    (fence.refused)();
    Err(StoreError::Fenced {
        key: String::from_utf8_lossy(&fence.key).into_owned(),
        revision: fence.revision,
    })
}

/// An etcd revision as a resourceVersion (etcd's are never negative).
pub fn revision_of(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

/// Splits writes into transactions within etcd's limits, keeping their order.
pub fn batches(writes: Vec<Write>) -> Vec<Vec<Write>> {
    let mut out: Vec<Vec<Write>> = Vec::new();
    let mut current: Vec<Write> = Vec::new();
    let mut bytes = 0;
    for write in writes {
        let size = write.size();
        if !current.is_empty() && (current.len() >= MAX_TXN_OPS || bytes + size > MAX_TXN_BYTES) {
            out.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(write);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn what_is_retried() {
        use etcd_client::Error;
        use tonic::{Code, Status};
        let grpc = |code, message: &str| Error::GRpcStatus(Status::new(code, message));
        // (error, retried as a read, retried as a write)
        let table = [
            (grpc(Code::Unavailable, "etcdserver: no leader"), true, true),
            (grpc(Code::Unavailable, "tcp connect error"), true, true),
            (
                grpc(Code::Unavailable, "etcdserver: request timed out"),
                true,
                false,
            ),
            (grpc(Code::Unknown, "transport error"), true, false),
            (grpc(Code::DeadlineExceeded, "deadline"), true, false),
            (
                grpc(
                    Code::OutOfRange,
                    "mvcc: required revision has been compacted",
                ),
                false,
                false,
            ),
            (
                grpc(Code::InvalidArgument, "too many operations in txn request"),
                false,
                false,
            ),
            (Error::InvalidArgs("bad".into()), false, false),
        ];
        for (error, read, write) in table {
            assert_eq!(retryable(&error, Retry::Read), read, "read: {error}");
            assert_eq!(retryable(&error, Retry::Write), write, "write: {error}");
        }
    }

    #[test]
    fn batches_stay_within_limits() {
        let writes: Vec<Write> = (0..250)
            .map(|i| Write::put(format!("k{i}"), Precondition::Absent, vec![0; 10]))
            .collect();
        let split = batches(writes);
        assert_eq!(
            split.iter().map(Vec::len).collect::<Vec<_>>(),
            [MAX_TXN_OPS, MAX_TXN_OPS, 50]
        );
        let big: Vec<Write> = (0..5)
            .map(|i| Write::put(format!("k{i}"), Precondition::Absent, vec![0; 400 << 10]))
            .collect();
        let split = batches(big);
        assert!(split
            .iter()
            .all(|b| b.iter().map(Write::size).sum::<usize>() <= MAX_TXN_BYTES));
        assert_eq!(split.iter().map(Vec::len).sum::<usize>(), 5);
    }

    #[test]
    fn stored_json_has_no_resource_version() {
        let obj = json!({"metadata": {"name": "a", "resourceVersion": "9"}, "data": 1});
        let bytes = encode(&obj).unwrap();
        let back = decode(b"k", &bytes, 12).unwrap();
        assert_eq!(back["metadata"]["resourceVersion"], json!("12"));
        assert!(!String::from_utf8(bytes)
            .unwrap()
            .contains("resourceVersion"));
    }
}
