//! Resource paths: `/api/v1/...` and `/apis/<group>/<version>/...` with GET (get, list, watch),
//! POST, PUT, PATCH and DELETE on objects and their `status` subresource, plus the discovery
//! and OpenAPI documents served under the same prefixes. The kinds and subresources the API
//! computes instead of storing are listed in [`crate::api::computed`]; [`serve`] hands them over.

use super::discovery;
use super::openapi;
use crate::api::access::auth::Principal;
use crate::api::access::authz::{self, Write};
use crate::api::computed::{self, Call};
use crate::api::error::{ApiError, ApiResult};
use crate::api::http::limits::within_deadline;
use crate::api::http::off_thread;
use crate::api::http::options::{self, list_options, Params};
use crate::api::http::path;
use crate::api::wire::body::{self, negotiate, respond, Encoding};
use crate::api::wire::table;
use crate::api::wire::target::{check_identity, place, resolve, rt_with_kind, Target};
use crate::api::wire::views;
use crate::api::wire::watch;
use crate::api::write::admission;
use crate::api::write::patch::{apply_patch, PatchError, PatchType};
use crate::api::write::update::write_update;
use crate::api::ApiState;
use crate::store::{DeleteOptions, Deleted, StoreError};
use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use flotilla_api::json_pointer::JsonPointer;
use serde_json::{json, Value};

/// `GET /openapi/v3`.
pub async fn openapi_index(State(state): State<ApiState>) -> Response {
    axum::Json(openapi::index(&state.registry)).into_response()
}

/// `GET /openapi/v3/api/v1` and `/openapi/v3/apis/<group>/<version>`.
pub async fn openapi_group_version(
    State(state): State<ApiState>,
    Path(gv): Path<String>,
) -> ApiResult<Response> {
    let segs: Vec<&str> = gv.split('/').collect();
    let (group, version) = match segs.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return Err(ApiError::no_route(&format!("/openapi/v3/{gv}"))),
    };
    openapi::group_version(&state.registry, group, version)
        .map(|doc| axum::Json(doc).into_response())
        .ok_or_else(|| ApiError::no_route(&format!("/openapi/v3/{gv}")))
}

/// `/api`.
pub async fn dispatch_core_root() -> Response {
    axum::Json(discovery::core_versions()).into_response()
}

/// `/apis`.
pub async fn dispatch_apis_root(State(state): State<ApiState>) -> Response {
    axum::Json(discovery::group_list(&state.registry)).into_response()
}

/// The undecoded path after `prefix`, its decoded segments and its query parameters.
fn split_request(uri: &Uri, prefix: &str) -> ApiResult<(String, Vec<String>, Params)> {
    let full = uri.path().to_string();
    let raw = full.strip_prefix(prefix).unwrap_or_default();
    let segs = path::segments(raw, &full)?;
    Ok((full.clone(), segs, Params::parse(uri.query())))
}

/// A request of one group-version: its APIResourceList when nothing follows, else a resource.
#[allow(clippy::too_many_arguments)]
async fn serve_group_version(
    state: &ApiState,
    who: Option<&Principal>,
    group: &str,
    version: &str,
    tail: &[String],
    path: &str,
    method: Method,
    params: Params,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    if tail.is_empty() {
        return discovery::resource_list(&state.registry, group, version)
            .map(|d| axum::Json(d).into_response())
            .ok_or_else(|| ApiError::no_route(path));
    }
    if path::has_trailing_slash(path) {
        // `configmaps/` is no collection path: an empty name addresses nothing.
        return Err(ApiError::no_route(path));
    }
    // The auth middleware records who calls; without it nobody may write.
    let who = who.ok_or(ApiError::Unauthorized)?;
    match resolve(&state.registry, group, version, tail)? {
        Some(target) => serve(state, who, method, target, params, headers, body).await,
        None => Err(ApiError::no_route(path)),
    }
}

/// Everything under `/api/` (the core group, `v1` only) and `/apis/` (every other group).
pub async fn dispatch(
    State(state): State<ApiState>,
    who: Option<Extension<Principal>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let who = who.as_ref().map(|Extension(p)| p);
    let result = async {
        let core = uri.path().starts_with("/api/");
        let (path, segs, params) = split_request(&uri, if core { "/api/" } else { "/apis/" })?;
        let (group, version, tail) = match (core, segs.as_slice()) {
            (true, []) => return Ok(dispatch_core_root().await),
            (true, [v, tail @ ..]) if v == "v1" => ("", "v1", tail),
            (true, _) => return Err(ApiError::no_route(&path)),
            (false, []) => return Ok(dispatch_apis_root(State(state.clone())).await),
            (false, [group]) => {
                return state
                    .registry
                    .groups()
                    .get(group)
                    .map(|versions| {
                        axum::Json(discovery::group_doc(group, versions)).into_response()
                    })
                    .ok_or_else(|| ApiError::no_route(&path))
            }
            (false, [group, version, tail @ ..]) => (group.as_str(), version.as_str(), tail),
        };
        serve_group_version(
            &state, who, group, version, tail, &path, method, params, headers, body,
        )
        .await
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// One resource request: a computed kind's or subresource's ([`computed::find`]) or the
/// store's CRUD; everything but a watch runs under the request deadline.
#[allow(clippy::too_many_arguments)]
async fn serve(
    state: &ApiState,
    who: &Principal,
    method: Method,
    target: Target,
    params: Params,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let deadline = state.limits.request_timeout;
    // The kinds and subresources the API computes (computed.rs) answer by their own handler,
    // under the same deadline as the stored kinds.
    if let Some(computed) = computed::find(&target) {
        let call = Call {
            state,
            who,
            method,
            target,
            params,
            headers,
            body,
        };
        return within_deadline(deadline, computed.serve(call)).await;
    }
    if let Some(sub) = &target.subresource {
        if sub != "status" || !target.rt.status_subresource {
            return Err(ApiError::no_route(&format!("{}/{}", target.rt.plural, sub)));
        }
    }
    let encoding = negotiate(&headers)?;
    options::check(&params)?;
    let is_watch = params.get("watch").is_some_and(|w| w == "true" || w == "1");
    if method == Method::GET && is_watch {
        return watch::serve(state, &target, &params, &headers).await;
    }
    let named = target.name.is_some();
    let r = Request {
        state,
        who,
        target,
        params,
        headers,
        encoding,
    };
    let work = async {
        match (&method, named) {
            (&Method::GET, true) => get(&r).await,
            (&Method::GET, false) => list(&r).await,
            (&Method::POST, false) => create(&r, body).await,
            (&Method::PUT, true) => update(&r, body).await,
            (&Method::PATCH, true) => patch(&r, body).await,
            (&Method::DELETE, true) => delete(&r, body).await,
            (&Method::DELETE, false) => delete_collection(&r, body).await,
            (m, _) => Err(ApiError::MethodNotAllowed(format!(
                "the server does not allow this method on the requested resource ({m})"
            ))),
        }
    };
    within_deadline(deadline, work).await
}

/// A request to a stored kind, as each verb's handler reads it (the body aside).
struct Request<'a> {
    state: &'a ApiState,
    who: &'a Principal,
    target: Target,
    params: Params,
    headers: HeaderMap,
    encoding: Encoding,
}

impl Request<'_> {
    /// An answer carrying one stored object, as the target shows it.
    fn answer(&self, status: StatusCode, stored: &Value) -> Response {
        answer(&self.target, &self.headers, status, stored, self.encoding)
    }
}

fn accept(headers: &HeaderMap) -> String {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

async fn get(r: &Request<'_>) -> ApiResult<Response> {
    let (state, target, headers, encoding) = (r.state, &r.target, &r.headers, r.encoding);
    let name = target.name.as_deref().unwrap_or_default();
    let mut obj = state
        .store
        .get(&target.rt, target.namespace.as_deref(), name)
        .await
        .map_err(|e| target.store_err(e))?;
    if table::wants_table(&accept(headers)) {
        views::decorate(&target.rt, &mut obj);
        let rv = resource_version_of(&obj);
        let t = table::table(
            &target.rt.group,
            &kind_of(target, &obj),
            std::slice::from_ref(&obj),
            rv,
            None,
            state.clock.now(),
        );
        return Ok(respond(StatusCode::OK, &t, encoding));
    }
    Ok(r.answer(StatusCode::OK, &obj))
}

/// An answer carrying one stored object, as the target shows it ([`Target::present`]).
fn answer(
    target: &Target,
    headers: &HeaderMap,
    status: StatusCode,
    stored: &Value,
    encoding: Encoding,
) -> Response {
    let metadata = views::wants_metadata(headers);
    if target.rewrites(metadata) {
        respond(status, &target.present(stored, metadata), encoding)
    } else {
        respond(status, stored, encoding)
    }
}

fn kind_of(target: &Target, obj: &Value) -> String {
    obj.get("kind")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| target.kind_label())
}

fn resource_version_of(obj: &Value) -> u64 {
    obj.lookup("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A list, read and encoded on the blocking pool ([`off_thread`]).
async fn list(r: &Request<'_>) -> ApiResult<Response> {
    let (state, target, params, headers) = (r.state, &r.target, &r.params, &r.headers);
    let encoding = r.encoding;
    let mut opts = list_options(params)?;
    opts.filter = target.served_filter(opts.filter);
    let store = state.store.clone();
    let target = target.clone();
    let as_table = table::wants_table(&accept(headers));
    let metadata_only = views::wants_metadata(headers);
    let now = state.clock.now();
    off_thread::run(move |runtime| {
        let mut page = runtime
            .block_on(store.list(&target.rt, target.namespace.as_deref(), &opts))
            .map_err(|e| target.store_err(e))?;
        let kind = target.kind_label();
        if as_table {
            for item in &mut page.items {
                views::decorate(&target.rt, item);
            }
            let t = table::table(
                &target.rt.group,
                &kind,
                &page.items,
                page.resource_version,
                page.continue_token.as_deref(),
                now,
            );
            return Ok(respond(StatusCode::OK, &t, encoding));
        }
        let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
        if let Some(c) = &page.continue_token {
            metadata["continue"] = json!(c);
        }
        if let Some(r) = page.remaining {
            metadata["remainingItemCount"] = json!(r);
        }
        let items = if target.rewrites(metadata_only) {
            page.items
                .iter()
                .map(|item| target.present(item, metadata_only))
                .collect()
        } else {
            page.items
        };
        let (list_kind, api_version) = if metadata_only {
            (
                "PartialObjectMetadataList".to_string(),
                "meta.k8s.io/v1".to_string(),
            )
        } else {
            (format!("{kind}List"), target.served().api_version())
        };
        let list = json!({
            "kind": list_kind,
            "apiVersion": api_version,
            "metadata": metadata,
            "items": items,
        });
        Ok(respond(StatusCode::OK, &list, encoding))
    })
    .await
}

async fn create(r: &Request<'_>, body: Body) -> ApiResult<Response> {
    let (state, target, params, headers) = (r.state, &r.target, &r.params, &r.headers);
    let mut obj = body::read_object(headers, body, state.limits.max_body_bytes).await?;
    check_identity(target, &mut obj, false)?;
    let obj = target.to_stored(obj);
    authz::check_write(r.who, place(target), Write::Create { new: &obj })?;
    let created = create_object(state, target, params, obj).await?;
    Ok(r.answer(StatusCode::CREATED, &created))
}

/// Creates `obj` (in its stored form, identity checked).
async fn create_object(
    state: &ApiState,
    target: &Target,
    params: &Params,
    mut obj: Value,
) -> ApiResult<Value> {
    target.check_create(&obj)?;
    let rt = rt_with_kind(target, &obj);
    admission::check_strict(params, &rt, &obj)?;
    // Admission derives permanent ids from the uid, so the object gets one first (the store
    // assigns the final uid; the permanent id only has to be unique).
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    }
    admission::admit(state, &rt, &mut obj, None)?;
    if params.dry_run() {
        return Ok(obj);
    }
    let created = state
        .store
        .create(&rt, obj)
        .await
        .map_err(|e| target.store_err(e))?;
    admission::after_write(state, &rt).await;
    Ok(created)
}

async fn update(r: &Request<'_>, body: Body) -> ApiResult<Response> {
    let (state, target, params, headers) = (r.state, &r.target, &r.params, &r.headers);
    let mut obj = body::read_object(headers, body, state.limits.max_body_bytes).await?;
    check_identity(target, &mut obj, true)?;
    let obj = target.to_stored(obj);
    let rt = rt_with_kind(target, &obj);
    admission::check_strict(params, &rt, &obj)?;
    let name = target.name.as_deref().unwrap_or_default();
    let old = state
        .store
        .get_shared(&rt, target.namespace.as_deref(), name)
        .await
        .map_err(|e| target.store_err(e))?;
    target.check_update(&obj, &old)?;
    authz::check_write(
        r.who,
        place(target),
        Write::Update {
            old: &old,
            new: &obj,
        },
    )?;
    let updated = write_update(state, target, &rt, params, obj, &old).await?;
    Ok(r.answer(StatusCode::OK, &updated))
}

async fn patch(r: &Request<'_>, body: Body) -> ApiResult<Response> {
    let (state, target, params, headers) = (r.state, &r.target, &r.params, &r.headers);
    let ct = body::content_type(headers);
    let kind = PatchType::from_content_type(&ct).ok_or_else(|| {
        ApiError::UnsupportedMediaType(format!(
            "the patch type {ct:?} is not supported: use application/merge-patch+json, \
             application/json-patch+json, application/strategic-merge-patch+json or \
             application/apply-patch+yaml"
        ))
    })?;
    let bytes = body::read(body, state.limits.max_body_bytes).await?;
    let format = if kind == PatchType::Apply {
        body::BodyFormat::Yaml
    } else {
        body::BodyFormat::Json
    };
    let patch_body = body::parse_off_thread(bytes, format).await?;
    let name = target.name.as_deref().unwrap_or_default();
    // The patch may carry its own resourceVersion precondition; otherwise retry on conflicts.
    let pinned = patch_body.lookup("/metadata/resourceVersion").is_some();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let live = match state
            .store
            .get(&target.rt, target.namespace.as_deref(), name)
            .await
        {
            Ok(live) => live,
            Err(StoreError::NotFound { .. }) if kind == PatchType::Apply => {
                authz::check_write(r.who, place(target), Write::CreateByApply)?;
                let mut obj = patch_body.clone();
                if !obj.is_object() {
                    return Err(ApiError::BadRequest(
                        "an apply patch must be an object".into(),
                    ));
                }
                check_identity(target, &mut obj, true)?;
                let obj = target.to_stored(obj);
                let created = create_object(state, target, params, obj).await?;
                return Ok(r.answer(StatusCode::CREATED, &created));
            }
            Err(e) => return Err(target.store_err(e)),
        };
        // The patch applies to the object as the path's kind shows it.
        let mut patched = target.to_served(&live);
        apply_patch(&mut patched, &patch_body, kind, state.limits.max_body_bytes).map_err(|e| {
            match e {
                PatchError::Malformed(m) => ApiError::BadRequest(m),
                PatchError::Failed(m) => ApiError::invalid(
                    &target.kind_label(),
                    &target.rt.group,
                    name,
                    vec![crate::api::error::Cause {
                        reason: "FieldValueInvalid".into(),
                        message: m,
                        field: "patch".into(),
                    }],
                ),
                PatchError::TooLarge(_) => ApiError::TooLarge(e.to_string()),
            }
        })?;
        if !patched.is_object() {
            return Err(ApiError::BadRequest(
                "the patch did not leave an object".into(),
            ));
        }
        check_identity(target, &mut patched, true)?;
        let mut patched = target.to_stored(patched);
        if !pinned {
            patched["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"].clone();
        }
        target.check_update(&patched, &live)?;
        let rt = rt_with_kind(target, &patched);
        // Strict validation holds for every patch type: what the patch left is checked.
        admission::check_strict(params, &rt, &patched)?;
        authz::check_write(
            r.who,
            place(target),
            Write::Update {
                old: &live,
                new: &patched,
            },
        )?;
        match write_update(state, target, &rt, params, patched, &live).await {
            Err(ApiError::Conflict { .. }) if !pinned && attempts < 8 => continue,
            Err(e) => return Err(e),
            Ok(updated) => return Ok(r.answer(StatusCode::OK, &updated)),
        }
    }
}

/// Reads the options of a delete from the query and an optional `DeleteOptions` body; a
/// malformed one is a 400 before anything is deleted.
async fn delete_options(r: &Request<'_>, body: Body) -> ApiResult<(DeleteOptions, bool)> {
    let (state, params, headers) = (r.state, &r.params, &r.headers);
    let bytes = body::read(body, state.limits.max_body_bytes).await?;
    let doc = if bytes.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let format = body::object_format(&body::content_type(headers))?;
        Some(body::parse_off_thread(bytes, format).await?)
    };
    options::delete_options(params, doc)
}

async fn delete(r: &Request<'_>, body: Body) -> ApiResult<Response> {
    let (state, target) = (r.state, &r.target);
    let (opts, dry_run) = delete_options(r, body).await?;
    let name = target.name.as_deref().unwrap_or_default();
    if dry_run {
        let obj = state
            .store
            .get(&target.rt, target.namespace.as_deref(), name)
            .await
            .map_err(|e| target.store_err(e))?;
        check_preconditions(target, &obj, &opts)?;
        return Ok(r.answer(StatusCode::OK, &obj));
    }
    let outcome = state
        .store
        .delete(&target.rt, target.namespace.as_deref(), name, &opts)
        .await
        .map_err(|e| target.store_err(e))?;
    crate::api::access::registration::revoke_on_delete(
        state,
        &target.rt,
        target.namespace.as_deref(),
        name,
    )
    .await;
    admission::after_write(state, &target.rt).await;
    // Kubernetes answers 200 with the object whether it is gone or waits for finalizers.
    let (Deleted::Gone(obj) | Deleted::Pending(obj)) = outcome;
    Ok(r.answer(StatusCode::OK, &obj))
}

/// What a dry-run delete would check of the stored object: its preconditions.
fn check_preconditions(target: &Target, obj: &Value, opts: &DeleteOptions) -> ApiResult<()> {
    let uid = obj.lookup("/metadata/uid").and_then(Value::as_str);
    let failed = opts
        .precondition_uid
        .as_deref()
        .is_some_and(|u| Some(u) != uid)
        || opts
            .precondition_resource_version
            .is_some_and(|rv| rv != resource_version_of(obj));
    if failed {
        return Err(ApiError::Conflict {
            message: "Precondition failed: the stored object's uid or resourceVersion differs"
                .into(),
            name: target.name.clone().unwrap_or_default(),
            group: target.rt.group.clone(),
            kind: target.rt.plural.clone(),
        });
    }
    Ok(())
}

async fn delete_collection(r: &Request<'_>, body: Body) -> ApiResult<Response> {
    let (state, target, params, encoding) = (r.state, &r.target, &r.params, r.encoding);
    let (delete_opts, dry_run) = delete_options(r, body).await?;
    if delete_opts.precondition_uid.is_some() || delete_opts.precondition_resource_version.is_some()
    {
        return Err(ApiError::BadRequest(
            "preconditions: Forbidden: a collection delete takes no preconditions".into(),
        ));
    }
    let mut opts = list_options(params)?;
    opts.limit = None;
    opts.filter = target.served_filter(opts.filter);
    let page = state
        .store
        .list(&target.rt, target.namespace.as_deref(), &opts)
        .await
        .map_err(|e| target.store_err(e))?;
    if dry_run {
        return Ok(respond(
            StatusCode::OK,
            &item_list(target, page.items),
            encoding,
        ));
    }
    let mut deleted = Vec::new();
    for item in page.items {
        let ns = item
            .lookup("/metadata/namespace")
            .and_then(Value::as_str)
            .map(String::from);
        let name = item
            .lookup("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let outcome = state
            .store
            .delete(&target.rt, ns.as_deref(), &name, &delete_opts)
            .await;
        if outcome.is_ok() {
            crate::api::access::registration::revoke_on_delete(
                state,
                &target.rt,
                ns.as_deref(),
                &name,
            )
            .await;
        }
        match outcome {
            Ok(Deleted::Gone(o) | Deleted::Pending(o)) => deleted.push(o),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(target.store_err(e)),
        }
    }
    admission::after_write(state, &target.rt).await;
    Ok(respond(
        StatusCode::OK,
        &item_list(target, deleted),
        encoding,
    ))
}

/// The list a collection delete answers with.
fn item_list(target: &Target, items: Vec<Value>) -> Value {
    let items: Vec<Value> = if target.rewrites(false) {
        items.iter().map(|i| target.present(i, false)).collect()
    } else {
        items
    };
    json!({
        "kind": format!("{}List", target.kind_label()),
        "apiVersion": target.served().api_version(),
        "metadata": {},
        "items": items,
    })
}
