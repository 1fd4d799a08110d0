//! Every document of the failover scenarios (`examples/*.yaml` of the repository)
//! goes through admission as the API would admit it: Flotilla's kinds decode to their types,
//! are accepted, keep every field the user wrote with the same value (defaults only add), keep
//! the purge-mode spelling, have no unknown fields, and a second admission changes nothing.
//! Resource templates stay unstructured and untouched.

// Helpers outside #[test] functions unwrap too: this whole crate is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use flotilla_api::admission::decode;
use flotilla_api::policy::{PropagationPolicy, PurgeMode};
use flotilla_api::validation::strict_unknown_fields;
use flotilla_api::{admit, AdmittedKind, DefaultingConfig};
use serde::Deserialize;
use serde_json::Value;

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Every place where `admitted` lacks or changes a value of `original` (arrays may grow).
fn missing_or_changed(original: &Value, admitted: &Value, path: &str, out: &mut Vec<String>) {
    match (original, admitted) {
        (Value::Object(o), Value::Object(a)) => {
            for (k, v) in o {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    Some(av) => missing_or_changed(v, av, &p, out),
                    None => out.push(format!("{p}: missing")),
                }
            }
        }
        (Value::Array(o), Value::Array(a)) if a.len() >= o.len() => {
            for (i, v) in o.iter().enumerate() {
                missing_or_changed(v, &a[i], &format!("{path}[{i}]"), out);
            }
        }
        (o, a) if o == a => {}
        (o, a) => out.push(format!("{path}: {o} became {a}")),
    }
}

fn load(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Admits one document as the API would, returning the stored form of Flotilla's kinds.
fn admit_document(name: &str, doc: &Value) -> Option<Value> {
    let kind = AdmittedKind::from_object(doc);
    let mut obj = doc.clone();
    let Some(kind) = kind else {
        // A resource template: unstructured, accepted as is.
        let k = doc["kind"].as_str().unwrap().to_string();
        admit(
            &group_of(doc),
            &k,
            &mut obj,
            None,
            &DefaultingConfig::default(),
            now(),
        )
        .unwrap();
        assert_eq!(&obj, doc, "{name}: template changed");
        return None;
    };
    // The server assigns the uid before admission.
    obj["metadata"]["uid"] = Value::from(format!("uid-{}", name.replace(['#', '_'], "-")));
    let unknown = strict_unknown_fields(kind, &obj);
    assert!(unknown.is_empty(), "{name}: unknown fields {unknown:?}");

    let admitted = admit_create(&obj).unwrap_or_else(|e| panic!("{name}: rejected: {e}"));
    let mut diffs = Vec::new();
    missing_or_changed(&obj, &admitted, "", &mut diffs);
    assert!(diffs.is_empty(), "{name}: {diffs:#?}");

    let again = admit_create(&admitted).unwrap();
    assert_eq!(again, admitted, "{name}: second admission changed it");
    let update = admit_with(&admitted, Some(&admitted), &DefaultingConfig::default()).unwrap();
    assert_eq!(update, admitted, "{name}: no-op update changed it");
    Some(admitted)
}

#[test]
fn every_scenario_document_is_admitted_unchanged_but_for_defaults() {
    let dir = scenarios_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!(
            "\n!!!!! SKIPPING scenario admission test: {} not found !!!!!\n",
            dir.display()
        );
        return;
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenarios in {}", dir.display());

    let mut policies = 0;
    for file in &files {
        let stem = file.file_stem().unwrap().to_string_lossy().to_string();
        for (i, doc) in load(file).iter().enumerate() {
            let name = format!("{stem}#{i}");
            let Some(admitted) = admit_document(&name, doc) else {
                continue;
            };
            let pp: PropagationPolicy = decode(&admitted).unwrap();
            policies += 1;
            check_scenario_specifics(&stem, &pp, &admitted);
        }
    }
    assert_eq!(policies, files.len(), "one policy per scenario");
}

fn check_scenario_specifics(stem: &str, pp: &PropagationPolicy, admitted: &Value) {
    let spec = &pp.spec;
    // Every policy gets the default not-ready/unreachable tolerations (Part 1).
    let keys: Vec<&str> = spec
        .placement
        .cluster_tolerations
        .iter()
        .map(|t| t.key.as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "cluster.karmada.io/not-ready",
            "cluster.karmada.io/unreachable"
        ],
        "{stem}"
    );
    let app = spec.failover.as_ref().and_then(|f| f.application.as_ref());
    let cluster = spec.failover.as_ref().and_then(|f| f.cluster.as_ref());
    match stem {
        s if s.starts_with("01") => {
            assert_eq!(spec.placement.spread_constraints[0].min_groups, 2);
        }
        s if s.starts_with("02") => {
            let rs = spec.placement.replica_scheduling.as_ref().unwrap();
            assert_eq!(
                rs.weight_preference.as_ref().unwrap().static_weight_list[1].weight,
                2
            );
        }
        s if s.starts_with("03") => {
            let app = app.unwrap();
            assert_eq!(app.purge_mode, Some(PurgeMode::Never));
            assert_eq!(app.grace_period_seconds, None);
            assert_eq!(app.decision_conditions.toleration_seconds, Some(120));
        }
        s if s.starts_with("04") => {
            let app = app.unwrap();
            assert_eq!(app.purge_mode, Some(PurgeMode::Immediately));
            assert_eq!(spec.propagate_deps, Some(true), "defaulted (Part 1)");
            assert_eq!(
                admitted["spec"]["failover"]["application"]["purgeMode"],
                "Immediately"
            );
            let rules = &app.state_preservation.as_ref().unwrap().rules;
            assert_eq!(
                rules[0].alias_label_name,
                "application.karmada.io/failover-jobid"
            );
        }
        s if s.starts_with("05") => {
            let cluster = cluster.unwrap();
            assert_eq!(cluster.purge_mode, Some(PurgeMode::Graciously));
            assert_eq!(cluster.grace_period_seconds, Some(100));
        }
        other => eprintln!("no specific checks for scenario {other}"),
    }
}
