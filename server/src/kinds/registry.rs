//! The kind table: the built-in kinds from `flotilla-api` plus the kinds that stored
//! CustomResourceDefinitions register, as Kubernetes does. Paths of unregistered groups are
//! still served as free-form templates (so curl can POST a custom kind directly); they appear
//! in discovery only once a CRD names them.
//!
//! Only [`super::crd_feed`] changes the CRD part, from the store, and it records the store
//! revision it has applied so far ([`KindRegistry::applied_revision`]); a writer waits for
//! that revision with [`KindRegistry::caught_up`].

use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{builtin_resources, ResourceType};
use parking_lot::RwLock;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The served kinds.
#[derive(Debug)]
pub struct KindRegistry {
    builtin: Vec<ResourceType>,
    /// CRD name -> the kinds (one per served version) it registers.
    crds: RwLock<BTreeMap<String, Vec<ResourceType>>>,
    /// The store resourceVersion up to which CRD changes are applied.
    applied: tokio::sync::watch::Sender<u64>,
}

impl Default for KindRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl KindRegistry {
    /// A registry with the built-in kinds only.
    pub fn new() -> Self {
        Self {
            builtin: builtin_resources(),
            crds: RwLock::new(BTreeMap::new()),
            applied: tokio::sync::watch::channel(0).0,
        }
    }

    /// The store resourceVersion up to which CRD changes are applied.
    pub fn applied_revision(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Records that every CRD change up to `revision` is applied (never goes back).
    pub fn mark_applied(&self, revision: u64) {
        self.applied.send_if_modified(|applied| {
            let newer = revision > *applied;
            if newer {
                *applied = revision;
            }
            newer
        });
    }

    /// Waits until CRD changes up to `revision` are applied; false when `within` passed first.
    pub async fn caught_up(&self, revision: u64, within: Duration) -> bool {
        let mut applied = self.applied.subscribe();
        let reached = tokio::time::timeout(within, applied.wait_for(|r| *r >= revision)).await;
        let caught_up = matches!(reached, Ok(Ok(_)));
        caught_up
    }

    /// Every registered kind (built-in first, then CRDs by name).
    pub fn all(&self) -> Vec<ResourceType> {
        let mut out = self.builtin.clone();
        for kinds in self.crds.read().values() {
            out.extend(kinds.iter().cloned());
        }
        out
    }

    /// The kind served at `group/version/plural`, if registered.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// The first registered kind (built-in ones first) that `hit` accepts, copied alone: the
    /// lookups on every request and every reconcile do not copy the table.
    fn find(&self, hit: impl Fn(&ResourceType) -> bool) -> Option<ResourceType> {
        if let Some(r) = self.builtin.iter().find(|r| hit(r)) {
            return Some(r.clone());
        }
        self.crds
            .read()
            .values()
            .flatten()
            .find(|r| hit(r))
            .cloned()
    }

    /// Whether a kind is served at `group/version/plural` (without copying the table).
    pub fn serves(&self, group: &str, version: &str, plural: &str) -> bool {
        let hit = |r: &ResourceType| r.group == group && r.version == version && r.plural == plural;
        self.builtin.iter().any(hit) || self.crds.read().values().flatten().any(hit)
    }

    /// The kind registered for `group` and `plural` in any version.
    pub fn lookup_group_plural(&self, group: &str, plural: &str) -> Option<ResourceType> {
        self.find(|r| r.group == group && r.plural == plural)
    }

    /// The kind served for `group`'s `kind`, preferring `version` when given.
    pub fn by_kind(&self, group: &str, version: Option<&str>, kind: &str) -> Option<ResourceType> {
        self.find(|r| r.group == group && r.kind == kind && version.is_none_or(|v| v == r.version))
            .or_else(|| self.find(|r| r.group == group && r.kind == kind))
    }

    /// A kind that no CRD declares, served as a free-form template. Only for non-core groups.
    pub fn adhoc(group: &str, version: &str, plural: &str, namespaced: bool) -> ResourceType {
        let singular = plural.strip_suffix('s').unwrap_or(plural).to_string();
        ResourceType {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            kind: String::new(),
            singular,
            short_names: Vec::new(),
            namespaced,
            status_subresource: true,
        }
    }

    /// The kind of `apiVersion` and `kind` as stored: a registered kind as registered, any other
    /// as a free-form namespaced template under the usual lower-case plural (`Widget` →
    /// `widgets`, `Policy` → `policies`), as the API stores what curl POSTs there.
    pub fn resolve_kind(&self, api_version: &str, kind: &str) -> ResourceType {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        if let Some(rt) = self.by_kind(group, Some(version), kind) {
            return rt;
        }
        let mut rt = Self::adhoc(group, version, &plural_of_kind(kind), true);
        rt.kind = kind.to_string();
        rt
    }

    /// Groups and their versions, for discovery, in a stable order (core excluded).
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in self.all().into_iter().filter(|r| !r.group.is_empty()) {
            let versions = out.entry(r.group.clone()).or_default();
            if !versions.contains(&r.version) {
                versions.push(r.version.clone());
            }
        }
        out
    }

    /// The kinds of one group-version.
    pub fn resources_in(&self, group: &str, version: &str) -> Vec<ResourceType> {
        self.all()
            .into_iter()
            .filter(|r| r.group == group && r.version == version)
            .collect()
    }

    /// Replaces every CRD registration by those of `crds` (a fresh list of the store, read
    /// at `revision`); a stored CRD that does not register is skipped with a warning.
    pub fn replace_crds(&self, crds: &[Value], revision: u64) {
        let mut fresh = BTreeMap::new();
        for crd in crds {
            match kinds_of_crd(crd) {
                Ok(kinds) => {
                    fresh.insert(crd_name(crd), kinds);
                }
                Err(e) => {
                    tracing::warn!(crd = %crd_name(crd), error = %e, "a stored CRD does not register")
                }
            }
        }
        *self.crds.write() = fresh;
        self.mark_applied(revision);
    }

    /// Registers (or re-registers) the kinds of a CustomResourceDefinition object.
    pub fn register_crd(&self, crd: &Value) -> Result<Vec<ResourceType>, String> {
        let kinds = kinds_of_crd(crd)?;
        self.crds.write().insert(crd_name(crd), kinds.clone());
        Ok(kinds)
    }

    /// Forgets the kinds of a deleted CustomResourceDefinition.
    pub fn unregister_crd(&self, name: &str) {
        self.crds.write().remove(name);
    }
}

/// The `metadata.name` of a CRD ("" when it has none).
pub fn crd_name(crd: &Value) -> String {
    crd.lookup("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The lower-case plural under which a kind no CRD declares is stored, by the English rule:
/// consonant + `y` → `ies` (`Policy` → `policies`), vowel + `y` → `ys` (`Doohickey` →
/// `doohickeys`), `s` → `ses` (`Address` → `addresses`), else `s` (`Widget` → `widgets`).
pub fn plural_of_kind(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y') {
        let after_vowel = stem.ends_with(['a', 'e', 'i', 'o', 'u']);
        if !stem.is_empty() && !after_vowel {
            return format!("{stem}ies");
        }
    }
    if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// The kinds a CRD declares, one per served version; errors name the field at fault.
pub fn kinds_of_crd(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let text = |path: &str| {
        spec.lookup(path)
            .and_then(Value::as_str)
            .map(str::to_string)
            .filter(|s| !s.is_empty())
    };
    let group = text("/group").ok_or("spec.group: Required value")?;
    let plural = text("/names/plural").ok_or("spec.names.plural: Required value")?;
    let kind = text("/names/kind").ok_or("spec.names.kind: Required value")?;
    let singular = text("/names/singular").unwrap_or_else(|| kind.to_ascii_lowercase());
    let namespaced = match text("/scope").as_deref() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        Some(other) => {
            return Err(format!(
                "spec.scope: Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""
            ))
        }
        None => return Err("spec.scope: Required value".into()),
    };
    // The built-in kind of the group that `same` says the CRD would redefine.
    let builtin = |same: &dyn Fn(&ResourceType) -> bool| {
        builtin_resources()
            .into_iter()
            .find(|r| r.group == group && same(r))
    };
    if let Some(taken) = builtin(&|r| r.plural == plural) {
        return Err(format!(
            "spec.names.plural: Invalid value: \"{plural}\": {plural}.{group} is a built-in kind ({}) and cannot be redefined",
            taken.kind
        ));
    }
    if let Some(taken) = builtin(&|r| r.kind == kind) {
        return Err(format!(
            "spec.names.kind: Invalid value: \"{kind}\": {group} already has the built-in kind {kind} ({}.{group})",
            taken.plural
        ));
    }
    let expected_name = format!("{plural}.{group}");
    let name = crd.lookup("/metadata/name").and_then(Value::as_str);
    if name != Some(expected_name.as_str()) {
        return Err(format!(
            "metadata.name: Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group ({expected_name})"
        ));
    }
    let short_names: Vec<String> = spec
        .lookup("/names/shortNames")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or("spec.versions: Required value: must have at least one version")?;
    let mut out = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let version = v
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(format!("spec.versions[{i}].name: Required value"))?;
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        out.push(ResourceType {
            group: group.clone(),
            version: version.to_string(),
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            short_names: short_names.clone(),
            namespaced,
            status_subresource: v.lookup("/subresources/status").is_some(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flink_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "flinkdeployments.flink.apache.org"},
            "spec": {
                "group": "flink.apache.org",
                "names": {"plural": "flinkdeployments", "singular": "flinkdeployment",
                          "kind": "FlinkDeployment", "shortNames": ["flinkdep"]},
                "scope": "Namespaced",
                "versions": [{"name": "v1beta1", "served": true, "storage": true,
                              "subresources": {"status": {}}}]
            }
        })
    }

    #[test]
    fn crd_registers_and_unregisters_its_kind() {
        let reg = KindRegistry::new();
        assert!(reg
            .lookup("flink.apache.org", "v1beta1", "flinkdeployments")
            .is_none());
        reg.register_crd(&flink_crd()).unwrap();
        let rt = reg
            .lookup("flink.apache.org", "v1beta1", "flinkdeployments")
            .unwrap();
        assert_eq!(rt.kind, "FlinkDeployment");
        assert!(rt.namespaced && rt.status_subresource);
        assert_eq!(reg.groups()["flink.apache.org"], vec!["v1beta1"]);
        reg.unregister_crd("flinkdeployments.flink.apache.org");
        assert!(reg
            .lookup("flink.apache.org", "v1beta1", "flinkdeployments")
            .is_none());
    }

    #[test]
    fn crd_errors_name_the_field() {
        let table = [
            ("/spec/group", "spec.group: Required value"),
            ("/spec/scope", "spec.scope: Required value"),
            ("/spec/names/kind", "spec.names.kind: Required value"),
            ("/spec/versions", "spec.versions: Required value"),
        ];
        for (pointer, want) in table {
            let mut crd = flink_crd();
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            crd.pointer_mut(parent)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .remove(key);
            let err = kinds_of_crd(&crd).unwrap_err();
            assert!(err.starts_with(want), "{pointer}: {err}");
        }
        let mut crd = flink_crd();
        crd["metadata"]["name"] = json!("wrong");
        assert!(kinds_of_crd(&crd).unwrap_err().starts_with("metadata.name"));
    }

    #[test]
    fn kinds_resolve_to_their_storage() {
        let reg = KindRegistry::new();
        let table = [
            ("apps/v1", "Deployment", "deployments", true),
            ("cluster.karmada.io/v1alpha1", "Cluster", "clusters", false),
            (
                "flink.apache.org/v1beta1",
                "FlinkDeployment",
                "flinkdeployments",
                true,
            ),
            ("example.io/v1", "Policy", "policies", true),
            ("example.io/v1", "Address", "addresses", true),
        ];
        for (av, kind, plural, namespaced) in table {
            let rt = reg.resolve_kind(av, kind);
            assert_eq!(
                (rt.plural.as_str(), rt.namespaced, rt.kind.as_str()),
                (plural, namespaced, kind)
            );
        }
    }

    #[test]
    fn kinds_pluralize_by_the_english_rule() {
        let table = [
            ("Policy", "policies"),
            ("Doohickey", "doohickeys"),
            ("Gateway", "gateways"),
            ("Toy", "toys"),
            ("Guy", "guys"),
            ("Y", "ys"),
            ("Address", "addresses"),
            ("Widget", "widgets"),
            ("FlinkDeployment", "flinkdeployments"),
        ];
        for (kind, plural) in table {
            assert_eq!(plural_of_kind(kind), plural, "{kind}");
        }
        let rt = KindRegistry::new().resolve_kind("example.io/v1", "Doohickey");
        assert_eq!(
            (rt.plural.as_str(), rt.kind.as_str()),
            ("doohickeys", "Doohickey")
        );
    }

    #[test]
    fn a_relist_replaces_every_registration_and_the_revision_only_advances() {
        let reg = KindRegistry::new();
        reg.register_crd(&flink_crd()).unwrap();
        let mut other = flink_crd();
        other["metadata"]["name"] = json!("widgets.example.io");
        other["spec"]["group"] = json!("example.io");
        other["spec"]["names"] = json!({"plural": "widgets", "kind": "Widget"});
        reg.replace_crds(&[other], 7);
        assert!(reg
            .lookup("flink.apache.org", "v1beta1", "flinkdeployments")
            .is_none());
        assert_eq!(
            reg.lookup("example.io", "v1beta1", "widgets").unwrap().kind,
            "Widget"
        );
        assert_eq!(reg.applied_revision(), 7);
        reg.mark_applied(5);
        assert_eq!(reg.applied_revision(), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn caught_up_waits_for_the_revision_or_gives_up() {
        let reg = std::sync::Arc::new(KindRegistry::new());
        reg.mark_applied(3);
        assert!(reg.caught_up(3, Duration::ZERO).await);
        assert!(!reg.caught_up(4, Duration::from_secs(1)).await);
        let later = reg.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            later.mark_applied(4);
        });
        assert!(reg.caught_up(4, Duration::from_secs(5)).await);
    }

    #[test]
    fn builtins_are_found_by_plural_and_kind() {
        let reg = KindRegistry::new();
        assert_eq!(
            reg.lookup("apps", "v1", "deployments").unwrap().kind,
            "Deployment"
        );
        assert_eq!(
            reg.by_kind("work.karmada.io", None, "ResourceBinding")
                .unwrap()
                .plural,
            "resourcebindings"
        );
        assert!(reg.lookup("apps", "v2", "deployments").is_none());
    }

    #[test]
    fn crds_may_not_redefine_builtin_kinds() {
        let crd = |group: &str, plural: &str, kind: &str| {
            serde_json::json!({
                "metadata": {"name": format!("{plural}.{group}")},
                "spec": {
                    "group": group,
                    "names": {"plural": plural, "kind": kind},
                    "scope": "Namespaced",
                    "versions": [{"name": "v1", "served": true, "storage": true}],
                },
            })
        };
        let table = [
            (
                "apps",
                "deployments",
                "Deployment",
                Some("spec.names.plural"),
            ),
            (
                "apps",
                "mydeployments",
                "Deployment",
                Some("spec.names.kind"),
            ),
            (
                "cluster.karmada.io",
                "clusters",
                "Cluster",
                Some("spec.names.plural"),
            ),
            ("example.io", "deployments", "Deployment", None),
            ("apps.example.io", "clusters", "Cluster", None),
        ];
        for (group, plural, kind, field) in table {
            let got = kinds_of_crd(&crd(group, plural, kind));
            match field {
                Some(field) => {
                    let err = got.unwrap_err();
                    assert!(
                        err.starts_with(&format!("{field}: ")),
                        "{group}/{plural}: {err}"
                    );
                }
                None => assert!(got.is_ok(), "{group}/{plural}: {got:?}"),
            }
            let reg = KindRegistry::new();
            assert_eq!(
                reg.register_crd(&crd(group, plural, kind)).is_ok(),
                field.is_none()
            );
        }
    }
}
