//! The Works controller's requests in flight: Work status writes and Events, sent in the
//! background so the controller goes on applying the Works that arrive meanwhile.
//!
//! A member receives Works one at a time (the control plane creates them as it schedules);
//! waiting for each Work's status write and Event before reading the next would cost a round
//! trip per Work, each waiting for the server's durable write. The outbox keeps up to
//! `limit` status writes and `limit` Events on their way at once, each a task of
//! its own (so a request travels while the controller is busy elsewhere), and hands back
//! what the server answered, one request at a time, in the order the answers come.
//!
//! At most one status write per Work is in flight: a Work synced again while its write
//! travels waits for the answer (the next write is built on the resourceVersion it returns).

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::FuturesUnordered;
use futures::StreamExt as _;
use serde_json::Value;
use tokio::task::JoinHandle;

use super::client::ClientError;
use super::PullContext;
use flotilla_api::work::Work;

/// What the server answered to one request of the outbox.
pub(crate) enum Sent {
    /// A Work's status write: the stored Work, or why it was refused.
    Status {
        name: String,
        /// The Work as the server stored it.
        result: Result<Box<Work>, ClientError>,
    },
    /// An Event (a failure is only logged).
    Event,
}

/// Requests on their way to the server.
pub(crate) struct Outbox {
    ctx: Arc<PullContext>,
    limit: usize,
    in_flight: FuturesUnordered<Request>,
    /// Works whose status write is in flight.
    reporting: HashSet<String>,
    events: usize,
}

impl Outbox {
    /// An empty outbox sending at most `limit` status writes and `limit` Events at once.
    pub(crate) fn new(ctx: Arc<PullContext>, limit: usize) -> Self {
        Outbox {
            ctx,
            limit: limit.max(1),
            in_flight: FuturesUnordered::new(),
            reporting: HashSet::new(),
            events: 0,
        }
    }

    /// Whether nothing is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// How many more status writes may be sent now.
    pub(crate) fn status_slots(&self) -> usize {
        self.limit.saturating_sub(self.reporting.len())
    }

    /// How many more Events may be sent now.
    pub(crate) fn event_slots(&self) -> usize {
        self.limit.saturating_sub(self.events)
    }

    /// Whether the Work's status write is in flight.
    pub(crate) fn is_reporting(&self, name: &str) -> bool {
        self.reporting.contains(name)
    }

    /// Sends a Work's status (`body`, the whole Work) to `path`.
    pub(crate) fn send_status(&mut self, name: String, path: String, body: Work) {
        self.reporting.insert(name.clone());
        let ctx = self.ctx.clone();
        let task_path = path.clone();
        let task = tokio::spawn(async move {
            ctx.client
                .put_as::<Box<Work>>(&task_path, &body)
                .await
                .map(Some)
        });
        self.in_flight.push(Request {
            work: Some(name),
            path,
            task,
        });
    }

    /// Posts an Event to `path`.
    pub(crate) fn send_event(&mut self, path: String, event: Value) {
        self.events += 1;
        let ctx = self.ctx.clone();
        let task_path = path.clone();
        let task = tokio::spawn(async move {
            let result = ctx.client.post_unkept(&task_path, &event).await;
            if let Err(e) = &result {
                tracing::debug!(cluster = %ctx.cluster(), error = %flotilla_support::error_chain(e),
                    "recording an event failed");
            }
            result.map(|()| None)
        });
        self.in_flight.push(Request {
            work: None,
            path,
            task,
        });
    }

    /// The next answer; `None` when nothing is in flight. Cancel safe: an answer not taken
    /// stays for the next call.
    pub(crate) async fn next(&mut self) -> Option<Sent> {
        let sent = self.in_flight.next().await?;
        match &sent {
            Sent::Status { name, .. } => {
                self.reporting.remove(name);
            }
            Sent::Event => self.events = self.events.saturating_sub(1),
        }
        Some(sent)
    }
}

/// One request's task, answering as [`Sent`].
struct Request {
    /// The Work whose status it writes; `None` for an Event.
    work: Option<String>,
    path: String,
    /// A status write answers the stored Work; an Event nothing.
    task: JoinHandle<Result<Option<Box<Work>>, ClientError>>,
}

impl Future for Request {
    type Output = Sent;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Sent> {
        let this = self.get_mut();
        let Poll::Ready(joined) = Pin::new(&mut this.task).poll(cx) else {
            return Poll::Pending;
        };
        Poll::Ready(match this.work.take() {
            None => Sent::Event,
            Some(name) => Sent::Status {
                name,
                result: match joined {
                    Ok(Ok(Some(work))) => Ok(work),
                    Ok(Ok(None)) => Err(ClientError::Abandoned {
                        method: "PUT".into(),
                        path: std::mem::take(&mut this.path),
                        message: "the status write answered no Work".into(),
                    }),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(ClientError::Abandoned {
                        method: "PUT".into(),
                        path: std::mem::take(&mut this.path),
                        message: e.to_string(),
                    }),
                },
            },
        })
    }
}
