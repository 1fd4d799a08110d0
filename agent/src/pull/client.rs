//! The agent's HTTP client for the Flotilla server: one [`ServerClient`] per process (rustls,
//! an optional extra CA, connection pooling shared by every hosted member) and one
//! [`ClusterClient`] per member, which carries that member's credential, registers when it
//! has none, and registers again once when the server answers 401. Errors keep the server's
//! Kubernetes `Status` code, reason and message. Tokens are never logged. Every answer's
//! `Flotilla-Member-Timing` header is kept ([`super::timing`]).
//!
//! Every request goes to the current server of the process's [`ServerEndpoints`] (the URLs of
//! `--server`, which share one store, so one credential and one CA serve them all); a request
//! that fails for a reason to leave that server moves the agent to the next one, and is sent
//! there again at once when that is safe ([`super::endpoints`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes_buf::LineBuffer;
use futures::stream::BoxStream;
use futures::StreamExt;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::endpoints::{Failure, Resend, ServerEndpoints};
use super::timing::AdvertisedTiming;
use flotilla_api::member_timing::MEMBER_TIMING_HEADER;
use flotilla_support::files;

/// Errors talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The request did not get an answer.
    #[error("{method} {url}")]
    Transport {
        /// HTTP method.
        method: String,
        /// The URL (no secrets in it).
        url: String,
        /// What failed.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with an error status.
    #[error("{method} {path}: {code} {reason}: {message}")]
    Api {
        /// HTTP method.
        method: String,
        /// Request path.
        path: String,
        /// HTTP status code.
        code: u16,
        /// `Status.reason`.
        reason: String,
        /// `Status.message`.
        message: String,
    },
    /// The answer was not the JSON expected.
    #[error("{method} {path}: undecodable answer")]
    Decode {
        /// HTTP method.
        method: String,
        /// Request path.
        path: String,
        /// What failed.
        #[source]
        source: serde_json::Error,
    },
    /// A file (CA, token, credential) could not be read or written.
    #[error("{path}")]
    File {
        /// The file.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The client could not be built (bad CA file, bad URL).
    #[error("building the HTTP client: {0}")]
    Setup(String),
    /// The task sending the request ended before an answer came (the agent is stopping).
    #[error("{method} {path}: the request was abandoned: {message}")]
    Abandoned {
        /// HTTP method.
        method: String,
        /// Request path.
        path: String,
        /// Why the task ended.
        message: String,
    },
    /// A watch stream went quiet for too long.
    #[error("watch {path}: no data for {idle:?}")]
    Idle {
        /// The watched path.
        path: String,
        /// How long it was quiet.
        idle: Duration,
    },
}

impl ClientError {
    /// The HTTP status code, when the server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClientError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// 404.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// 409.
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// 410 (a watch from a resourceVersion the server no longer has).
    pub fn is_gone(&self) -> bool {
        self.code() == Some(410)
    }

    /// How the request failed, as far as choosing a server goes ([`Failure::reason`]).
    pub fn failure(&self) -> Failure {
        match self {
            ClientError::Transport { source, .. } if source.is_timeout() => Failure::Timeout,
            ClientError::Transport { source, .. } if source.is_connect() => Failure::Connect,
            ClientError::Transport { .. } => Failure::Broken,
            ClientError::Idle { .. } => Failure::Timeout,
            ClientError::Api { code, .. } => Failure::Status(*code),
            ClientError::Decode { .. }
            | ClientError::File { .. }
            | ClientError::Setup(_)
            | ClientError::Abandoned { .. } => Failure::Local,
        }
    }
}

/// Registration details sent to `POST /flotilla/v1/register`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Registration {
    /// Cloud provider.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,
    /// Region.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
    /// Zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Cluster labels.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// How many members of one process register at the same time.
const MAX_CONCURRENT_REGISTRATIONS: usize = 16;

/// The process-wide connection to the servers.
#[derive(Clone, Debug)]
pub struct ServerClient {
    http: reqwest::Client,
    /// The servers, and the one requests go to now.
    endpoints: Arc<ServerEndpoints>,
    request_timeout: Duration,
    /// Registrations in flight at once (many members starting together queue here).
    registrations: Arc<tokio::sync::Semaphore>,
    /// The member timing the server advertised last (on any answer).
    timing: AdvertisedTiming,
}

/// One event of a watch.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct WatchEvent {
    /// ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
    #[serde(rename = "type")]
    pub type_: String,
    /// The object (a `Status` for ERROR).
    pub object: Value,
}

impl ServerClient {
    /// A client for `servers` (one `https://...` or `http://...` URL, or several
    /// comma-separated: [`ServerEndpoints::parse`]), trusting the PEM certificates of
    /// `ca_file` besides the usual roots, for every one of them.
    pub fn new(
        servers: &str,
        ca_file: Option<&Path>,
        request_timeout: Duration,
    ) -> Result<Self, ClientError> {
        let endpoints =
            ServerEndpoints::parse(servers).map_err(|e| ClientError::Setup(e.to_string()))?;
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_keepalive(Duration::from_secs(30));
        if let Some(path) = ca_file {
            let pem = std::fs::read(path).map_err(|source| ClientError::File {
                path: path.display().to_string(),
                source,
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                ClientError::Setup(format!("{}: not a PEM certificate: {e}", path.display()))
            })?;
            if certs.is_empty() {
                return Err(ClientError::Setup(format!(
                    "{}: no certificate in it",
                    path.display()
                )));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder
            .build()
            .map_err(|e| ClientError::Setup(flotilla_support::error_chain(&e)))?;
        Ok(ServerClient {
            http,
            endpoints: Arc::new(endpoints),
            request_timeout,
            registrations: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_REGISTRATIONS)),
            timing: AdvertisedTiming::default(),
        })
    }

    /// The servers and the one in use.
    pub fn endpoints(&self) -> &Arc<ServerEndpoints> {
        &self.endpoints
    }

    /// The same client (same connections, servers and memory of the advertised timing) with
    /// another timeout for each non-watch request.
    pub fn with_request_timeout(&self, request_timeout: Duration) -> Self {
        ServerClient {
            request_timeout,
            ..self.clone()
        }
    }

    /// The member timing the server advertised last.
    pub fn advertised_timing(&self) -> &AdvertisedTiming {
        &self.timing
    }

    /// Sends one request to the server at `base`; an error status is answered as
    /// [`ClientError::Api`].
    async fn send_to(
        &self,
        base: &str,
        method: Method,
        path: &str,
        token: &str,
        body: Option<(&'static str, bytes::Bytes)>,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, ClientError> {
        let url = format!("{base}{path}");
        let mut req = self
            .http
            .request(method.clone(), &url)
            .bearer_auth(token)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        if let Some((content_type, bytes)) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(bytes);
        }
        let resp = req.send().await.map_err(|source| ClientError::Transport {
            method: method.to_string(),
            url: url.clone(),
            source: source.without_url(),
        })?;
        self.timing.observe(
            resp.headers()
                .get(MEMBER_TIMING_HEADER)
                .and_then(|v| v.to_str().ok()),
        );
        if resp.status().is_success() {
            return Ok(resp);
        }
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let status: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        Err(ClientError::Api {
            method: method.to_string(),
            path: path.to_string(),
            code,
            reason: status["reason"].as_str().unwrap_or("").to_string(),
            message: status["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| text.chars().take(200).collect()),
        })
    }

    /// Runs `attempt` against the current server. When it fails for a reason to leave that
    /// server, the agent moves to the next one (for `cluster`'s logs), and the attempt is made
    /// again there when [`Failure::resend`] says so: at most once per server of the list.
    async fn on_some_server<T, F, Fut>(
        &self,
        cluster: &str,
        policy: Resend,
        attempt: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let mut tried = 0;
        loop {
            let at = self.endpoints.current();
            let error = match attempt(self.endpoints.url(at).to_string()).await {
                Ok(answer) => return Ok(answer),
                Err(e) => e,
            };
            let failure = error.failure();
            let Some(reason) = failure.reason() else {
                return Err(error);
            };
            tried += 1;
            self.endpoints.fail_over(at, reason, cluster, &error);
            if !failure.resend(policy, tried, self.endpoints.len()) {
                return Err(error);
            }
        }
    }

    /// One JSON call on behalf of `cluster` (for logs); answers the decoded body.
    pub async fn call(
        &self,
        cluster: &str,
        method: Method,
        path: &str,
        token: &str,
        body: Option<(&'static str, &Value)>,
    ) -> Result<Value, ClientError> {
        self.call_as(cluster, method, path, token, body).await
    }

    /// As [`Self::call`], the answer decoded straight into `T` (`serde::de::IgnoredAny` when
    /// the caller only needs to know the request was accepted).
    pub async fn call_as<T: serde::de::DeserializeOwned>(
        &self,
        cluster: &str,
        method: Method,
        path: &str,
        token: &str,
        body: Option<(&'static str, &(impl Serialize + Sync + ?Sized))>,
    ) -> Result<T, ClientError> {
        let body = body.map(|(ct, v)| {
            (
                ct,
                bytes::Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
            )
        });
        self.on_some_server(cluster, Resend::WhenQuick, |base| {
            let (method, body) = (method.clone(), body.clone());
            async move {
                let resp = self
                    .send_to(
                        &base,
                        method.clone(),
                        path,
                        token,
                        body,
                        Some(self.request_timeout),
                    )
                    .await?;
                let bytes = resp
                    .bytes()
                    .await
                    .map_err(|source| ClientError::Transport {
                        method: method.to_string(),
                        url: format!("{base}{path}"),
                        source: source.without_url(),
                    })?;
                serde_json::from_slice(&bytes).map_err(|source| ClientError::Decode {
                    method: method.to_string(),
                    path: path.to_string(),
                    source,
                })
            }
        })
        .await
    }

    /// Opens a watch (`path` carries the query) on behalf of `cluster`; the answer is a stream
    /// of events. A watch is never opened again on another server: the caller lists there
    /// first.
    pub async fn watch(
        &self,
        cluster: &str,
        path: &str,
        token: &str,
    ) -> Result<WatchStream, ClientError> {
        self.on_some_server(cluster, Resend::Never, |base| async move {
            let resp = tokio::time::timeout(
                self.request_timeout,
                self.send_to(&base, Method::GET, path, token, None, None),
            )
            .await
            .map_err(|_| ClientError::Idle {
                path: path.to_string(),
                idle: self.request_timeout,
            })??;
            Ok(WatchStream {
                path: path.to_string(),
                inner: resp.bytes_stream().boxed(),
                lines: LineBuffer::default(),
            })
        })
        .await
    }
}

/// A watch's newline-delimited JSON events.
pub struct WatchStream {
    path: String,
    inner: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    lines: LineBuffer,
}

impl WatchStream {
    /// The next event; `None` when the server ended the stream. Cancel-safe.
    pub async fn next_event(&mut self) -> Result<Option<WatchEvent>, ClientError> {
        loop {
            if let Some(line) = self.lines.next_line() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(&line).map(Some).map_err(|source| {
                    ClientError::Decode {
                        method: "GET".into(),
                        path: self.path.clone(),
                        source,
                    }
                });
            }
            match self.inner.next().await {
                Some(Ok(chunk)) => self.lines.push(&chunk),
                Some(Err(source)) => {
                    return Err(ClientError::Transport {
                        method: "GET".into(),
                        url: self.path.clone(),
                        source: source.without_url(),
                    })
                }
                None => return Ok(None),
            }
        }
    }
}

mod bytes_buf {
    //! Splits a byte stream into lines.

    /// Bytes received and not yet split.
    #[derive(Debug, Default)]
    pub struct LineBuffer {
        buf: Vec<u8>,
    }

    impl LineBuffer {
        /// Appends received bytes.
        pub fn push(&mut self, chunk: &[u8]) {
            self.buf.extend_from_slice(chunk);
        }

        /// The next complete line, without its newline.
        pub fn next_line(&mut self) -> Option<Vec<u8>> {
            let pos = self.buf.iter().position(|b| *b == b'\n')?;
            let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
            line.pop();
            Some(line)
        }
    }
}

/// A member's credential: read from `<data-dir>/credential`, else obtained by registering with
/// the join token, and obtained again when the server refuses it.
#[derive(Debug)]
pub struct Credentials {
    cluster: String,
    join_token_file: Option<PathBuf>,
    credential_file: PathBuf,
    registration: Registration,
    current: parking_lot::RwLock<Option<String>>,
    registering: tokio::sync::Mutex<()>,
}

/// The answer of `POST /flotilla/v1/register`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RegisterAnswer {
    #[serde(default)]
    cluster_name: String,
    token: String,
}

impl Credentials {
    /// Loads the stored credential, if any.
    pub fn load(
        cluster: &str,
        join_token_file: Option<PathBuf>,
        credential_file: PathBuf,
        registration: Registration,
    ) -> Result<Self, ClientError> {
        let stored = files::read_optional(&credential_file)
            .map_err(|source| ClientError::File {
                path: credential_file.display().to_string(),
                source,
            })?
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .filter(|t| !t.is_empty());
        Ok(Credentials {
            cluster: cluster.to_string(),
            join_token_file,
            credential_file,
            registration,
            current: parking_lot::RwLock::new(stored),
            registering: tokio::sync::Mutex::new(()),
        })
    }

    /// True when a credential is at hand.
    pub fn has_credential(&self) -> bool {
        self.current.read().is_some()
    }

    /// The credential, registering first if there is none.
    pub async fn token(&self, server: &ServerClient) -> Result<String, ClientError> {
        if let Some(t) = self.current.read().clone() {
            return Ok(t);
        }
        self.renew(server, None).await
    }

    /// Registers again unless another caller already replaced `stale`.
    pub async fn renew(
        &self,
        server: &ServerClient,
        stale: Option<&str>,
    ) -> Result<String, ClientError> {
        let _guard = self.registering.lock().await;
        if let Some(cur) = self.current.read().clone() {
            if Some(cur.as_str()) != stale {
                return Ok(cur);
            }
        }
        let token = self.register(server).await?;
        *self.current.write() = Some(token.clone());
        Ok(token)
    }

    async fn register(&self, server: &ServerClient) -> Result<String, ClientError> {
        let Some(path) = &self.join_token_file else {
            return Err(ClientError::Setup(
                "no credential and no --token-file to register with".into(),
            ));
        };
        let join = std::fs::read_to_string(path).map_err(|source| ClientError::File {
            path: path.display().to_string(),
            source,
        })?;
        let _permit = server.registrations.acquire().await.ok();
        let mut body = serde_json::to_value(&self.registration).unwrap_or(Value::Null);
        body["clusterName"] = Value::String(self.cluster.clone());
        let answer = server
            .call(
                &self.cluster,
                Method::POST,
                "/flotilla/v1/register",
                join.trim(),
                Some(("application/json", &body)),
            )
            .await?;
        let answer: RegisterAnswer =
            serde_json::from_value(answer).map_err(|source| ClientError::Decode {
                method: "POST".into(),
                path: "/flotilla/v1/register".into(),
                source,
            })?;
        if !answer.cluster_name.is_empty() && answer.cluster_name != self.cluster {
            tracing::warn!(cluster = %self.cluster, answered = %answer.cluster_name,
                "registration answered for another cluster name");
        }
        files::write_private(&self.credential_file, answer.token.as_bytes()).map_err(|source| {
            ClientError::File {
                path: self.credential_file.display().to_string(),
                source,
            }
        })?;
        tracing::info!(cluster = %self.cluster, "registered with the server");
        Ok(answer.token)
    }
}

/// One member's view of the server: its credential on every call.
#[derive(Clone, Debug)]
pub struct ClusterClient {
    server: ServerClient,
    creds: Arc<Credentials>,
}

impl ClusterClient {
    /// A client for one member.
    pub fn new(server: ServerClient, creds: Arc<Credentials>) -> Self {
        ClusterClient { server, creds }
    }

    /// The member timing the server advertised last.
    pub fn advertised_timing(&self) -> &AdvertisedTiming {
        self.server.advertised_timing()
    }

    /// The servers and the one in use.
    pub fn endpoints(&self) -> &Arc<ServerEndpoints> {
        self.server.endpoints()
    }

    /// The same member's client with another timeout for each non-watch request.
    pub fn with_request_timeout(&self, request_timeout: Duration) -> Self {
        ClusterClient {
            server: self.server.with_request_timeout(request_timeout),
            creds: self.creds.clone(),
        }
    }

    /// Makes sure the member has a credential (registering if it has none).
    pub async fn ensure_registered(&self) -> Result<(), ClientError> {
        self.creds.token(&self.server).await.map(|_| ())
    }

    async fn with_token<T, F, Fut>(&self, f: F) -> Result<T, ClientError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let token = self.creds.token(&self.server).await?;
        match f(token.clone()).await {
            Err(e) if e.code() == Some(401) => {
                tracing::warn!(cluster = %self.creds.cluster, "credential refused; registering again");
                let fresh = self.creds.renew(&self.server, Some(&token)).await?;
                f(fresh).await
            }
            other => other,
        }
    }

    /// A JSON call with the member's credential.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, &Value)>,
    ) -> Result<Value, ClientError> {
        self.call_as(method, path, body).await
    }

    /// As [`Self::call`], the answer decoded straight into `T`.
    pub async fn call_as<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, &(impl Serialize + Sync + ?Sized))>,
    ) -> Result<T, ClientError> {
        self.with_token(|t| {
            let method = method.clone();
            async move {
                self.server
                    .call_as(&self.creds.cluster, method, path, &t, body)
                    .await
            }
        })
        .await
    }

    /// GET.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.call(Method::GET, path, None).await
    }

    /// POST a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::POST, path, Some(("application/json", body)))
            .await
    }

    /// PUT a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::PUT, path, Some(("application/json", body)))
            .await
    }

    /// PUT a body encoded as JSON straight from `body`; the answer decoded as `T`.
    pub async fn put_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &(impl Serialize + Sync + ?Sized),
    ) -> Result<T, ClientError> {
        self.call_as(Method::PUT, path, Some(("application/json", body)))
            .await
    }

    /// POST a JSON body whose answer is not needed: it is checked to be JSON, not kept.
    pub async fn post_unkept(&self, path: &str, body: &Value) -> Result<(), ClientError> {
        self.call_as::<serde::de::IgnoredAny>(Method::POST, path, Some(("application/json", body)))
            .await
            .map(drop)
    }

    /// PATCH with a JSON merge patch.
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> Result<Value, ClientError> {
        self.call(
            Method::PATCH,
            path,
            Some(("application/merge-patch+json", patch)),
        )
        .await
    }

    /// Opens a watch.
    pub async fn watch(&self, path: &str) -> Result<WatchStream, ClientError> {
        self.with_token(|t| async move { self.server.watch(&self.creds.cluster, path, &t).await })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::bytes_buf::LineBuffer;
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A refused connection, no answer and a connection closed mid-request are told apart
    /// (they decide whether the request is sent again to the next server at once).
    #[tokio::test]
    async fn transport_failures_are_told_apart() {
        let call = |url: String| async move {
            let client = ServerClient::new(&url, None, Duration::from_millis(300)).unwrap();
            client
                .call("m1", Method::GET, "/x", "t", None)
                .await
                .unwrap_err()
        };
        // Refused: a port bound, then freed.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let refused = call(format!("http://127.0.0.1:{port}")).await;
        assert_eq!(refused.failure(), Failure::Connect, "{refused:?}");

        // Silent: accepts, reads, never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_addr = silent.local_addr().unwrap();
        let holder = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = silent.accept().await {
                held.push(s);
            }
        });
        let timed_out = call(format!("http://{silent_addr}")).await;
        assert_eq!(timed_out.failure(), Failure::Timeout, "{timed_out:?}");
        holder.abort();

        // Broken: reads the request, then closes the connection without an answer.
        let closer = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closer_addr = closer.local_addr().unwrap();
        let closing = tokio::spawn(async move {
            while let Ok((mut s, _)) = closer.accept().await {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
            }
        });
        let broken = call(format!("http://{closer_addr}")).await;
        assert_eq!(broken.failure(), Failure::Broken, "{broken:?}");
        closing.abort();
    }

    #[test]
    fn lines_split_across_chunks() {
        let mut b = LineBuffer::default();
        b.push(b"{\"a\":");
        assert_eq!(b.next_line(), None);
        b.push(b"1}\n{\"b\":2}\n{\"c\"");
        assert_eq!(b.next_line().unwrap(), b"{\"a\":1}");
        assert_eq!(b.next_line().unwrap(), b"{\"b\":2}");
        assert_eq!(b.next_line(), None);
        b.push(b":3}\n");
        assert_eq!(b.next_line().unwrap(), b"{\"c\":3}");
    }
}
