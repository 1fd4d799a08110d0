//! A pod's effective resource request, as Kubernetes sums it (`PodRequests` in
//! `k8s.io/component-helpers/resource`, which the scheduler and the kubelet use): the one rule
//! behind the interpreter's replica requirements, the simulated member's scheduler and the
//! kube runtime's resource summary.
//!
//! - The app containers' requests are summed. A container that states limits but no requests
//!   requests its limits, as the API server defaults it.
//! - A native sidecar (an init container with `restartPolicy: Always`) keeps running beside the
//!   app containers, so its requests are added to that sum too.
//! - A regular init container runs alone, but after the sidecars declared before it have
//!   started: while it runs, the pod needs its requests plus those sidecars'. A sidecar's own
//!   start needs the sidecars declared up to and including it.
//! - Per resource, the pod requests the larger of the running sum and the largest init phase,
//!   plus `spec.overhead` (the RuntimeClass's per-pod cost). Zero quantities are dropped.
//!
//! Pod-level resources (`spec.resources`, alpha in Kubernetes) are not read.
//!
//! [`pod_requests`] rejects a field it cannot read, naming it; [`pod_requests_skipping_unreadable`]
//! leaves such a field out, for pods a cluster already holds (a real member never admits one).

use serde_json::{Map, Value};

use crate::quantity::{add_lists, Quantity, ResourceList};

/// A field of a pod spec that is not what a pod spec holds there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct PodRequestError {
    /// Dotted path of the field, from the pod spec (`containers.0.resources.requests.cpu`);
    /// empty for the spec itself.
    pub path: String,
    /// What was wrong.
    pub problem: String,
}

impl PodRequestError {
    fn new(path: &[&str], problem: impl Into<String>) -> Self {
        PodRequestError {
            path: path.join("."),
            problem: problem.into(),
        }
    }

    /// The same error seen from one level up (`resources.limits` in container 0 →
    /// `containers.0.resources.limits`).
    fn under(self, prefix: &[&str]) -> Self {
        let prefix = prefix.join(".");
        PodRequestError {
            path: if self.path.is_empty() {
                prefix
            } else {
                format!("{prefix}.{}", self.path)
            },
            problem: self.problem,
        }
    }
}

/// The pod's effective request; an error names the first field that cannot be read.
pub fn pod_requests(pod_spec: &Value) -> Result<ResourceList, PodRequestError> {
    effective_request(pod_spec, Unreadable::Reject)
}

/// The pod's effective request, leaving out what cannot be read (a list that is not a list,
/// a quantity that is not a quantity): for pods a cluster already holds.
pub fn pod_requests_skipping_unreadable(pod_spec: &Value) -> ResourceList {
    effective_request(pod_spec, Unreadable::Skip).unwrap_or_default()
}

/// What to do with a field that cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unreadable {
    Reject,
    Skip,
}

impl Unreadable {
    /// The value read, or (skipping) the empty value in place of an unreadable one.
    fn read<T: Default>(self, read: Result<T, PodRequestError>) -> Result<T, PodRequestError> {
        match (read, self) {
            (Ok(v), _) => Ok(v),
            (Err(_), Unreadable::Skip) => Ok(T::default()),
            (Err(e), Unreadable::Reject) => Err(e),
        }
    }
}

fn effective_request(pod_spec: &Value, mode: Unreadable) -> Result<ResourceList, PodRequestError> {
    // Σ app containers, native sidecars added below.
    let mut running = ResourceList::new();
    for (i, container) in mode.read(array(pod_spec, "containers"))?.iter().enumerate() {
        let request = container_request(container, mode)
            .map_err(|e| e.under(&["containers", &i.to_string()]))?;
        running = add_lists(&running, &request);
    }
    // The sidecars started so far, and the largest need of any init phase.
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for (i, container) in mode
        .read(array(pod_spec, "initContainers"))?
        .iter()
        .enumerate()
    {
        let request = container_request(container, mode)
            .map_err(|e| e.under(&["initContainers", &i.to_string()]))?;
        let phase = if is_sidecar(container) {
            running = add_lists(&running, &request);
            sidecars = add_lists(&sidecars, &request);
            sidecars.clone()
        } else {
            add_lists(&request, &sidecars)
        };
        raise_to(&mut init_peak, phase);
    }
    raise_to(&mut running, init_peak);
    let overhead = mode.read(resource_list(pod_spec, &["overhead"], mode))?;
    let mut total = add_lists(&running, &overhead);
    total.retain(|_, q| !q.is_zero());
    Ok(total)
}

/// An init container that keeps running beside the app containers (`restartPolicy: Always`).
fn is_sidecar(container: &Value) -> bool {
    container.get("restartPolicy").and_then(Value::as_str) == Some("Always")
}

/// Per resource, `list` becomes the larger of itself and `other` (the earlier one on a tie).
fn raise_to(list: &mut ResourceList, other: ResourceList) {
    for (name, q) in other {
        if list.get(&name).is_none_or(|cur| q > *cur) {
            list.insert(name, q);
        }
    }
}

/// A container's effective requests: its requests, with limits standing in for requests it
/// does not state (as the Kubernetes defaulting does).
fn container_request(container: &Value, mode: Unreadable) -> Result<ResourceList, PodRequestError> {
    let mut out = mode.read(resource_list(container, &["resources", "limits"], mode))?;
    out.extend(mode.read(resource_list(container, &["resources", "requests"], mode))?);
    Ok(out)
}

/// The resource list at `path`, empty when absent; with [`Unreadable::Skip`], entries that are
/// not quantities are left out.
fn resource_list(
    v: &Value,
    path: &[&str],
    mode: Unreadable,
) -> Result<ResourceList, PodRequestError> {
    let mut out = ResourceList::new();
    if let Some(map) = object(v, path)? {
        for (name, q) in map {
            let at = || [path, &[name.as_str()]].concat();
            let quantity = match q {
                Value::String(s) => Quantity::parse(s),
                Value::Number(n) => Quantity::parse(&n.to_string()),
                other => {
                    if mode == Unreadable::Skip {
                        continue;
                    }
                    return Err(PodRequestError::new(
                        &at(),
                        format!("expected a quantity, got {other}"),
                    ));
                }
            };
            match (quantity, mode) {
                (Ok(quantity), _) => {
                    out.insert(name.clone(), quantity);
                }
                (Err(_), Unreadable::Skip) => {}
                (Err(e), Unreadable::Reject) => {
                    return Err(PodRequestError::new(&at(), e.to_string()))
                }
            }
        }
    }
    Ok(out)
}

/// The value at `path`; `Ok(None)` when a step is missing or null; an error when a step that
/// must be an object is something else.
fn lookup<'a>(v: &'a Value, path: &[&str]) -> Result<Option<&'a Value>, PodRequestError> {
    let mut cur = v;
    for (i, key) in path.iter().enumerate() {
        match cur {
            Value::Object(map) => match map.get(*key) {
                None | Some(Value::Null) => return Ok(None),
                Some(next) => cur = next,
            },
            Value::Null => return Ok(None),
            _ => return Err(PodRequestError::new(&path[..i], "expected an object")),
        }
    }
    Ok(Some(cur))
}

/// A list field of the pod spec; missing reads as empty.
fn array<'a>(pod_spec: &'a Value, field: &str) -> Result<&'a [Value], PodRequestError> {
    match lookup(pod_spec, &[field])? {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(PodRequestError::new(
            &[field],
            format!("expected a list, got {other}"),
        )),
    }
}

/// An object field; missing reads as `None`.
fn object<'a>(
    v: &'a Value,
    path: &[&str],
) -> Result<Option<&'a Map<String, Value>>, PodRequestError> {
    match lookup(v, path)? {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(PodRequestError::new(
            path,
            format!("expected an object, got {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).expect("quantity")))
            .collect()
    }

    fn sidecar(cpu: &str) -> Value {
        json!({"restartPolicy": "Always", "resources": {"requests": {"cpu": cpu}}})
    }

    fn init(cpu: &str) -> Value {
        json!({"resources": {"requests": {"cpu": cpu}}})
    }

    #[test]
    fn requests_are_summed_as_kubernetes_does() {
        let rows: Vec<(&str, Value, ResourceList)> = vec![
            ("no containers", json!({}), list(&[])),
            ("no spec", Value::Null, list(&[])),
            (
                "app containers summed",
                json!({"containers": [
                    {"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                    {"resources": {"requests": {"cpu": 1}}}]}),
                list(&[("cpu", "1250m"), ("memory", "64Mi")]),
            ),
            (
                "limits stand in for missing requests",
                json!({"containers": [{"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}),
                list(&[("cpu", "2"), ("memory", "1Gi")]),
            ),
            (
                "requests win over limits",
                json!({"containers": [{"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}}]}),
                list(&[("cpu", "500m")]),
            ),
            (
                "init container larger than the sum",
                json!({"containers": [{"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                       "initContainers": [init("1")]}),
                list(&[("cpu", "1"), ("memory", "64Mi")]),
            ),
            (
                "init container smaller than the sum",
                json!({"containers": [init("2"), init("1")],
                       "initContainers": [{"resources": {"requests": {"cpu": "2500m", "nvidia.com/gpu": "1"}}}]}),
                list(&[("cpu", "3"), ("nvidia.com/gpu", "1")]),
            ),
            (
                "largest init container counts, not their sum",
                json!({"initContainers": [init("1"), init("2")]}),
                list(&[("cpu", "2")]),
            ),
            (
                // The example of Kubernetes' init container documentation.
                "app sum above the largest init container",
                json!({"initContainers": [{"resources": {"requests": {"memory": "200Mi"}}},
                                          {"resources": {"requests": {"memory": "150Mi"}}}],
                       "containers": [{"resources": {"requests": {"memory": "120Mi"}}},
                                      {"resources": {"requests": {"memory": "140Mi"}}}]}),
                list(&[("memory", "260Mi")]),
            ),
            (
                "a sidecar runs beside the app containers",
                json!({"containers": [init("1")], "initContainers": [sidecar("500m")]}),
                list(&[("cpu", "1500m")]),
            ),
            (
                "an init container after a sidecar runs beside it",
                json!({"containers": [init("1")], "initContainers": [sidecar("500m"), init("2")]}),
                list(&[("cpu", "2500m")]),
            ),
            (
                "an init container before a sidecar runs alone",
                json!({"containers": [init("1")], "initContainers": [init("2"), sidecar("500m")]}),
                list(&[("cpu", "2")]),
            ),
            (
                "sidecars accumulate through the init phases",
                json!({"initContainers": [sidecar("1"), sidecar("1"), init("1")]}),
                list(&[("cpu", "3")]),
            ),
            (
                "only restartPolicy Always makes a sidecar",
                json!({"containers": [init("1")],
                       "initContainers": [{"restartPolicy": "OnFailure", "resources": {"requests": {"cpu": "500m"}}}]}),
                list(&[("cpu", "1")]),
            ),
            (
                "overhead added",
                json!({"containers": [init("1")], "overhead": {"cpu": "250m"}}),
                list(&[("cpu", "1250m")]),
            ),
            (
                "overhead added to the init peak",
                json!({"containers": [init("1")], "initContainers": [init("2")],
                       "overhead": {"cpu": "250m", "memory": "120Mi"}}),
                list(&[("cpu", "2250m"), ("memory", "120Mi")]),
            ),
            (
                "zero requests dropped",
                json!({"containers": [{"resources": {"requests": {"cpu": "0", "memory": "10Mi"}}}]}),
                list(&[("memory", "10Mi")]),
            ),
        ];
        for (name, spec, want) in rows {
            let got = pod_requests(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, want, "{name}");
            assert_eq!(
                pod_requests_skipping_unreadable(&spec),
                want,
                "{name} (skipping)"
            );
        }
    }

    #[test]
    fn unreadable_fields_are_named_or_skipped() {
        let rows: Vec<(Value, &str, &str, ResourceList)> = vec![
            (
                json!({"containers": [{"resources": {"requests": {"cpu": "lots", "memory": "1Gi"}}}]}),
                "containers.0.resources.requests.cpu",
                "quantities must match",
                list(&[("memory", "1Gi")]),
            ),
            (
                json!({"containers": "none"}),
                "containers",
                "expected a list, got \"none\"",
                list(&[]),
            ),
            (
                json!({"containers": [init("1")], "initContainers": [{"resources": {"limits": "x"}}]}),
                "initContainers.0.resources.limits",
                "expected an object, got \"x\"",
                list(&[("cpu", "1")]),
            ),
            (
                json!({"containers": [{"resources": 3}, init("1")]}),
                "containers.0.resources",
                "expected an object",
                list(&[("cpu", "1")]),
            ),
            (
                json!({"containers": [7]}),
                "containers.0",
                "expected an object",
                list(&[]),
            ),
            (
                json!({"containers": [init("1")], "overhead": {"cpu": true}}),
                "overhead.cpu",
                "expected a quantity, got true",
                list(&[("cpu", "1")]),
            ),
            (json!("spec"), "", "expected an object", list(&[])),
        ];
        for (spec, path, problem, skipped) in rows {
            let err = pod_requests(&spec).expect_err(path);
            assert_eq!(err.path, path, "{spec}");
            assert!(err.problem.starts_with(problem), "{spec}: {}", err.problem);
            assert_eq!(pod_requests_skipping_unreadable(&spec), skipped, "{spec}");
        }
    }
}
