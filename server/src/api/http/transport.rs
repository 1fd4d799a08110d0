//! The connection layer under the API: how many client connections are served at once, how
//! long a client may take to send a request head, and the answers hyper writes by itself.
//!
//! hyper answers a request it cannot parse (400), a URI too long (414) or headers too large
//! (431) without calling the application, with an empty body, and offers no hook to change
//! that answer. [`Guarded`] sits between hyper and the socket (under TLS, on the plain text)
//! and turns exactly those answers into Kubernetes `Status` bodies: an HTTP/1 error head with
//! `content-length: 0`. Every error answer the application makes already has a `Status` body
//! (see [`crate::api::http::limits::status_bodies`]), so an empty one can only be hyper's.

use crate::api::error::ApiError;
use axum_server::accept::Accept;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// An acceptor that serves at most `max` connections at once (a connection past it is closed
/// at accept) and wraps each stream in [`Guarded`].
#[derive(Clone, Debug)]
pub struct LimitAcceptor<A> {
    inner: A,
    slots: Arc<Semaphore>,
    max: usize,
}

impl<A> LimitAcceptor<A> {
    /// Wraps `inner` (the default or the TLS acceptor).
    pub fn new(inner: A, max: usize) -> Self {
        Self {
            inner,
            slots: Arc::new(Semaphore::new(max.max(1))),
            max: max.max(1),
        }
    }
}

impl<I, S, A> Accept<I, S> for LimitAcceptor<A>
where
    A: Accept<I, S> + Clone + Send + 'static,
    A::Future: Send,
    I: Send + 'static,
    S: Send + 'static,
{
    type Stream = Guarded<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let permit = self.slots.clone().try_acquire_owned();
        let inner = self.inner.clone();
        let max = self.max;
        Box::pin(async move {
            let Ok(permit) = permit else {
                tracing::warn!(
                    max_connections = max,
                    "closing a new connection: too many open"
                );
                return Err(io::Error::other("too many open connections"));
            };
            let (stream, service) = inner.accept(stream, service).await?;
            Ok((Guarded::new(stream, permit), service))
        })
    }
}

/// A client connection: holds its connection slot and rewrites hyper's own error answers.
#[derive(Debug)]
pub struct Guarded<S> {
    inner: S,
    _permit: OwnedSemaphorePermit,
    /// Bytes of a rewritten answer not yet written to the socket.
    pending: Vec<u8>,
    written: usize,
}

impl<S> Guarded<S> {
    fn new(inner: S, permit: OwnedSemaphorePermit) -> Self {
        Self {
            inner,
            _permit: permit,
            pending: Vec::new(),
            written: 0,
        }
    }
}

impl<S: AsyncWrite + Unpin> Guarded<S> {
    /// Sends `answer` in place of the `len` bytes hyper wrote, and tells hyper they were
    /// written. What of it the socket does not take now goes with the next drain (write,
    /// flush or shutdown).
    fn answer_instead(
        &mut self,
        cx: &mut Context<'_>,
        answer: Vec<u8>,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        self.pending = answer;
        self.written = 0;
        let _ = self.drain(cx)?;
        Poll::Ready(Ok(len))
    }

    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = std::task::ready!(
                Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

/// If `buf` is exactly an HTTP/1 error head with an empty body, the same answer with a
/// `Status` body.
pub fn rewrite_bare_error(buf: &[u8]) -> Option<Vec<u8>> {
    let head = buf.strip_suffix(b"\r\n\r\n")?;
    if !(head.starts_with(b"HTTP/1.1 ") || head.starts_with(b"HTTP/1.0 ")) || head.len() < 12 {
        return None;
    }
    let code: u16 = std::str::from_utf8(&head[9..12]).ok()?.parse().ok()?;
    let status = axum::http::StatusCode::from_u16(code).ok()?;
    if !(status.is_client_error() || status.is_server_error()) {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let mut headers = Vec::new();
    let mut empty = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("content-length") {
            empty = value.trim() == "0";
        } else if !name.eq_ignore_ascii_case("content-type") {
            headers.push(line);
        }
    }
    if !empty {
        return None;
    }
    let message = match code {
        414 => "the request URI is too long",
        431 => "the request header fields are too large",
        _ => "the request is not valid HTTP",
    };
    let body = ApiError::with_code(status, message).to_status().to_string();
    let mut out = format!("{status_line}\r\n");
    for h in headers {
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str(&format!(
        "content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ));
    Some(out.into_bytes())
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.drain(cx))?;
        if let Some(answer) = rewrite_bare_error(buf) {
            return self.answer_instead(cx, answer, buf.len());
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.drain(cx))?;
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (nonempty.next(), nonempty.next()) {
            if let Some(answer) = rewrite_bare_error(only) {
                return self.answer_instead(cx, answer, only.len());
            }
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_only_bare_error_heads() {
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Wed, 25 Nov 2026 12:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(rewrite_bare_error(bare).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 "));
        assert!(head.contains("date: Wed"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let status: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 431);

        for keep in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}",
            b"HTTP/1.1 400 Bad Request\r\ntransfer-encoding: chunked\r\n\r\n",
            b"\x00\x00\x12\x04",
        ] {
            assert!(rewrite_bare_error(keep).is_none(), "{keep:?}");
        }
    }
}
