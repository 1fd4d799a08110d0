//! Checks of `metadata` shared by every kind: name syntax, namespace scope, label and
//! annotation syntax.

use super::{push_reasons, FieldError, Path};
use crate::meta::ObjectMeta;
use crate::names;

/// How a kind's names are checked.
pub(crate) type NameCheck = fn(&str) -> Vec<String>;

/// Checks metadata. `namespaced` says whether the kind lives in a namespace.
pub(crate) fn validate_object_meta(
    meta: &ObjectMeta,
    namespaced: bool,
    name_check: NameCheck,
    errs: &mut Vec<FieldError>,
) {
    let path = Path::new("metadata");
    if meta.name.is_empty() {
        if meta.generate_name.is_empty() {
            errs.push(FieldError::required(
                &path.child("name"),
                "name or generateName is required",
            ));
        }
    } else {
        push_reasons(
            errs,
            &path.child("name"),
            &meta.name,
            name_check(&meta.name),
        );
    }
    if namespaced {
        if meta.namespace.is_empty() {
            errs.push(FieldError::required(
                &path.child("namespace"),
                "namespace is required for this kind",
            ));
        } else {
            push_reasons(
                errs,
                &path.child("namespace"),
                &meta.namespace,
                names::dns1123_label(&meta.namespace),
            );
        }
    } else if !meta.namespace.is_empty() {
        errs.push(FieldError::forbidden(
            &path.child("namespace"),
            "not allowed on this type: it is cluster-scoped",
        ));
    }
    for (k, v) in &meta.labels {
        push_reasons(errs, &path.child("labels"), k, names::qualified_name(k));
        push_reasons(errs, &path.child("labels").key(k), v, names::label_value(v));
    }
    for k in meta.annotations.keys() {
        push_reasons(
            errs,
            &path.child("annotations"),
            k,
            names::qualified_name(&k.to_ascii_lowercase()),
        );
    }
}
