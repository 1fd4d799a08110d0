//! The resource interpreter: what Flotilla knows about the *inside* of a resource template.
//!
//! Templates are unstructured (`serde_json::Value`); the interpreter answers, per kind:
//! how many replicas a workload has and what each one needs (for the scheduler), how to
//! revise a manifest to a cluster's share, what of a member object's status is reported back,
//! whether a member object is healthy (for application failover), how the per-cluster statuses
//! fold into the template's status, and which other objects the template depends on
//! (`propagateDeps`). It is a pure function of JSON values: no store, no HTTP; a controller
//! fetches, asks, and writes.
//!
//! Rules come in three layers, tried per operation in this order (as Karmada):
//! 1. user `ResourceInterpreterCustomization`s ([`customization`]), fed by a controller with
//!    [`Interpreter::add_customization`] / [`Interpreter::remove_customization`]; when several
//!    target the same kind, the first by name that defines the operation wins;
//! 2. built-in third-party customizations written in Lua and shipped in the binary
//!    ([`thirdparty`], e.g. `flink.apache.org/v1beta1 FlinkDeployment`);
//! 3. the native rules for Kubernetes' own kinds ([`native`]).
//!
//! Lua rules run in a sandbox ([`lua`]) with memory and time limits. [`jsonpath`] evaluates the
//! Kubernetes JSONPath templates of `statePreservation` rules.

pub mod customization;
pub mod jsonpath;
pub mod lua;
pub mod native;
pub mod thirdparty;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use flotilla_api::binding::{AggregatedStatusItem, ReplicaRequirements, TargetCluster};
use flotilla_api::selector::LabelSelector;
use flotilla_api::work::ResourceHealth;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use customization::{
    CustomizationRules, CustomizationTarget, LuaScript, ResourceInterpreterCustomization,
    ResourceInterpreterCustomizationSpec, CUSTOMIZATION_API_VERSION, CUSTOMIZATION_KIND,
};
pub use lua::{SandboxLimits, ScriptError};
pub use native::{FieldError, WellKnownKind};

/// `apiVersion` + `kind`: what interpreter rules are keyed by (exactly, as Karmada: a rule for
/// `apps/v1 Deployment` does not apply to `apps/v1beta1 Deployment`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gvk {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// CamelCase kind.
    pub kind: String,
}

impl Gvk {
    /// A GVK from its two strings.
    pub fn new(api_version: &str, kind: &str) -> Self {
        Gvk {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        }
    }

    /// The GVK an object says it is; `None` when `apiVersion` or `kind` is missing or empty.
    pub fn of(object: &Value) -> Option<Gvk> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        (!api_version.is_empty() && !kind.is_empty()).then(|| Gvk::new(api_version, kind))
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)
    }
}

/// Health of one member object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Health {
    /// Healthy (also the verdict for kinds without a health rule, as Karmada's work status).
    Healthy,
    /// The rule says it is not healthy.
    Unhealthy,
    /// The rule could not decide (script error, timeout, malformed object).
    Unknown,
}

impl From<Health> for ResourceHealth {
    fn from(health: Health) -> Self {
        match health {
            Health::Healthy => ResourceHealth::Healthy,
            Health::Unhealthy => ResourceHealth::Unhealthy,
            Health::Unknown => ResourceHealth::Unknown,
        }
    }
}

/// An object a template depends on (Karmada's `DependentObjectReference`): by name, or, when
/// `name` is empty, every object of that kind in the namespace matching `labelSelector`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectRef {
    /// apiVersion of the dependency.
    pub api_version: String,
    /// Kind of the dependency.
    pub kind: String,
    /// Namespace (the template's).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name; empty when selected by labels.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Label selector, when not named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

impl ObjectRef {
    /// A named dependency.
    pub fn named(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            label_selector: None,
        }
    }
}

/// The interpreter operations, named as Karmada's `InterpreterOperation`s; each has one Lua
/// entry function and one field in a customization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// `replicaResource` / `GetReplicas(desiredObj) return replica, requires`.
    InterpretReplica,
    /// `replicaRevision` / `ReviseReplica(obj, desiredReplica) return obj`.
    ReviseReplica,
    /// `retention` / `Retain(desiredObj, observedObj) return desiredObj`.
    Retain,
    /// `statusAggregation` / `AggregateStatus(desiredObj, statusItems) return desiredObj`.
    AggregateStatus,
    /// `statusReflection` / `ReflectStatus(observedObj) return status`.
    InterpretStatus,
    /// `healthInterpretation` / `InterpretHealth(observedObj) return bool`.
    InterpretHealth,
    /// `dependencyInterpretation` / `GetDependencies(desiredObj) return dependencies`.
    InterpretDependency,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Operation; 7] = [
        Operation::InterpretReplica,
        Operation::ReviseReplica,
        Operation::Retain,
        Operation::AggregateStatus,
        Operation::InterpretStatus,
        Operation::InterpretHealth,
        Operation::InterpretDependency,
    ];

    /// The Lua function a script for this operation must define.
    pub fn lua_function(self) -> &'static str {
        match self {
            Operation::InterpretReplica => "GetReplicas",
            Operation::ReviseReplica => "ReviseReplica",
            Operation::Retain => "Retain",
            Operation::AggregateStatus => "AggregateStatus",
            Operation::InterpretStatus => "ReflectStatus",
            Operation::InterpretHealth => "InterpretHealth",
            Operation::InterpretDependency => "GetDependencies",
        }
    }

    /// The field of `spec.customizations` holding the script.
    pub fn customization_field(self) -> &'static str {
        match self {
            Operation::InterpretReplica => "replicaResource",
            Operation::ReviseReplica => "replicaRevision",
            Operation::Retain => "retention",
            Operation::AggregateStatus => "statusAggregation",
            Operation::InterpretStatus => "statusReflection",
            Operation::InterpretHealth => "healthInterpretation",
            Operation::InterpretDependency => "dependencyInterpretation",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.lua_function())
    }
}

/// Where a rule came from, for error messages and explanations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleSource {
    /// A user `ResourceInterpreterCustomization` of this name.
    Customization(String),
    /// A built-in third-party customization shipped in the binary.
    BuiltIn(String),
    /// Flotilla's native rule for a Kubernetes kind.
    Native,
}

impl fmt::Display for RuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleSource::Customization(name) => write!(f, "ResourceInterpreterCustomization {name}"),
            RuleSource::BuiltIn(name) => write!(f, "built-in customization {name}"),
            RuleSource::Native => f.write_str("native rule"),
        }
    }
}

/// Why the interpreter could not answer.
#[derive(Debug, thiserror::Error)]
pub enum InterpretError {
    /// The object has no usable `apiVersion`/`kind`.
    #[error("the object has no apiVersion and kind")]
    NoKind,
    /// A native rule met a field of the wrong shape.
    #[error("{gvk}: {source}")]
    Field {
        /// The object's kind.
        gvk: Gvk,
        /// The field and what was wrong.
        #[source]
        source: FieldError,
    },
    /// A Lua rule failed.
    #[error("{operation} of {rule} for {gvk} failed")]
    Script {
        /// The object's kind.
        gvk: Gvk,
        /// The operation.
        operation: Operation,
        /// Which customization.
        rule: RuleSource,
        /// What went wrong in the sandbox.
        #[source]
        source: ScriptError,
    },
    /// A Lua rule returned something the operation cannot use.
    #[error("{operation} of {rule} for {gvk} returned an unusable result: {problem}")]
    BadResult {
        /// The object's kind.
        gvk: Gvk,
        /// The operation.
        operation: Operation,
        /// Which customization.
        rule: RuleSource,
        /// What is wrong with the result.
        problem: String,
    },
    /// A customization could not be compiled; it was not added.
    #[error("ResourceInterpreterCustomization {name}: {field} is unusable")]
    InvalidCustomization {
        /// The customization's name.
        name: String,
        /// The offending field (`spec.customizations.healthInterpretation`, ...).
        field: String,
        /// Why.
        #[source]
        source: ScriptError,
    },
    /// A customization without a name or target.
    #[error("ResourceInterpreterCustomization {name:?}: {problem}")]
    MalformedCustomization {
        /// The customization's name (may be empty).
        name: String,
        /// What is missing.
        problem: String,
    },
}

/// Runs sandbox work that may take the whole time budget: on a multi-threaded tokio runtime the
/// worker first hands its other tasks to another thread, so a slow script does not stall them;
/// elsewhere (plain threads, single-threaded test runtimes) it just runs.
fn off_the_runtime<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// One compiled customization: its target and its scripts in one Lua state.
struct Compiled {
    source: RuleSource,
    target: Gvk,
    scripts: lua::ScriptSet,
}

/// The resource interpreter. Cheap to share (`Arc<Interpreter>`): every method takes `&self`
/// and is safe to call from many tokio tasks at once. A Lua call holds that customization's
/// state for at most the sandbox's time budget.
pub struct Interpreter {
    limits: SandboxLimits,
    builtin: BTreeMap<Gvk, Arc<Compiled>>,
    user: RwLock<BTreeMap<String, Arc<Compiled>>>,
}

impl Default for Interpreter {
    fn default() -> Self {
        Interpreter::new()
    }
}

/// A rule chosen for one (kind, operation).
enum Rule {
    Lua(Arc<Compiled>),
    Native(WellKnownKind),
}

impl Interpreter {
    /// An interpreter with the native rules, the built-in third-party customizations and the
    /// default sandbox limits.
    pub fn new() -> Self {
        Interpreter::with_limits(SandboxLimits::default())
    }

    /// As [`Interpreter::new`] with other sandbox limits (tests use small ones).
    pub fn with_limits(limits: SandboxLimits) -> Self {
        let builtin = thirdparty::builtins()
            .into_iter()
            .map(|b| {
                let compiled = Compiled {
                    source: RuleSource::BuiltIn(b.name.to_string()),
                    target: b.target.clone(),
                    scripts: lua::ScriptSet::new(b.name, b.scripts, limits),
                };
                (b.target, Arc::new(compiled))
            })
            .collect();
        Interpreter {
            limits,
            builtin,
            user: RwLock::new(BTreeMap::new()),
        }
    }

    /// The sandbox limits in force.
    pub fn limits(&self) -> SandboxLimits {
        self.limits
    }

    /// Adds (or replaces, by `metadata.name`) a user customization. Every script is compiled
    /// and must define its entry function; on any error nothing changes and the error says
    /// which field is wrong, so the controller can report it on the object.
    pub fn add_customization(
        &self,
        customization: &ResourceInterpreterCustomization,
    ) -> Result<(), InterpretError> {
        let name = customization.metadata.name.clone();
        if name.is_empty() {
            return Err(InterpretError::MalformedCustomization {
                name,
                problem: "metadata.name is required".to_string(),
            });
        }
        let target = &customization.spec.target;
        if target.api_version.is_empty() || target.kind.is_empty() {
            return Err(InterpretError::MalformedCustomization {
                name,
                problem: "spec.target.apiVersion and spec.target.kind are required".to_string(),
            });
        }
        let scripts = customization.spec.customizations.scripts();
        let set = lua::ScriptSet::new(&name, scripts, self.limits);
        off_the_runtime(|| set.compile()).map_err(|(op, source)| {
            InterpretError::InvalidCustomization {
                name: name.clone(),
                field: format!("spec.customizations.{}", op.customization_field()),
                source,
            }
        })?;
        let compiled = Compiled {
            source: RuleSource::Customization(name.clone()),
            target: Gvk::new(&target.api_version, &target.kind),
            scripts: set,
        };
        self.user.write().insert(name, Arc::new(compiled));
        Ok(())
    }

    /// Removes a user customization; true when it was there.
    pub fn remove_customization(&self, name: &str) -> bool {
        self.user.write().remove(name).is_some()
    }

    /// Names of the user customizations in use, sorted.
    pub fn customization_names(&self) -> Vec<String> {
        self.user.read().keys().cloned().collect()
    }

    /// The native kind this GVK is, if any.
    pub fn well_known_kind(&self, gvk: &Gvk) -> Option<WellKnownKind> {
        WellKnownKind::of(gvk)
    }

    /// True when some rule (user, built-in or native) implements `operation` for `gvk`.
    pub fn has_rule(&self, gvk: &Gvk, operation: Operation) -> bool {
        self.rule(gvk, operation).is_some()
    }

    /// True when the kind has a health rule (application failover needs one: §11).
    pub fn has_health_rule(&self, gvk: &Gvk) -> bool {
        self.has_rule(gvk, Operation::InterpretHealth)
    }

    /// Which rule answers `operation` for `gvk`, for explanations.
    pub fn rule_source(&self, gvk: &Gvk, operation: Operation) -> Option<RuleSource> {
        self.rule(gvk, operation).map(|rule| match rule {
            Rule::Lua(compiled) => compiled.source.clone(),
            Rule::Native(_) => RuleSource::Native,
        })
    }

    fn rule(&self, gvk: &Gvk, operation: Operation) -> Option<Rule> {
        let user = self
            .user
            .read()
            .values()
            .find(|c| c.target == *gvk && c.scripts.has(operation))
            .cloned();
        if let Some(compiled) = user {
            return Some(Rule::Lua(compiled));
        }
        if let Some(compiled) = self.builtin.get(gvk) {
            if compiled.scripts.has(operation) {
                return Some(Rule::Lua(compiled.clone()));
            }
        }
        let kind = WellKnownKind::of(gvk)?;
        native::has_rule(kind, operation).then_some(Rule::Native(kind))
    }

    fn call(
        &self,
        compiled: &Compiled,
        gvk: &Gvk,
        operation: Operation,
        args: &[&Value],
    ) -> Result<Vec<Value>, InterpretError> {
        off_the_runtime(|| compiled.scripts.call(operation, args)).map_err(|source| {
            tracing::warn!(
                rule = %compiled.source,
                operation = %operation,
                kind = %gvk,
                error = %source,
                "a Lua interpreter rule failed"
            );
            InterpretError::Script {
                gvk: gvk.clone(),
                operation,
                rule: compiled.source.clone(),
                source,
            }
        })
    }

    fn field_error(gvk: &Gvk) -> impl FnOnce(FieldError) -> InterpretError + '_ {
        move |source| InterpretError::Field {
            gvk: gvk.clone(),
            source,
        }
    }

    /// The error of a Lua rule whose result is not what `operation` must return.
    fn bad_result<'a>(
        gvk: &'a Gvk,
        operation: Operation,
        compiled: &'a Compiled,
    ) -> impl Fn(String) -> InterpretError + 'a {
        move |problem| InterpretError::BadResult {
            gvk: gvk.clone(),
            operation,
            rule: compiled.source.clone(),
            problem,
        }
    }

    /// Runs a Lua rule of an operation that returns the object, and the object it returned.
    fn call_for_object(
        &self,
        compiled: &Compiled,
        gvk: &Gvk,
        operation: Operation,
        args: &[&Value],
    ) -> Result<Map<String, Value>, InterpretError> {
        let out = self.call(compiled, gvk, operation, args)?;
        match out.into_iter().next() {
            Some(Value::Object(obj)) => Ok(obj),
            other => Err(Self::bad_result(gvk, operation, compiled)(format!(
                "{operation} must return the object, got {}",
                other.unwrap_or(Value::Null)
            ))),
        }
    }

    /// The workload's replica count and per-replica requirements; `Ok(None)` for kinds that
    /// are not workloads (no rule).
    pub fn replicas(
        &self,
        template: &Value,
    ) -> Result<Option<(i32, Option<ReplicaRequirements>)>, InterpretError> {
        let gvk = Gvk::of(template).ok_or(InterpretError::NoKind)?;
        match self.rule(&gvk, Operation::InterpretReplica) {
            None => Ok(None),
            Some(Rule::Native(kind)) => {
                native::replica::replicas(kind, template).map_err(Self::field_error(&gvk))
            }
            Some(Rule::Lua(compiled)) => {
                let out = self.call(&compiled, &gvk, Operation::InterpretReplica, &[template])?;
                let bad = Self::bad_result(&gvk, Operation::InterpretReplica, &compiled);
                let replicas = out.first().unwrap_or(&Value::Null);
                let replicas = replicas
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| {
                        bad(format!(
                            "replica must be a whole number ≥ 0, got {replicas}"
                        ))
                    })?;
                let requires = match out.get(1) {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(lua::requirements_from(v).map_err(bad)?),
                };
                Ok(Some((replicas, requires)))
            }
        }
    }

    /// The manifest revised to `replicas` for one cluster (Deployment, StatefulSet,
    /// ReplicaSet: `spec.replicas`; Job: `spec.parallelism`). Kinds without a rule come back
    /// unchanged. Job completions are divided separately: see [`Interpreter::revise_for_cluster`].
    pub fn revise_replicas(
        &self,
        manifest: &Value,
        replicas: i32,
    ) -> Result<Value, InterpretError> {
        let gvk = Gvk::of(manifest).ok_or(InterpretError::NoKind)?;
        match self.rule(&gvk, Operation::ReviseReplica) {
            None => Ok(manifest.clone()),
            Some(Rule::Native(kind)) => {
                let mut out = manifest.clone();
                native::replica::revise(kind, &mut out, replicas)
                    .map_err(Self::field_error(&gvk))?;
                Ok(out)
            }
            Some(Rule::Lua(compiled)) => {
                let desired = Value::from(replicas);
                self.call_for_object(
                    &compiled,
                    &gvk,
                    Operation::ReviseReplica,
                    &[manifest, &desired],
                )
                .map(Value::Object)
            }
        }
    }

    /// The manifest for `cluster` of a binding scheduled to `targets` (§10.3): replicas revised
    /// to the cluster's share when the template has a replica rule and `divided` (the placement
    /// divides replicas), then, for a Job whose template sets `spec.completions`, the
    /// completions divided among the targets in proportion to their replicas.
    pub fn revise_for_cluster(
        &self,
        template: &Value,
        targets: &[TargetCluster],
        cluster: &str,
        divided: bool,
    ) -> Result<Value, InterpretError> {
        let gvk = Gvk::of(template).ok_or(InterpretError::NoKind)?;
        let mut manifest = template.clone();
        let share = targets.iter().find(|t| t.name == cluster);
        if divided {
            if let Some(target) = share {
                manifest = self.revise_replicas(&manifest, target.replicas)?;
            }
        }
        if WellKnownKind::of(&gvk) == Some(WellKnownKind::Job) {
            let completions = native::replica::divide_job_completions(template, targets)
                .map_err(Self::field_error(&gvk))?;
            if let Some(n) = completions
                .and_then(|c| c.into_iter().find(|t| t.name == cluster))
                .map(|t| t.replicas)
            {
                native::replica::set_job_completions(&mut manifest, n)
                    .map_err(Self::field_error(&gvk))?;
            }
        }
        Ok(manifest)
    }

    /// What of a member object's status is reported back (into the Work and the binding's
    /// `aggregatedStatus`); kinds without a rule report their whole `status`. `Ok(None)` when
    /// there is nothing to report yet.
    pub fn reflect_status(&self, member_object: &Value) -> Result<Option<Value>, InterpretError> {
        let gvk = Gvk::of(member_object).ok_or(InterpretError::NoKind)?;
        match self.rule(&gvk, Operation::InterpretStatus) {
            None => Ok(native::reflect::whole_status(member_object)),
            Some(Rule::Native(kind)) => {
                native::reflect::reflect(kind, member_object).map_err(Self::field_error(&gvk))
            }
            Some(Rule::Lua(compiled)) => {
                let out = self.call(
                    &compiled,
                    &gvk,
                    Operation::InterpretStatus,
                    &[member_object],
                )?;
                match out.into_iter().next() {
                    None | Some(Value::Null) => Ok(None),
                    Some(status @ Value::Object(_)) => Ok(Some(status)),
                    Some(other) => Err(Self::bad_result(
                        &gvk,
                        Operation::InterpretStatus,
                        &compiled,
                    )(format!(
                        "ReflectStatus must return a table, got {other}"
                    ))),
                }
            }
        }
    }

    /// The health rule's verdict: `Ok(None)` when the kind has no health rule.
    pub fn interpret_health(&self, object: &Value) -> Result<Option<bool>, InterpretError> {
        let gvk = Gvk::of(object).ok_or(InterpretError::NoKind)?;
        match self.rule(&gvk, Operation::InterpretHealth) {
            None => Ok(None),
            Some(Rule::Native(kind)) => native::health::interpret(kind, object)
                .map(Some)
                .map_err(Self::field_error(&gvk)),
            Some(Rule::Lua(compiled)) => {
                let out = self.call(&compiled, &gvk, Operation::InterpretHealth, &[object])?;
                match out.first() {
                    Some(Value::Bool(healthy)) => Ok(Some(*healthy)),
                    other => Err(Self::bad_result(
                        &gvk,
                        Operation::InterpretHealth,
                        &compiled,
                    )(format!(
                        "InterpretHealth must return a boolean, got {}",
                        other.unwrap_or(&Value::Null)
                    ))),
                }
            }
        }
    }

    /// Health of a member object as the work status controller records it (§12): no rule ⇒
    /// Healthy, rule error ⇒ Unknown, true ⇒ Healthy, false ⇒ Unhealthy.
    pub fn health(&self, object: &Value) -> Health {
        match self.interpret_health(object) {
            Ok(None) | Ok(Some(true)) => Health::Healthy,
            Ok(Some(false)) => Health::Unhealthy,
            Err(error) => {
                tracing::debug!(error = %error, "health interpretation failed; health is Unknown");
                Health::Unknown
            }
        }
    }

    /// The template's new `status` folded from the per-cluster items; `Ok(None)` when the kind
    /// has no aggregation rule (its status is left alone). The result may equal the current
    /// status; callers write only when it differs.
    pub fn aggregate_status(
        &self,
        template: &Value,
        items: &[AggregatedStatusItem],
    ) -> Result<Option<Value>, InterpretError> {
        let gvk = Gvk::of(template).ok_or(InterpretError::NoKind)?;
        match self.rule(&gvk, Operation::AggregateStatus) {
            None => Ok(None),
            Some(Rule::Native(kind)) => native::aggregate::aggregate(kind, template, items)
                .map(Some)
                .map_err(Self::field_error(&gvk)),
            Some(Rule::Lua(compiled)) => {
                let items = serde_json::to_value(items).unwrap_or(Value::Array(Vec::new()));
                let mut obj = self.call_for_object(
                    &compiled,
                    &gvk,
                    Operation::AggregateStatus,
                    &[template, &items],
                )?;
                Ok(Some(
                    obj.remove("status")
                        .unwrap_or_else(|| Value::Object(Default::default())),
                ))
            }
        }
    }

    /// The objects the template depends on, for `propagateDeps`; empty for kinds without a
    /// rule.
    pub fn dependencies(&self, template: &Value) -> Result<Vec<ObjectRef>, InterpretError> {
        let gvk = Gvk::of(template).ok_or(InterpretError::NoKind)?;
        match self.rule(&gvk, Operation::InterpretDependency) {
            None => Ok(Vec::new()),
            Some(Rule::Native(kind)) => {
                native::dependencies::dependencies(kind, template).map_err(Self::field_error(&gvk))
            }
            Some(Rule::Lua(compiled)) => {
                let out =
                    self.call(&compiled, &gvk, Operation::InterpretDependency, &[template])?;
                let bad = Self::bad_result(&gvk, Operation::InterpretDependency, &compiled);
                match out.into_iter().next() {
                    None | Some(Value::Null) => Ok(Vec::new()),
                    // An empty Lua table reads as an empty object.
                    Some(Value::Object(map)) if map.is_empty() => Ok(Vec::new()),
                    Some(list @ Value::Array(_)) => serde_json::from_value(list)
                        .map_err(|e| bad(format!("not a list of dependencies: {e}"))),
                    Some(other) => Err(bad(format!(
                        "GetDependencies must return a list, got {other}"
                    ))),
                }
            }
        }
    }

    /// The desired manifest with what must be kept of the observed member object (a user or
    /// built-in `Retain` rule); kinds without a Lua rule come back unchanged.
    pub fn retain(&self, desired: &Value, observed: &Value) -> Result<Value, InterpretError> {
        let gvk = Gvk::of(desired).ok_or(InterpretError::NoKind)?;
        match self.rule(&gvk, Operation::Retain) {
            None | Some(Rule::Native(_)) => Ok(desired.clone()),
            Some(Rule::Lua(compiled)) => self
                .call_for_object(&compiled, &gvk, Operation::Retain, &[desired, observed])
                .map(Value::Object),
        }
    }
}

#[cfg(test)]
mod tests;
