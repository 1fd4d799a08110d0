//! The OpenAPI v3 documents kubectl downloads to decide on server-side field validation: an
//! index of group-versions at `/openapi/v3` and, per group-version, a document whose PATCH
//! operations carry `x-kubernetes-group-version-kind` and a `fieldValidation` parameter. With
//! those, kubectl sends `fieldValidation=Strict` and leaves validation to the server.

use crate::kinds::KindRegistry;
use flotilla_api::kinds::ResourceType;
use serde_json::{json, Map, Value};

/// Path of a group-version in the index: `api/v1` or `apis/<group>/<version>`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// A short, stable hash of a document, so clients can cache by URL.
fn hash(doc: &Value) -> String {
    // FNV-1a 64 over the JSON text: stable across runs, enough for cache keys.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in doc.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// The `/openapi/v3` index.
pub fn index(registry: &KindRegistry) -> Value {
    let mut paths = Map::new();
    let mut gvs: Vec<(String, String)> = vec![(String::new(), "v1".to_string())];
    for (group, versions) in registry.groups() {
        for v in versions {
            gvs.push((group.clone(), v));
        }
    }
    for (group, version) in gvs {
        if let Some(doc) = group_version(registry, &group, &version) {
            let path = gv_path(&group, &version);
            let url = format!("/openapi/v3/{path}?hash={}", hash(&doc));
            paths.insert(path, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

/// The OpenAPI document of one group-version (`None` when nothing is served there).
pub fn group_version(registry: &KindRegistry, group: &str, version: &str) -> Option<Value> {
    let kinds = registry.resources_in(group, version);
    if kinds.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for r in &kinds {
        let prefix = format!("/{}", gv_path(group, version));
        let item = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        paths.insert(item, path_item(r));
        schemas.insert(schema_name(r), schema(r));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Flotilla", "version": super::discovery::KUBE_MINOR},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn schema_name(r: &ResourceType) -> String {
    let group = if r.group.is_empty() { "core" } else { &r.group };
    format!("{group}.{}.{}", r.version, r.kind)
}

fn gvk(r: &ResourceType) -> Value {
    json!({"group": r.group, "version": r.version, "kind": r.kind})
}

fn path_item(r: &ResourceType) -> Value {
    let reference = json!({"$ref": format!("#/components/schemas/{}", schema_name(r))});
    let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}});
    let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": true});
    let op = |verb: &str| {
        json!({
            "operationId": format!("{verb}{}", r.kind),
            "x-kubernetes-action": verb,
            "x-kubernetes-group-version-kind": gvk(r),
            "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation")],
            "responses": ok,
        })
    };
    json!({
        "get": {"operationId": format!("read{}", r.kind), "x-kubernetes-action": "get",
                "x-kubernetes-group-version-kind": gvk(r), "responses": ok},
        "put": op("put"),
        "patch": op("patch"),
        "parameters": [
            {"name": "name", "in": "path", "required": true, "schema": {"type": "string"}},
        ],
    })
}

/// A permissive object schema: Flotilla validates on the server, so the document only has to
/// name the kind and keep unknown fields for free-form templates.
fn schema(r: &ResourceType) -> Value {
    json!({
        "type": "object",
        "x-kubernetes-group-version-kind": [gvk(r)],
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_lists_core_and_karmada_groups_with_patch_gvk() {
        let reg = KindRegistry::new();
        let idx = index(&reg);
        let paths = idx["paths"].as_object().unwrap();
        assert!(paths.contains_key("api/v1"));
        assert!(paths.contains_key("apis/apps/v1"));
        assert!(paths.contains_key("apis/work.karmada.io/v1alpha2"));
        let url = paths["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="));

        let doc = group_version(&reg, "apps", "v1").unwrap();
        let item = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
        assert_eq!(
            item["patch"]["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        let params = item["patch"]["parameters"].as_array().unwrap();
        assert!(params.iter().any(|p| p["name"] == "fieldValidation"));
        assert!(group_version(&reg, "nope.io", "v1").is_none());
    }
}
