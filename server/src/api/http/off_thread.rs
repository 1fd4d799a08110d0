//! Requests whose work grows with the store run on tokio's blocking pool, not on the API's
//! async threads.
//!
//! A list reads and decodes every object it returns synchronously, and its answer is encoded
//! in one piece: for an agent relisting 20,000 Works that is seconds of CPU. The API runtime
//! has one thread per core, so two such lists at once (the members relisting after a
//! restart) held every other request, `GET /apis` included, until they ended. On the blocking
//! pool the operating system shares the cores between them and the API's threads, as it does
//! with the controllers' runtime, and a small request is answered in milliseconds meanwhile.

use crate::api::error::{ApiError, ApiResult};
use tokio::runtime::Handle;

/// Runs `work` on the blocking pool and waits for it. `work` gets the runtime's handle, to
/// block on the store's futures (they do their work synchronously when polled).
pub async fn run<T, F>(work: F) -> ApiResult<T>
where
    F: FnOnce(&Handle) -> ApiResult<T> + Send + 'static,
    T: Send + 'static,
{
    let runtime = Handle::current();
    tokio::task::spawn_blocking(move || work(&runtime))
        .await
        .map_err(|e| ApiError::Internal(Box::new(e)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_work_leaves_the_async_thread_free() {
        // One async worker. The work starts (polled on that worker) and blocks until another
        // task spawned on the runtime runs: had it blocked the worker itself, that task could
        // not run and the work would time out.
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let blocked = tokio::spawn(run(move |_| {
            let _ = started_tx.send(());
            rx.recv_timeout(std::time::Duration::from_secs(10))
                .map_err(|e| ApiError::Internal(Box::new(e)))
        }));
        started_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the work started");
        let other = tokio::spawn(async move { tx.send(()).is_ok() });
        assert!(other.await.expect("the other task ran"));
        blocked
            .await
            .expect("joined")
            .expect("the work ended once the other task ran");
    }

    #[tokio::test]
    async fn the_work_blocks_on_store_futures_and_its_error_comes_back() {
        let answer = run(|rt| Ok(rt.block_on(async { 6 * 7 }))).await;
        assert_eq!(answer.ok(), Some(42));
        let failed: ApiResult<()> = run(|_| Err(ApiError::BadRequest("no".into()))).await;
        assert!(matches!(failed, Err(ApiError::BadRequest(m)) if m == "no"));
    }
}
