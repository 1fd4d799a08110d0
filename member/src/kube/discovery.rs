//! Which resources the member serves, from its discovery documents (`/api`, `/api/<v>`,
//! `/apis`, `/apis/<group>/<version>`, every version of every group, as Karmada's
//! `ServerGroupsAndResources`). One snapshot serves two purposes:
//!
//! - resolving a manifest's group, version and kind to its resource (plural name, scope), as
//!   `kubectl` does, instead of guessing the plural (`ApiResource::from_gvk` guesses wrong for
//!   many CRDs). A kind not in the snapshot refreshes it (at most once per
//!   [`MISS_REFRESH`]): a CRD installed since is found;
//! - the Cluster's `apiEnablements`, refreshed when older than the runtime's `discovery_ttl`.
//!
//! A group version that fails to answer is left out (logged), as Karmada keeps partial
//! results; `/api` or `/apis` failing fails the snapshot. Group versions are asked eight at a
//! time; a refresh in progress never holds up a reader of the last snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::cluster::{ApiEnablement, ApiResource as EnabledResource};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::core::ApiResource;
use kube::Client;
use tokio::time::Instant;

/// The least time between two refreshes caused by an unknown kind (a manifest naming a kind
/// the member does not serve must not turn every apply into a full discovery).
pub const MISS_REFRESH: Duration = Duration::from_secs(2);

/// One resource as a manifest names it: its `ApiResource` (plural included) and scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Group, version, kind and plural.
    pub resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

/// What one discovery found.
#[derive(Debug)]
pub struct Snapshot {
    /// The resource lists, one per group version that answered.
    pub lists: Vec<APIResourceList>,
    index: HashMap<(String, String, String), Resolved>,
    taken: Instant,
}

impl Snapshot {
    /// A snapshot of these lists, taken now.
    pub fn new(lists: Vec<APIResourceList>) -> Self {
        Snapshot {
            index: index(&lists),
            lists,
            taken: Instant::now(),
        }
    }

    /// The resource of a group, version and kind, if served.
    pub fn find(&self, group: &str, version: &str, kind: &str) -> Option<&Resolved> {
        self.index
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
    }

    /// Every resource it found (in no particular order).
    pub fn resources(&self) -> impl Iterator<Item = &Resolved> {
        self.index.values()
    }
}

/// Resolution keys of every top-level resource (subresources skipped), by group, version,
/// kind. When two resources share a kind (rare), the first listed wins.
pub fn index(lists: &[APIResourceList]) -> HashMap<(String, String, String), Resolved> {
    let mut out = HashMap::new();
    for list in lists {
        let (group, version) = split_group_version(&list.group_version);
        for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
            let key = (group.to_string(), version.to_string(), r.kind.clone());
            out.entry(key).or_insert_with(|| Resolved {
                resource: ApiResource {
                    group: group.to_string(),
                    version: version.to_string(),
                    api_version: list.group_version.clone(),
                    kind: r.kind.clone(),
                    plural: r.name.clone(),
                },
                namespaced: r.namespaced,
            });
        }
    }
    out
}

/// The Cluster's `apiEnablements`: per group version, its resources' names and kinds,
/// subresources skipped, sorted by group version then name; a group version left with no
/// resource is left out.
pub fn enablements(lists: &[APIResourceList]) -> Vec<ApiEnablement> {
    let mut by_gv: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
    for list in lists {
        let resources = by_gv.entry(list.group_version.as_str()).or_default();
        for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
            resources.entry(r.name.as_str()).or_insert(r.kind.as_str());
        }
    }
    by_gv
        .into_iter()
        .filter(|(_, resources)| !resources.is_empty())
        .map(|(gv, resources)| ApiEnablement {
            group_version: gv.to_string(),
            resources: resources
                .into_iter()
                .map(|(name, kind)| EnabledResource {
                    name: name.to_string(),
                    kind: kind.to_string(),
                })
                .collect(),
        })
        .collect()
}

/// `apps/v1` → (`apps`, `v1`); `v1` → (``, `v1`).
fn split_group_version(gv: &str) -> (&str, &str) {
    gv.rsplit_once('/').unwrap_or(("", gv))
}

/// Group versions asked at once during a discovery.
const CONCURRENCY: usize = 8;

/// The member's discovery, cached.
pub struct Discovery {
    client: Client,
    request_timeout: Duration,
    /// The last snapshot: readers never wait for a refresh in progress.
    held: parking_lot::Mutex<Option<Arc<Snapshot>>>,
    /// One refresh at a time; who waits for it finds the fresh snapshot.
    refreshing: tokio::sync::Mutex<()>,
}

impl Discovery {
    /// A cache that discovers on first use.
    pub fn new(client: Client, request_timeout: Duration) -> Self {
        Discovery {
            client,
            request_timeout,
            held: parking_lot::Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    fn held(&self, max_age: Duration) -> Option<Arc<Snapshot>> {
        self.held
            .lock()
            .as_ref()
            .filter(|s| s.taken.elapsed() <= max_age)
            .cloned()
    }

    /// A snapshot at most `max_age` old (discovering again when the held one is older).
    pub async fn snapshot(&self, max_age: Duration) -> Result<Arc<Snapshot>, kube::Error> {
        if let Some(s) = self.held(max_age) {
            return Ok(s);
        }
        let _refresh = self.refreshing.lock().await;
        // Refreshed by another caller while this one waited?
        if let Some(s) = self.held(max_age) {
            return Ok(s);
        }
        let fresh = Arc::new(Snapshot::new(self.discover().await?));
        *self.held.lock() = Some(fresh.clone());
        Ok(fresh)
    }

    /// The resource of a group, version and kind; `None` when the member does not serve it
    /// (after a refresh, unless one ran within [`MISS_REFRESH`]).
    pub async fn resolve(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Result<Option<Resolved>, kube::Error> {
        let snapshot = self.snapshot(Duration::MAX).await?;
        if let Some(r) = snapshot.find(group, version, kind) {
            return Ok(Some(r.clone()));
        }
        let snapshot = self.snapshot(MISS_REFRESH).await?;
        Ok(snapshot.find(group, version, kind).cloned())
    }

    async fn discover(&self) -> Result<Vec<APIResourceList>, kube::Error> {
        let started = Instant::now();
        let core = self.timed(self.client.list_core_api_versions()).await?;
        let groups = self.timed(self.client.list_api_groups()).await?;
        // (group version, core?) of every version of every group.
        let wanted: Vec<(String, bool)> = core
            .versions
            .iter()
            .map(|v| (v.clone(), true))
            .chain(
                groups
                    .groups
                    .iter()
                    .flat_map(|g| g.versions.iter().map(|v| (v.group_version.clone(), false))),
            )
            .collect();
        let answers: Vec<(String, Result<APIResourceList, kube::Error>)> =
            futures::stream::iter(wanted)
                .map(|(gv, core)| async move {
                    let answer = if core {
                        self.timed(self.client.list_core_api_resources(&gv)).await
                    } else {
                        self.timed(self.client.list_api_group_resources(&gv)).await
                    };
                    (gv, answer)
                })
                .buffered(CONCURRENCY)
                .collect()
                .await;
        let mut lists = Vec::new();
        for (gv, answer) in answers {
            match answer {
                Ok(mut list) => {
                    // Core lists name their group version `v1`; keep it so.
                    if list.group_version.is_empty() {
                        list.group_version = gv;
                    }
                    lists.push(list);
                }
                Err(e) => {
                    tracing::warn!(group_version = %gv, error = %flotilla_support::error_chain(&e),
                    "discovery of a group version failed; left out")
                }
            }
        }
        tracing::debug!(
            group_versions = lists.len(),
            duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "member discovery done"
        );
        Ok(lists)
    }

    async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        super::timed(self.request_timeout, call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    fn list(gv: &str, resources: &[(&str, &str, bool)]) -> APIResourceList {
        APIResourceList {
            group_version: gv.into(),
            resources: resources
                .iter()
                .map(|(name, kind, namespaced)| APIResource {
                    name: name.to_string(),
                    kind: kind.to_string(),
                    namespaced: *namespaced,
                    singular_name: String::new(),
                    verbs: vec!["get".into()],
                    ..APIResource::default()
                })
                .collect(),
        }
    }

    fn lists() -> Vec<APIResourceList> {
        vec![
            list(
                "v1",
                &[
                    ("pods", "Pod", true),
                    ("pods/status", "Pod", true),
                    ("nodes", "Node", false),
                    ("configmaps", "ConfigMap", true),
                ],
            ),
            list(
                "apps/v1",
                &[
                    ("deployments", "Deployment", true),
                    ("deployments/scale", "Scale", true),
                ],
            ),
            list(
                "flink.apache.org/v1beta1",
                &[("flinkdeployments", "FlinkDeployment", true)],
            ),
            list("example.io/v1", &[("octopi", "Octopus", false)]),
            list("empty.io/v1", &[("things/status", "Thing", true)]),
        ]
    }

    #[test]
    fn enablements_are_sorted_without_subresources() {
        let got: Vec<(String, Vec<(String, String)>)> = enablements(&lists())
            .into_iter()
            .map(|e| {
                (
                    e.group_version,
                    e.resources.into_iter().map(|r| (r.name, r.kind)).collect(),
                )
            })
            .collect();
        let want = [
            ("apps/v1", vec![("deployments", "Deployment")]),
            ("example.io/v1", vec![("octopi", "Octopus")]),
            (
                "flink.apache.org/v1beta1",
                vec![("flinkdeployments", "FlinkDeployment")],
            ),
            (
                "v1",
                vec![
                    ("configmaps", "ConfigMap"),
                    ("nodes", "Node"),
                    ("pods", "Pod"),
                ],
            ),
        ];
        let want: Vec<(String, Vec<(String, String)>)> = want
            .into_iter()
            .map(|(gv, rs)| {
                (
                    gv.to_string(),
                    rs.into_iter()
                        .map(|(n, k)| (n.to_string(), k.to_string()))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn kinds_resolve_to_served_plurals_and_scopes() {
        let snapshot = Snapshot::new(lists());
        let cases = [
            (
                ("apps", "v1", "Deployment"),
                Some(("deployments", "apps/v1", true)),
            ),
            (("", "v1", "Pod"), Some(("pods", "v1", true))),
            (("", "v1", "Node"), Some(("nodes", "v1", false))),
            // Discovery's plural, not a guess ("octopuses").
            (
                ("example.io", "v1", "Octopus"),
                Some(("octopi", "example.io/v1", false)),
            ),
            // A subresource's kind is not a resource.
            (("apps", "v1", "Scale"), None),
            (("empty.io", "v1", "Thing"), None),
            // Another version is another resource.
            (("apps", "v1beta1", "Deployment"), None),
            (("", "v1", "Deployment"), None),
        ];
        for ((g, v, k), want) in cases {
            let got = snapshot.find(g, v, k).map(|r| {
                (
                    r.resource.plural.as_str(),
                    r.resource.api_version.as_str(),
                    r.namespaced,
                )
            });
            assert_eq!(got, want, "{g}/{v} {k}");
            if let Some(r) = snapshot.find(g, v, k) {
                assert_eq!(
                    (r.resource.group.as_str(), r.resource.kind.as_str()),
                    (g, k)
                );
            }
        }
    }
}
