//! What a member agent's credential allows: its own Cluster (and status), its own Lease in
//! `karmada-cluster`, the Works (and their status) in its execution namespace
//! `karmada-es-<cluster>`, Events there, and discovery. Everything else is 403.

/// Whether the agent of `cluster` may call `method` on `path`.
pub fn agent_may(cluster: &str, method: &str, path: &str) -> bool {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let read = method == "GET";
    match segs.as_slice() {
        // Discovery and OpenAPI.
        ["api"] | ["apis"] | ["api", "v1"] | ["apis", _] | ["apis", _, _] => read,
        ["openapi", ..] => read,
        ["apis", "cluster.karmada.io", "v1alpha1", "clusters", name] => {
            *name == cluster && matches!(method, "GET" | "PUT" | "PATCH")
        }
        ["apis", "cluster.karmada.io", "v1alpha1", "clusters", name, "status"] => {
            *name == cluster && matches!(method, "GET" | "PUT" | "PATCH")
        }
        ["apis", "coordination.k8s.io", "v1", "namespaces", "karmada-cluster", "leases"] => {
            method == "POST"
        }
        ["apis", "coordination.k8s.io", "v1", "namespaces", "karmada-cluster", "leases", name] => {
            *name == cluster && matches!(method, "GET" | "PUT" | "PATCH")
        }
        ["apis", "work.karmada.io", "v1alpha1", "namespaces", ns, "works", rest @ ..] => {
            *ns == execution_namespace(cluster).as_str()
                && match rest {
                    [] => read,
                    [_name] | [_name, "status"] => matches!(method, "GET" | "PUT" | "PATCH"),
                    _ => false,
                }
        }
        ["api", "v1", "namespaces", ns, "events"] => {
            *ns == execution_namespace(cluster).as_str() && method == "POST"
        }
        _ => false,
    }
}

/// The execution namespace of a member cluster.
pub fn execution_namespace(cluster: &str) -> String {
    format!("karmada-es-{cluster}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_reach_only_their_own_objects() {
        let table = [
            ("GET", "/apis", true),
            ("GET", "/api/v1", true),
            ("GET", "/apis/work.karmada.io/v1alpha1", true),
            ("GET", "/apis/cluster.karmada.io/v1alpha1/clusters/m1", true),
            (
                "PUT",
                "/apis/cluster.karmada.io/v1alpha1/clusters/m1/status",
                true,
            ),
            (
                "DELETE",
                "/apis/cluster.karmada.io/v1alpha1/clusters/m1",
                false,
            ),
            (
                "GET",
                "/apis/cluster.karmada.io/v1alpha1/clusters/m2",
                false,
            ),
            ("GET", "/apis/cluster.karmada.io/v1alpha1/clusters", false),
            (
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/karmada-cluster/leases",
                true,
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/karmada-cluster/leases/m1",
                true,
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/karmada-cluster/leases/m2",
                false,
            ),
            (
                "GET",
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works",
                true,
            ),
            (
                "GET",
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works/w",
                true,
            ),
            (
                "PUT",
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works/w/status",
                true,
            ),
            (
                "PATCH",
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works/w",
                true,
            ),
            (
                "POST",
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works",
                false,
            ),
            (
                "DELETE",
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works/w",
                false,
            ),
            (
                "GET",
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m2/works",
                false,
            ),
            ("GET", "/apis/work.karmada.io/v1alpha1/works", false),
            ("POST", "/api/v1/namespaces/karmada-es-m1/events", true),
            ("POST", "/api/v1/namespaces/default/events", false),
            ("GET", "/api/v1/namespaces/default/secrets", false),
            ("GET", "/apis/apps/v1/namespaces/default/deployments", false),
            ("GET", "/metrics", false),
        ];
        for (method, path, want) in table {
            assert_eq!(agent_may("m1", method, path), want, "{method} {path}");
        }
    }
}
