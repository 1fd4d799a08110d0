//! A linearizability checker for one register, for the high-availability tests' "nothing lost"
//! check: clients write unique values to a key and read it back through different servers,
//! and the recorded history must have a legal sequential order that respects real time.
//!
//! The search is Wing and Gong's, with Lowe's memo of (operations linearized, register value),
//! as Knossos and Porcupine run it: repeatedly linearize an operation that was invoked before
//! every pending operation returned and is legal in the current state, backtracking on a dead
//! end. A write whose outcome is unknown (a timeout, a dropped connection, a 5xx) may have
//! taken effect at any moment after its invocation, or never: it has no return time and need
//! not be linearized. One whose value no read returned is dropped first, since leaving it out
//! never makes a history less legal.

use std::collections::HashSet;

/// What a client did to the register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Wrote this value (values are unique within a history).
    Write(String),
    /// Read this value (`None`: the key did not exist).
    Read(Option<String>),
}

/// One operation as a client saw it: when it was invoked and, if the client learned its
/// outcome, when it returned (any clock common to every client, e.g. nanoseconds since start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The operation and its answer.
    pub op: Op,
    /// When the client sent it.
    pub invoked: u64,
    /// When the client got the answer; `None` for a write with an unknown outcome.
    pub returned: Option<u64>,
}

impl Call {
    /// An operation whose answer came back.
    pub fn done(op: Op, invoked: u64, returned: u64) -> Call {
        Call {
            op,
            invoked,
            returned: Some(returned),
        }
    }

    /// A write whose outcome is unknown.
    pub fn unknown(value: &str, invoked: u64) -> Call {
        Call {
            op: Op::Write(value.to_string()),
            invoked,
            returned: None,
        }
    }
}

/// Whether `history`, starting from `initial`, is linearizable for a register. The error
/// names the operations that could not be ordered after the longest legal prefix found.
pub fn check(initial: Option<&str>, history: &[Call]) -> Result<(), String> {
    let read: HashSet<&str> = history
        .iter()
        .filter_map(|c| match &c.op {
            Op::Read(Some(v)) => Some(v.as_str()),
            _ => None,
        })
        .collect();
    let calls: Vec<&Call> = history
        .iter()
        .filter(|c| match (&c.op, c.returned) {
            (Op::Write(v), None) => read.contains(v.as_str()),
            _ => true,
        })
        .collect();
    Search::new(calls, initial.map(str::to_string)).run()
}

struct Search<'a> {
    calls: Vec<&'a Call>,
    done: Vec<u64>,
    value: Option<String>,
    /// Calls with an answer not yet linearized.
    pending: usize,
}

/// Candidates of one search level: (call, the value after it), and the next to try.
struct Level {
    candidates: Vec<(usize, Option<String>)>,
    next: usize,
}

impl<'a> Search<'a> {
    fn new(calls: Vec<&'a Call>, initial: Option<String>) -> Self {
        let pending = calls.iter().filter(|c| c.returned.is_some()).count();
        let done = vec![0; calls.len().div_ceil(64)];
        Search {
            calls,
            done,
            value: initial,
            pending,
        }
    }

    fn is_done(&self, i: usize) -> bool {
        self.done[i / 64] & (1 << (i % 64)) != 0
    }

    fn flip(&mut self, i: usize) {
        self.done[i / 64] ^= 1 << (i % 64);
    }

    /// The calls that may go next: invoked no later than the earliest return among the calls
    /// not yet linearized, and legal in the current state.
    fn level(&self) -> Level {
        let horizon = (0..self.calls.len())
            .filter(|i| !self.is_done(*i))
            .filter_map(|i| self.calls[i].returned)
            .min()
            .unwrap_or(u64::MAX);
        let candidates = (0..self.calls.len())
            .filter(|i| !self.is_done(*i) && self.calls[*i].invoked <= horizon)
            .filter_map(|i| match &self.calls[i].op {
                Op::Write(v) => Some((i, Some(v.clone()))),
                Op::Read(r) if *r == self.value => Some((i, self.value.clone())),
                Op::Read(_) => None,
            })
            .collect();
        Level {
            candidates,
            next: 0,
        }
    }

    fn run(mut self) -> Result<(), String> {
        if self.pending == 0 {
            return Ok(());
        }
        let mut seen: HashSet<(Vec<u64>, Option<String>)> = HashSet::new();
        let mut path: Vec<(usize, Option<String>)> = Vec::new();
        let mut best: Vec<usize> = Vec::new();
        let mut levels = vec![self.level()];
        while let Some(level) = levels.last_mut() {
            let Some((i, after)) = level.candidates.get(level.next).cloned() else {
                levels.pop();
                if let Some((i, before)) = path.pop() {
                    self.flip(i);
                    self.value = before;
                    if self.calls[i].returned.is_some() {
                        self.pending += 1;
                    }
                }
                continue;
            };
            level.next += 1;
            self.flip(i);
            if !seen.insert((self.done.clone(), after.clone())) {
                self.flip(i);
                continue;
            }
            path.push((i, std::mem::replace(&mut self.value, after)));
            if self.calls[i].returned.is_some() {
                self.pending -= 1;
                if self.pending == 0 {
                    return Ok(());
                }
            }
            if path.len() > best.len() {
                best = path.iter().map(|(i, _)| *i).collect();
            }
            levels.push(self.level());
        }
        let ordered: HashSet<usize> = best.iter().copied().collect();
        let stuck: Vec<String> = (0..self.calls.len())
            .filter(|i| !ordered.contains(i) && self.calls[*i].returned.is_some())
            .take(5)
            .map(|i| format!("{:?}", self.calls[i]))
            .collect();
        Err(format!(
            "not linearizable: after {} operations in order, none of these fits: {}",
            best.len(),
            stuck.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(v: &str, invoked: u64, returned: u64) -> Call {
        Call::done(Op::Write(v.into()), invoked, returned)
    }

    fn r(v: Option<&str>, invoked: u64, returned: u64) -> Call {
        Call::done(Op::Read(v.map(String::from)), invoked, returned)
    }

    #[test]
    fn register_histories_are_judged_like_a_register() {
        let cases: Vec<(&str, Vec<Call>, bool)> = vec![
            ("empty", vec![], true),
            (
                "sequential",
                vec![r(Some("init"), 0, 1), w("a", 2, 3), r(Some("a"), 4, 5)],
                true,
            ),
            (
                "a stale read",
                vec![w("a", 0, 1), r(Some("init"), 2, 3)],
                false,
            ),
            (
                "a read of a value never written",
                vec![r(Some("zzz"), 0, 1)],
                false,
            ),
            (
                "a read concurrent with a write sees the old value",
                vec![w("a", 0, 10), r(Some("init"), 1, 2)],
                true,
            ),
            (
                "a read concurrent with a write sees the new value",
                vec![w("a", 0, 10), r(Some("a"), 1, 2)],
                true,
            ),
            (
                "once a read saw the new value, a later read cannot see the old",
                vec![w("a", 0, 10), r(Some("a"), 1, 2), r(Some("init"), 3, 4)],
                false,
            ),
            (
                "concurrent writes in either order",
                vec![
                    w("a", 0, 10),
                    w("b", 1, 11),
                    r(Some("a"), 12, 13),
                    r(Some("a"), 14, 15),
                ],
                true,
            ),
            (
                "values cannot flip back",
                vec![
                    w("a", 0, 10),
                    w("b", 1, 11),
                    r(Some("a"), 12, 13),
                    r(Some("b"), 14, 15),
                    r(Some("a"), 16, 17),
                ],
                false,
            ),
            (
                "an unknown write that was read took effect",
                vec![
                    Call::unknown("a", 0),
                    r(Some("a"), 5, 6),
                    r(Some("a"), 7, 8),
                ],
                true,
            ),
            (
                "an unknown write never read may not have",
                vec![Call::unknown("a", 0), r(Some("init"), 5, 6)],
                true,
            ),
            (
                "an unknown write cannot be read before it was sent",
                vec![r(Some("a"), 0, 1), Call::unknown("a", 2)],
                false,
            ),
            (
                "an acknowledged write is not lost",
                vec![w("a", 0, 1), w("b", 2, 3), r(Some("a"), 4, 5)],
                false,
            ),
            ("a deleted key reads as absent", vec![r(None, 0, 1)], false),
        ];
        for (name, history, want) in cases {
            let got = check(Some("init"), &history);
            assert_eq!(got.is_ok(), want, "{name}: {got:?}");
        }
        assert!(check(None, &[r(None, 0, 1)]).is_ok());
    }

    #[test]
    fn long_interleaved_histories_are_checked_quickly() {
        // Three clients, each writing then reading its own value, overlapping in pairs; a
        // thousand operations must not make the search explode.
        let mut history = Vec::new();
        let mut last = "init".to_string();
        for k in 0..250u64 {
            let t = k * 10;
            let v = format!("v{k}");
            history.push(w(&v, t, t + 6));
            history.push(r(Some(&last), t + 1, t + 2));
            history.push(Call::unknown(&format!("lost{k}"), t + 3));
            history.push(r(Some(&v), t + 7, t + 9));
            last = v;
        }
        assert_eq!(check(Some("init"), &history), Ok(()));
        history.push(r(Some("v3"), 100_000, 100_001));
        assert!(check(Some("init"), &history).is_err());
    }
}
