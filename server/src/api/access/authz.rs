//! What each credential may do. The admin token may do everything. A member agent's
//! credential reaches its own Cluster (read; status read and written), its own Lease in
//! `karmada-cluster`, the Works (and their status) in its execution namespace
//! `karmada-es-<cluster>`, Events there, and discovery; everything else is 403.
//!
//! Two checks, both pure: [`agent_may`] looks at the method and path (the auth middleware
//! calls it before any handler runs), and [`agent_may_write`] looks at the object a write
//! would store (the resource handlers call it through [`check_write`] once the body is
//! decoded and, for updates, the stored object read). The second check is what keeps an agent
//! from creating anything but its own Lease and Events (a POST's name is in its body; a
//! server-side apply to a missing object would create one) and from changing anything on its
//! Works but the finalizers it removes.

use super::auth::Principal;
use crate::api::error::{ApiError, ApiResult};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{ResourceType, CLUSTER_GROUP, WORK_GROUP};
use serde_json::Value;

/// Namespace of member Leases.
const LEASE_NAMESPACE: &str = "karmada-cluster";

/// Whether the agent of `cluster` may call `method` on `path`.
pub fn agent_may(cluster: &str, method: &str, path: &str) -> bool {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let read = method == "GET";
    match segs.as_slice() {
        // Discovery and OpenAPI.
        ["api"] | ["apis"] | ["api", "v1"] | ["apis", _] | ["apis", _, _] => read,
        ["openapi", ..] => read,
        // Its Cluster: read only; the spec is the admin's.
        ["apis", "cluster.karmada.io", "v1alpha1", "clusters", name] => *name == cluster && read,
        ["apis", "cluster.karmada.io", "v1alpha1", "clusters", name, "status"] => {
            *name == cluster && matches!(method, "GET" | "PUT" | "PATCH")
        }
        // The name of a new Lease is in the body: checked by `agent_may_write`.
        ["apis", "coordination.k8s.io", "v1", "namespaces", LEASE_NAMESPACE, "leases"] => {
            method == "POST"
        }
        ["apis", "coordination.k8s.io", "v1", "namespaces", LEASE_NAMESPACE, "leases", name] => {
            *name == cluster && matches!(method, "GET" | "PUT" | "PATCH")
        }
        ["apis", "work.karmada.io", "v1alpha1", "namespaces", ns, "works", rest @ ..] => {
            *ns == execution_namespace(cluster).as_str()
                && match rest {
                    [] => read,
                    // The object itself only to remove finalizers (`agent_may_write`).
                    [_name] => matches!(method, "GET" | "PATCH"),
                    [_name, "status"] => matches!(method, "GET" | "PUT" | "PATCH"),
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

/// A write as the resource handlers are about to store it.
#[derive(Clone, Copy, Debug)]
pub enum Write<'a> {
    /// A POST of a new object.
    Create {
        /// The object to create.
        new: &'a Value,
    },
    /// A server-side apply PATCH of an object that does not exist (it would create it).
    CreateByApply,
    /// A PUT or PATCH of an existing object or of its status.
    Update {
        /// The stored object.
        old: &'a Value,
        /// The object as it would be written.
        new: &'a Value,
    },
}

/// Where a write goes.
#[derive(Clone, Copy, Debug)]
pub struct Place<'a> {
    /// The kind.
    pub rt: &'a ResourceType,
    /// The namespace from the path.
    pub namespace: Option<&'a str>,
    /// The subresource (`status`), if any.
    pub subresource: Option<&'a str>,
}

/// Whether the agent of `cluster` may make `write` at `place` (which [`agent_may`] already
/// allowed by path); `Err` says why not.
pub fn agent_may_write(cluster: &str, place: Place<'_>, write: Write<'_>) -> Result<(), String> {
    let rt = place.rt;
    let is = |group: &str, plural: &str| rt.group == group && rt.plural == plural;
    match write {
        Write::CreateByApply => Err(format!(
            "the agent of cluster {cluster:?} may not create {} with a server-side apply \
             (PATCH of an object that does not exist)",
            rt.plural
        )),
        Write::Create { new } => {
            let name = new
                .lookup("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if is("coordination.k8s.io", "leases") && place.namespace == Some(LEASE_NAMESPACE) {
                if name == cluster {
                    Ok(())
                } else {
                    Err(format!(
                        "metadata.name: the agent of cluster {cluster:?} may create only the \
                         Lease {LEASE_NAMESPACE}/{cluster}, not {name:?}"
                    ))
                }
            } else if is("", "events")
                && place.namespace == Some(execution_namespace(cluster).as_str())
            {
                Ok(())
            } else {
                Err(format!(
                    "the agent of cluster {cluster:?} may not create {}",
                    rt.plural
                ))
            }
        }
        Write::Update { old, new } => match place.subresource {
            // The store keeps everything but the status of a status write.
            Some("status") if is(CLUSTER_GROUP, "clusters") || is(WORK_GROUP, "works") => Ok(()),
            Some(sub) => Err(format!(
                "the agent of cluster {cluster:?} may not write {}/{sub}",
                rt.plural
            )),
            None if is("coordination.k8s.io", "leases") => Ok(()),
            None if is(WORK_GROUP, "works") => only_finalizers_removed(old, new).map_err(|why| {
                format!(
                    "the agent of cluster {cluster:?} may only remove finalizers of a Work: {why}"
                )
            }),
            None => Err(format!(
                "the agent of cluster {cluster:?} may not update {}",
                rt.plural
            )),
        },
    }
}

/// `Ok` when `new` differs from `old` at most by finalizers taken away (bookkeeping fields
/// aside); `Err` names the first field that changed otherwise.
fn only_finalizers_removed(old: &Value, new: &Value) -> Result<(), String> {
    let finalizers = |v: &Value| -> Vec<String> {
        v.lookup("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = finalizers(old);
    if let Some(added) = finalizers(new).into_iter().find(|f| !before.contains(f)) {
        return Err(format!("metadata.finalizers: {added:?} would be added"));
    }
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in ["finalizers", "resourceVersion", "managedFields"] {
                meta.remove(field);
            }
        }
        v
    };
    let (old, new) = (strip(old), strip(new));
    if old == new {
        return Ok(());
    }
    Err(first_difference(&old, &new, String::new()))
}

/// The path of the first field where `a` and `b` differ (`""` when they do not).
fn first_difference(a: &Value, b: &Value, at: String) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x
            .keys()
            .chain(y.keys().filter(|k| !x.contains_key(*k)))
            .find_map(|k| {
                let (l, r) = (x.get(k), y.get(k));
                (l != r).then(|| {
                    let path = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    match (l, r) {
                        (Some(l), Some(r)) => first_difference(l, r, path),
                        _ => format!("{path} would change"),
                    }
                })
            })
            .unwrap_or_default(),
        _ if a == b => String::new(),
        _ => format!("{at} would change"),
    }
}

/// The handlers' write check: the admin may write anything, an agent what
/// [`agent_may_write`] allows (403 otherwise).
pub fn check_write(who: &Principal, place: Place<'_>, write: Write<'_>) -> ApiResult<()> {
    match who {
        Principal::Admin => Ok(()),
        Principal::Agent { cluster } => agent_may_write(cluster, place, write).map_err(|why| {
            tracing::info!(cluster = %cluster, resource = %place.rt.plural, "agent write refused");
            ApiError::Forbidden(why)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::kinds::well_known;
    use serde_json::json;

    const CLUSTER: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/karmada-cluster/leases";
    const WORKS_M1: &str = "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works";
    const WORKS_M2: &str = "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m2/works";

    #[test]
    fn agents_reach_only_their_own_paths() {
        let table = [
            ("GET", "/apis".to_string(), true),
            ("GET", "/api/v1".into(), true),
            ("GET", "/apis/work.karmada.io/v1alpha1".into(), true),
            ("POST", "/apis/work.karmada.io/v1alpha1".into(), false),
            ("GET", "/openapi/v3".into(), true),
            ("GET", format!("{CLUSTER}/m1"), true),
            ("PUT", format!("{CLUSTER}/m1"), false),
            ("PATCH", format!("{CLUSTER}/m1"), false),
            ("DELETE", format!("{CLUSTER}/m1"), false),
            ("GET", format!("{CLUSTER}/m1/status"), true),
            ("PUT", format!("{CLUSTER}/m1/status"), true),
            ("PATCH", format!("{CLUSTER}/m1/status"), true),
            ("GET", format!("{CLUSTER}/m2"), false),
            ("PUT", format!("{CLUSTER}/m2/status"), false),
            ("GET", CLUSTER.into(), false),
            ("POST", CLUSTER.into(), false),
            ("POST", LEASES.into(), true),
            ("GET", LEASES.into(), false),
            ("GET", format!("{LEASES}/m1"), true),
            ("PUT", format!("{LEASES}/m1"), true),
            ("DELETE", format!("{LEASES}/m1"), false),
            ("PUT", format!("{LEASES}/m2"), false),
            (
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/default/leases".into(),
                false,
            ),
            ("GET", WORKS_M1.into(), true),
            ("POST", WORKS_M1.into(), false),
            ("DELETE", WORKS_M1.into(), false),
            ("GET", format!("{WORKS_M1}/w"), true),
            ("PUT", format!("{WORKS_M1}/w"), false),
            ("PATCH", format!("{WORKS_M1}/w"), true),
            ("DELETE", format!("{WORKS_M1}/w"), false),
            ("PUT", format!("{WORKS_M1}/w/status"), true),
            ("PATCH", format!("{WORKS_M1}/w/status"), true),
            ("GET", format!("{WORKS_M1}/w/scale"), false),
            ("GET", WORKS_M2.into(), false),
            ("GET", format!("{WORKS_M2}/w"), false),
            ("GET", "/apis/work.karmada.io/v1alpha1/works".into(), false),
            (
                "POST",
                "/api/v1/namespaces/karmada-es-m1/events".into(),
                true,
            ),
            (
                "GET",
                "/api/v1/namespaces/karmada-es-m1/events".into(),
                false,
            ),
            ("POST", "/api/v1/namespaces/default/events".into(), false),
            ("GET", "/api/v1/namespaces/default/secrets".into(), false),
            (
                "GET",
                "/api/v1/namespaces/karmada-cluster/secrets".into(),
                false,
            ),
            (
                "GET",
                "/apis/apps/v1/namespaces/default/deployments".into(),
                false,
            ),
            ("GET", "/metrics".into(), false),
        ];
        for (method, path, want) in table {
            assert_eq!(agent_may("m1", method, &path), want, "{method} {path}");
        }
    }

    fn work(finalizers: &[&str], replicas: i64) -> Value {
        json!({
            "apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
            "metadata": {"name": "w", "namespace": "karmada-es-m1", "resourceVersion": "7",
                         "labels": {"a": "b"}, "finalizers": finalizers},
            "spec": {"workload": {"manifests": [{"spec": {"replicas": replicas}}]}},
        })
    }

    #[test]
    fn agent_writes_are_checked_against_the_object() {
        let (leases, works, clusters, events) = (
            well_known::leases(),
            well_known::works(),
            well_known::clusters(),
            well_known::events(),
        );
        let at = |rt, ns, sub| Place {
            rt,
            namespace: ns,
            subresource: sub,
        };
        let lease = |name: &str| json!({"metadata": {"name": name}});
        let f = "karmada.io/execution-controller";
        let with_f = work(&[f], 2);
        let without_f = work(&[], 2);
        let mut relabelled = work(&[], 2);
        relabelled["metadata"]["labels"]["a"] = json!("c");
        let mut bumped = work(&[f], 2);
        bumped["metadata"]["resourceVersion"] = json!("8");
        let ns_lease = Some("karmada-cluster");
        let (own, other, event) = (lease("m1"), lease("m2"), lease("e"));
        let unnamed = json!({"metadata": {"generateName": "m1"}});
        let scaled = work(&[], 3);
        let ns_m1 = Some("karmada-es-m1");
        let table: Vec<(&str, Place<'_>, Write<'_>, bool)> = vec![
            (
                "own lease",
                at(&leases, ns_lease, None),
                Write::Create { new: &own },
                true,
            ),
            (
                "another member's lease",
                at(&leases, ns_lease, None),
                Write::Create { new: &other },
                false,
            ),
            (
                "a lease without a name",
                at(&leases, ns_lease, None),
                Write::Create { new: &unnamed },
                false,
            ),
            (
                "own lease by apply",
                at(&leases, ns_lease, None),
                Write::CreateByApply,
                false,
            ),
            (
                "event in its namespace",
                at(&events, ns_m1, None),
                Write::Create { new: &event },
                true,
            ),
            (
                "event elsewhere",
                at(&events, Some("default"), None),
                Write::Create { new: &event },
                false,
            ),
            (
                "a Work",
                at(&works, ns_m1, None),
                Write::Create { new: &with_f },
                false,
            ),
            (
                "a Work by apply",
                at(&works, ns_m1, None),
                Write::CreateByApply,
                false,
            ),
            (
                "its Cluster by apply",
                at(&clusters, None, None),
                Write::CreateByApply,
                false,
            ),
            (
                "Work finalizer removed",
                at(&works, ns_m1, None),
                Write::Update {
                    old: &with_f,
                    new: &without_f,
                },
                true,
            ),
            (
                "Work unchanged but its resourceVersion",
                at(&works, ns_m1, None),
                Write::Update {
                    old: &with_f,
                    new: &bumped,
                },
                true,
            ),
            (
                "Work finalizer added",
                at(&works, ns_m1, None),
                Write::Update {
                    old: &without_f,
                    new: &with_f,
                },
                false,
            ),
            (
                "Work label changed",
                at(&works, ns_m1, None),
                Write::Update {
                    old: &without_f,
                    new: &relabelled,
                },
                false,
            ),
            (
                "Work spec changed",
                at(&works, ns_m1, None),
                Write::Update {
                    old: &with_f,
                    new: &scaled,
                },
                false,
            ),
            (
                "Work status",
                at(&works, ns_m1, Some("status")),
                Write::Update {
                    old: &with_f,
                    new: &scaled,
                },
                true,
            ),
            (
                "Work scale",
                at(&works, ns_m1, Some("scale")),
                Write::Update {
                    old: &with_f,
                    new: &scaled,
                },
                false,
            ),
            (
                "Cluster status",
                at(&clusters, None, Some("status")),
                Write::Update {
                    old: &own,
                    new: &own,
                },
                true,
            ),
            (
                "Cluster spec",
                at(&clusters, None, None),
                Write::Update {
                    old: &own,
                    new: &own,
                },
                false,
            ),
            (
                "Lease renewal",
                at(&leases, ns_lease, None),
                Write::Update {
                    old: &own,
                    new: &own,
                },
                true,
            ),
            (
                "Lease status",
                at(&leases, ns_lease, Some("status")),
                Write::Update {
                    old: &own,
                    new: &own,
                },
                false,
            ),
        ];
        for (what, place, write, want) in table {
            let got = agent_may_write("m1", place, write);
            assert_eq!(got.is_ok(), want, "{what}: {got:?}");
            if let Err(why) = got {
                assert!(why.contains("\"m1\""), "{what}: {why}");
            }
        }
    }

    #[test]
    fn the_refusal_names_the_changed_field() {
        let mut new = work(&[], 2);
        new["metadata"]["labels"]["a"] = json!("c");
        let why = only_finalizers_removed(&work(&[], 2), &new).unwrap_err();
        assert_eq!(why, "metadata.labels.a would change");
        let why = only_finalizers_removed(&work(&[], 2), &work(&["x"], 2)).unwrap_err();
        assert_eq!(why, "metadata.finalizers: \"x\" would be added");
        let mut new = work(&[], 2);
        new["spec"]["extra"] = json!(1);
        let why = only_finalizers_removed(&work(&[], 2), &new).unwrap_err();
        assert_eq!(why, "spec.extra would change");
    }

    #[test]
    fn the_admin_writes_anything() {
        let rt = well_known::clusters();
        let place = Place {
            rt: &rt,
            namespace: None,
            subresource: None,
        };
        assert!(check_write(&Principal::Admin, place, Write::CreateByApply).is_ok());
        let agent = Principal::Agent {
            cluster: "m1".into(),
        };
        assert!(matches!(
            check_write(&agent, place, Write::CreateByApply),
            Err(ApiError::Forbidden(_))
        ));
    }
}
