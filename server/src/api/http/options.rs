//! What a request asks for besides its path and body: the query parameters and the
//! `DeleteOptions` body, checked before anything is read or written. A value Kubernetes would
//! refuse (`dryRun=Bogus`, `gracePeriodSeconds=abc`, `resourceVersionMatch=Bogus`, a
//! propagation policy that does not exist, a DeleteOptions field of the wrong type) is a 400
//! naming the parameter, so a malformed delete never deletes and a malformed dry run never
//! writes.

use crate::api::error::{ApiError, ApiResult, Cause};
use crate::store::{DeleteOptions, ListOptions, ObjectFilter, Propagation};
use flotilla_api::json_pointer::JsonPointer;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// Query parameters of resource requests (the last value of a repeated key wins, except
/// `dryRun`, whose every value is checked).
#[derive(Clone, Debug, Default)]
pub struct Params {
    values: HashMap<String, String>,
    dry_run: Vec<String>,
}

impl Params {
    /// Decodes a raw query string (`a=b&c=d`); undecodable bytes become U+FFFD, as in
    /// `application/x-www-form-urlencoded`.
    pub fn parse(query: Option<&str>) -> Self {
        let mut params = Params::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            if k == "dryRun" {
                params.dry_run.push(v.to_string());
            }
            params.values.insert(k.into_owned(), v.into_owned());
        }
        params
    }

    /// Parameters from pairs (tests and internal callers).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        Self::parse(Some(&query))
    }

    /// The value of a parameter.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.values.get(key)
    }

    /// Whether the request is a dry run (`dryRun=All`). [`check`] has refused every other
    /// value before this is asked.
    pub fn dry_run(&self) -> bool {
        self.dry_run.iter().any(|v| v == "All")
    }
}

fn bad(param: &str, value: &str, why: &str) -> ApiError {
    ApiError::BadRequest(format!("{param}: Invalid value: {value:?}: {why}"))
}

fn unsupported(param: &str, value: &str, supported: &[&str]) -> ApiError {
    let list = supported
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    ApiError::BadRequest(format!(
        "{param}: Unsupported value: {value:?}: supported values: {list}"
    ))
}

fn check_bool(params: &Params, key: &str) -> ApiResult<()> {
    match params.get(key).map(String::as_str) {
        None | Some("true" | "false" | "1" | "0" | "") => Ok(()),
        Some(v) => Err(bad(key, v, "must be true or false")),
    }
}

fn check_int(params: &Params, key: &str, min: i64) -> ApiResult<()> {
    match params.get(key) {
        None => Ok(()),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= min => Ok(()),
            Ok(_) => Err(bad(key, v, &format!("must be an integer >= {min}"))),
            Err(_) => Err(bad(key, v, "must be an integer")),
        },
    }
}

/// Checks every query parameter Flotilla reads. Unknown parameters are ignored, as Kubernetes
/// ignores them.
pub fn check(params: &Params) -> ApiResult<()> {
    for v in &params.dry_run {
        if v != "All" {
            return Err(unsupported("dryRun", v, &["All"]));
        }
    }
    if let Some(v) = params.get("fieldValidation") {
        if !matches!(v.as_str(), "" | "Ignore" | "Warn" | "Strict") {
            return Err(unsupported(
                "fieldValidation",
                v,
                &["Ignore", "Warn", "Strict"],
            ));
        }
    }
    if let Some(v) = params.get("propagationPolicy") {
        propagation(Some(v))?;
    }
    if let Some(v) = params.get("resourceVersion") {
        if !v.is_empty() && v.parse::<u64>().is_err() {
            return Err(bad(
                "resourceVersion",
                v,
                "must be a resourceVersion the server gave",
            ));
        }
    }
    check_int(params, "gracePeriodSeconds", i64::MIN)?;
    check_int(params, "timeoutSeconds", 0)?;
    check_int(params, "limit", 0)?;
    for key in [
        "watch",
        "allowWatchBookmarks",
        "orphanDependents",
        "sendInitialEvents",
    ] {
        check_bool(params, key)?;
    }
    if params.get("orphanDependents").is_some() && params.get("propagationPolicy").is_some() {
        return Err(ApiError::BadRequest(
            "propagationPolicy: Invalid value: orphanDependents and propagationPolicy cannot both be set".into(),
        ));
    }
    let causes = list_option_causes(params);
    if causes.is_empty() {
        return Ok(());
    }
    let detail = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect::<Vec<_>>()
        .join(", ");
    Err(ApiError::Invalid {
        message: format!("ListOptions.meta.k8s.io \"\" is invalid: {detail}"),
        name: String::new(),
        group: "meta.k8s.io".into(),
        kind: "ListOptions".into(),
        causes,
    })
}

/// Whether a boolean query parameter is true (`true` or `1`, as [`check`] accepts them).
pub fn flag(params: &Params, key: &str) -> bool {
    params.get(key).is_some_and(|v| v == "true" || v == "1")
}

/// `sendInitialEvents` when given (a value, even `false`), as Kubernetes reads the pointer.
pub fn send_initial_events(params: &Params) -> Option<bool> {
    params
        .get("sendInitialEvents")
        .filter(|v| !v.is_empty())
        .map(|v| v == "true" || v == "1")
}

/// kube-apiserver's `ValidateListOptions` with the WatchList feature on (as it is from 1.32):
/// the rules on `resourceVersionMatch` and `sendInitialEvents`, for a list and for a watch.
/// Like Kubernetes it does not ask a streaming watch for `allowWatchBookmarks`: without it the
/// stream simply has no initial-events-end bookmark.
fn list_option_causes(params: &Params) -> Vec<Cause> {
    let get = |key: &str| params.get(key).map(String::as_str).unwrap_or("");
    let forbidden = |field: &str, detail: &str| Cause {
        reason: "FieldValueForbidden".into(),
        message: format!("Forbidden: {detail}"),
        field: field.into(),
    };
    let not_supported = |field: &str, value: &str, supported: &[&str]| Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            supported
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        field: field.into(),
    };
    let matched = get("resourceVersionMatch");
    let send_initial = send_initial_events(params);
    let rvm = "resourceVersionMatch";
    let mut causes = Vec::new();
    if flag(params, "watch") {
        if send_initial.is_some() && matched != "NotOlderThan" {
            causes.push(forbidden(
                rvm,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !matched.is_empty() {
            if send_initial.is_none() {
                causes.push(forbidden(
                    rvm,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if matched != "NotOlderThan" {
                causes.push(not_supported(rvm, matched, &["NotOlderThan"]));
            }
            if !get("continue").is_empty() {
                causes.push(forbidden(
                    rvm,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        return causes;
    }
    if !matched.is_empty() {
        if get("resourceVersion").is_empty() {
            causes.push(forbidden(
                rvm,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !get("continue").is_empty() {
            causes.push(forbidden(
                rvm,
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if matched != "Exact" && matched != "NotOlderThan" {
            causes.push(not_supported(rvm, matched, &["Exact", "NotOlderThan", ""]));
        }
        if matched == "Exact" && get("resourceVersion") == "0" {
            causes.push(forbidden(
                rvm,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if send_initial.is_some() {
        causes.push(forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    causes
}

fn propagation(value: Option<&String>) -> ApiResult<Propagation> {
    match value.map(String::as_str) {
        None | Some("") | Some("Background") => Ok(Propagation::Background),
        Some("Foreground") => Ok(Propagation::Foreground),
        Some("Orphan") => Ok(Propagation::Orphan),
        Some(other) => Err(unsupported(
            "propagationPolicy",
            other,
            &["Background", "Foreground", "Orphan"],
        )),
    }
}

/// The `DeleteOptions` body Kubernetes clients send (kubectl sends one on every delete).
/// Unknown fields are ignored; a known field of the wrong type is an error.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteOptionsBody {
    kind: Option<String>,
    /// Checked for its type only: Flotilla deletes at once, there is no grace period to wait.
    #[allow(dead_code)]
    grace_period_seconds: Option<i64>,
    preconditions: Option<PreconditionsBody>,
    orphan_dependents: Option<bool>,
    propagation_policy: Option<String>,
    dry_run: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PreconditionsBody {
    uid: Option<String>,
    resource_version: Option<String>,
}

/// What a delete asks for, from the query and an optional `DeleteOptions` body (already
/// parsed): the store's options and whether it is a dry run.
pub fn delete_options(
    params: &Params,
    body: Option<serde_json::Value>,
) -> ApiResult<(DeleteOptions, bool)> {
    check(params)?;
    let body: DeleteOptionsBody = match body {
        None => DeleteOptionsBody::default(),
        Some(doc) => serde_json::from_value(doc)
            .map_err(|e| ApiError::BadRequest(format!("the DeleteOptions body is invalid: {e}")))?,
    };
    if let Some(kind) = body.kind.as_deref() {
        if !kind.is_empty() && kind != "DeleteOptions" {
            return Err(ApiError::BadRequest(format!(
                "kind: Invalid value: {kind:?}: the body of a delete must be a DeleteOptions"
            )));
        }
    }
    let mut dry_run = params.dry_run();
    for v in body.dry_run.iter().flatten() {
        if v != "All" {
            return Err(unsupported("dryRun", v, &["All"]));
        }
        dry_run = true;
    }
    let orphan = body.orphan_dependents.or_else(|| {
        params
            .get("orphanDependents")
            .map(|v| v == "true" || v == "1")
    });
    let policy = body
        .propagation_policy
        .or_else(|| params.get("propagationPolicy").cloned());
    if orphan.is_some() && policy.as_deref().is_some_and(|p| !p.is_empty()) {
        return Err(ApiError::BadRequest(
            "propagationPolicy: Invalid value: orphanDependents and propagationPolicy cannot both be set".into(),
        ));
    }
    let propagation = match (orphan, policy) {
        (Some(true), _) => Propagation::Orphan,
        (_, p) => propagation(p.as_ref())?,
    };
    let preconditions = body.preconditions.unwrap_or_default();
    let precondition_resource_version = match preconditions.resource_version.as_deref() {
        None | Some("") => None,
        Some(rv) => Some(rv.parse().map_err(|_| {
            bad(
                "preconditions.resourceVersion",
                rv,
                "must be a resourceVersion the server gave",
            )
        })?),
    };
    Ok((
        DeleteOptions {
            propagation,
            precondition_uid: preconditions.uid.filter(|u| !u.is_empty()),
            precondition_resource_version,
        },
        dry_run,
    ))
}

/// Builds list options from `labelSelector`, `fieldSelector`, `limit` and `continue`.
pub fn list_options(params: &Params) -> ApiResult<ListOptions> {
    let filter = selector_filter(
        params.get("labelSelector").map(String::as_str),
        params.get("fieldSelector").map(String::as_str),
    )?;
    let limit = match params.get("limit").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(l) => Some(l.parse::<usize>().map_err(|_| {
            ApiError::BadRequest(format!(
                "limit: invalid value {l:?}: must be a positive integer"
            ))
        })?),
    };
    Ok(ListOptions {
        filter,
        limit,
        continue_token: params.get("continue").filter(|c| !c.is_empty()).cloned(),
    })
}

/// Builds a store filter from `labelSelector` and `fieldSelector` query values.
pub fn selector_filter(
    label: Option<&str>,
    field: Option<&str>,
) -> ApiResult<Option<ObjectFilter>> {
    let labels = match label.filter(|s| !s.trim().is_empty()) {
        Some(s) => Some(
            flotilla_api::selector::LabelRequirements::parse(s)
                .map_err(|e| ApiError::BadRequest(format!("labelSelector: {e}")))?,
        ),
        None => None,
    };
    let fields = match field.filter(|s| !s.trim().is_empty()) {
        Some(s) => Some(
            flotilla_api::selector::FieldSelector::parse(s)
                .map_err(|e| ApiError::BadRequest(format!("fieldSelector: {e}")))?,
        ),
        None => None,
    };
    if labels.is_none() && fields.is_none() {
        return Ok(None);
    }
    Ok(Some(Arc::new(move |obj: &Value| {
        let label_ok = labels.as_ref().is_none_or(|l| {
            let map = obj
                .lookup("/metadata/labels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            l.matches(&map)
        });
        label_ok && fields.as_ref().is_none_or(|f| f.matches(obj))
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn query_values_kubernetes_refuses_are_400() {
        let ok: &[&[(&str, &str)]] = &[
            &[],
            &[("dryRun", "All")],
            &[("fieldValidation", "Strict")],
            &[("propagationPolicy", "Foreground")],
            &[("gracePeriodSeconds", "0")],
            &[
                ("resourceVersion", "5"),
                ("resourceVersionMatch", "NotOlderThan"),
            ],
            &[
                ("watch", "true"),
                ("allowWatchBookmarks", "1"),
                ("timeoutSeconds", "3"),
            ],
            &[("unknownParameter", "whatever")],
        ];
        for pairs in ok {
            assert!(
                check(&Params::from_pairs(pairs.iter().copied())).is_ok(),
                "{pairs:?}"
            );
        }
        let bad: &[&[(&str, &str)]] = &[
            &[("dryRun", "Bogus")],
            &[("dryRun", "")],
            &[("dryRun", "All"), ("dryRun", "None")],
            &[("fieldValidation", "Loose")],
            &[("propagationPolicy", "Sideways")],
            &[("gracePeriodSeconds", "abc")],
            &[("resourceVersion", "abc")],
            &[("timeoutSeconds", "-1")],
            &[("limit", "x")],
            &[("watch", "yes")],
            &[
                ("orphanDependents", "true"),
                ("propagationPolicy", "Orphan"),
            ],
        ];
        for pairs in bad {
            let err = check(&Params::from_pairs(pairs.iter().copied()));
            assert!(matches!(err, Err(ApiError::BadRequest(_))), "{pairs:?}");
        }
    }

    #[test]
    fn list_and_watch_options_follow_kube_apiserver() {
        // The rows of kube-apiserver's own TestValidateListOptions.
        /// (query, the causes' "field: message" of Kubernetes' 422, none if valid)
        type Row = (
            &'static [(&'static str, &'static str)],
            &'static [&'static str],
        );
        let table: &[Row] = &[
            (&[], &[]),
            (&[("resourceVersion", "1"), ("resourceVersionMatch", "Exact")], &[]),
            (
                &[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")],
                &["resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""],
            ),
            (&[("resourceVersion", "0"), ("resourceVersionMatch", "NotOlderThan")], &[]),
            (
                &[("resourceVersion", "0"), ("resourceVersionMatch", "foo")],
                &[r#"resourceVersionMatch: Unsupported value: "foo": supported values: "Exact", "NotOlderThan", """#],
            ),
            (
                &[("resourceVersionMatch", "Exact")],
                &["resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"],
            ),
            (
                &[("sendInitialEvents", "true")],
                &["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"],
            ),
            (&[("watch", "true")], &[]),
            (
                &[("watch", "true"), ("sendInitialEvents", "true"),
                  ("resourceVersionMatch", "NotOlderThan"), ("allowWatchBookmarks", "true")],
                &[],
            ),
            (
                &[("watch", "true"), ("sendInitialEvents", "false"),
                  ("resourceVersionMatch", "NotOlderThan"), ("allowWatchBookmarks", "true")],
                &[],
            ),
            // Kubernetes does not require allowWatchBookmarks (a legacy rv=0 watch could already
            // ask for the initial events).
            (
                &[("watch", "true"), ("sendInitialEvents", "true"),
                  ("resourceVersionMatch", "NotOlderThan")],
                &[],
            ),
            (
                &[("watch", "true"), ("resourceVersionMatch", "NotOlderThan")],
                &["resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"],
            ),
            (
                &[("watch", "true"), ("sendInitialEvents", "true")],
                &["resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"],
            ),
            (
                &[("watch", "true"), ("sendInitialEvents", "true"),
                  ("resourceVersionMatch", "Exact"), ("allowWatchBookmarks", "true")],
                &[
                    "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    r#"resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan""#,
                ],
            ),
            (
                &[("watch", "true"), ("sendInitialEvents", "true"),
                  ("resourceVersionMatch", "NotOlderThan"), ("continue", "123")],
                &["resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"],
            ),
        ];
        for (pairs, want) in table {
            let got = check(&Params::from_pairs(pairs.iter().copied()));
            match got {
                Ok(()) => assert!(want.is_empty(), "{pairs:?}: valid, want {want:?}"),
                Err(ApiError::Invalid {
                    causes,
                    kind,
                    group,
                    message,
                    ..
                }) => {
                    let got: Vec<String> = causes
                        .iter()
                        .map(|c| format!("{}: {}", c.field, c.message))
                        .collect();
                    assert_eq!(got, *want, "{pairs:?}");
                    assert_eq!(
                        (kind.as_str(), group.as_str()),
                        ("ListOptions", "meta.k8s.io")
                    );
                    assert!(message.starts_with("ListOptions.meta.k8s.io \"\" is invalid: "));
                }
                Err(other) => panic!("{pairs:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn delete_options_from_query_and_body() {
        let none = Params::default();
        let (opts, dry) = delete_options(&none, None).unwrap();
        assert_eq!(opts.propagation, Propagation::Background);
        assert!(!dry);
        let (opts, dry) = delete_options(
            &none,
            Some(json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"],
                "propagationPolicy": "Orphan", "preconditions": {"uid": "u", "resourceVersion": "7"}})),
        )
        .unwrap();
        assert!(dry);
        assert_eq!(opts.propagation, Propagation::Orphan);
        assert_eq!(opts.precondition_uid.as_deref(), Some("u"));
        assert_eq!(opts.precondition_resource_version, Some(7));
        let (_, dry) = delete_options(&Params::from_pairs([("dryRun", "All")]), None).unwrap();
        assert!(dry);
        let (opts, _) = delete_options(&none, Some(json!({"orphanDependents": true}))).unwrap();
        assert_eq!(opts.propagation, Propagation::Orphan);
        for body in [
            json!({"propagationPolicy": "Sideways"}),
            json!({"propagationPolicy": 3}),
            json!({"gracePeriodSeconds": "abc"}),
            json!({"dryRun": "All"}),
            json!({"dryRun": ["Bogus"]}),
            json!({"preconditions": {"resourceVersion": "x"}}),
            json!({"preconditions": "x"}),
            json!({"orphanDependents": "yes"}),
            json!({"kind": "Pod"}),
            json!({"orphanDependents": false, "propagationPolicy": "Foreground"}),
        ] {
            assert!(
                matches!(
                    delete_options(&none, Some(body.clone())),
                    Err(ApiError::BadRequest(_))
                ),
                "{body}"
            );
        }
    }
}
