//! How this crate's tests wait: [`eventually`], the one wait helper of `flotilla-server`, for
//! the tests beside the code and those in `server/tests/` alike (the controller tests' world is
//! [`crate::controllers::runtime::testing`]). Compiled only for tests and under the crate's
//! `testing` feature, which `server/tests/`, the benches and `flotilla-tests` enable; a plain
//! build of the server leaves it out. The agent's tests (`agent/tests/support`) and the
//! end-to-end tests (`flotilla_tests`) have twins of the same signature.

/// Real etcd processes on 127.0.0.1 for the etcd store's tests.
pub mod etcd;

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(10);

/// What one look of [`eventually`] answers: done, with a value, or not yet, with what it saw.
pub trait Outcome {
    /// What the wait gives back once it is over.
    type Value;
    /// `Ok(value)` ends the wait; `Err(seen)` tells what this look saw instead.
    fn into_outcome(self) -> Result<Self::Value, String>;
}

/// `Some(value)` ends the wait; `None` is "not yet" and tells nothing more.
impl<T> Outcome for Option<T> {
    type Value = T;
    fn into_outcome(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".to_string())
    }
}

/// `Ok(value)` ends the wait; `Err(seen)` is "not yet", and the last `seen` is in the panic.
impl<T, E: Display> Outcome for Result<T, E> {
    type Value = T;
    fn into_outcome(self) -> Result<T, String> {
        self.map_err(|seen| seen.to_string())
    }
}

/// Looks at `f` until it answers `Some(value)` or `Ok(value)`, and returns the value.
///
/// Looks every 10 ms in tokio time, so under a paused clock (`start_paused`) the deadline is
/// virtual and costs no real time. A test that drives a [`flotilla_support::clock::FakeClock`] moves it
/// itself; `eventually` only waits for what runs meanwhile.
///
/// # Panics
/// When `deadline` has passed and `f` still says "not yet": the message names `what` and what
/// the last look saw (the `Err` it answered).
pub async fn eventually<O, F, Fut>(what: &str, deadline: Duration, mut f: F) -> O::Value
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let seen = match f().await.into_outcome() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= until {
            panic!("waited {deadline:?} for {what}; last seen: {seen}");
        }
        tokio::time::sleep(POLL).await;
    }
}
