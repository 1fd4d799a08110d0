//! The API's admission step, between decoding a body and writing it: object names, strict
//! field validation, Karmada defaulting and validation (pure functions of `flotilla-api`), the
//! decoding of what a status write stores,
//! CustomResourceDefinition checks, and what follows a write (a CRD write answers once the kind
//! registry has applied it).

use crate::api::error::{ApiError, ApiResult, Cause};
use crate::api::http::options::Params;
use crate::api::ApiState;
use crate::kinds::kinds_of_crd;
use flotilla_api::admission::AdmittedKind;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::ResourceType;
use flotilla_api::validation::{strict::strict_unknown_fields, FieldError, Path, ValidationErrors};
use serde_json::Value;
use std::time::Duration;

/// A field error as a `Status` cause: the field goes in `field` only (kubectl prints
/// `field: message`, so a path in the message would show twice).
fn cause(e: &FieldError) -> Cause {
    Cause {
        reason: e.kind.cause_reason().to_string(),
        message: e.message.clone(),
        field: e.path.clone(),
    }
}

fn name_of(obj: &Value) -> String {
    obj.lookup("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn invalid(rt: &ResourceType, obj: &Value, errors: &ValidationErrors) -> ApiError {
    ApiError::invalid(
        &rt.kind,
        &rt.group,
        &name_of(obj),
        errors.0.iter().map(cause).collect(),
    )
}

/// `fieldValidation=Strict`: unknown fields of Flotilla's own kinds are an error (422).
/// Free-form templates have no schema here, so nothing is unknown for them.
pub fn check_strict(params: &Params, rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    let mode = params.get("fieldValidation").map(String::as_str);
    match mode {
        None | Some("") | Some("Ignore") | Some("Warn") => Ok(()),
        Some("Strict") => {
            let errors = AdmittedKind::from_group_kind(&rt.group, &rt.kind)
                .map(|kind| strict_unknown_fields(kind, obj))
                .unwrap_or_default();
            if errors.is_empty() {
                Ok(())
            } else {
                Err(invalid(rt, obj, &ValidationErrors(errors)))
            }
        }
        Some(other) => Err(ApiError::BadRequest(format!(
            "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Warn\", \"Strict\""
        ))),
    }
}

/// Defaults and validates an object about to be written (`old` on updates).
pub fn admit(
    state: &ApiState,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    let mut errors = flotilla_api::validation::validate_metadata(obj, rt.namespaced);
    if errors.is_empty() {
        if let Err(e) = flotilla_api::admission::admit(
            &rt.group,
            &rt.kind,
            obj,
            old,
            &state.defaulting,
            state.clock.now(),
        ) {
            errors.extend(e.0);
        }
    }
    if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
        if let Err(message) = kinds_of_crd(obj) {
            let (path, msg) = message
                .split_once(": ")
                .map(|(p, m)| (p.to_string(), m.to_string()))
                .unwrap_or_else(|| ("spec".to_string(), message.clone()));
            errors.push(FieldError::invalid(&Path::new(&path), "", msg));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(invalid(rt, obj, &ValidationErrors(errors)))
    }
}

/// Validates a status write (`PUT`/`PATCH` of `.../status`): the status it would store must
/// decode as the kind's status; a failure is a 422 naming the field and nothing is written.
pub fn admit_status(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    flotilla_api::admission::admit_status(&rt.group, &rt.kind, obj.get("status"))
        .map_err(|errors| invalid(rt, obj, &errors))
}

/// How long a CRD write waits for the kind registry before answering anyway.
pub const REGISTRY_CATCH_UP: Duration = Duration::from_secs(10);

/// What follows a stored write or delete of `rt`: for a CRD, the answer waits until the kind
/// registry (fed by the store's watch, see [`crate::kinds`]) has applied the kind's last
/// change, so discovery right after the answer shows it.
pub async fn after_write(state: &ApiState, rt: &ResourceType) {
    if !(rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition") {
        return;
    }
    let revision = match state.store.kind_revision(rt).await {
        Ok(revision) => revision,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the CRD revision; answering without waiting");
            return;
        }
    };
    if !state.registry.caught_up(revision, REGISTRY_CATCH_UP).await {
        tracing::warn!(
            revision,
            applied = state.registry.applied_revision(),
            wait_ms = REGISTRY_CATCH_UP.as_millis() as u64,
            "the kind registry did not apply a CRD write in time; discovery may lag"
        );
    }
}
