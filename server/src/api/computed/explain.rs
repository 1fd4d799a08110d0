//! `GET .../resourcebindings/<name>/explain` (and `clusterresourcebindings`): why the binding
//! is placed where it is. The scheduler runs again, changing nothing, over the binding and the
//! clusters as they are now, and the answer lists every cluster — selected or not, the filter
//! that rejected it and why, its score and available replicas — plus the replica arithmetic
//! (strategy, weights, the order seats were given). Flotilla's addition to Karmada.

use crate::api::error::{ApiError, ApiResult};
use crate::api::wire::body::{negotiate, respond};
use crate::api::wire::target::Target;
use crate::api::ApiState;
use crate::controllers::failover::application_failover::FailoverState;
use crate::controllers::shared::cluster_cache;
use crate::scheduler::{
    condition_for, needs_scheduling, schedule, ClusterSnapshot, Explanation, ScheduleError,
    ScheduleInput, ScheduleOptions,
};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use chrono::{DateTime, Utc};
use flotilla_api::binding::{ResourceBindingSpec, ResourceBindingStatus};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::ResourceType;
use flotilla_api::policy::APPLIED_PLACEMENT_ANNOTATION;
use serde_json::{json, Value};

fn explanation_json(e: &Explanation) -> Value {
    let clusters: Vec<Value> = e
        .clusters()
        .map(|(name, c)| {
            let mut v = json!({
                "name": name,
                "selected": c.selected,
                "summary": c.to_string(),
            });
            if let Some(r) = &c.rejected {
                v["filter"] = json!(r.filter());
                v["reason"] = json!(r.to_string());
            }
            if let Some(s) = c.score {
                v["score"] = json!(s);
            }
            if let Some(a) = c.available_replicas {
                v["availableReplicas"] = json!(a);
            }
            if let Some(r) = c.replicas {
                v["replicas"] = json!(r);
            }
            v
        })
        .collect();
    json!({"clusters": clusters, "arithmetic": e.lines})
}

/// Whether `rt` has the `explain` subresource: ResourceBindings and ClusterResourceBindings.
pub fn explains(rt: &ResourceType) -> bool {
    rt.group == flotilla_api::kinds::WORK_GROUP && rt.plural.ends_with("resourcebindings")
}

/// Serves `GET <binding>/explain`; any other method is 405.
pub async fn serve(
    state: &ApiState,
    method: &Method,
    target: &Target,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    if *method != Method::GET {
        return Err(ApiError::MethodNotAllowed(
            "explain only answers GET".into(),
        ));
    }
    let encoding = negotiate(headers)?;
    let name = target.name.as_deref().unwrap_or_default();
    let doc = explain(state, &target.rt, target.namespace.as_deref(), name).await?;
    Ok(respond(StatusCode::OK, &doc, encoding))
}

/// Builds the explanation of one stored binding: the binding and the clusters are read here,
/// the scheduler runs on a blocking thread (its cost grows with the fleet; the request
/// deadline then fires on time and no async worker is held).
pub async fn explain(
    state: &ApiState,
    rt: &ResourceType,
    namespace: Option<&str>,
    name: &str,
) -> ApiResult<Value> {
    let binding = state
        .store
        .get(rt, namespace, name)
        .await
        .map_err(|e| ApiError::from_store(e, &rt.group, &rt.plural))?;
    let snapshot = cluster_cache::read(state.store.as_ref())
        .await
        .map_err(|e| ApiError::from_store(e, "cluster.karmada.io", "clusters"))?
        .snapshot;
    let now = state.clock.now();
    let (namespace, name) = (namespace.map(String::from), name.to_string());
    tokio::task::spawn_blocking(move || {
        explanation(&binding, &snapshot, namespace.as_deref(), &name, now)
    })
    .await
    .map_err(|e| ApiError::Internal(Box::new(e)))?
}

/// The explanation of `binding` over the clusters of `snapshot` at `now`.
pub fn explanation(
    binding: &Value,
    snapshot: &ClusterSnapshot,
    namespace: Option<&str>,
    name: &str,
    now: DateTime<Utc>,
) -> ApiResult<Value> {
    let bad = |e: serde_json::Error| {
        ApiError::BadRequest(format!("the stored binding does not decode: {e}"))
    };
    let spec: ResourceBindingSpec = serde_json::from_value(binding["spec"].clone()).map_err(bad)?;
    let status: ResourceBindingStatus = match binding.get("status") {
        Some(s) => serde_json::from_value(s.clone()).map_err(bad)?,
        None => ResourceBindingStatus::default(),
    };
    let applied = binding
        .lookup(&format!(
            "/metadata/annotations/{}",
            APPLIED_PLACEMENT_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let would_schedule = needs_scheduling(&spec, &status, applied, snapshot);
    let failover = FailoverState::of(binding);
    let blocked = failover.blocked(now);
    let result = schedule(&ScheduleInput {
        spec: &spec,
        status: &status,
        clusters: snapshot,
        options: ScheduleOptions::default(),
        blocked: &blocked,
    });
    let (cond, reason, message) = condition_for(&result);
    let mut out = json!({
        "kind": "BindingExplanation",
        "apiVersion": "flotilla.io/v1alpha1",
        "binding": {"name": name, "namespace": namespace},
        "current": spec.clusters,
        "wouldReschedule": would_schedule.map(|r| format!("{r:?}")),
        "result": {"status": cond.as_str(), "reason": reason, "message": message},
    });
    // Application failover: evictions in progress, blocked clusters, timers and the streak.
    if !failover.is_empty() || !spec.graceful_eviction_tasks.is_empty() {
        out["failover"] = json!({
            "evictionTasks": spec.graceful_eviction_tasks,
            "blocked": blocked.iter().map(|(c, until)| json!({"cluster": c, "until": until})).collect::<Vec<_>>(),
            "unhealthySince": failover.unhealthy_since,
            "applicationFailoverStreak": failover.streak,
            "backoffUntil": failover.backoff_until,
        });
    }
    let explanation = match &result {
        Ok(o) => {
            out["proposed"] = json!(o.clusters);
            Some(&o.explanation)
        }
        Err(ScheduleError::FitError { explanation, .. })
        | Err(ScheduleError::Unschedulable { explanation, .. }) => Some(explanation.as_ref()),
        Err(ScheduleError::SchedulerError(_)) => None,
    };
    if let Some(e) = explanation {
        if let (Some(target), Value::Object(more)) = (out.as_object_mut(), explanation_json(e)) {
            target.extend(more);
        }
    }
    Ok(out)
}
