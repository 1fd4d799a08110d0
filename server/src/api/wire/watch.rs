//! `?watch=true`: newline-delimited JSON events `{"type", "object"}` streamed from the store,
//! as kube-apiserver streams them.
//!
//! - **Where it starts.** Without a resourceVersion (or with "0") the stream starts with an
//!   ADDED event for every existing object; with one it resumes right after it.
//!   `sendInitialEvents=true` (a streaming list, with `resourceVersionMatch=NotOlderThan`)
//!   starts with the current state whatever the resourceVersion, and, when bookmarks are
//!   allowed, marks its end with a BOOKMARK annotated `k8s.io/initial-events-end: "true"` at the
//!   list's resourceVersion; `sendInitialEvents=false` sends no state, only what follows.
//! - **Too old.** A resourceVersion the event log no longer reaches back to is answered 200
//!   with one ERROR event carrying the 410 `Status` (reason `Expired`), then the end of the
//!   stream: clients (kube-runtime's watcher, client-go's reflector) relist on that in-stream
//!   form only. A watcher that falls behind the log later ends the same way.
//! - **Bookmarks** (`allowWatchBookmarks`) come every `bookmark_interval` and once two seconds
//!   before `timeoutSeconds` ends the stream (kube-apiserver's watch cache does both), and carry
//!   the store's position as this watch has seen it ([`crate::store::WatchProgress`]), not the
//!   last event sent: a watcher of a quiet kind stays inside the event log while other kinds
//!   change.
//! - **Forms.** Events of a view carry the object as the path's kind shows it (events.k8s.io
//!   Events from the stored core ones, [`super::views`]); `as=PartialObjectMetadata` gets
//!   metadata only; a Table Accept header gets a one-row Table per event, as `kubectl get -w`
//!   expects.
//!
//! `timeoutSeconds` ends the stream, and so does the server's shutdown.

use super::table;
use super::target::Target;
use super::views;
use crate::api::error::{ApiError, ApiResult};
use crate::api::http::off_thread;
use crate::api::http::options::{self, list_options, Params};
use crate::api::ApiState;
use crate::store::{StoreError, WatchEvent, WatchOptions, WatchProgress, WatchStream};
use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use flotilla_api::json_pointer::JsonPointer;
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::{json, Value};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// The annotation of the BOOKMARK that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How long before `timeoutSeconds` the last bookmark goes (kube-apiserver's watch cache).
const BOOKMARK_BEFORE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the body stream carries before it is encoded.
enum Item {
    /// The event type, the object (as the store shares it) and its resourceVersion.
    Event(&'static str, Arc<Value>, u64),
    /// A bookmark at the watch's progress.
    Bookmark,
    /// The bookmark that ends the initial events, at the list's resourceVersion.
    InitialEventsEnd(u64),
    Error(Value),
}

/// One event line, `{"type": …, "object": …}`, encoded straight from the shared object.
#[derive(serde::Serialize)]
struct EventLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    object: &'a Value,
}

/// Where a watch starts: with the current state (listed) or after a resourceVersion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// ADDED events for the current state, then the changes after it.
    State,
    /// The changes after this resourceVersion.
    After(u64),
    /// The changes from now on.
    Now,
}

/// Where a watch with these parameters starts (Kubernetes' semantics for watch): the legacy
/// forms by the resourceVersion alone, `sendInitialEvents` by itself.
pub fn start(
    send_initial_events: Option<bool>,
    resource_version: Option<&str>,
) -> ApiResult<Start> {
    let after = |v: &str| {
        v.parse::<u64>()
            .map(Start::After)
            .map_err(|_| ApiError::BadRequest(format!("resourceVersion: invalid value {v:?}")))
    };
    match (
        send_initial_events,
        resource_version.filter(|v| !v.is_empty()),
    ) {
        (Some(true), _) | (None, None | Some("0")) => Ok(Start::State),
        (Some(false), None | Some("0")) => Ok(Start::Now),
        (_, Some(v)) => after(v),
    }
}

/// Serves a watch request.
pub async fn serve(
    state: &ApiState,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let mut opts = list_options(params)?;
    opts.filter = target.served_filter(opts.filter);
    let as_table = table::wants_table(
        headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    );
    let metadata = views::wants_metadata(headers);
    let bookmarks = options::flag(params, "allowWatchBookmarks");
    let send_initial = options::send_initial_events(params);
    let mut initial = Vec::new();
    let from = match start(
        send_initial,
        params.get("resourceVersion").map(String::as_str),
    )? {
        Start::State => {
            let mut all = opts.clone();
            all.limit = None;
            all.continue_token = None;
            // Read on the blocking pool, as a list is (off_thread.rs).
            let (store, target) = (state.store.clone(), target.clone());
            let page = off_thread::run(move |runtime| {
                runtime
                    .block_on(store.list(&target.rt, target.namespace.as_deref(), &all))
                    .map_err(|e| target.store_err(e))
            })
            .await?;
            for obj in page.items {
                let rv = obj
                    .lookup("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(page.resource_version);
                initial.push(Item::Event("ADDED", Arc::new(obj), rv));
            }
            // Only a streaming list says where its initial events end.
            if send_initial == Some(true) && bookmarks {
                initial.push(Item::InitialEventsEnd(page.resource_version));
            }
            page.resource_version
        }
        Start::After(rv) => rv,
        Start::Now => state
            .store
            .current_resource_version()
            .await
            .map_err(|e| target.store_err(e))?,
    };
    let watched = state
        .store
        .watch_with_progress(
            &target.rt,
            WatchOptions {
                namespace: target.namespace.clone(),
                filter: opts.filter.clone(),
                from: Some(from),
            },
        )
        .await;
    let (events, progress): (WatchStream, WatchProgress) = match watched {
        Ok(watched) => watched,
        // Too old: Kubernetes answers 200 and says so in the stream.
        Err(e @ StoreError::Expired { .. }) => {
            (stream::iter([Err(e)]).boxed(), WatchProgress::new(from))
        }
        Err(e) => return Err(target.store_err(e)),
    };

    let live = events.map(|r| match r {
        Ok(WatchEvent {
            event_type,
            object,
            resource_version,
        }) => {
            let kind = match event_type {
                crate::store::EventType::Added => "ADDED",
                crate::store::EventType::Modified => "MODIFIED",
                crate::store::EventType::Deleted => "DELETED",
            };
            Item::Event(kind, object, resource_version)
        }
        Err(e @ StoreError::Expired { .. }) => {
            Item::Error(ApiError::Gone(e.to_string()).to_status())
        }
        Err(e) => Item::Error(ApiError::Internal(Box::new(e)).to_status()),
    });
    // Stop after an error event.
    let live = live
        .scan(false, |done, item| {
            if *done {
                return futures::future::ready(None);
            }
            if matches!(item, Item::Error(_)) {
                *done = true;
            }
            futures::future::ready(Some(item))
        })
        .boxed();
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let live = if bookmarks {
        with_bookmarks(live, state.limits.bookmark_interval, timeout)
    } else {
        live
    };
    // The initial state goes out whole before any bookmark: a bookmark says everything up to
    // its resourceVersion was sent.
    let items = stream::iter(initial).chain(live).boxed();
    let items = match timeout {
        Some(t) => items.take_until(tokio::time::sleep(t)).boxed(),
        None => items,
    };
    let mut shutdown = state.shutdown.clone();
    let items = items.take_until(async move {
        if shutdown.wait_for(|stopping| *stopping).await.is_err() {
            // No shutdown signal will ever come: watch until the client leaves.
            futures::future::pending::<()>().await;
        }
    });

    let target = target.clone();
    let clock = state.clock.clone();
    let served = target.served();
    let (bookmark_kind, bookmark_api_version) = if metadata {
        (
            "PartialObjectMetadata".to_string(),
            "meta.k8s.io/v1".to_string(),
        )
    } else {
        (served.kind.clone(), served.api_version())
    };
    let bookmark = move |rv: u64, annotations: Option<Value>| {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if let Some(a) = annotations {
            meta["annotations"] = a;
        }
        json!({
            "type": "BOOKMARK",
            "object": {"kind": bookmark_kind, "apiVersion": bookmark_api_version, "metadata": meta},
        })
    };
    let lines = items.map(move |item| {
        let line = match item {
            Item::Event(kind, obj, rv) => {
                if as_table {
                    let mut obj = Arc::unwrap_or_clone(obj);
                    views::decorate(&target.rt, &mut obj);
                    let k = obj
                        .get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or(&target.rt.kind)
                        .to_string();
                    let object = table::table(
                        &target.rt.group,
                        &k,
                        std::slice::from_ref(&obj),
                        rv,
                        None,
                        clock.now(),
                    );
                    json!({"type": kind, "object": object})
                } else if target.rewrites(metadata) {
                    json!({"type": kind, "object": target.present(&obj, metadata)})
                } else {
                    // The stored object, shared with the store's log: written out, not copied.
                    let line = EventLine { kind, object: &obj };
                    return Ok(format!(
                        "{}\n",
                        serde_json::to_string(&line).unwrap_or_default()
                    ));
                }
            }
            Item::Bookmark => bookmark(progress.get(), None),
            Item::InitialEventsEnd(rv) => bookmark(rv, Some(json!({INITIAL_EVENTS_END: "true"}))),
            Item::Error(status) => json!({"type": "ERROR", "object": status}),
        };
        Ok::<_, std::convert::Infallible>(format!("{line}\n"))
    });
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache, private"),
        ],
        Body::from_stream(lines),
    )
        .into_response())
}

/// The live events with bookmarks among them: every `interval`, and once
/// [`BOOKMARK_BEFORE_TIMEOUT`] before `timeout` when it is longer. The stream ends with the
/// events (an error event ends them).
fn with_bookmarks(
    live: BoxStream<'static, Item>,
    interval: Duration,
    timeout: Option<Duration>,
) -> BoxStream<'static, Item> {
    struct Merged {
        live: BoxStream<'static, Item>,
        ticks: tokio::time::Interval,
        last_call: Option<Pin<Box<tokio::time::Sleep>>>,
    }
    let start = tokio::time::Instant::now();
    let interval = interval.max(Duration::from_millis(1));
    let mut ticks = tokio::time::interval_at(start + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let last_call = timeout
        .and_then(|t| t.checked_sub(BOOKMARK_BEFORE_TIMEOUT))
        .filter(|at| !at.is_zero())
        .map(|at| Box::pin(tokio::time::sleep_until(start + at)));
    let merged = Merged {
        live,
        ticks,
        last_call,
    };
    stream::unfold(merged, |mut m| async move {
        let mut last_call_done = false;
        let item = {
            let Merged {
                live,
                ticks,
                last_call,
            } = &mut m;
            let last = async {
                match last_call.as_mut() {
                    Some(sleep) => sleep.as_mut().await,
                    None => futures::future::pending().await,
                }
            };
            // Events first: a bookmark never overtakes an event that is ready.
            tokio::select! {
                biased;
                item = live.next() => item,
                _ = ticks.tick() => Some(Item::Bookmark),
                () = last => {
                    last_call_done = true;
                    Some(Item::Bookmark)
                }
            }
        };
        if last_call_done {
            m.last_call = None;
        }
        item.map(|item| (item, m))
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_starts_where_kubernetes_starts_it() {
        // (sendInitialEvents, resourceVersion, where the watch starts)
        let table: &[(Option<bool>, Option<&str>, Start)] = &[
            (None, None, Start::State),
            (None, Some(""), Start::State),
            (None, Some("0"), Start::State),
            (None, Some("42"), Start::After(42)),
            (Some(true), None, Start::State),
            (Some(true), Some("0"), Start::State),
            (Some(true), Some("42"), Start::State),
            (Some(false), None, Start::Now),
            (Some(false), Some("0"), Start::Now),
            (Some(false), Some("42"), Start::After(42)),
        ];
        for (send, rv, want) in table {
            assert_eq!(start(*send, *rv).unwrap(), *want, "{send:?} {rv:?}");
        }
        assert!(matches!(
            start(None, Some("x")),
            Err(ApiError::BadRequest(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn bookmarks_come_every_interval_and_before_the_timeout_and_end_with_the_events() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Item>();
        let merged = with_bookmarks(
            rx.boxed(),
            Duration::from_secs(30),
            Some(Duration::from_secs(45)),
        );
        let got = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = got.clone();
        let reader = tokio::spawn(async move {
            let mut merged = merged;
            while let Some(item) = merged.next().await {
                let at = tokio::time::Instant::now();
                let what = match item {
                    Item::Bookmark => "bookmark".to_string(),
                    Item::Event(kind, _, rv) => format!("{kind} {rv}"),
                    _ => "other".to_string(),
                };
                seen.lock().push((at, what));
            }
        });
        let t0 = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_secs(10)).await;
        tx.unbounded_send(Item::Event("ADDED", Arc::new(json!({})), 7))
            .unwrap();
        tokio::time::sleep(Duration::from_secs(45)).await;
        drop(tx);
        reader.await.unwrap();
        let got: Vec<(u64, String)> = got
            .lock()
            .iter()
            .map(|(at, what)| ((*at - t0).as_secs(), what.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (10, "ADDED 7".to_string()),
                (30, "bookmark".to_string()),
                (43, "bookmark".to_string()),
            ]
        );
    }
}
