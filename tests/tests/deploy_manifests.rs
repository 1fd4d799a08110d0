//! The manifests under `deploy/` (the agent's namespace, RBAC, join Secret, Deployment, and
//! the cluster-admin binding only for trying it) parse, and agree with each other: the
//! Deployment runs as the ServiceAccount the bindings name, the bindings name the roles that
//! exist, and the agent runs `--runtime kube` with in-cluster configuration.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .join("deploy")
}

/// Every `.yaml` file under `dir`, recursively, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(yaml_files(&path));
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Every document of every file, with the file it came from (relative to `deploy/`).
fn documents() -> Vec<(String, Value)> {
    let dir = deploy_dir();
    let mut out = Vec::new();
    for file in yaml_files(&dir) {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(&dir).unwrap().display().to_string();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{shown}: {e}"));
            if !v.is_null() {
                out.push((shown.clone(), v));
            }
        }
    }
    out
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} in {v}"))
}

/// The one document of `kind` named `name` (panics naming what is missing or doubled).
fn one<'a>(docs: &'a [(String, Value)], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .iter()
        .map(|(_, v)| v)
        .filter(|v| v["kind"] == kind && v.pointer("/metadata/name") == Some(&Value::from(name)))
        .collect();
    assert_eq!(found.len(), 1, "{kind} {name}: {found:?}");
    found[0]
}

#[test]
fn deploy_manifests_parse_and_agree() {
    let docs = documents();
    // Every document is a Kubernetes object of a known kind, with a name.
    let mut kinds: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, v) in &docs {
        let kind = str_at(v, "/kind");
        let api_version = str_at(v, "/apiVersion");
        let name = str_at(v, "/metadata/name");
        let want_api = match kind {
            "Namespace" | "ServiceAccount" | "Secret" => "v1",
            "ClusterRole" | "ClusterRoleBinding" => "rbac.authorization.k8s.io/v1",
            "Deployment" => "apps/v1",
            other => panic!("{file}: unexpected kind {other}"),
        };
        assert_eq!(api_version, want_api, "{file}: {kind} {name}");
        kinds
            .entry(kind.to_string())
            .or_default()
            .push(file.clone());
    }
    let count = |kind: &str| kinds.get(kind).map_or(0, Vec::len);
    assert_eq!(count("Namespace"), 1, "{kinds:?}");
    assert_eq!(count("ServiceAccount"), 1, "{kinds:?}");
    assert_eq!(count("ClusterRole"), 1, "{kinds:?}");
    assert_eq!(count("Secret"), 1, "{kinds:?}");
    assert_eq!(count("Deployment"), 1, "{kinds:?}");
    // The least-privilege binding, and the cluster-admin one kept apart (only for trying it).
    assert_eq!(count("ClusterRoleBinding"), 2, "{kinds:?}");

    let namespace = str_at(one(&docs, "Namespace", "flotilla-system"), "/metadata/name");
    let sa = docs
        .iter()
        .find(|(_, v)| v["kind"] == "ServiceAccount")
        .map(|(_, v)| v)
        .unwrap();
    let sa_name = str_at(sa, "/metadata/name");
    assert_eq!(str_at(sa, "/metadata/namespace"), namespace);

    // The Deployment: the ServiceAccount's, in the namespace, running --runtime kube with
    // in-cluster configuration (no --kubeconfig), its Secret mounted.
    let deployment = docs
        .iter()
        .find(|(_, v)| v["kind"] == "Deployment")
        .map(|(_, v)| v)
        .unwrap();
    assert_eq!(str_at(deployment, "/metadata/namespace"), namespace);
    assert_eq!(
        str_at(deployment, "/spec/template/spec/serviceAccountName"),
        sa_name
    );
    let selector = deployment
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .unwrap();
    for (k, v) in selector {
        assert_eq!(
            deployment.pointer(&format!(
                "/spec/template/metadata/labels/{}",
                k.replace('/', "~1")
            )),
            Some(v),
            "the selector matches the pod template's labels"
        );
    }
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.windows(2).any(|w| w == ["--runtime", "kube"]),
        "{args:?}"
    );
    assert!(!args.contains(&"--kubeconfig"), "in-cluster: {args:?}");
    let secret = docs
        .iter()
        .find(|(_, v)| v["kind"] == "Secret")
        .map(|(_, v)| v)
        .unwrap();
    assert_eq!(str_at(secret, "/metadata/namespace"), namespace);
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v.pointer("/secret/secretName") == secret.pointer("/metadata/name")),
        "the join Secret is mounted: {volumes:?}"
    );
    let token_file = args
        .windows(2)
        .find(|w| w[0] == "--token-file")
        .map(|w| w[1])
        .expect("--token-file");
    assert!(
        secret["stringData"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| token_file.ends_with(&format!("/{k}"))),
        "--token-file {token_file} is a key of the Secret"
    );

    // The bindings: each names the agent's ServiceAccount; the least-privilege one its
    // ClusterRole, the other cluster-admin, from its own folder (`kubectl apply -f deploy/`
    // does not take it).
    let role = docs
        .iter()
        .find(|(_, v)| v["kind"] == "ClusterRole")
        .map(|(_, v)| v)
        .unwrap();
    let role_name = str_at(role, "/metadata/name");
    let mut roles_bound = Vec::new();
    for (file, binding) in docs
        .iter()
        .filter(|(_, v)| v["kind"] == "ClusterRoleBinding")
    {
        assert_eq!(
            str_at(binding, "/roleRef/apiGroup"),
            "rbac.authorization.k8s.io",
            "{file}"
        );
        assert_eq!(str_at(binding, "/roleRef/kind"), "ClusterRole", "{file}");
        let subjects = binding["subjects"].as_array().unwrap();
        assert_eq!(subjects.len(), 1, "{file}");
        assert_eq!(str_at(&subjects[0], "/kind"), "ServiceAccount", "{file}");
        assert_eq!(str_at(&subjects[0], "/name"), sa_name, "{file}");
        assert_eq!(str_at(&subjects[0], "/namespace"), namespace, "{file}");
        let bound = str_at(binding, "/roleRef/name");
        if bound == "cluster-admin" {
            assert!(
                file.contains('/'),
                "{file}: the cluster-admin binding is kept apart"
            );
            let text = std::fs::read_to_string(deploy_dir().join(file)).unwrap();
            assert!(text.contains("ONLY FOR TRYING IT"), "{file}");
        } else {
            assert!(!file.contains('/'), "{file}");
        }
        roles_bound.push(bound.to_string());
    }
    roles_bound.sort();
    assert_eq!(roles_bound, ["cluster-admin", role_name]);

    // The role: the verbs the runtime uses and no more on every kind; nodes and pods
    // watched; the health, version and discovery endpoints readable.
    let rules = role["rules"].as_array().unwrap();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let everything = rules
        .iter()
        .find(|r| strings(&r["resources"]) == ["*"])
        .expect("a rule on the kinds Works place");
    let mut verbs = strings(&everything["verbs"]);
    verbs.sort();
    assert_eq!(verbs, ["create", "delete", "get", "list", "patch", "watch"]);
    let grants = |resource: &str, verb: &str| {
        rules.iter().any(|r| {
            strings(&r["apiGroups"]).iter().any(|g| g.is_empty())
                && strings(&r["resources"]).iter().any(|x| x == resource)
                && strings(&r["verbs"]).iter().any(|x| x == verb)
        })
    };
    for (resource, verb) in [
        ("nodes", "list"),
        ("nodes", "watch"),
        ("pods", "list"),
        ("pods", "watch"),
        ("namespaces", "create"),
    ] {
        assert!(grants(resource, verb), "{verb} {resource}");
    }
    let urls: Vec<String> = rules
        .iter()
        .filter(|r| strings(&r["verbs"]) == ["get"])
        .flat_map(|r| strings(&r["nonResourceURLs"]))
        .collect();
    for url in [
        "/readyz", "/healthz", "/version", "/api", "/apis", "/apis/*",
    ] {
        assert!(urls.iter().any(|u| u == url), "get {url}: {urls:?}");
    }
}
