//! What a valid name, label key and label value is: DNS-1123 labels and subdomains and
//! Kubernetes qualified names. Each check returns the reasons a string is invalid (empty when
//! it is valid), worded as Kubernetes words them. Also the names Flotilla derives from a
//! template's ([`binding_name`]), which must always fit the limits they are checked against.

/// Longest DNS-1123 label.
pub const DNS1123_LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest name part of a qualified name, and longest label value.
pub const QUALIFIED_NAME_MAX: usize = 63;

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn dns_label_shape_ok(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| is_lower_alnum(c) || c == '-')
        && s.starts_with(is_lower_alnum)
        && s.ends_with(is_lower_alnum)
}

/// Problems with `s` as a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 chars).
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    if !dns_label_shape_ok(s) {
        errs.push(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
             '-', and must start and end with an alphanumeric character"
                .to_string(),
        );
    }
    errs
}

/// Problems with `s` as a DNS-1123 subdomain (dot-separated labels, at most 253 chars).
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    if s.is_empty() || !s.split('.').all(dns_label_shape_ok) {
        errs.push(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character"
                .to_string(),
        );
    }
    errs
}

fn name_part_shape_ok(s: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    !s.is_empty()
        && s.chars().all(ok_char)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Problems with `s` as a qualified name, the syntax of label and annotation keys: an optional
/// DNS-1123 subdomain prefix and `/`, then a name of at most 63 characters matching
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
pub fn qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            *name
        }
        _ => {
            errs.push(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and \
                 must start and end with an alphanumeric character with an optional DNS \
                 subdomain prefix and '/' (e.g. 'example.com/MyName')"
                    .to_string(),
            );
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
        return errs;
    }
    if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!(
            "name part must be no more than {QUALIFIED_NAME_MAX} characters"
        ));
    }
    if !name_part_shape_ok(name) {
        errs.push(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start \
             and end with an alphanumeric character"
                .to_string(),
        );
    }
    errs
}

/// Problems with `s` as a label value: empty, or at most 63 characters matching
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.is_empty() {
        return errs;
    }
    if s.len() > QUALIFIED_NAME_MAX {
        errs.push(format!(
            "must be no more than {QUALIFIED_NAME_MAX} characters"
        ));
    }
    if !name_part_shape_ok(s) {
        errs.push(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', \
             '_' or '.', and must start and end with an alphanumeric character"
                .to_string(),
        );
    }
    errs
}

/// FNV-1a, 32 bits (Go's `hash/fnv` `New32a`).
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The name of the binding of a template named `name` of kind `kind`: Karmada's
/// `<name>-<kind lowercased>` whenever that is a valid name (at most 253 characters), so a
/// Karmada user finds the binding where they expect it. A longer one keeps a prefix of the
/// name, then a hash of the whole name and the kind, so it still fits, stays stable, and two
/// long names sharing a prefix do not collide. (Kinds are short: a CRD's kind pairs with a
/// plural that is a DNS label.)
pub fn binding_name(name: &str, kind: &str) -> String {
    let kind = kind.to_ascii_lowercase();
    let plain = format!("{name}-{kind}");
    if plain.len() <= DNS1123_SUBDOMAIN_MAX {
        return plain;
    }
    let hash = fnv1a32(plain.as_bytes());
    // `-` + 8 hex digits + `-` + kind after the prefix.
    let room = DNS1123_SUBDOMAIN_MAX.saturating_sub(kind.len() + 10);
    let prefix: String = name.chars().take(room).collect();
    let prefix = prefix.trim_end_matches(['-', '.']);
    if prefix.is_empty() {
        format!("{hash:08x}-{kind}")
    } else {
        format!("{prefix}-{hash:08x}-{kind}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_syntax_table() {
        type Check = fn(&str) -> Vec<String>;
        let cases: &[(Check, &str, bool)] = &[
            (dns1123_label, "member1", true),
            (dns1123_label, "a-b", true),
            (dns1123_label, "A", false),
            (dns1123_label, "-a", false),
            (dns1123_label, "a.b", false),
            (dns1123_label, "", false),
            (dns1123_label, &"a".repeat(64), false),
            (dns1123_subdomain, "nginx-propagation", true),
            (dns1123_subdomain, "a.b.c", true),
            (dns1123_subdomain, "a..b", false),
            (dns1123_subdomain, "a_b", false),
            (dns1123_subdomain, "", false),
            (qualified_name, "app", true),
            (qualified_name, "app.kubernetes.io/name", true),
            (
                qualified_name,
                "application.karmada.io/failover-jobid",
                true,
            ),
            (qualified_name, "My_Key.1", true),
            (qualified_name, "/app", false),
            (qualified_name, "a/b/c", false),
            (qualified_name, "Example.com/x", false),
            (qualified_name, "app-", false),
            (qualified_name, "", false),
            (qualified_name, &"k".repeat(64), false),
            (label_value, "", true),
            (label_value, "nginx", true),
            (label_value, "v1.2_3-x", true),
            (label_value, "a b", false),
            (label_value, "-x", false),
            (label_value, &"v".repeat(64), false),
        ];
        for (check, input, ok) in cases {
            let errs = check(input);
            assert_eq!(errs.is_empty(), *ok, "{input:?}: {errs:?}");
        }
    }

    #[test]
    fn binding_names_always_fit() {
        let long = "a".repeat(250);
        let dotted = format!("{}.{}", "b".repeat(230), "c".repeat(30));
        let table: Vec<(&str, &str, Option<&str>)> = vec![
            ("nginx", "Deployment", Some("nginx-deployment")),
            ("cfg", "ConfigMap", Some("cfg-configmap")),
            (&long[..242], "Deployment", None),
            (&long, "Deployment", None),
            (&long, "Service", None),
            (&dotted, "Deployment", None),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (name, kind, want) in table {
            let got = binding_name(name, kind);
            if let Some(want) = want {
                assert_eq!(got, want);
            }
            assert!(
                dns1123_subdomain(&got).is_empty(),
                "{got}: {:?}",
                dns1123_subdomain(&got)
            );
            assert_eq!(got, binding_name(name, kind), "stable");
            assert!(seen.insert(got.clone()), "distinct: {got}");
        }
        // Karmada's name is kept up to the limit exactly.
        let fits = "n".repeat(DNS1123_SUBDOMAIN_MAX - "-deployment".len());
        assert_eq!(
            binding_name(&fits, "Deployment"),
            format!("{fits}-deployment")
        );
        let over = format!("{fits}n");
        let got = binding_name(&over, "Deployment");
        assert!(
            got.len() <= DNS1123_SUBDOMAIN_MAX && got.ends_with("-deployment"),
            "{got}"
        );
        // Names sharing the kept prefix still differ.
        assert_ne!(
            binding_name(&format!("{long}x"), "Deployment"),
            binding_name(&format!("{long}y"), "Deployment")
        );
    }
}
