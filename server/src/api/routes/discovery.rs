//! Discovery documents kubectl reads before anything else: `/version`, `/api`, `/apis`,
//! `/api/v1` and `/apis/<group>/<version>` in their plain (non-aggregated) forms.

use crate::kinds::KindRegistry;
use flotilla_api::kinds::ResourceType;
use serde_json::{json, Value};

/// Kubernetes version Flotilla's API corresponds to (what kubectl compares against).
pub const KUBE_MAJOR: &str = "1";
/// Minor version, see [`KUBE_MAJOR`].
pub const KUBE_MINOR: &str = "32";

/// The `/version` document.
pub fn version() -> Value {
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": format!("v1.32.0-flotilla.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// The `/api` document (APIVersions).
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [],
    })
}

/// The `/apis` document (APIGroupList).
pub fn group_list(registry: &KindRegistry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .into_iter()
        .map(|(group, versions)| group_doc(&group, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// One `APIGroup`, as listed in `/apis` and served at `/apis/<group>`.
pub fn group_doc(group: &str, versions: &[String]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = gvs.first().cloned().unwrap_or(Value::Null);
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": gvs,
        "preferredVersion": preferred,
    })
}

/// Verbs every served kind supports.
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of one kind: [`VERBS`] for a stored kind, a computed kind's own
/// ([`crate::api::computed`]: only `create` for `FailoverSimulation`, only reads for the kinds
/// computed on read).
pub fn verbs(r: &ResourceType) -> &'static [&'static str] {
    crate::api::computed::kind_verbs(r).unwrap_or(VERBS)
}

/// The APIResourceList of one group-version (`None` when nothing is served there).
pub fn resource_list(registry: &KindRegistry, group: &str, version: &str) -> Option<Value> {
    let kinds = registry.resources_in(group, version);
    if kinds.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for r in &kinds {
        resources.push(resource_doc(r));
        if r.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        for (sub, listed, verbs) in crate::api::computed::listed_subresources(r) {
            resources.push(json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "group": listed.group,
                "version": listed.version,
                "kind": listed.kind,
                "verbs": verbs,
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

fn resource_doc(r: &ResourceType) -> Value {
    let mut doc = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": verbs(r),
    });
    if !r.short_names.is_empty() {
        doc["shortNames"] = json!(r.short_names);
    }
    doc
}
