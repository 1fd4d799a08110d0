//! `POST /apis/flotilla.io/v1alpha1/failoversimulations`: the failover dry-run. A create-only
//! kind that stores nothing (Kubernetes' TokenReview pattern): the request's spec comes back
//! with a computed `status`, so `kubectl create -f sim.yaml -o yaml` prints the answer. Every
//! other verb is a 405 `Status`. The handler reads the clusters, ClusterTaintPolicies and
//! bindings, has the server's [`DryRun`] compute the answer on a blocking thread (the pure
//! [`crate::simulation::simulate`], CPU-bound: the request deadline then fires on time and no
//! async worker is held; a run the deadline cut off finishes unseen) and maps its errors; it
//! writes nothing (not even an Event: a dry-run that left traces would not be one).

use super::Call;
use crate::api::access::authz::{self, Write};
use crate::api::error::{ApiError, ApiResult, Cause};
use crate::api::wire::body::{negotiate, read_object, respond};
use crate::api::wire::target::{check_identity, place};
use crate::controllers::shared::cluster_cache;
use crate::simulation::{simulate, sort_inputs, BindingInput, SimulationError, SimulationSettings};
use crate::store::ListOptions;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use chrono::{DateTime, Utc};
use flotilla_api::cluster::Cluster;
use flotilla_api::kinds::well_known;
use flotilla_api::policy::cluster_taint_policy::ClusterTaintPolicy;
use flotilla_api::simulation::{
    FailoverSimulation, FailoverSimulationSpec, FailoverSimulationStatus, FAILOVER_SIMULATION_KIND,
    FLOTILLA_GROUP,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Serves any request addressed to `failoversimulations`.
pub async fn serve(call: Call<'_>) -> ApiResult<Response> {
    let (state, who, body) = (call.state, call.who, call.body);
    let (method, target, headers) = (&call.method, &call.target, &call.headers);
    if *method != Method::POST || target.name.is_some() || target.subresource.is_some() {
        return Err(ApiError::MethodNotAllowed(format!(
            "failoversimulations only answer create (POST to the collection), not {method}: a simulation is computed and never stored"
        )));
    }
    let encoding = negotiate(headers)?;
    let mut obj = read_object(headers, body, state.limits.max_body_bytes).await?;
    check_identity(target, &mut obj, false)?;
    authz::check_write(who, place(target), Write::Create { new: &obj })?;
    let request: FailoverSimulation = serde_json::from_value(obj.clone()).map_err(|e| {
        ApiError::BadRequest(format!("the FailoverSimulation does not decode: {e}"))
    })?;
    let name = request.metadata.name.clone();
    let clusters = cluster_cache::read(state.store.as_ref())
        .await
        .map_err(|e| ApiError::from_store(e, "cluster.karmada.io", "clusters"))?
        .by_name;
    let policies_rt = well_known::cluster_taint_policies();
    let taint_policies: Vec<ClusterTaintPolicy> = state
        .store
        .list(&policies_rt, None, &ListOptions::default())
        .await
        .map_err(|e| ApiError::from_store(e, &policies_rt.group, &policies_rt.plural))?
        .items
        .into_iter()
        .filter_map(|p| serde_json::from_value(p).ok())
        .collect();
    let bindings = super::every_binding(state, |e, rt| {
        ApiError::from_store(e, &rt.group, &rt.plural)
    })
    .await?;
    // The brake's flags and the server's start, from the brake the controllers share.
    let settings = match &state.brake() {
        Some(brake) => state.simulation.clone().with_brake(brake.as_ref()),
        None => state.simulation.clone(),
    };
    let failed_clusters = request.spec.failed_clusters.clone();
    let input = DryRunInput {
        spec: request.spec,
        clusters,
        taint_policies,
        bindings,
        settings,
        now: state.clock.now(),
    };
    let status = state
        .dry_run
        .run(input)
        .await?
        .map_err(|e| invalid(&name, e))?;
    tracing::info!(
        simulation = %name,
        failed_clusters = ?failed_clusters,
        bindings = status.summary.bindings,
        affected = status.summary.affected,
        evictions = status.summary.evictions,
        unplaceable = status.summary.unplaceable,
        "failover simulated"
    );
    obj["status"] = serde_json::to_value(&status).map_err(|e| ApiError::Internal(Box::new(e)))?;
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(
            "creationTimestamp".into(),
            serde_json::to_value(status.failed_at).unwrap_or(Value::Null),
        );
    }
    Ok(respond(StatusCode::CREATED, &obj, encoding))
}

/// What a dry-run computes over: the request's spec and the store's objects as read.
pub struct DryRunInput {
    /// The request.
    pub spec: FailoverSimulationSpec,
    /// The clusters, by name.
    pub clusters: BTreeMap<String, Cluster>,
    /// The ClusterTaintPolicies.
    pub taint_policies: Vec<ClusterTaintPolicy>,
    /// Every ResourceBinding and ClusterResourceBinding, with its kind, as stored.
    pub bindings: Vec<(&'static str, Value)>,
    /// The server's flags (and its brake's).
    pub settings: SimulationSettings,
    /// When the clusters fail.
    pub now: DateTime<Utc>,
}

impl DryRunInput {
    /// The answer: the bindings decoded (those whose spec does not decode are skipped, as the
    /// controllers skip them) and the pure [`simulate`] run over them.
    pub fn simulate(&self) -> Result<FailoverSimulationStatus, SimulationError> {
        let mut bindings: Vec<BindingInput> = self
            .bindings
            .iter()
            .filter_map(|(kind, b)| BindingInput::from_object(kind, b))
            .collect();
        sort_inputs(&mut bindings);
        simulate(
            &self.spec,
            &self.clusters,
            &self.taint_policies,
            &bindings,
            &self.settings,
            self.now,
        )
    }
}

/// The result of a dry-run's computation.
pub type DryRunResult = Result<FailoverSimulationStatus, SimulationError>;

/// What computes a dry-run's answer, on a blocking thread: [`DryRunInput::simulate`] in the
/// server; a test puts a slow stand-in in its place to show that the request deadline holds
/// and the server serves on meanwhile.
#[derive(Clone)]
pub struct DryRun(Arc<dyn Fn(&DryRunInput) -> DryRunResult + Send + Sync>);

impl Default for DryRun {
    fn default() -> Self {
        Self::new(DryRunInput::simulate)
    }
}

impl DryRun {
    /// A dry-run computed by `compute`.
    pub fn new(compute: impl Fn(&DryRunInput) -> DryRunResult + Send + Sync + 'static) -> Self {
        Self(Arc::new(compute))
    }

    /// Computes the answer of `input` on a blocking thread. Dropped (by the request deadline),
    /// the future stops waiting; the computation runs to its end and its answer is dropped.
    pub async fn run(&self, input: DryRunInput) -> ApiResult<DryRunResult> {
        let compute = self.0.clone();
        tokio::task::spawn_blocking(move || compute(&input))
            .await
            .map_err(|e| ApiError::Internal(Box::new(e)))
    }
}

fn invalid(name: &str, e: SimulationError) -> ApiError {
    match e {
        SimulationError::Invalid(errors) => ApiError::invalid(
            FAILOVER_SIMULATION_KIND,
            FLOTILLA_GROUP,
            name,
            errors
                .errors()
                .iter()
                .map(|e| Cause {
                    reason: e.kind.cause_reason().to_string(),
                    message: e.message.clone(),
                    field: e.path.clone(),
                })
                .collect(),
        ),
    }
}
