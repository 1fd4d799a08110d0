//! Pins the wire format: every document of `golden/full-objects.yaml` (one object of each
//! Flotilla kind with every field set, in Karmada's spelling) decodes into its type and
//! encodes back to exactly the same document, and no field is unknown to the type.

// Helpers outside #[test] functions unwrap too: this whole crate is a test.
#![allow(clippy::unwrap_used)]

use flotilla_api::admission::decode;
use flotilla_api::binding::{ClusterResourceBinding, ResourceBinding};
use flotilla_api::cluster::Cluster;
use flotilla_api::event::Event;
use flotilla_api::policy::{ClusterPropagationPolicy, ClusterTaintPolicy, PropagationPolicy};
use flotilla_api::validation::strict_unknown_fields;
use flotilla_api::work::Work;
use flotilla_api::AdmittedKind;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

fn round_trip<T: Serialize + DeserializeOwned>(doc: &Value) -> Value {
    let typed: T = decode(doc).unwrap();
    serde_json::to_value(&typed).unwrap()
}

#[test]
fn every_field_round_trips_under_karmadas_name() {
    let text = include_str!("golden/full-objects.yaml");
    let mut kinds = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let doc = Value::deserialize(doc).unwrap();
        let kind = AdmittedKind::from_object(&doc).unwrap();
        let back = match kind {
            AdmittedKind::PropagationPolicy => round_trip::<PropagationPolicy>(&doc),
            AdmittedKind::ClusterPropagationPolicy => round_trip::<ClusterPropagationPolicy>(&doc),
            AdmittedKind::ClusterTaintPolicy => round_trip::<ClusterTaintPolicy>(&doc),
            AdmittedKind::Cluster => round_trip::<Cluster>(&doc),
            AdmittedKind::ResourceBinding => round_trip::<ResourceBinding>(&doc),
            AdmittedKind::ClusterResourceBinding => round_trip::<ClusterResourceBinding>(&doc),
            AdmittedKind::Work => round_trip::<Work>(&doc),
            AdmittedKind::Event => round_trip::<Event>(&doc),
        };
        let name = format!("{kind:?}");
        // Work manifests are raw JSON: even their nulls survive.
        assert_eq!(back, doc, "{name}");
        assert_eq!(strict_unknown_fields(kind, &doc), vec![], "{name}");
        kinds.push(kind);
    }
    assert_eq!(kinds.len(), 8, "one document per kind");
}
