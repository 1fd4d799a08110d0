//! The writes a controller makes itself, so that its own watch does not wake it for them.
//!
//! A controller that writes the objects it also watches (the binding controller creates the Works
//! whose changes wake it) would otherwise run once more after each of its writes, only to find what
//! it has just written. Before writing, it says which object it is about to change and at which
//! resourceVersion it read it (0 for a creation); its feed
//! ([`crate::controllers::runtime::controller::Source::skipping_own`]) then drops the first watch
//! event of that object past that version: the write's own. The expectation is set before the write
//! because the watch event can reach the feed before the write call returns.
//!
//! Why the first event past the version is the write's own: an update carries the version it read
//! as a precondition, so nothing can land in between, and a creation's first event is its own. Once
//! the write returns, the controller confirms it with the version written, and only the event of
//! exactly that version is taken for its own (so a write whose event never comes, replaced by a
//! relist, cannot take a later writer's event). When the write fails (a conflict, the object
//! already exists) the controller cancels the expectation and must look again (it returns an error
//! or asks to be requeued): another writer's event may have been taken for its own. Deletions
//! always wake. A relist of the kind forgets every expectation (the events it replaces will not
//! come).

use std::collections::HashMap;

use flotilla_api::kinds::ResourceType;
use parking_lot::Mutex;
use serde_json::Value;

use crate::store::EventType;

/// The event a write will make.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expected {
    /// The first past the version read (the write is under way).
    After(u64),
    /// Exactly this version (the write returned it).
    Exactly(u64),
}

/// Writes a controller makes: object → the event expected of it.
#[derive(Debug, Default)]
pub struct OwnWrites {
    expected: Mutex<HashMap<String, Expected>>,
}

/// `<kind>|<namespace>/<name>` (or `<kind>|<name>`).
fn identity(res: &ResourceType, namespace: Option<&str>, name: &str) -> String {
    match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{}|{ns}/{name}", res.storage_name()),
        None => format!("{}|{name}", res.storage_name()),
    }
}

/// An object's identity and resourceVersion (0 when it has none).
fn identity_of(res: &ResourceType, obj: &Value) -> Option<(String, u64)> {
    let meta = obj.get("metadata")?;
    let name = meta.get("name").and_then(Value::as_str)?;
    let namespace = meta.get("namespace").and_then(Value::as_str);
    let rv = meta
        .get("resourceVersion")
        .and_then(Value::as_str)
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0);
    Some((identity(res, namespace, name), rv))
}

impl OwnWrites {
    /// The controller is about to write `obj` as it read it (a new object for a creation).
    pub fn expect(&self, res: &ResourceType, obj: &Value) {
        if let Some((key, rv)) = identity_of(res, obj) {
            self.expected.lock().insert(key, Expected::After(rv));
        }
    }

    /// The write returned `written`: only the event of its version is the write's own (if
    /// that event has not already come).
    pub fn confirm(&self, res: &ResourceType, written: &Value) {
        if let Some((key, rv)) = identity_of(res, written) {
            if let Some(e) = self.expected.lock().get_mut(&key) {
                *e = Expected::Exactly(rv);
            }
        }
    }

    /// The write failed: its event will not come.
    pub fn cancel(&self, res: &ResourceType, obj: &Value) {
        if let Some((key, _)) = identity_of(res, obj) {
            self.expected.lock().remove(&key);
        }
    }

    /// Whether a watch event is the one an expected write makes (the expectation is then
    /// spent). Deletions are never the controller's own: they always wake it.
    pub fn is_own(&self, res: &ResourceType, event: EventType, obj: &Value) -> bool {
        let Some((key, rv)) = identity_of(res, obj) else {
            return false;
        };
        let mut expected = self.expected.lock();
        let Some(&e) = expected.get(&key) else {
            return false;
        };
        let (own, spent) = match e {
            _ if event == EventType::Deleted => (false, true),
            // An event from before the write: the write's own is still to come.
            Expected::After(read) if rv <= read => (false, false),
            Expected::After(_) => (true, true),
            Expected::Exactly(written) if rv < written => (false, false),
            Expected::Exactly(written) => (rv == written, true),
        };
        if spent {
            expected.remove(&key);
        }
        own
    }

    /// Forgets every expectation (the feed relisted).
    pub fn forget_all(&self) {
        self.expected.lock().clear();
    }

    /// How many writes wait for their event (for tests).
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.expected.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::kinds::well_known;
    use serde_json::json;

    fn work(rv: Option<u64>) -> Value {
        let mut w = json!({"metadata": {"namespace": "karmada-es-m1", "name": "w"}});
        if let Some(rv) = rv {
            w["metadata"]["resourceVersion"] = json!(rv.to_string());
        }
        w
    }

    #[test]
    fn only_the_first_event_past_the_version_read_is_the_writes_own() {
        let works = well_known::works();
        // (read rv (None: a creation), event, event rv, own?, still expected after)
        let table = [
            (None, EventType::Added, 7, true, false),
            (Some(5), EventType::Modified, 6, true, false),
            (Some(5), EventType::Modified, 9, true, false),
            // An event from before the write: news, the write's own is still to come.
            (Some(5), EventType::Modified, 5, false, true),
            (Some(5), EventType::Modified, 4, false, true),
            (Some(5), EventType::Deleted, 6, false, false),
            (Some(5), EventType::Deleted, 5, false, false),
        ];
        for (i, (read, event, rv, own, kept)) in table.into_iter().enumerate() {
            let writes = OwnWrites::default();
            writes.expect(&works, &work(read));
            assert_eq!(
                writes.is_own(&works, event, &work(Some(rv))),
                own,
                "row {i}"
            );
            assert_eq!(writes.pending() == 1, kept, "row {i}");
        }
        // Nothing expected: every event is news.
        let writes = OwnWrites::default();
        assert!(!writes.is_own(&works, EventType::Modified, &work(Some(3))));
    }

    #[test]
    fn a_spent_cancelled_or_forgotten_expectation_takes_no_later_event() {
        let works = well_known::works();
        let writes = OwnWrites::default();
        writes.expect(&works, &work(Some(5)));
        assert!(writes.is_own(&works, EventType::Modified, &work(Some(6))));
        assert!(!writes.is_own(&works, EventType::Modified, &work(Some(7))));
        writes.expect(&works, &work(Some(7)));
        writes.cancel(&works, &work(Some(7)));
        assert!(!writes.is_own(&works, EventType::Modified, &work(Some(8))));
        writes.expect(&works, &work(Some(8)));
        writes.forget_all();
        assert!(!writes.is_own(&works, EventType::Modified, &work(Some(9))));
    }

    #[test]
    fn a_confirmed_write_takes_only_the_event_of_its_version() {
        let works = well_known::works();
        // (event rv after a write from 5 confirmed at 7, own?, still expected after)
        for (i, (rv, own, kept)) in [(7, true, false), (6, false, true), (9, false, false)]
            .into_iter()
            .enumerate()
        {
            let writes = OwnWrites::default();
            writes.expect(&works, &work(Some(5)));
            writes.confirm(&works, &work(Some(7)));
            assert_eq!(
                writes.is_own(&works, EventType::Modified, &work(Some(rv))),
                own,
                "row {i}"
            );
            assert_eq!(writes.pending() == 1, kept, "row {i}");
        }
        // Confirmed after its event came: nothing is left to take a later event.
        let writes = OwnWrites::default();
        writes.expect(&works, &work(None));
        assert!(writes.is_own(&works, EventType::Added, &work(Some(7))));
        writes.confirm(&works, &work(Some(7)));
        assert_eq!(writes.pending(), 0);
    }

    #[test]
    fn kinds_and_namespaces_are_told_apart() {
        let writes = OwnWrites::default();
        writes.expect(&well_known::works(), &work(Some(5)));
        let elsewhere = json!({"metadata": {"namespace": "karmada-es-m2", "name": "w", "resourceVersion": "6"}});
        assert!(!writes.is_own(&well_known::works(), EventType::Modified, &elsewhere));
        let binding = &well_known::resource_bindings();
        assert!(!writes.is_own(binding, EventType::Modified, &work(Some(6))));
        assert!(writes.is_own(&well_known::works(), EventType::Modified, &work(Some(6))));
    }
}
