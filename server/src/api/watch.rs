//! `?watch=true`: newline-delimited JSON events `{"type", "object"}` streamed from the store.
//! Without a resourceVersion (or with "0") the stream starts with an ADDED event for every
//! existing object; with one it resumes right after it, or answers 410 Gone when the event
//! log no longer reaches back that far (the client relists). `allowWatchBookmarks` adds
//! periodic BOOKMARK events; `timeoutSeconds` ends the stream. When the client asks for a
//! Table, each event carries a one-row Table as `kubectl get -w` expects.

use super::error::{ApiError, ApiResult};
use super::off_thread;
use super::options::{list_options, Params};
use super::table;
use super::target::Target;
use super::ApiState;
use crate::store::{StoreError, WatchEvent, WatchOptions};
use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use flotilla_api::json_pointer::JsonPointer;
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the body stream carries before it is encoded.
enum Item {
    /// The event type, the object (as the store shares it) and its resourceVersion.
    Event(&'static str, Arc<Value>, u64),
    Bookmark,
    Error(Value),
}

/// One event line, `{"type": …, "object": …}`, encoded straight from the shared object.
#[derive(serde::Serialize)]
struct EventLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    object: &'a Value,
}

/// Serves a watch request.
pub async fn serve(
    state: &ApiState,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let opts = list_options(params)?;
    let as_table = table::wants_table(
        headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    );
    let rv_param = params.get("resourceVersion").map(String::as_str);
    let mut initial = Vec::new();
    let from = match rv_param {
        None | Some("") | Some("0") => {
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
            page.resource_version
        }
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| ApiError::BadRequest(format!("resourceVersion: invalid value {v:?}")))?,
    };
    let events = state
        .store
        .watch(
            &target.rt,
            WatchOptions {
                namespace: target.namespace.clone(),
                filter: opts.filter.clone(),
                from: Some(from),
            },
        )
        .await
        .map_err(|e| ApiError::from_store(e, &target.rt.group, &target.rt.plural))?;

    let last_rv = Arc::new(AtomicU64::new(from));
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
    let live = live.scan(false, |done, item| {
        if *done {
            return futures::future::ready(None);
        }
        if matches!(item, Item::Error(_)) {
            *done = true;
        }
        futures::future::ready(Some(item))
    });
    let bookmarks = params
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true" || b == "1");
    let interval = state.limits.bookmark_interval;
    let items = stream::iter(initial).chain(live);
    let items: futures::stream::BoxStream<'static, Item> = if bookmarks {
        let ticks = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval_at(
            tokio::time::Instant::now() + interval,
            interval,
        ))
        .map(|_| Item::Bookmark);
        stream::select(items, ticks).boxed()
    } else {
        items.boxed()
    };
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
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

    let rt = target.rt.clone();
    let group = rt.group.clone();
    let clock = state.clock.clone();
    let lines = items.map(move |item| {
        let line = match item {
            Item::Event(kind, obj, rv) => {
                last_rv.fetch_max(rv, Ordering::SeqCst);
                if as_table {
                    let k = obj
                        .get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or(&rt.kind)
                        .to_string();
                    let object = table::table(
                        &group,
                        &k,
                        std::slice::from_ref(obj.as_ref()),
                        rv,
                        None,
                        clock.now(),
                    );
                    json!({"type": kind, "object": object})
                } else {
                    // The stored object, shared with the store's log: written out, not copied.
                    let line = EventLine { kind, object: &obj };
                    return Ok(format!(
                        "{}\n",
                        serde_json::to_string(&line).unwrap_or_default()
                    ));
                }
            }
            Item::Bookmark => json!({
                "type": "BOOKMARK",
                "object": {
                    "kind": rt.kind,
                    "apiVersion": rt.api_version(),
                    "metadata": {"resourceVersion": last_rv.load(Ordering::SeqCst).to_string()},
                },
            }),
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
