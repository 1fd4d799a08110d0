//! Validation of Cluster: the name, the sync mode, how the member is reached (API endpoint,
//! proxy, secret references) and the taints.

use std::collections::BTreeSet;

use super::meta::validate_object_meta;
use super::{push_reasons, FieldError, Path};
use crate::cluster::{Cluster, SyncMode};
use crate::names;

/// Longest cluster name (Karmada's limit, so execution namespaces stay valid).
pub const CLUSTER_NAME_MAX: usize = 48;

fn cluster_name(name: &str) -> Vec<String> {
    if name.len() > CLUSTER_NAME_MAX {
        return vec![format!(
            "must be no more than {CLUSTER_NAME_MAX} characters"
        )];
    }
    names::dns1123_label(name)
}

/// Validates a (defaulted) Cluster.
pub fn validate_cluster(new: &Cluster, _old: Option<&Cluster>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_object_meta(&new.metadata, false, cluster_name, &mut errs);
    let spec = &new.spec;
    let path = Path::new("spec");
    match spec.sync_mode {
        None => errs.push(FieldError::required(
            &path.child("syncMode"),
            "syncMode is required: Push or Pull",
        )),
        Some(SyncMode::Push) if spec.api_endpoint.is_empty() => errs.push(FieldError::required(
            &path.child("apiEndpoint"),
            "apiEndpoint is required when syncMode is Push",
        )),
        _ => {}
    }
    if !spec.api_endpoint.is_empty() {
        if let Err(reason) = check_endpoint(&spec.api_endpoint, &["http", "https"]) {
            errs.push(FieldError::invalid(
                &path.child("apiEndpoint"),
                &spec.api_endpoint,
                reason,
            ));
        }
    }
    if !spec.proxy_url.is_empty() {
        let ok = spec.proxy_url.contains("://")
            && check_endpoint(&spec.proxy_url, &["http", "https", "socks5"]).is_ok();
        if !ok {
            errs.push(FieldError::invalid(
                &path.child("proxyURL"),
                &spec.proxy_url,
                "must be a URL with scheme http, https or socks5 and a host",
            ));
        }
    }
    for (field, sref) in [
        ("secretRef", &spec.secret_ref),
        ("impersonatorSecretRef", &spec.impersonator_secret_ref),
    ] {
        if let Some(r) = sref {
            let p = path.child(field);
            if r.namespace.is_empty() {
                errs.push(FieldError::required(
                    &p.child("namespace"),
                    "namespace is required",
                ));
            }
            if r.name.is_empty() {
                errs.push(FieldError::required(&p.child("name"), "name is required"));
            }
        }
    }
    let mut seen = BTreeSet::new();
    for (i, t) in spec.taints.iter().enumerate() {
        let p = path.child("taints").index(i);
        if t.key.is_empty() {
            errs.push(FieldError::required(
                &p.child("key"),
                "taint key is required",
            ));
        } else {
            push_reasons(
                &mut errs,
                &p.child("key"),
                &t.key,
                names::qualified_name(&t.key),
            );
        }
        push_reasons(
            &mut errs,
            &p.child("value"),
            &t.value,
            names::label_value(&t.value),
        );
        if !seen.insert((t.key.clone(), t.effect)) {
            errs.push(FieldError::duplicate(&p, format!("{}:{}", t.key, t.effect)));
        }
    }
    errs
}

/// Checks an endpoint: `host`, `host:port`, `ip`, `ip:port`, `[ipv6]:port` or a URL with one
/// of `schemes`, a host, and no user info, query or fragment.
fn check_endpoint(endpoint: &str, schemes: &[&str]) -> Result<(), String> {
    let rest = match endpoint.split_once("://") {
        Some((scheme, rest)) => {
            if !schemes.contains(&scheme) {
                return Err(format!(
                    "unsupported scheme \"{scheme}\", must be one of {}",
                    schemes.join(", ")
                ));
            }
            rest
        }
        None => endpoint,
    };
    if rest.contains('@') {
        return Err("must not contain user information".to_string());
    }
    if rest.contains('?') {
        return Err("must not contain a query".to_string());
    }
    if rest.contains('#') {
        return Err("must not contain a fragment".to_string());
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err("unterminated IPv6 address".to_string());
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("invalid IPv6 address \"{addr}\""));
        }
        (addr, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("must have a host".to_string());
    }
    if let Some(p) = port {
        if !matches!(p.parse::<u32>(), Ok(1..=65535)) {
            return Err(format!("invalid port \"{p}\""));
        }
    }
    let is_ip = host.parse::<std::net::IpAddr>().is_ok();
    if !is_ip && !names::dns1123_subdomain(&host.to_ascii_lowercase()).is_empty() {
        return Err(format!("invalid host \"{host}\""));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_endpoint;

    #[test]
    fn endpoint_table() {
        let cases = [
            ("https://10.0.0.1:6443", true),
            ("https://member1.example.com", true),
            ("http://member1:8080/prefix", true),
            ("member1.example.com", true),
            ("member1:6443", true),
            ("10.0.0.1", true),
            ("10.0.0.1:6443", true),
            ("https://[::1]:6443", true),
            ("127.0.0.1:0", false),
            ("https://", false),
            ("ftp://host", false),
            ("https://user:pw@host", false),
            ("https://host?x=1", false),
            ("https://host#frag", false),
            ("https://host:port", false),
            ("https://ho_st", false),
            ("https://[::zz]:1", false),
        ];
        for (input, ok) in cases {
            assert_eq!(
                check_endpoint(input, &["http", "https"]).is_ok(),
                ok,
                "{input}: {:?}",
                check_endpoint(input, &["http", "https"])
            );
        }
    }
}
