//! The Works of one member: list `karmada-es-<cluster>`, then watch from the list's
//! resourceVersion (resuming from the last one seen when a stream ends, relisting on 410),
//! and for each Work:
//!
//! - apply every manifest whose hash changed (or whose object is missing) to the runtime,
//!   delete objects whose manifest left the Work, and record what was applied;
//! - report `status.conditions` Applied and `status.manifestStatuses` (the member objects'
//!   status and health), again whenever the runtime announces a change (at most once per
//!   `work_status_period`); the status writes and Events travel through the outbox (`outbox.rs`)
//!   while the next Works are applied;
//! - on a deletionTimestamp: delete its objects (unless `preserveResourcesOnDeletion`), then
//!   remove the `karmada.io/execution-controller` finalizer;
//! - when it disappears (DELETED, or missing from a relist, also across restarts thanks to the
//!   record): delete its objects.
//!
//! When the agent moves to another server (`--server URL,URL,...`, [`super::endpoints`]) the
//! Works are listed again on that server, and the watch starts from that list's
//! resourceVersion: a watch is never resumed on one server from a resourceVersion another
//! server handed out.
//!
//! Objects claimed by another Work's record are never deleted on behalf of this one. Works that
//! ask for exactly-once placement are told to the member's fence ([`super::fence`]) and are
//! not applied while it is fenced; a lifted fence relists.

use flotilla_api::json_pointer::JsonPointer;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::cluster::execution_namespace;
use flotilla_api::meta::{set_condition, Condition, ConditionStatus, Time};
use flotilla_api::work::{
    ManifestStatus, ResourceIdentifier, Work, WorkStatus, CONDITION_APPLIED, EXACTLY_ONCE,
    EXECUTION_CONTROLLER_FINALIZER, PLACEMENT_GUARANTEE_ANNOTATION, WORK_API_VERSION,
};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::backoff::Backoff;
use super::client::{ClientError, WatchStream};
use super::fence::FencePhase;
use super::outbox::{Outbox, Sent};
use super::record::{plan_sync, AppliedObject, RecordFile, WorkRecord};
use super::{health, pause, wait_reachable, PullContext, Wake};
use flotilla_member::hashing::canonical_hash;
use flotilla_member::ObjectRef;

/// Reason and message of a successful Applied condition.
pub const APPLIED_REASON: &str = "AppliedSuccessful";
/// Message of a successful Applied condition.
pub const APPLIED_MESSAGE: &str = "Manifest has been successfully applied";
/// Reason of a failed Applied condition.
pub const APPLY_FAILED_REASON: &str = "AppliedFailed";

/// How a watch ended.
enum WatchEnd {
    /// The server closed the stream: watch again from the last resourceVersion.
    Closed,
    /// The resourceVersion is too old: relist.
    Gone,
    /// The connection broke: wait, then watch again from the last resourceVersion.
    Broken(ClientError),
    /// Nothing came for the idle timeout: watch again from the last resourceVersion at once.
    Idle,
    /// The member became unreachable: wait, then relist.
    Unreachable,
    /// The agent moved to another server: relist there.
    Switched,
    /// Shutdown.
    Stop,
}

enum Step {
    Event(Result<Option<super::client::WatchEvent>, ClientError>),
    /// The server answered a request of the outbox.
    Answer(Sent),
    /// The stream has nothing ready and synced Works wait to be reported.
    Send,
    Idle,
    RuntimeChanged,
    StatusTick,
    Resync,
    Unreachable,
    Switched,
    Stop,
}

/// Status writes (and, apart, Events) in flight at once.
const FLUSH_CONCURRENCY: usize = 16;
/// Works per page of a relist (client-go's reflectors list 500 at a time).
const LIST_PAGE: usize = 500;

/// An Event about a Work waiting to be handed to the outbox.
struct PendingEvent {
    work: Work,
    type_: &'static str,
    reason: &'static str,
    message: String,
}

/// Syncs one member's Works.
pub struct WorksController {
    ctx: Arc<PullContext>,
    namespace: String,
    collection: String,
    events_path: String,
    record: RecordFile,
    works: BTreeMap<String, Work>,
    apply_errors: HashMap<String, String>,
    status_dirty: bool,
    /// Works synced since their status was last sent, whose status the next send reports
    /// (a Work whose previous status write is still in flight waits for its answer).
    pending: BTreeSet<String>,
    /// Events the next send hands to the outbox.
    pending_events: Vec<PendingEvent>,
    /// Status writes and Events on their way.
    outbox: Outbox,
    /// For each Work whose reported status was found current: a hash of what that status is
    /// made from (the Work's resourceVersion, its apply error, and each applied object's
    /// resourceVersion). A status pass skips the Works whose hash did not move.
    settled: HashMap<String, u64>,
}

impl WorksController {
    /// A controller for the context's member, starting from the record on disk.
    pub fn new(ctx: Arc<PullContext>, record: RecordFile) -> Self {
        let namespace = execution_namespace(ctx.cluster());
        let collection = format!("/apis/work.karmada.io/v1alpha1/namespaces/{namespace}/works");
        let events_path = format!("/api/v1/namespaces/{namespace}/events");
        WorksController {
            outbox: Outbox::new(ctx.clone(), FLUSH_CONCURRENCY),
            ctx,
            namespace,
            collection,
            events_path,
            record,
            works: BTreeMap::new(),
            apply_errors: HashMap::new(),
            status_dirty: false,
            pending: BTreeSet::new(),
            pending_events: Vec::new(),
            settled: HashMap::new(),
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.namespace)
    }

    /// Lists, watches and syncs until shutdown.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut faults = self.ctx.member.faults.subscribe();
        let mut backoff = Backoff::default();
        // Every server switch of the process (none with one server): list again there.
        let mut switches = self.ctx.client.endpoints().subscribe();
        'relist: loop {
            if wait_reachable(&mut faults, &mut shutdown).await == Wake::Stop {
                break;
            }
            let listed_on = *switches.borrow_and_update();
            let mut rv = match self.relist().await {
                Ok(rv) => rv,
                Err(e) => {
                    let delay = backoff.next_delay();
                    super::log_retry(
                        self.ctx.cluster(),
                        "listing works",
                        backoff.attempts(),
                        delay,
                        &e,
                    );
                    if pause(delay, &mut faults, &mut shutdown).await == Wake::Stop {
                        break;
                    }
                    continue;
                }
            };
            backoff.reset();
            loop {
                if *switches.borrow_and_update() != listed_on {
                    tracing::info!(cluster = %self.ctx.cluster(),
                        server = %self.ctx.client.endpoints().url(self.ctx.client.endpoints().current()),
                        "switched servers; listing the works again");
                    continue 'relist;
                }
                let timeout_s = 240 + rand::random::<u64>() % 120;
                let path = format!(
                    "{}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={timeout_s}",
                    self.collection
                );
                let opened = tokio::time::Instant::now();
                let end = match self.ctx.client.watch(&path).await {
                    Ok(stream) => {
                        self.consume(stream, &mut rv, &mut faults, &mut shutdown, &mut switches)
                            .await
                    }
                    Err(e) if e.is_gone() => WatchEnd::Gone,
                    Err(e) => WatchEnd::Broken(e),
                };
                let lived = opened.elapsed() >= Duration::from_secs(1);
                if lived {
                    // The watch served a while: whatever ended it, start backing off afresh.
                    backoff.reset();
                }
                match end {
                    WatchEnd::Closed if lived => {}
                    WatchEnd::Closed => {
                        // Closed at once: do not spin on a server that ends every watch.
                        if pause(backoff.next_delay(), &mut faults, &mut shutdown).await
                            == Wake::Stop
                        {
                            break 'relist;
                        }
                    }
                    WatchEnd::Gone => {
                        tracing::info!(cluster = %self.ctx.cluster(), resource_version = %rv,
                            "watch expired; relisting");
                        continue 'relist;
                    }
                    // The failure moved the agent to another server: list there at once.
                    WatchEnd::Broken(_) if *switches.borrow() != listed_on => {}
                    WatchEnd::Broken(e) => {
                        let delay = backoff.next_delay();
                        super::log_retry(
                            self.ctx.cluster(),
                            "watching works",
                            backoff.attempts(),
                            delay,
                            &e,
                        );
                        if pause(delay, &mut faults, &mut shutdown).await == Wake::Stop {
                            break 'relist;
                        }
                    }
                    WatchEnd::Idle => {
                        tracing::debug!(cluster = %self.ctx.cluster(), "watch went quiet; reopening");
                    }
                    WatchEnd::Unreachable => continue 'relist,
                    // The top of the loop lists again.
                    WatchEnd::Switched => {}
                    WatchEnd::Stop => break 'relist,
                }
            }
        }
        self.save_record().await;
    }

    async fn consume(
        &mut self,
        mut stream: WatchStream,
        rv: &mut String,
        faults: &mut watch::Receiver<crate::member::FaultFlags>,
        shutdown: &mut watch::Receiver<bool>,
        switches: &mut watch::Receiver<u64>,
    ) -> WatchEnd {
        let mut changes = self.ctx.member.runtime.subscribe();
        let mut runtime_alive = true;
        let mut status_tick = tokio::time::interval(self.ctx.timing.work_status_period);
        status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let period = self.ctx.timing.resync_period;
        let mut resync = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let idle = self.ctx.timing.watch_idle_timeout;
        let mut last_data = tokio::time::Instant::now();
        let mut fence = self.ctx.member.fence.subscribe();
        loop {
            let step = tokio::select! {
                biased;
                _ = flotilla_member::stopped(shutdown) => Step::Stop,
                _ = async { let _ = faults.wait_for(|f| f.unreachable).await; } => Step::Unreachable,
                // A lifted fence relists (as a member back from unreachable does).
                _ = async { let _ = fence.wait_for(|p| *p == FencePhase::Lifted).await; } => Step::Unreachable,
                Ok(()) = switches.changed() => Step::Switched,
                ev = stream.next_event() => Step::Event(ev),
                Some(answer) = self.outbox.next(), if !self.outbox.is_empty() => Step::Answer(answer),
                // Only when no event is ready (biased): a burst of Works is applied first,
                // then recorded with one write of the record and sent concurrently; the
                // Works that arrive meanwhile are applied while those requests travel.
                _ = std::future::ready(()), if self.can_send() => Step::Send,
                _ = tokio::time::sleep_until(last_data + idle) => Step::Idle,
                r = changes.changed(), if runtime_alive => match r {
                    Ok(()) => Step::RuntimeChanged,
                    Err(_) => {
                        // The runtime is gone (shutting down): rely on the status tick.
                        runtime_alive = false;
                        Step::StatusTick
                    }
                },
                _ = status_tick.tick() => Step::StatusTick,
                _ = resync.tick() => Step::Resync,
            };
            match step {
                Step::Stop => {
                    self.flush().await;
                    return WatchEnd::Stop;
                }
                Step::Unreachable => return WatchEnd::Unreachable,
                Step::Switched => return WatchEnd::Switched,
                Step::Answer(answer) => self.take_answer(answer).await,
                Step::Send => self.send().await,
                Step::RuntimeChanged => self.status_dirty = true,
                Step::StatusTick => {
                    if self.status_dirty {
                        self.status_dirty = false;
                        self.report_all().await;
                    }
                }
                Step::Resync => {
                    let names: Vec<String> = self.works.keys().cloned().collect();
                    for name in names {
                        self.sync(&name).await;
                    }
                }
                Step::Idle => return WatchEnd::Idle,
                Step::Event(Err(e)) => return WatchEnd::Broken(e),
                Step::Event(Ok(None)) => return WatchEnd::Closed,
                Step::Event(Ok(Some(ev))) => {
                    last_data = tokio::time::Instant::now();
                    if let Some(v) = ev
                        .object
                        .lookup("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                    {
                        if ev.type_ != "ERROR" {
                            *rv = v.to_string();
                        }
                    }
                    match ev.type_.as_str() {
                        "ADDED" | "MODIFIED" => match serde_json::from_value::<Work>(ev.object) {
                            Ok(work) => self.upsert(work).await,
                            Err(e) => tracing::warn!(cluster = %self.ctx.cluster(),
                                error = %e, "undecodable work in watch event"),
                        },
                        "DELETED" => {
                            let work: Option<Work> = serde_json::from_value(ev.object).ok();
                            // The deletion of a Work older than the one held (a watch
                            // replaying what a later list page had already passed) is no news.
                            let work = work
                                .filter(|w| !older_than_held(self.works.get(&w.metadata.name), w));
                            if let Some(work) = work {
                                let preserve =
                                    work.spec.preserve_resources_on_deletion == Some(true);
                                self.forget(&work.metadata.name, preserve).await;
                            }
                        }
                        "BOOKMARK" => {}
                        "ERROR" => {
                            let code = ev.object.get("code").and_then(Value::as_u64);
                            if code == Some(410) {
                                return WatchEnd::Gone;
                            }
                            return WatchEnd::Broken(ClientError::Api {
                                method: "GET".into(),
                                path: self.collection.clone(),
                                code: u16::try_from(code.unwrap_or(500)).unwrap_or(500),
                                reason: ev.object["reason"].as_str().unwrap_or("").into(),
                                message: ev.object["message"].as_str().unwrap_or("").into(),
                            });
                        }
                        other => tracing::debug!(cluster = %self.ctx.cluster(), event = other,
                            "ignoring watch event"),
                    }
                }
            }
        }
    }

    /// Lists the Works, syncs each, forgets those gone; answers the list's resourceVersion.
    async fn relist(&mut self) -> Result<String, ClientError> {
        // In pages, as client-go's reflectors list: each answer stays small, however many
        // Works the member has. The watch starts from the first page's resourceVersion, so a
        // change made while the later pages are read arrives through it (perhaps twice, never
        // missed).
        let mut rv: Option<String> = None;
        let mut fresh = BTreeMap::new();
        let mut next: Option<String> = None;
        loop {
            let mut path = format!("{}?limit={LIST_PAGE}", self.collection);
            if let Some(token) = &next {
                path.push_str("&continue=");
                path.push_str(&utf8_percent_encode(token, NON_ALPHANUMERIC).to_string());
            }
            let mut page = self.ctx.client.get(&path).await?;
            rv.get_or_insert_with(|| {
                page.lookup("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("0")
                    .to_string()
            });
            let items = match page.get_mut("items").map(Value::take) {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            };
            for item in items {
                match serde_json::from_value::<Work>(item) {
                    Ok(w) => {
                        fresh.insert(w.metadata.name.clone(), w);
                    }
                    Err(e) => tracing::warn!(cluster = %self.ctx.cluster(), error = %e,
                        "undecodable work in list"),
                }
            }
            next = page
                .lookup("/metadata/continue")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(String::from);
            if next.is_none() {
                break;
            }
        }
        let rv = rv.unwrap_or_else(|| "0".to_string());
        let prefix = format!("{}/", self.namespace);
        let mut gone: Vec<(String, bool)> = self
            .works
            .iter()
            .filter(|(n, _)| !fresh.contains_key(*n))
            .map(|(n, w)| {
                (
                    n.clone(),
                    w.spec.preserve_resources_on_deletion == Some(true),
                )
            })
            .collect();
        for key in self.record.work_keys() {
            if let Some(name) = key.strip_prefix(&prefix) {
                if !fresh.contains_key(name) && !gone.iter().any(|(n, _)| n == name) {
                    gone.push((name.to_string(), false));
                }
            }
        }
        for (name, preserve) in gone {
            self.forget(&name, preserve).await;
        }
        self.works = fresh;
        // A fresh list after a fence was lifted: exactly-once Works still here apply again.
        self.ctx.member.fence.rearm();
        let names: Vec<String> = self.works.keys().cloned().collect();
        for name in names {
            self.sync(&name).await;
        }
        self.flush().await;
        Ok(rv)
    }

    async fn upsert(&mut self, work: Work) {
        if older_than_held(self.works.get(&work.metadata.name), &work) {
            tracing::debug!(cluster = %self.ctx.cluster(), work = %work.metadata.name,
                resource_version = %work.metadata.resource_version,
                "an older copy of a held Work; ignored");
            return;
        }
        let name = work.metadata.name.clone();
        self.works.insert(name.clone(), work);
        self.sync(&name).await;
    }

    /// Makes the applied-objects record durable; its file writes and syncs run on a blocking
    /// thread, so the runtime's threads stay free for the lease and the watches meanwhile.
    async fn save_record(&mut self) {
        let result = match self.record.prepare_save() {
            Ok(None) => return,
            Ok(Some(save)) => match tokio::task::spawn_blocking(move || save.write()).await {
                Ok(written) => written,
                Err(e) => {
                    tracing::error!(cluster = %self.ctx.cluster(), error = %e,
                        "saving the applied-objects record stopped");
                    return;
                }
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(done) => self.record.saved(done),
            Err(e) => {
                tracing::error!(cluster = %self.ctx.cluster(), error = %flotilla_support::error_chain(&e),
                "saving the applied-objects record failed")
            }
        }
    }

    /// Deletes the recorded objects of a Work that is gone, and forgets it.
    async fn forget(&mut self, name: &str, preserve: bool) {
        self.works.remove(name);
        self.apply_errors.remove(name);
        let key = self.key(name);
        self.ctx.member.fence.untrack(&key);
        if !preserve {
            self.delete_objects(&key).await;
        }
        self.record.remove(&key);
        self.save_record().await;
    }

    async fn delete_objects(&mut self, key: &str) {
        let objects: Vec<ObjectRef> = self
            .record
            .get(key)
            .map(|r| r.objects.iter().map(|o| o.object.clone()).collect())
            .unwrap_or_default();
        for object in objects {
            self.delete_object(key, &object).await;
        }
    }

    async fn delete_object(&self, key: &str, object: &ObjectRef) {
        if self.record.record().claimed_elsewhere(key, object) {
            return;
        }
        match self.ctx.member.runtime.delete(object).await {
            Ok(_) => tracing::info!(cluster = %self.ctx.cluster(), work = %key, object = %object,
                "deleted from the member"),
            Err(e) => tracing::warn!(cluster = %self.ctx.cluster(), work = %key, object = %object,
                error = %flotilla_support::error_chain(&e), "deleting from the member failed"),
        }
    }

    /// Brings the member in line with one Work and reports its status.
    async fn sync(&mut self, name: &str) {
        let Some(work) = self.works.get(name).cloned() else {
            return;
        };
        let key = self.key(name);
        if work.metadata.is_deleting() {
            self.ctx.member.fence.untrack(&key);
            if work.spec.preserve_resources_on_deletion != Some(true) {
                self.delete_objects(&key).await;
            }
            self.record.remove(&key);
            self.save_record().await;
            self.remove_finalizer(work).await;
            return;
        }
        let mut errors = Vec::new();
        let mut valid: Vec<(usize, ObjectRef, String)> = Vec::new();
        for (i, m) in work.spec.workload.manifests.iter().enumerate() {
            match ObjectRef::from_manifest(m) {
                Ok(r) => valid.push((i, r, canonical_hash(m))),
                Err(e) => errors.push(format!("manifest {i}: {e}")),
            }
        }
        // Told to the fence even while suspended: what already runs must still be fenced.
        if !self.fence_allows(&work, &key, &valid) || work.spec.suspend_dispatching == Some(true) {
            return;
        }
        let pairs: Vec<(ObjectRef, String)> = valid
            .iter()
            .map(|(_, r, h)| (r.clone(), h.clone()))
            .collect();
        let previous = self.record.get(&key).cloned();
        let plan = plan_sync(previous.as_ref(), &pairs);
        let mut objects: Vec<Option<AppliedObject>> = vec![None; valid.len()];
        let mut to_apply = plan.apply.clone();
        for idx in &plan.unchanged {
            let (_, r, h) = &valid[*idx];
            let recorded = previous
                .as_ref()
                .and_then(|p| p.objects.iter().find(|o| o.object.same_object(r)))
                .and_then(|o| o.generation);
            match self.ctx.member.runtime.get(r).await {
                // Still there, and not behind what was applied (a runtime that lost its last
                // writes holds an older generation: it gets the manifest again).
                Ok(Some(o)) if !is_behind(&o, recorded) => {
                    objects[*idx] = Some(AppliedObject {
                        object: r.clone(),
                        hash: h.clone(),
                        generation: recorded,
                    })
                }
                _ => to_apply.push(*idx),
            }
        }
        to_apply.sort_unstable();
        let mut applied_any = false;
        for idx in to_apply {
            let (ordinal, r, h) = &valid[idx];
            let manifest = work.spec.workload.manifests[*ordinal].clone();
            match self.ctx.member.runtime.apply(manifest).await {
                Ok(applied) => {
                    applied_any = true;
                    tracing::info!(cluster = %self.ctx.cluster(), work = %key, object = %r,
                        "applied");
                    objects[idx] = Some(AppliedObject {
                        object: r.clone(),
                        hash: h.clone(),
                        generation: generation_of(&applied),
                    });
                }
                Err(e) => {
                    // With its causes: a member API's refusal says why in its source.
                    errors.push(format!("{r}: {}", flotilla_support::error_chain(&e)));
                    // Still applied in its previous form, if it ever was.
                    objects[idx] = previous
                        .as_ref()
                        .and_then(|p| p.objects.iter().find(|o| o.object.same_object(r)).cloned());
                }
            }
        }
        for r in &plan.delete {
            self.delete_object(&key, r).await;
        }
        self.record.set(
            &key,
            WorkRecord {
                uid: work.metadata.uid.clone(),
                objects: objects.into_iter().flatten().collect(),
            },
        );
        if errors.is_empty() {
            self.apply_errors.remove(name);
            if applied_any {
                let message = format!(
                    "Successfully applied resource(s) to cluster {}",
                    self.ctx.cluster()
                );
                self.pending_events.push(PendingEvent {
                    work: work.clone(),
                    type_: "Normal",
                    reason: "SyncSucceed",
                    message,
                });
            }
        } else {
            let message = errors.join("; ");
            tracing::warn!(cluster = %self.ctx.cluster(), work = %key, error = %message,
                "applying work failed");
            let first_time = self.apply_errors.get(name) != Some(&message);
            self.apply_errors.insert(name.to_string(), message.clone());
            if first_time {
                self.pending_events.push(PendingEvent {
                    work: work.clone(),
                    type_: "Warning",
                    reason: "SyncFailed",
                    message,
                });
            }
        }
        // Recorded and reported by the next send.
        self.pending.insert(name.to_string());
    }

    /// Whether the outbox could take something now: an Event, or the status of a synced Work
    /// whose previous write is not still in flight.
    fn can_send(&self) -> bool {
        (!self.pending_events.is_empty() && self.outbox.event_slots() > 0)
            || (self.outbox.status_slots() > 0
                && self.pending.iter().any(|n| !self.outbox.is_reporting(n)))
    }

    /// Makes the record durable (once for everything synced since the last send), then hands
    /// the pending Works' status writes and the pending Events to the outbox, as many as it
    /// takes; the rest wait for its answers. Returns at once: the answers come back through
    /// [`Self::take_answer`].
    async fn send(&mut self) {
        if !self.can_send() {
            return;
        }
        self.save_record().await;
        let events = self.pending_events.len().min(self.outbox.event_slots());
        for e in self.pending_events.drain(..events).collect::<Vec<_>>() {
            let event = self.event_body(&e.work, e.type_, e.reason, &e.message);
            self.outbox.send_event(self.events_path.clone(), event);
        }
        // The Works whose write is in flight (at most the outbox's limit) stay pending.
        while self.outbox.status_slots() > 0 {
            let Some(name) = self
                .pending
                .iter()
                .find(|n| !self.outbox.is_reporting(n))
                .cloned()
            else {
                break;
            };
            self.pending.remove(&name);
            if let Some(body) = self.status_body(&name).await {
                let path = format!("{}/{name}/status", self.collection);
                self.outbox.send_status(name, path, body);
            }
        }
    }

    /// Sends everything pending and waits for every answer.
    async fn flush(&mut self) {
        loop {
            self.send().await;
            match self.outbox.next().await {
                Some(answer) => self.take_answer(answer).await,
                None if self.pending.is_empty() && self.pending_events.is_empty() => return,
                // Nothing in flight, yet something pending: the next send takes it.
                None => {}
            }
        }
    }

    /// Keeps what the server answered to a status write; a conflict sends it again.
    async fn take_answer(&mut self, answer: Sent) {
        let Sent::Status { name, result } = answer else {
            return;
        };
        match result {
            Ok(w) => {
                // Not a Work forgotten meanwhile, nor over a newer one the watch brought.
                if let Some(held) = self.works.get(&name) {
                    if !is_older(
                        &w.metadata.resource_version,
                        &held.metadata.resource_version,
                    ) {
                        self.works.insert(name.clone(), *w);
                    }
                }
                tracing::debug!(cluster = %self.ctx.cluster(), work = %self.key(&name),
                    "work status reported");
            }
            // Written, but the answer is not a Work this agent reads: the watch brings it.
            Err(ClientError::Decode { .. }) => {}
            // Read the Work again; the next send writes its status on what it read.
            Err(e) if e.is_conflict() => {
                if self.refresh(&name).await {
                    self.pending.insert(name);
                }
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                tracing::warn!(cluster = %self.ctx.cluster(), work = %self.key(&name),
                    error = %flotilla_support::error_chain(&e), "reporting work status failed");
                self.status_dirty = true;
            }
        }
    }

    /// The status the Work should carry now.
    async fn desired_status(&self, work: &Work) -> WorkStatus {
        let key = self.key(&work.metadata.name);
        let recorded = self.record.get(&key);
        let mut manifest_statuses = Vec::new();
        for (i, m) in work.spec.workload.manifests.iter().enumerate() {
            let Ok(r) = ObjectRef::from_manifest(m) else {
                continue;
            };
            let applied =
                recorded.is_some_and(|rec| rec.objects.iter().any(|o| o.object.same_object(&r)));
            if !applied {
                continue;
            }
            let object = self.ctx.member.runtime.get(&r).await.ok().flatten();
            let status = object
                .as_ref()
                .and_then(|o| o.get("status"))
                .filter(|s| !s.is_null())
                .cloned();
            let health = object
                .as_ref()
                .and_then(|o| health::interpret(r.group(), &r.kind, o));
            manifest_statuses.push(ManifestStatus {
                identifier: ResourceIdentifier {
                    ordinal: i64::try_from(i).unwrap_or(i64::MAX),
                    group: r.group().to_string(),
                    version: r.version().to_string(),
                    kind: r.kind.clone(),
                    resource: r.resource(),
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                },
                status,
                generation: object
                    .as_ref()
                    .and_then(|o| o.lookup("/metadata/generation"))
                    .and_then(serde_json::Value::as_i64),
                health,
            });
        }
        let mut conditions = work.status.conditions.clone();
        let applied = match self.apply_errors.get(&work.metadata.name) {
            None => Condition::new(
                CONDITION_APPLIED,
                ConditionStatus::True,
                APPLIED_REASON,
                APPLIED_MESSAGE,
            ),
            Some(err) => Condition::new(
                CONDITION_APPLIED,
                ConditionStatus::False,
                APPLY_FAILED_REASON,
                &format!("Failed to apply all manifests ({err})"),
            ),
        };
        set_condition(&mut conditions, applied, self.ctx.clock.now());
        WorkStatus {
            conditions,
            manifest_statuses,
        }
    }

    /// The Work with the status it should carry, when that differs from the cached one (and
    /// the Work is neither being deleted nor suspended).
    async fn status_body(&self, name: &str) -> Option<Work> {
        let work = self.works.get(name)?;
        if work.metadata.is_deleting() || work.spec.suspend_dispatching == Some(true) {
            return None;
        }
        let status = self.desired_status(work).await;
        if status == work.status {
            return None;
        }
        let mut body = work.clone();
        body.status = status;
        Some(body)
    }

    /// Reads one Work again into the cache; false when it is gone or unreadable.
    async fn refresh(&mut self, name: &str) -> bool {
        match self
            .ctx
            .client
            .get(&format!("{}/{name}", self.collection))
            .await
        {
            Ok(v) => match serde_json::from_value::<Work>(v) {
                Ok(w) => {
                    self.works.insert(name.to_string(), w);
                    true
                }
                Err(_) => false,
            },
            Err(e) => {
                if !e.is_not_found() {
                    tracing::warn!(cluster = %self.ctx.cluster(), work = %self.key(name),
                        error = %flotilla_support::error_chain(&e), "reading work failed");
                }
                false
            }
        }
    }

    /// Reports the status of every Work whose inputs moved since it was last found current
    /// (a member's objects change all the time under load; most Works' do not).
    async fn report_all(&mut self) {
        let works = &self.works;
        self.settled.retain(|name, _| works.contains_key(name));
        let names: Vec<String> = self.works.keys().cloned().collect();
        for name in names {
            let Some(inputs) = self.status_inputs(&name).await else {
                continue;
            };
            if self.settled.get(&name) == Some(&inputs) {
                continue;
            }
            if self.status_body(&name).await.is_none() {
                self.settled.insert(name, inputs);
            } else {
                self.pending.insert(name);
            }
        }
    }

    /// A hash of what a Work's status is made from; `None` when the Work is unknown.
    async fn status_inputs(&self, name: &str) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let work = self.works.get(name)?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        work.metadata.resource_version.hash(&mut h);
        self.apply_errors.get(name).hash(&mut h);
        let recorded = self.record.get(&self.key(name));
        for m in &work.spec.workload.manifests {
            let Ok(r) = ObjectRef::from_manifest(m) else {
                continue;
            };
            let applied =
                recorded.is_some_and(|rec| rec.objects.iter().any(|o| o.object.same_object(&r)));
            applied.hash(&mut h);
            if applied {
                let rv = self
                    .ctx
                    .member
                    .runtime
                    .resource_version(&r)
                    .await
                    .ok()
                    .flatten();
                rv.hash(&mut h);
            }
        }
        Some(h.finish())
    }

    /// Removes the execution-controller finalizer of a deleted Work (objects already gone).
    async fn remove_finalizer(&mut self, mut work: Work) {
        let name = work.metadata.name.clone();
        for _ in 0..5 {
            if !work.metadata.has_finalizer(EXECUTION_CONTROLLER_FINALIZER) {
                return;
            }
            let remaining: Vec<&String> = work
                .metadata
                .finalizers
                .iter()
                .filter(|f| f.as_str() != EXECUTION_CONTROLLER_FINALIZER)
                .collect();
            let patch = json!({"metadata": {
                "resourceVersion": work.metadata.resource_version,
                "finalizers": if remaining.is_empty() { Value::Null } else { json!(remaining) },
            }});
            let path = format!("{}/{name}", self.collection);
            match self.ctx.client.merge_patch(&path, &patch).await {
                Ok(stored) => {
                    tracing::info!(cluster = %self.ctx.cluster(), work = %self.key(&name),
                        "finalizer removed");
                    if let Ok(w) = serde_json::from_value::<Work>(stored) {
                        self.works.insert(name.clone(), w);
                    }
                    return;
                }
                Err(e) if e.is_not_found() => return,
                Err(e) if e.is_conflict() => {
                    if !self.refresh(&name).await {
                        return;
                    }
                    match self.works.get(&name) {
                        Some(w) => work = w.clone(),
                        None => return,
                    }
                }
                Err(e) => {
                    tracing::warn!(cluster = %self.ctx.cluster(), work = %self.key(&name),
                        error = %flotilla_support::error_chain(&e), "removing the finalizer failed; will retry");
                    return;
                }
            }
        }
    }

    /// An Event about a Work.
    fn event_body(&self, work: &Work, type_: &str, reason: &str, message: &str) -> Value {
        let now = self.ctx.clock.now();
        let stamp = Time::new(now).to_string();
        let suffix = format!("{:x}", now.timestamp_nanos_opt().unwrap_or_default());
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{}.{suffix}", work.metadata.name), "namespace": self.namespace},
            "involvedObject": {
                "apiVersion": WORK_API_VERSION,
                "kind": "Work",
                "namespace": self.namespace,
                "name": work.metadata.name,
                "uid": work.metadata.uid,
                "resourceVersion": work.metadata.resource_version,
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": "flotilla-agent", "host": self.ctx.cluster()},
            "reportingComponent": "flotilla-agent",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        })
    }
}

impl WorksController {
    /// Tells the fence whether the Work asks for exactly-once placement and which objects it
    /// holds; false when it does and the member is fenced (nothing is applied then).
    fn fence_allows(&self, work: &Work, key: &str, valid: &[(usize, ObjectRef, String)]) -> bool {
        let fence = &self.ctx.member.fence;
        let exactly_once =
            work.metadata.annotation(PLACEMENT_GUARANTEE_ANNOTATION) == Some(EXACTLY_ONCE);
        fence.track(
            key,
            exactly_once,
            valid.iter().map(|(_, r, _)| r.clone()).collect(),
        );
        if exactly_once && !fence.allows_apply() {
            tracing::info!(cluster = %self.ctx.cluster(), work = %key,
                "fenced: exactly-once work not applied until the Works are listed afresh");
            return false;
        }
        true
    }
}

/// Whether resourceVersion `a` is older than `b` (both numbers; anything else is not older).
fn is_older(a: &str, b: &str) -> bool {
    matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(a), Ok(b)) if a < b)
}

/// An object's `metadata.generation`.
fn generation_of(object: &Value) -> Option<i64> {
    object
        .lookup("/metadata/generation")
        .and_then(Value::as_i64)
}

/// Whether a runtime object holds an older generation than the one recorded after the last
/// apply (nothing recorded: never behind).
fn is_behind(object: &Value, recorded: Option<i64>) -> bool {
    match (generation_of(object), recorded) {
        (Some(now), Some(then)) => now < then,
        (None, Some(_)) => true,
        _ => false,
    }
}

/// Whether `incoming`, a Work from a watch event, is older than the copy of its name this
/// agent holds: a lower resourceVersion. Such a copy is not applied (nor its deletion taken),
/// so a watch that replays what a later list page already showed never puts an older spec
/// over a newer one, brings a deleted Work back for a moment, or takes the deletion of an
/// earlier Work of the name for the deletion of the one held. A store's resourceVersions are
/// one sequence over all its objects (a global counter, or etcd's revision), so they compare
/// across Works; one that is not a number is never taken as older.
fn older_than_held(held: Option<&Work>, incoming: &Work) -> bool {
    let Some(held) = held else {
        return false;
    };
    let version = |w: &Work| w.metadata.resource_version.parse::<u64>().ok();
    matches!((version(held), version(incoming)), (Some(h), Some(i)) if i < h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_copy_of_a_held_work_is_not_taken() {
        let work = |uid: &str, rv: &str| -> Work {
            serde_json::from_value(json!({"apiVersion": "work.karmada.io/v1alpha1",
                "kind": "Work", "metadata": {"name": "w", "namespace": "karmada-es-m1",
                "uid": uid, "resourceVersion": rv}, "spec": {}}))
            .expect("a Work")
        };
        let table = [
            (None, work("u", "5"), false),
            (Some(work("u", "7")), work("u", "5"), true),
            (Some(work("u", "7")), work("u", "7"), false),
            (Some(work("u", "7")), work("u", "9"), false),
            // An earlier Work of the name (its deletion, say) is older too.
            (Some(work("u", "7")), work("v", "5"), true),
            (Some(work("u", "7")), work("v", "9"), false),
            // Versions that are not numbers are never taken as older.
            (Some(work("u", "x")), work("u", "5"), false),
            (Some(work("u", "7")), work("u", ""), false),
        ];
        for (i, (held, incoming, want)) in table.iter().enumerate() {
            assert_eq!(older_than_held(held.as_ref(), incoming), *want, "row {i}");
        }
    }

    #[test]
    fn a_runtime_object_behind_the_recorded_generation_is_applied_again() {
        let at = |g: Option<i64>| match g {
            Some(g) => json!({"metadata": {"name": "x", "generation": g}}),
            None => json!({"metadata": {"name": "x"}}),
        };
        let table = [
            (Some(1), Some(2), true),
            (Some(2), Some(2), false),
            // Edited on the member since (or by its own controllers): not behind.
            (Some(3), Some(2), false),
            (None, Some(2), true),
            // Nothing recorded (an older record, or a kind without generations).
            (Some(1), None, false),
            (None, None, false),
        ];
        for (i, (now, recorded, want)) in table.into_iter().enumerate() {
            assert_eq!(is_behind(&at(now), recorded), want, "row {i}");
        }
    }
}
