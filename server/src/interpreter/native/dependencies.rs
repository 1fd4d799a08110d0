//! Native dependency rules (Karmada's `native/dependencies.go`), used by `propagateDeps`: the
//! ConfigMaps, Secrets (including image pull secrets and volume plugin secrets),
//! ServiceAccount and PersistentVolumeClaims a pod template refers to, for every kind with a
//! pod template; an Ingress's TLS secrets; a ServiceImport's derived Service and its
//! EndpointSlices. Each list is sorted and free of duplicates.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::selector::LabelSelector;
use serde_json::Value;

use super::super::ObjectRef;
use super::{array, lookup, namespace, string, FieldError, WellKnownKind};

/// The dependencies of a template of `kind`.
pub fn dependencies(kind: WellKnownKind, object: &Value) -> Result<Vec<ObjectRef>, FieldError> {
    let ns = namespace(object)?;
    if let Some(path) = kind.pod_spec_path() {
        let spec = lookup(object, path)?.unwrap_or(&Value::Null);
        return pod_dependencies(spec, ns).map_err(|e| FieldError {
            path: format!("{}.{}", path.join("."), e.path),
            problem: e.problem,
        });
    }
    match kind {
        WellKnownKind::Ingress => {
            let mut secrets = BTreeSet::new();
            for tls in array(object, &["spec", "tls"])? {
                insert(&mut secrets, string(tls, &["secretName"])?);
            }
            Ok(secrets
                .into_iter()
                .map(|name| ObjectRef::named("v1", "Secret", ns, &name))
                .collect())
        }
        WellKnownKind::ServiceImport => {
            let name = string(object, &["metadata", "name"])?;
            let derived = format!("derived-{name}");
            Ok(vec![
                ObjectRef::named("v1", "Service", ns, &derived),
                ObjectRef {
                    api_version: "discovery.k8s.io/v1".to_string(),
                    kind: "EndpointSlice".to_string(),
                    namespace: ns.to_string(),
                    name: String::new(),
                    label_selector: Some(LabelSelector {
                        match_labels: BTreeMap::from([(
                            "kubernetes.io/service-name".to_string(),
                            derived,
                        )]),
                        match_expressions: Vec::new(),
                    }),
                },
            ])
        }
        _ => Ok(Vec::new()),
    }
}

fn insert(set: &mut BTreeSet<String>, name: &str) {
    if !name.is_empty() {
        set.insert(name.to_string());
    }
}

/// Volume plugins that name a Secret, and where (`secret.secretName`, `cephfs.secretRef.name`).
const VOLUME_SECRETS: &[&[&str]] = &[
    &["secret", "secretName"],
    &["azureFile", "secretName"],
    &["cephfs", "secretRef", "name"],
    &["cinder", "secretRef", "name"],
    &["flexVolume", "secretRef", "name"],
    &["rbd", "secretRef", "name"],
    &["scaleIO", "secretRef", "name"],
    &["iscsi", "secretRef", "name"],
    &["storageos", "secretRef", "name"],
    &["csi", "nodePublishSecretRef", "name"],
];

/// Dependencies of one pod spec in `namespace` (also Lua's `kube.getPodDependencies`).
pub fn pod_dependencies(pod_spec: &Value, namespace: &str) -> Result<Vec<ObjectRef>, FieldError> {
    let mut config_maps = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    let mut claims = BTreeSet::new();

    for pull in array(pod_spec, &["imagePullSecrets"])? {
        insert(&mut secrets, string(pull, &["name"])?);
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for container in array(pod_spec, &[list])? {
            for env in array(container, &["env"])? {
                insert(
                    &mut config_maps,
                    string(env, &["valueFrom", "configMapKeyRef", "name"])?,
                );
                insert(
                    &mut secrets,
                    string(env, &["valueFrom", "secretKeyRef", "name"])?,
                );
            }
            for from in array(container, &["envFrom"])? {
                insert(&mut config_maps, string(from, &["configMapRef", "name"])?);
                insert(&mut secrets, string(from, &["secretRef", "name"])?);
            }
        }
    }
    for volume in array(pod_spec, &["volumes"])? {
        insert(&mut config_maps, string(volume, &["configMap", "name"])?);
        for path in VOLUME_SECRETS {
            insert(&mut secrets, string(volume, path)?);
        }
        for source in array(volume, &["projected", "sources"])? {
            insert(&mut config_maps, string(source, &["configMap", "name"])?);
            insert(&mut secrets, string(source, &["secret", "name"])?);
        }
        insert(
            &mut claims,
            string(volume, &["persistentVolumeClaim", "claimName"])?,
        );
    }
    let service_account = string(pod_spec, &["serviceAccountName"])?;

    let mut out = Vec::new();
    let named = |kind: &str, name: &str| ObjectRef::named("v1", kind, namespace, name);
    out.extend(config_maps.iter().map(|n| named("ConfigMap", n)));
    out.extend(secrets.iter().map(|n| named("Secret", n)));
    if !service_account.is_empty() && service_account != "default" {
        out.push(named("ServiceAccount", service_account));
    }
    out.extend(claims.iter().map(|n| named("PersistentVolumeClaim", n)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn names(refs: &[ObjectRef]) -> Vec<String> {
        refs.iter()
            .map(|r| format!("{}/{}/{}", r.kind, r.namespace, r.name))
            .collect()
    }

    fn full_pod_spec() -> Value {
        json!({
            "serviceAccountName": "runner",
            "imagePullSecrets": [{"name": "registry"}],
            "initContainers": [{"envFrom": [{"configMapRef": {"name": "init-env"}}]}],
            "containers": [{
                "env": [
                    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "a"}}},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "b"}}},
                    {"name": "C", "value": "plain"}
                ],
                "envFrom": [{"secretRef": {"name": "api-keys"}}, {"configMapRef": {"name": "settings"}}]
            }],
            "ephemeralContainers": [{"env": [{"name": "D", "valueFrom": {"secretKeyRef": {"name": "debug"}}}]}],
            "volumes": [
                {"name": "v1", "configMap": {"name": "files"}},
                {"name": "v2", "secret": {"secretName": "certs"}},
                {"name": "v3", "projected": {"sources": [{"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-secret"}}, {"serviceAccountToken": {"path": "t"}}]}},
                {"name": "v4", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "v5", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "csi-secret"}}},
                {"name": "v6", "cephfs": {"monitors": [], "secretRef": {"name": "ceph"}}},
                {"name": "v7", "emptyDir": {}}
            ]
        })
    }

    #[test]
    fn pod_template_dependencies() {
        let want = vec![
            "ConfigMap/ns/files",
            "ConfigMap/ns/init-env",
            "ConfigMap/ns/proj-cm",
            "ConfigMap/ns/settings",
            "Secret/ns/api-keys",
            "Secret/ns/ceph",
            "Secret/ns/certs",
            "Secret/ns/csi-secret",
            "Secret/ns/db-password",
            "Secret/ns/debug",
            "Secret/ns/proj-secret",
            "Secret/ns/registry",
            "ServiceAccount/ns/runner",
            "PersistentVolumeClaim/ns/data",
        ];
        let template = json!({"metadata": {"labels": {}}, "spec": full_pod_spec()});
        let workloads = [
            (
                WellKnownKind::Deployment,
                json!({"metadata": {"namespace": "ns"}, "spec": {"template": template.clone()}}),
            ),
            (
                WellKnownKind::StatefulSet,
                json!({"metadata": {"namespace": "ns"}, "spec": {"template": template.clone()}}),
            ),
            (
                WellKnownKind::ReplicaSet,
                json!({"metadata": {"namespace": "ns"}, "spec": {"template": template.clone()}}),
            ),
            (
                WellKnownKind::DaemonSet,
                json!({"metadata": {"namespace": "ns"}, "spec": {"template": template.clone()}}),
            ),
            (
                WellKnownKind::Job,
                json!({"metadata": {"namespace": "ns"}, "spec": {"template": template.clone()}}),
            ),
            (
                WellKnownKind::CronJob,
                json!({"metadata": {"namespace": "ns"}, "spec": {"jobTemplate": {"spec": {"template": template.clone()}}}}),
            ),
            (
                WellKnownKind::Pod,
                json!({"metadata": {"namespace": "ns"}, "spec": full_pod_spec()}),
            ),
        ];
        for (kind, object) in workloads {
            let got = dependencies(kind, &object).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(names(&got), want, "{kind:?}");
            assert!(got.iter().all(|r| r.api_version == "v1"));
        }
    }

    #[test]
    fn default_service_account_and_empty_pods() {
        let object = json!({"metadata": {"namespace": "ns"}, "spec": {"template": {"spec": {"serviceAccountName": "default", "containers": [{"name": "c"}]}}}});
        assert_eq!(dependencies(WellKnownKind::Deployment, &object), Ok(vec![]));
        assert_eq!(
            dependencies(WellKnownKind::Deployment, &json!({})),
            Ok(vec![])
        );
    }

    #[test]
    fn ingress_and_service_import() {
        let ingress = json!({"metadata": {"namespace": "web"}, "spec": {"tls": [{"secretName": "b-cert"}, {"secretName": "a-cert"}, {"hosts": ["x"]}]}});
        assert_eq!(
            names(&dependencies(WellKnownKind::Ingress, &ingress).expect("ingress")),
            vec!["Secret/web/a-cert", "Secret/web/b-cert"]
        );
        let import = json!({"metadata": {"namespace": "web", "name": "api"}});
        let got = dependencies(WellKnownKind::ServiceImport, &import).expect("import");
        assert_eq!(
            got[0],
            ObjectRef::named("v1", "Service", "web", "derived-api")
        );
        assert_eq!(got[1].kind, "EndpointSlice");
        assert_eq!(
            got[1]
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.get("kubernetes.io/service-name"))
                .map(String::as_str),
            Some("derived-api")
        );
    }

    #[test]
    fn kinds_without_pods_have_none() {
        assert_eq!(
            dependencies(WellKnownKind::Service, &json!({"spec": {}})),
            Ok(vec![])
        );
    }

    #[test]
    fn malformed_pod_spec_is_an_error() {
        let object = json!({"spec": {"template": {"spec": {"volumes": {"not": "a list"}}}}});
        let err = dependencies(WellKnownKind::Deployment, &object).expect_err("volumes");
        assert_eq!(err.path, "spec.template.spec.volumes");
    }
}
