//! Validation: whether an object may be stored, and if not every reason why, each naming the
//! field at fault ([`FieldError`]). One module per kind family; the shared metadata and
//! selector checks live here. Validation runs on defaulted objects (see
//! [`crate::admission`]), so it checks what will be stored.

mod cluster;
mod cluster_taint_policy;
mod meta;
mod objects;
mod policy;
pub mod strict;

use std::fmt;

pub use cluster::validate_cluster;
pub use cluster_taint_policy::validate_cluster_taint_policy;
pub use objects::{
    validate_cluster_resource_binding, validate_event, validate_resource_binding, validate_work,
};
pub use policy::{validate_cluster_propagation_policy, validate_propagation_policy};
pub use strict::strict_unknown_fields;

/// Kind of a field error, as Kubernetes' `field.ErrorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldErrorKind {
    /// A required field is missing.
    Required,
    /// The value is malformed or out of range.
    Invalid,
    /// The field may not be set (here, or to this value, or changed).
    Forbidden,
    /// The value is not one of the supported ones.
    NotSupported,
    /// The value appears twice where it must be unique.
    Duplicate,
    /// The value is too long.
    TooLong,
}

impl FieldErrorKind {
    /// The `reason` Kubernetes puts in `Status.details.causes[]` for this kind.
    pub fn cause_reason(&self) -> &'static str {
        match self {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::TooLong => "FieldValueTooLong",
        }
    }
}

/// One reason an object is rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    /// Path of the field, e.g. `spec.placement.spreadConstraints[0].maxGroups`.
    pub path: String,
    /// What kind of problem.
    pub kind: FieldErrorKind,
    /// The offending value, when there is one worth showing.
    pub value: Option<String>,
    /// What is wrong, for humans.
    pub message: String,
}

impl FieldError {
    fn new(path: &Path, kind: FieldErrorKind, value: Option<String>, message: String) -> Self {
        FieldError {
            path: path.0.clone(),
            kind,
            value,
            message,
        }
    }

    /// A required field is missing.
    pub fn required(path: &Path, message: impl Into<String>) -> Self {
        Self::new(path, FieldErrorKind::Required, None, message.into())
    }

    /// The value is invalid.
    pub fn invalid(path: &Path, value: impl fmt::Display, message: impl Into<String>) -> Self {
        Self::new(
            path,
            FieldErrorKind::Invalid,
            Some(value.to_string()),
            message.into(),
        )
    }

    /// The field may not be set or changed.
    pub fn forbidden(path: &Path, message: impl Into<String>) -> Self {
        Self::new(path, FieldErrorKind::Forbidden, None, message.into())
    }

    /// The value is not one of `supported`.
    pub fn not_supported(path: &Path, value: impl fmt::Display, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
        let value = value.to_string();
        Self::new(
            path,
            FieldErrorKind::NotSupported,
            Some(value.clone()),
            format!(
                "Unsupported value: \"{value}\": supported values: {}",
                list.join(", ")
            ),
        )
    }

    /// The value is already used.
    pub fn duplicate(path: &Path, value: impl fmt::Display) -> Self {
        let value = value.to_string();
        Self::new(
            path,
            FieldErrorKind::Duplicate,
            Some(value.clone()),
            format!("Duplicate value: \"{value}\""),
        )
    }

    /// The value is longer than `max`.
    pub fn too_long(path: &Path, value: impl fmt::Display, max: usize) -> Self {
        Self::new(
            path,
            FieldErrorKind::TooLong,
            Some(value.to_string()),
            format!("must have at most {max} characters"),
        )
    }
}

/// Every reason an object is rejected. Display lists each as `path: message`.
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl ValidationErrors {
    /// Ok when there are no errors.
    pub fn into_result(errors: Vec<FieldError>) -> Result<(), ValidationErrors> {
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(errors))
        }
    }

    /// The errors.
    pub fn errors(&self) -> &[FieldError] {
        &self.0
    }
}

impl From<FieldError> for ValidationErrors {
    fn from(e: FieldError) -> Self {
        ValidationErrors(vec![e])
    }
}

/// A field path under construction: `spec.placement.spreadConstraints[0]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    /// A root path (`metadata`, `spec`).
    pub fn new(root: &str) -> Self {
        Path(root.to_string())
    }

    /// `self.name`.
    pub fn child(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    /// `self[i]`.
    pub fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    /// `self[key]`, for map entries.
    pub fn key(&self, key: &str) -> Path {
        Path(format!("{}[{key}]", self.0))
    }

    /// The path text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Pushes an Invalid error per reason a name check gave.
fn push_reasons(errs: &mut Vec<FieldError>, path: &Path, value: &str, reasons: Vec<String>) {
    errs.extend(
        reasons
            .into_iter()
            .map(|r| FieldError::invalid(path, value, r)),
    );
}

/// Checks a `metav1.LabelSelector`: keys, values, and values against operators.
fn validate_label_selector(
    sel: &crate::selector::LabelSelector,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    use crate::selector::LabelSelectorOperator as Op;
    for (k, v) in &sel.match_labels {
        let p = path.child("matchLabels");
        push_reasons(errs, &p, k, crate::names::qualified_name(k));
        push_reasons(errs, &p, v, crate::names::label_value(v));
    }
    for (i, e) in sel.match_expressions.iter().enumerate() {
        let p = path.child("matchExpressions").index(i);
        push_reasons(
            errs,
            &p.child("key"),
            &e.key,
            crate::names::qualified_name(&e.key),
        );
        match e.operator {
            Op::In | Op::NotIn if e.values.is_empty() => errs.push(FieldError::required(
                &p.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            Op::Exists | Op::DoesNotExist if !e.values.is_empty() => {
                errs.push(FieldError::forbidden(
                    &p.child("values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ))
            }
            _ => {}
        }
        for (j, v) in e.values.iter().enumerate() {
            push_reasons(
                errs,
                &p.child("values").index(j),
                v,
                crate::names::label_value(v),
            );
        }
    }
}

/// Checks the metadata of an object of any kind, templates included: `metadata` must decode
/// as ObjectMeta, the name must be a DNS-1123 subdomain (or a generateName be given), the
/// namespace fit the kind's scope, and labels and annotations be well-formed.
pub fn validate_metadata(obj: &serde_json::Value, namespaced: bool) -> Vec<FieldError> {
    let root = Path::new("metadata");
    let Some(metadata) = obj.get("metadata") else {
        return vec![FieldError::required(&root, "metadata is required")];
    };
    let meta: crate::meta::ObjectMeta = match crate::admission::decode(metadata) {
        Ok(m) => m,
        Err(mut e) => {
            e.path = if e.path.is_empty() {
                root.as_str().to_string()
            } else {
                format!("metadata.{}", e.path)
            };
            return vec![e];
        }
    };
    let mut errs = Vec::new();
    meta::validate_object_meta(
        &meta,
        namespaced,
        crate::names::dns1123_subdomain,
        &mut errs,
    );
    errs
}

#[cfg(test)]
mod validate_metadata_tests {
    use super::validate_metadata;
    use serde_json::json;

    #[test]
    fn metadata_of_any_kind() {
        let table = [
            (
                json!({"metadata": {"name": "ok", "namespace": "default"}}),
                true,
                None,
            ),
            (
                json!({"metadata": {"generateName": "ok-", "namespace": "d"}}),
                true,
                None,
            ),
            (json!({}), true, Some("metadata")),
            (json!({"metadata": "x"}), true, Some("metadata")),
            (
                json!({"metadata": {"name": "Bad_Name", "namespace": "d"}}),
                true,
                Some("metadata.name"),
            ),
            (
                json!({"metadata": {"name": "a"}}),
                true,
                Some("metadata.namespace"),
            ),
            (
                json!({"metadata": {"name": "a", "namespace": "d"}}),
                false,
                Some("metadata.namespace"),
            ),
            (
                json!({"metadata": {"name": "a", "labels": {"a": 1}}}),
                false,
                Some("metadata.labels"),
            ),
            (
                json!({"metadata": {"name": "a", "labels": {"-bad": "x"}}}),
                false,
                Some("metadata.labels"),
            ),
            (
                json!({"metadata": {"name": "a", "finalizers": "x"}}),
                false,
                Some("metadata.finalizers"),
            ),
        ];
        for (obj, namespaced, want) in table {
            let errs = validate_metadata(&obj, namespaced);
            match want {
                None => assert!(errs.is_empty(), "{obj}: {errs:?}"),
                Some(path) => assert!(
                    errs.iter().any(|e| e.path.starts_with(path)),
                    "{obj}: want {path}, got {errs:?}"
                ),
            }
        }
    }
}
