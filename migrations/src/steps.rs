//! The numbered migrations, oldest first. A released step is never edited: a change of
//! layout is a new step at the end, with a fixture test of the layout before it.

use crate::{Migration, RawStore, META_TREE, RESOURCE_VERSION_KEY};
use serde_json::Value;

/// Every migration, in order; `MIGRATIONS[i].number == i + 1`.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        number: 1,
        name: "initial-layout",
        apply: initial_layout,
    },
    Migration {
        number: 2,
        name: "cluster-zone-to-zones",
        apply: cluster_zone_to_zones,
    },
];

/// 1: a store starts with its resourceVersion counter at 0.
fn initial_layout(store: &mut dyn RawStore) -> Result<(), String> {
    if store
        .get(META_TREE, RESOURCE_VERSION_KEY)
        .map_err(|e| e.to_string())?
        .is_none()
    {
        store
            .put(META_TREE, RESOURCE_VERSION_KEY, b"0".to_vec())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Storage name of Karmada's Cluster kind.
const CLUSTERS_TREE: &str = "cluster.karmada.io/clusters";

/// 2: Karmada deprecated `Cluster.spec.zone` for `spec.zones` (v1.7). Clusters stored with a
/// zone and no zones get `zones: [zone]` and lose `zone`, as Karmada's mutation does.
fn cluster_zone_to_zones(store: &mut dyn RawStore) -> Result<(), String> {
    for (key, bytes) in store.scan(CLUSTERS_TREE).map_err(|e| e.to_string())? {
        let mut cluster: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("cluster {key:?} is not JSON: {e}"))?;
        let Some(spec) = cluster.get_mut("spec").and_then(Value::as_object_mut) else {
            continue;
        };
        let zone = match spec.get("zone").and_then(Value::as_str) {
            Some(z) if !z.is_empty() => z.to_string(),
            _ => continue,
        };
        let has_zones = spec
            .get("zones")
            .and_then(Value::as_array)
            .is_some_and(|z| !z.is_empty());
        if !has_zones {
            spec.insert("zones".into(), Value::from(vec![zone]));
        }
        spec.remove("zone");
        let bytes = serde_json::to_vec(&cluster).map_err(|e| e.to_string())?;
        store
            .put(CLUSTERS_TREE, &key, bytes)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_consecutive_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.number as usize, i + 1, "{}", m.name);
        }
    }
}
