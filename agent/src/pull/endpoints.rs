//! The servers a pull agent talks to (`--server URL,URL,...`) and which one it talks to now.
//!
//! Several servers share one store (etcd), so the agent needs only one of them at a time: it
//! stays on the current server until a request to it fails for a reason that says the server,
//! not the request, is at fault ([`Failure::reason`]): the connection could not be made, broke
//! or timed out, or the server answered 5xx. Then it moves to the next URL of the list
//! ([`ServerEndpoints::fail_over`], in order, wrapping around) and logs the switch. A 4xx is
//! the request's own answer (401 registers again, 404, 409 and 410 keep their meaning) and
//! never moves the agent.
//!
//! Whether the failed request is sent again at once, to the next server, is
//! [`Failure::resend`]'s decision: yes when it failed quickly (connection refused or broken,
//! 5xx), at most once per server of the list (one round); no after a timeout, whose caller
//! retries with a fresh request after its own back-off ([`super::backoff`]), so that the
//! rounds over the list are spaced by jittered exponential back-off. A watch is never resent:
//! its loop lists again on the new server ([`ServerEndpoints::subscribe`]).
//!
//! The set is process-wide: every member of the process talks to the same server, and a
//! switch made by one member's request moves them all. A switch is conditional on the
//! server the failed request went to still being the current one ([`Endpoint`]), so that
//! many requests failing together on a dead server move the agent once, not once each.
//! With one URL nothing ever switches: the agent behaves as it did before several servers.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::watch;

/// Why `--server` was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointsError {
    /// No URL at all.
    #[error("--server: no server URL given")]
    Empty,
    /// `a,,b` or a trailing comma.
    #[error("--server: element {position} of {list:?} is empty")]
    EmptyElement {
        /// 1-based position of the empty element.
        position: usize,
        /// The whole list as given.
        list: String,
    },
    /// Not an http(s) URL.
    #[error("--server: server URL {url:?} must start with http:// or https://")]
    Scheme {
        /// The URL.
        url: String,
    },
    /// The same URL twice.
    #[error("--server: {url} is given twice")]
    Duplicate {
        /// The URL.
        url: String,
    },
}

/// Which server a request went to: its position in the list and the switch count then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Position in the list.
    pub index: usize,
    /// How many switches had happened when it was picked.
    pub generation: u64,
}

/// How a request failed, as far as choosing a server goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No connection could be made (refused, unreachable, TLS handshake): nothing was sent.
    Connect,
    /// No answer within the request's timeout (or a watch that did not open in time).
    Timeout,
    /// The connection broke while the request or its answer travelled.
    Broken,
    /// The server answered with this HTTP status.
    Status(u16),
    /// Anything else (a local file, an undecodable answer, the agent stopping).
    Local,
}

/// Why the agent moved to another server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// No connection could be made.
    Connect,
    /// No answer in time.
    Timeout,
    /// The connection broke.
    Broken,
    /// A 5xx answer.
    ServerError(u16),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Connect => f.write_str("connection failed"),
            Reason::Timeout => f.write_str("timed out"),
            Reason::Broken => f.write_str("connection broken"),
            Reason::ServerError(code) => write!(f, "answered {code}"),
        }
    }
}

/// Whether a request may be sent again to another server within the same call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resend {
    /// When it failed quickly (see [`Failure::resend`]).
    WhenQuick,
    /// Never (watches: their loop lists again on the new server instead).
    Never,
}

impl Failure {
    /// The reason to leave the server this failure happened on, if it is one: connection
    /// failures, timeouts and 5xx are; 4xx answers and local errors are not.
    pub fn reason(self) -> Option<Reason> {
        match self {
            Failure::Connect => Some(Reason::Connect),
            Failure::Timeout => Some(Reason::Timeout),
            Failure::Broken => Some(Reason::Broken),
            Failure::Status(code) if code >= 500 => Some(Reason::ServerError(code)),
            Failure::Status(_) | Failure::Local => None,
        }
    }

    /// Whether the request is sent again at once, to the next server, after this failure:
    /// only when it is a reason to switch, failed quickly (not a timeout, whose wait has used
    /// the caller's time and whose body may be stale by now), the policy allows it, and not
    /// every server of the list has been tried by this call yet (`tried` of `servers`).
    pub fn resend(self, policy: Resend, tried: usize, servers: usize) -> bool {
        let quick = matches!(
            self.reason(),
            Some(Reason::Connect | Reason::Broken | Reason::ServerError(_))
        );
        quick && policy == Resend::WhenQuick && tried < servers
    }
}

/// The position after `current` in a list of `len` (wrapping around).
pub fn next_index(current: usize, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (current + 1) % len
    }
}

/// Splits and checks a `--server` value: comma-separated http(s) URLs, each trimmed of
/// surrounding spaces and of trailing slashes, none empty, none twice.
pub fn parse_list(list: &str) -> Result<Vec<String>, EndpointsError> {
    if list.trim().is_empty() {
        return Err(EndpointsError::Empty);
    }
    let mut urls: Vec<String> = Vec::new();
    for (i, raw) in list.split(',').enumerate() {
        let url = raw.trim().trim_end_matches('/');
        if url.is_empty() {
            return Err(EndpointsError::EmptyElement {
                position: i + 1,
                list: list.to_string(),
            });
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(EndpointsError::Scheme {
                url: raw.trim().to_string(),
            });
        }
        if urls.iter().any(|u| u == url) {
            return Err(EndpointsError::Duplicate {
                url: url.to_string(),
            });
        }
        urls.push(url.to_string());
    }
    Ok(urls)
}

/// The ordered server URLs and the one in use.
#[derive(Debug)]
pub struct ServerEndpoints {
    urls: Vec<String>,
    current: Mutex<Endpoint>,
    /// The generation, for loops that must act on a switch (the Works watch lists again).
    switched: watch::Sender<u64>,
    switches: AtomicU64,
}

impl ServerEndpoints {
    /// The set of a `--server` value (one URL, or several comma-separated), starting on the
    /// first.
    pub fn parse(list: &str) -> Result<Self, EndpointsError> {
        Ok(Self::new(parse_list(list)?))
    }

    fn new(urls: Vec<String>) -> Self {
        ServerEndpoints {
            urls,
            current: Mutex::new(Endpoint {
                index: 0,
                generation: 0,
            }),
            switched: watch::Sender::new(0),
            switches: AtomicU64::new(0),
        }
    }

    /// The URLs, in order.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// How many servers there are.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Never true: a set has at least one URL.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// The server to send to now.
    pub fn current(&self) -> Endpoint {
        *self.current.lock()
    }

    /// The URL of an endpoint.
    pub fn url(&self, at: Endpoint) -> &str {
        self.urls
            .get(at.index)
            .or_else(|| self.urls.first())
            .map_or("", String::as_str)
    }

    /// How many times the agent switched servers since it started.
    pub fn switches(&self) -> u64 {
        self.switches.load(Ordering::SeqCst)
    }

    /// The generation now (the number of switches; it moves with every switch).
    pub fn generation(&self) -> u64 {
        self.current.lock().generation
    }

    /// A receiver of the generation, woken by every switch.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.switched.subscribe()
    }

    /// Moves to the next server because a request to `from` failed for `reason`, unless the
    /// agent already left `from` (another request's failure moved it) or there is no other
    /// server. Logs and counts the switch; answers whether it switched.
    pub fn fail_over(
        &self,
        from: Endpoint,
        reason: Reason,
        cluster: &str,
        error: &(dyn std::error::Error + 'static),
    ) -> bool {
        let (to, generation) = {
            let mut current = self.current.lock();
            if self.urls.len() < 2 || *current != from {
                return false;
            }
            current.index = next_index(current.index, self.urls.len());
            current.generation += 1;
            (*current, current.generation)
        };
        self.switches.fetch_add(1, Ordering::SeqCst);
        self.switched.send_replace(generation);
        tracing::warn!(cluster, from = %self.url(from), to = %self.url(to), reason = %reason,
            error = %flotilla_support::error_chain(error), "switching server");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_list_is_split_and_checked() {
        let ok = |urls: &[&str]| Ok(urls.iter().map(|u| u.to_string()).collect::<Vec<_>>());
        let table: [(&str, Result<Vec<String>, EndpointsError>); 9] = [
            ("http://a:1", ok(&["http://a:1"])),
            ("https://a:1/", ok(&["https://a:1"])),
            (
                "https://a:1,https://b:2",
                ok(&["https://a:1", "https://b:2"]),
            ),
            (
                " https://a:1 , https://b:2/ ",
                ok(&["https://a:1", "https://b:2"]),
            ),
            ("", Err(EndpointsError::Empty)),
            (
                "https://a:1,,https://b:2",
                Err(EndpointsError::EmptyElement {
                    position: 2,
                    list: "https://a:1,,https://b:2".into(),
                }),
            ),
            (
                "https://a:1,",
                Err(EndpointsError::EmptyElement {
                    position: 2,
                    list: "https://a:1,".into(),
                }),
            ),
            (
                "https://a:1,b:2",
                Err(EndpointsError::Scheme { url: "b:2".into() }),
            ),
            (
                "https://a:1,https://a:1/",
                Err(EndpointsError::Duplicate {
                    url: "https://a:1".into(),
                }),
            ),
        ];
        for (list, want) in table {
            assert_eq!(parse_list(list), want, "{list:?}");
        }
        let empty = parse_list("https://a,,https://b").unwrap_err().to_string();
        assert!(empty.starts_with("--server: element 2"), "{empty}");
    }

    #[test]
    fn which_failures_switch_and_which_are_resent_at_once() {
        use Failure::*;
        // (failure, reason to switch, resent at once with a policy of WhenQuick, 1 of 3 tried)
        let table = [
            (Connect, Some(Reason::Connect), true),
            (Broken, Some(Reason::Broken), true),
            (Timeout, Some(Reason::Timeout), false),
            (Status(500), Some(Reason::ServerError(500)), true),
            (Status(503), Some(Reason::ServerError(503)), true),
            (Status(504), Some(Reason::ServerError(504)), true),
            (Status(401), None, false),
            (Status(403), None, false),
            (Status(404), None, false),
            (Status(409), None, false),
            (Status(410), None, false),
            (Status(429), None, false),
            (Local, None, false),
        ];
        for (failure, reason, resend) in table {
            assert_eq!(failure.reason(), reason, "{failure:?}");
            assert_eq!(
                failure.resend(Resend::WhenQuick, 1, 3),
                resend,
                "{failure:?}"
            );
            assert!(
                !failure.resend(Resend::Never, 1, 3),
                "{failure:?}: a watch is never resent"
            );
            assert!(
                !failure.resend(Resend::WhenQuick, 3, 3),
                "{failure:?}: one round at most"
            );
        }
    }

    #[test]
    fn the_next_server_wraps_around() {
        let table = [
            (0, 1, 0),
            (0, 2, 1),
            (1, 2, 0),
            (0, 3, 1),
            (2, 3, 0),
            (0, 0, 0),
        ];
        for (current, len, want) in table {
            assert_eq!(next_index(current, len), want, "{current} of {len}");
        }
    }

    #[test]
    fn a_switch_moves_once_per_failed_server_and_wakes_subscribers() {
        let error = std::io::Error::other("refused");
        let error: &(dyn std::error::Error + 'static) = &error;
        let set = ServerEndpoints::parse("http://a,http://b,http://c").unwrap();
        let mut rx = set.subscribe();
        let on_a = set.current();
        assert_eq!((set.url(on_a), set.generation()), ("http://a", 0));
        // Two requests failed on a: the first moves to b, the second finds it moved.
        assert!(set.fail_over(on_a, Reason::Connect, "m1", error));
        assert!(!set.fail_over(on_a, Reason::Connect, "m1", error));
        let on_b = set.current();
        assert_eq!((set.url(on_b), on_b.generation), ("http://b", 1));
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 1);
        assert!(set.fail_over(on_b, Reason::ServerError(503), "m1", error));
        let on_c = set.current();
        assert!(set.fail_over(on_c, Reason::Timeout, "m1", error));
        assert_eq!(set.url(set.current()), "http://a", "wraps around");
        assert_eq!(set.switches(), 3);

        // One server: nothing ever switches.
        let one = ServerEndpoints::parse("http://a").unwrap();
        let rx = one.subscribe();
        assert!(!one.fail_over(one.current(), Reason::Connect, "m1", error));
        assert_eq!((one.switches(), one.generation()), (0, 0));
        assert!(!rx.has_changed().unwrap());
    }
}
