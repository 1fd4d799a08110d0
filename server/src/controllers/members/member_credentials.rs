//! How the control plane reaches a push member (Karmada's `membercluster_client`): a Cluster
//! with `spec.secretRef` is a Kubernetes API server at `spec.apiEndpoint`, reached with the
//! Secret's bearer `token` and `caBundle` (PEM; not needed with
//! `spec.insecureSkipTLSVerification`) through `spec.proxyURL` if set. A Cluster without one is
//! Flotilla's simulated member surface (`flotilla-agent --mode push`). A credential that cannot
//! be used (Secret missing, empty token, no CA bundle while verifying) makes every call fail
//! with a message that says which, and that message becomes the Cluster's Ready condition.
//! [`access_from`] decides from the Cluster and the Secret; [`member_target`] reads the Secret
//! on every probe and every Work sync, so a rotated token is used from the next one on.

use crate::probes::{KubeCredential, MemberAccess, MemberTarget};
use crate::store::{Store, StoreError};
use base64::Engine;
use flotilla_api::cluster::Cluster;
use flotilla_api::kinds::well_known;
use serde_json::Value;

/// The Secret key holding the bearer token.
pub const TOKEN_KEY: &str = "token";
/// The Secret key holding the PEM CA bundle.
pub const CA_BUNDLE_KEY: &str = "caBundle";

/// How a Cluster is reached, given the Secret its `spec.secretRef` names (`None`: not found).
pub fn access_from(cluster: &Cluster, secret: Option<&Value>) -> MemberAccess {
    let Some(reference) = &cluster.spec.secret_ref else {
        return MemberAccess::Surface;
    };
    let name = format!("{}/{}", reference.namespace, reference.name);
    let Some(secret) = secret else {
        return MemberAccess::Broken(format!(
            "the member's credential cannot be read: Secret {name} (spec.secretRef) not found"
        ));
    };
    let token = match secret_value(secret, TOKEN_KEY) {
        Ok(Some(t)) if !t.is_empty() => t,
        Ok(_) => {
            return MemberAccess::Broken(format!(
                "the member's credential cannot be read: Secret {name} has no non-empty \
                 value for {TOKEN_KEY:?}"
            ))
        }
        Err(e) => return MemberAccess::Broken(format!("Secret {name}: {e}")),
    };
    let Ok(token) = String::from_utf8(token) else {
        return MemberAccess::Broken(format!("Secret {name}: {TOKEN_KEY:?} is not UTF-8 text"));
    };
    let insecure = cluster.spec.insecure_skip_tls_verification;
    let ca_bundle = match secret_value(secret, CA_BUNDLE_KEY) {
        Ok(ca) => ca.filter(|c| !c.is_empty()),
        Err(e) => return MemberAccess::Broken(format!("Secret {name}: {e}")),
    };
    if ca_bundle.is_none() && !insecure {
        return MemberAccess::Broken(format!(
            "the member's credential cannot be read: Secret {name} has no non-empty value for \
             {CA_BUNDLE_KEY:?} and spec.insecureSkipTLSVerification is false"
        ));
    }
    MemberAccess::Kube(KubeCredential {
        token: token.trim().to_string(),
        ca_bundle: if insecure { None } else { ca_bundle },
        insecure_skip_tls_verification: insecure,
        proxy_url: cluster.spec.proxy_url.clone(),
    })
}

/// One value of a Secret: base64 under `data`, or plain text under `stringData` (a Secret
/// written without the API's conversion).
fn secret_value(secret: &Value, key: &str) -> Result<Option<Vec<u8>>, String> {
    if let Some(encoded) = secret
        .get("data")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
    {
        return base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map(Some)
            .map_err(|e| format!("data.{key} is not base64: {e}"));
    }
    Ok(secret
        .get("stringData")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
        .map(|s| s.as_bytes().to_vec()))
}

/// The member as the push controllers reach it: reads the Secret its `spec.secretRef` names.
pub async fn member_target(
    store: &dyn Store,
    cluster: &Cluster,
) -> Result<MemberTarget, StoreError> {
    let secret = match &cluster.spec.secret_ref {
        None => None,
        Some(r) => match store
            .get(&well_known::secrets(), Some(&r.namespace), &r.name)
            .await
        {
            Ok(s) => Some(s),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        },
    };
    Ok(MemberTarget {
        cluster: cluster.metadata.name.clone(),
        endpoint: cluster.spec.api_endpoint.clone(),
        access: access_from(cluster, secret.as_ref()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(secret_ref: bool, insecure: bool) -> Cluster {
        let mut c = json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "m1"},
            "spec": {"syncMode": "Push", "apiEndpoint": "https://127.0.0.1:6443"}});
        if secret_ref {
            c["spec"]["secretRef"] = json!({"namespace": "karmada-cluster", "name": "m1"});
        }
        if insecure {
            c["spec"]["insecureSkipTLSVerification"] = json!(true);
        }
        serde_json::from_value(c).expect("a valid Cluster")
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    /// (what, cluster, its Secret, the access, or a phrase of the broken credential's message)
    type AccessRow = (
        &'static str,
        Cluster,
        Option<Value>,
        Result<MemberAccess, &'static str>,
    );

    #[test]
    fn access_table() {
        let kube = |token: &str, ca: Option<&str>, insecure: bool| {
            MemberAccess::Kube(KubeCredential {
                token: token.into(),
                ca_bundle: ca.map(|c| c.as_bytes().to_vec()),
                insecure_skip_tls_verification: insecure,
                proxy_url: String::new(),
            })
        };
        let cases: Vec<AccessRow> = vec![
            (
                "no secretRef: the simulated surface",
                cluster(false, false),
                None,
                Ok(MemberAccess::Surface),
            ),
            (
                "token and CA bundle",
                cluster(true, false),
                Some(json!({"data": {"token": b64("t0k\n"), "caBundle": b64("PEM")}})),
                Ok(kube("t0k", Some("PEM"), false)),
            ),
            (
                "insecure needs no CA bundle, and ignores one",
                cluster(true, true),
                Some(json!({"data": {"token": b64("t"), "caBundle": b64("PEM")}})),
                Ok(kube("t", None, true)),
            ),
            (
                "stringData is read too",
                cluster(true, true),
                Some(json!({"stringData": {"token": "plain"}})),
                Ok(kube("plain", None, true)),
            ),
            (
                "Secret missing",
                cluster(true, false),
                None,
                Err("not found"),
            ),
            (
                "empty token",
                cluster(true, false),
                Some(json!({"data": {"token": "", "caBundle": b64("PEM")}})),
                Err("no non-empty value for \"token\""),
            ),
            (
                "no CA bundle while verifying",
                cluster(true, false),
                Some(json!({"data": {"token": b64("t")}})),
                Err("insecureSkipTLSVerification is false"),
            ),
            (
                "token not base64",
                cluster(true, true),
                Some(json!({"data": {"token": "!!"}})),
                Err("data.token is not base64"),
            ),
        ];
        for (what, c, secret, want) in cases {
            let got = access_from(&c, secret.as_ref());
            match (want, got) {
                (Ok(w), g) => assert_eq!(g, w, "{what}"),
                (Err(needle), MemberAccess::Broken(msg)) => {
                    assert!(msg.contains(needle), "{what}: {msg}");
                    assert!(
                        msg.contains("karmada-cluster/m1"),
                        "{what} names the Secret: {msg}"
                    );
                }
                (Err(_), g) => panic!("{what}: expected a broken credential, got {g:?}"),
            }
        }
    }
}
