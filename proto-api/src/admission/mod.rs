//! Admission: the one call the API makes before storing an object of a kind Flotilla owns.
//! [`admit`] decodes the JSON into its typed kind, defaults it, validates it (create and update
//! rules), and writes the defaulted object back into the JSON without losing any field the user
//! wrote. Kinds Flotilla does not own (resource templates, ConfigMaps, custom kinds) pass
//! untouched.

pub mod decode;
mod merge;
mod value_de;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::binding::{ClusterResourceBinding, ResourceBinding};
use crate::cluster::Cluster;
use crate::defaulting::{self, DefaultingConfig};
use crate::event::Event;
use crate::kinds::{CLUSTER_GROUP, POLICY_GROUP, WORK_GROUP};
use crate::policy::{ClusterPropagationPolicy, ClusterTaintPolicy, PropagationPolicy};
use crate::shape::shape_of;
use crate::validation::{self, FieldError, Path, ValidationErrors};
use crate::work::Work;

pub use decode::decode;

/// The kinds admission types, defaults and validates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdmittedKind {
    /// `cluster.karmada.io` Cluster.
    Cluster,
    /// `policy.karmada.io` PropagationPolicy.
    PropagationPolicy,
    /// `policy.karmada.io` ClusterPropagationPolicy.
    ClusterPropagationPolicy,
    /// `policy.karmada.io` ClusterTaintPolicy.
    ClusterTaintPolicy,
    /// `work.karmada.io` ResourceBinding.
    ResourceBinding,
    /// `work.karmada.io` ClusterResourceBinding.
    ClusterResourceBinding,
    /// `work.karmada.io` Work.
    Work,
    /// core Event.
    Event,
}

impl AdmittedKind {
    /// The admitted kind for an API group (`""` for core) and kind, if Flotilla owns it.
    pub fn from_group_kind(group: &str, kind: &str) -> Option<Self> {
        Some(match (group, kind) {
            (CLUSTER_GROUP, "Cluster") => AdmittedKind::Cluster,
            (POLICY_GROUP, "PropagationPolicy") => AdmittedKind::PropagationPolicy,
            (POLICY_GROUP, "ClusterPropagationPolicy") => AdmittedKind::ClusterPropagationPolicy,
            (POLICY_GROUP, "ClusterTaintPolicy") => AdmittedKind::ClusterTaintPolicy,
            (WORK_GROUP, "ResourceBinding") => AdmittedKind::ResourceBinding,
            (WORK_GROUP, "ClusterResourceBinding") => AdmittedKind::ClusterResourceBinding,
            (WORK_GROUP, "Work") => AdmittedKind::Work,
            ("", "Event") => AdmittedKind::Event,
            _ => return None,
        })
    }

    /// The admitted kind named by an object's own `apiVersion` and `kind`.
    pub fn from_object(obj: &Value) -> Option<Self> {
        let api_version = obj.get("apiVersion")?.as_str()?;
        let kind = obj.get("kind")?.as_str()?;
        let group = api_version
            .rsplit_once('/')
            .map_or("", |(group, _version)| group);
        Self::from_group_kind(group, kind)
    }
}

/// Decodes, defaults and validates `obj`, then writes the defaulted object back into it.
///
/// `group` and `kind` name the resource being written (from the URL); kinds Flotilla does not
/// own are accepted unchanged. `old` is the stored object on update (`None` on create): it
/// carries immutable fields (the permanent-id label) and drives update rules (`schedulerName`
/// is immutable). On create the server must already have set `metadata.uid`: policies and
/// bindings take their permanent id from it. Decode errors come back as a [`FieldError`] naming
/// the field; on error `obj` is left as it was.
pub fn admit(
    group: &str,
    kind: &str,
    obj: &mut Value,
    old: Option<&Value>,
    cfg: &DefaultingConfig,
    now: DateTime<Utc>,
) -> Result<(), ValidationErrors> {
    let Some(kind) = AdmittedKind::from_group_kind(group, kind) else {
        return Ok(());
    };
    match kind {
        AdmittedKind::Cluster => admit_typed::<Cluster>(
            obj,
            old,
            |c, _| defaulting::default_cluster(c, now),
            validation::validate_cluster,
        ),
        AdmittedKind::PropagationPolicy => admit_typed::<PropagationPolicy>(
            obj,
            old,
            |p, o| defaulting::default_propagation_policy(p, o, cfg),
            validation::validate_propagation_policy,
        ),
        AdmittedKind::ClusterPropagationPolicy => admit_typed::<ClusterPropagationPolicy>(
            obj,
            old,
            |p, o| defaulting::default_cluster_propagation_policy(p, o, cfg),
            validation::validate_cluster_propagation_policy,
        ),
        AdmittedKind::ClusterTaintPolicy => admit_typed::<ClusterTaintPolicy>(
            obj,
            old,
            |_, _| {},
            validation::validate_cluster_taint_policy,
        ),
        AdmittedKind::ResourceBinding => admit_typed::<ResourceBinding>(
            obj,
            old,
            defaulting::default_resource_binding,
            validation::validate_resource_binding,
        ),
        AdmittedKind::ClusterResourceBinding => admit_typed::<ClusterResourceBinding>(
            obj,
            old,
            defaulting::default_cluster_resource_binding,
            validation::validate_cluster_resource_binding,
        ),
        AdmittedKind::Work => admit_typed::<Work>(obj, old, |_, _| {}, validation::validate_work),
        AdmittedKind::Event => {
            admit_typed::<Event>(obj, old, |_, _| {}, validation::validate_event)
        }
    }
}

/// Checks the `status` a status write (`PUT`/`PATCH` of `.../status`) would store: it must
/// decode as the kind's status, or the write is refused with the field at fault
/// (`status.conditions[0]`). Only the status is looked at, since a status write stores nothing
/// else. Kinds Flotilla does not own are accepted unchanged.
pub fn admit_status(
    group: &str,
    kind: &str,
    status: Option<&Value>,
) -> Result<(), ValidationErrors> {
    let Some(kind) = AdmittedKind::from_group_kind(group, kind) else {
        return Ok(());
    };
    let mut only_status = serde_json::Map::new();
    if let Some(s) = status {
        only_status.insert("status".to_string(), s.clone());
    }
    let only_status = Value::Object(only_status);
    match kind {
        AdmittedKind::Cluster => decode::<Cluster>(&only_status).map(drop),
        AdmittedKind::PropagationPolicy => decode::<PropagationPolicy>(&only_status).map(drop),
        AdmittedKind::ClusterPropagationPolicy => {
            decode::<ClusterPropagationPolicy>(&only_status).map(drop)
        }
        AdmittedKind::ClusterTaintPolicy => decode::<ClusterTaintPolicy>(&only_status).map(drop),
        AdmittedKind::ResourceBinding => decode::<ResourceBinding>(&only_status).map(drop),
        AdmittedKind::ClusterResourceBinding => {
            decode::<ClusterResourceBinding>(&only_status).map(drop)
        }
        AdmittedKind::Work => decode::<Work>(&only_status).map(drop),
        AdmittedKind::Event => decode::<Event>(&only_status).map(drop),
    }
    .map_err(ValidationErrors::from)
}

fn admit_typed<T>(
    obj: &mut Value,
    old: Option<&Value>,
    default: impl Fn(&mut T, Option<&T>),
    validate: impl Fn(&T, Option<&T>) -> Vec<FieldError>,
) -> Result<(), ValidationErrors>
where
    T: Serialize + DeserializeOwned,
{
    let mut typed: T = decode(obj)?;
    let old_typed: Option<T> = match old {
        None => None,
        Some(v) => {
            let mut o: T = decode(v).map_err(|e| {
                FieldError::invalid(
                    &Path::new(""),
                    "",
                    format!("the stored object cannot be decoded: {e}"),
                )
            })?;
            default(&mut o, None);
            Some(o)
        }
    };
    let before = serde_json::to_value(&typed).map_err(encode_error)?;
    default(&mut typed, old_typed.as_ref());
    ValidationErrors::into_result(validate(&typed, old_typed.as_ref()))?;
    let after = serde_json::to_value(&typed).map_err(encode_error)?;
    let shape = shape_of(&typed);
    *obj = merge::merge(obj, after, Some(&before), &shape);
    Ok(())
}

fn encode_error(e: serde_json::Error) -> FieldError {
    FieldError::invalid(
        &Path::new(""),
        "",
        format!("the object cannot be encoded: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_writes_are_decoded_as_the_kind_status() {
        let table = [
            (
                WORK_GROUP,
                "ResourceBinding",
                Some(json!([1])),
                Some("status"),
            ),
            (
                WORK_GROUP,
                "ClusterResourceBinding",
                Some(json!({"conditions": {}})),
                Some("status.conditions"),
            ),
            (
                WORK_GROUP,
                "Work",
                Some(json!({"manifestStatuses": [3]})),
                Some("status.manifestStatuses[0]"),
            ),
            (
                CLUSTER_GROUP,
                "Cluster",
                Some(json!("Ready")),
                Some("status"),
            ),
            (
                CLUSTER_GROUP,
                "Cluster",
                Some(json!({"conditions": [{"type": "Ready", "status": "True"}]})),
                None,
            ),
            (
                WORK_GROUP,
                "ResourceBinding",
                Some(json!({"aggregatedStatus": [{"clusterName": "m1", "status": {"x": null}}]})),
                None,
            ),
            (WORK_GROUP, "Work", None, None),
            ("apps", "Deployment", Some(json!([1])), None),
        ];
        for (group, kind, status, want) in table {
            let got = admit_status(group, kind, status.as_ref());
            match want {
                None => assert!(got.is_ok(), "{kind} {status:?}: {got:?}"),
                Some(path) => {
                    let errs = got.expect_err(path);
                    assert_eq!(errs.0[0].path, path, "{kind}: {errs:?}");
                }
            }
        }
    }
}
