//! The ClusterTaintPolicy controller (docs/semantics.md §4.2): keeps each Cluster's taints
//! as the ClusterTaintPolicies say. For every policy, oldest first, whose `targetClusters`
//! matches the cluster: when its `addOnConditions` match the cluster's conditions its taints
//! are added (a taint already there keeps its value and `timeAdded`), then when its
//! `removeOnConditions` match they are removed. Clusters a policy does not target, and taints
//! no policy names, are left alone; deleting a policy removes nothing.
//!
//! This is how a team declares its own failover rules: with
//! `--enable-automatic-no-execute-taints=false` the built-in NoExecute taints of
//! [`crate::controllers::members::cluster_taints`] are off and a policy's NoExecute taint is what
//! evicts. The decision is the pure [`plan`] ([`desired_taints`] for the taints alone); the
//! reconciler, keyed by cluster name, reads the cluster and the policies, writes the taint list
//! with compare-and-swap and records an Event per policy that changed it. Any policy change queues
//! [`ALL_CLUSTERS`], whose reconcile queues every cluster.

use crate::controllers::members::support::{describe, live_cluster, write_taints};
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler, Source};
use crate::controllers::runtime::queue::WorkQueue;
use crate::controllers::shared::metrics::registered_counter_vec;
use crate::events::{EventRecorder, EventType};
use crate::store::{ListOptions, Store};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use flotilla_api::affinity::cluster_matches;
use flotilla_api::cluster::{Cluster, Taint, TaintEffect};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::well_known;
use flotilla_api::meta::Time;
use flotilla_api::policy::cluster_taint_policy::{conditions_match, ClusterTaintPolicy};
use prometheus::IntCounterVec;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The key a policy change queues: its reconcile queues every cluster (no cluster can have
/// this name).
pub const ALL_CLUSTERS: &str = "*";

/// One taint a policy put on or took off a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintChange {
    /// The policy that did it (the last one to touch the taint).
    pub policy: String,
    /// The taint (for a removal, as it was on the cluster).
    pub taint: Taint,
    /// True when added, false when removed.
    pub added: bool,
}

/// What the policies make of one cluster's taints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintPlan {
    /// The taint list the cluster should carry.
    pub taints: Vec<Taint>,
    /// What differs from the cluster's current list, and which policy did it.
    pub changes: Vec<TaintChange>,
}

/// Orders policies as Karmada does (creationTimestamp ascending; names break ties so the
/// order is deterministic) and drops those being deleted.
fn ordered(policies: &[ClusterTaintPolicy]) -> Vec<&ClusterTaintPolicy> {
    let mut out: Vec<&ClusterTaintPolicy> = policies
        .iter()
        .filter(|p| !p.metadata.is_deleting())
        .collect();
    out.sort_by(|a, b| {
        (a.metadata.creation_timestamp, &a.metadata.name)
            .cmp(&(b.metadata.creation_timestamp, &b.metadata.name))
    });
    out
}

/// Applies `policies` (any order; sorted here by creationTimestamp) to `cluster` at `now`.
pub fn plan(cluster: &Cluster, policies: &[ClusterTaintPolicy], now: DateTime<Utc>) -> TaintPlan {
    let conditions = &cluster.status.conditions;
    let mut taints = cluster.spec.taints.clone();
    // (key, effect) → the last policy that added or removed it.
    let mut touched: BTreeMap<(String, TaintEffect), String> = BTreeMap::new();
    for p in ordered(policies) {
        if let Some(target) = &p.spec.target_clusters {
            if !cluster_matches(cluster, target) {
                continue;
            }
        }
        let name = &p.metadata.name;
        if conditions_match(conditions, &p.spec.add_on_conditions) {
            for pt in &p.spec.taints {
                if !taints.iter().any(|t| pt.same_identity(t)) {
                    // A taint the cluster had when the pass began, which an older policy
                    // removed just before, comes back as it was: its timeAdded keeps counting
                    // toward tolerationSeconds, and two policies sharing a taint under opposite
                    // conditions do not rewrite it (and wake each other) forever.
                    let taint = cluster
                        .spec
                        .taints
                        .iter()
                        .find(|t| pt.same_identity(t))
                        .cloned()
                        .unwrap_or_else(|| pt.to_taint(Time::new(now)));
                    taints.push(taint);
                    touched.insert((pt.key.clone(), pt.effect), name.clone());
                }
            }
        }
        if conditions_match(conditions, &p.spec.remove_on_conditions) {
            for pt in &p.spec.taints {
                if let Some(i) = taints.iter().position(|t| pt.same_identity(t)) {
                    taints.remove(i);
                    touched.insert((pt.key.clone(), pt.effect), name.clone());
                }
            }
        }
    }
    let by = |t: &Taint| {
        touched
            .get(&(t.key.clone(), t.effect))
            .cloned()
            .unwrap_or_default()
    };
    let old = &cluster.spec.taints;
    let mut changes: Vec<TaintChange> = taints
        .iter()
        .filter(|t| !old.iter().any(|o| o.same_identity(t)))
        .map(|t| TaintChange {
            policy: by(t),
            taint: t.clone(),
            added: true,
        })
        .collect();
    changes.extend(
        old.iter()
            .filter(|o| !taints.iter().any(|t| t.same_identity(o)))
            .map(|o| TaintChange {
                policy: by(o),
                taint: o.clone(),
                added: false,
            }),
    );
    TaintPlan { taints, changes }
}

/// The taints `cluster` should carry under `policies` at `now`, or `None` when its current
/// list is already right.
pub fn desired_taints(
    cluster: &Cluster,
    policies: &[ClusterTaintPolicy],
    now: DateTime<Utc>,
) -> Option<Vec<Taint>> {
    let p = plan(cluster, policies, now);
    (p.taints != cluster.spec.taints).then_some(p.taints)
}

/// What of a Cluster the policies look at: labels and spec (targetClusters, current taints),
/// condition types and statuses, deletion. Resource-summary reports leave it unchanged.
pub fn cluster_fingerprint(obj: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let text = |p: &str| obj.lookup(p).map(Value::to_string).unwrap_or_default();
    text("/metadata/labels").hash(&mut h);
    text("/metadata/deletionTimestamp").hash(&mut h);
    text("/spec").hash(&mut h);
    if let Some(conds) = obj.lookup("/status/conditions").and_then(Value::as_array) {
        for c in conds {
            c.get("type").map(Value::to_string).hash(&mut h);
            c.get("status").map(Value::to_string).hash(&mut h);
        }
    }
    h.finish()
}

/// The controller that applies ClusterTaintPolicies to Clusters.
pub struct ClusterTaintPolicyController {
    store: Arc<dyn Store>,
    clock: flotilla_support::clock::SharedClock,
    events: EventRecorder,
    queue: WorkQueue,
    changes: IntCounterVec,
}

impl ClusterTaintPolicyController {
    /// A controller over `store` that queues clusters into `queue` (the queue it runs on).
    pub fn new(
        store: Arc<dyn Store>,
        clock: flotilla_support::clock::SharedClock,
        events: EventRecorder,
        queue: WorkQueue,
        registry: &prometheus::Registry,
    ) -> Result<Self, prometheus::Error> {
        let changes = registered_counter_vec(
            registry,
            "flotilla_cluster_taint_policy_changes_total",
            "Cluster taints ClusterTaintPolicies added or removed, by policy and action.",
            &["policy", "action"],
        )?;
        Ok(Self {
            store,
            clock,
            events,
            queue,
            changes,
        })
    }

    /// What wakes it: a change of what a cluster's policies look at, and any change of a
    /// policy (which concerns every cluster).
    pub fn sources() -> Vec<Source> {
        vec![
            Source::primary(well_known::clusters()).on_change_of(cluster_fingerprint),
            Source::mapped(well_known::cluster_taint_policies(), |_| {
                vec![ALL_CLUSTERS.to_string()]
            })
            .on_change_of(crate::controllers::runtime::controller::generation_fingerprint),
        ]
    }

    async fn queue_every_cluster(&self) -> Result<Action, ReconcileError> {
        let clusters = self
            .store
            .list(&well_known::clusters(), None, &ListOptions::default())
            .await?;
        for c in &clusters.items {
            if let Some(name) = c.lookup("/metadata/name").and_then(Value::as_str) {
                self.queue.add(name);
            }
        }
        Ok(Action::Done)
    }

    async fn policies(&self) -> Result<Vec<ClusterTaintPolicy>, ReconcileError> {
        let list = self
            .store
            .list(
                &well_known::cluster_taint_policies(),
                None,
                &ListOptions::default(),
            )
            .await?;
        let mut out = Vec::with_capacity(list.items.len());
        for raw in list.items {
            match serde_json::from_value::<ClusterTaintPolicy>(raw) {
                Ok(p) => out.push(p),
                // Admission validated it; one unreadable policy must not stop the others.
                Err(e) => tracing::warn!(error = %e, "a ClusterTaintPolicy does not decode"),
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl Reconciler for ClusterTaintPolicyController {
    fn name(&self) -> &'static str {
        "cluster-taint-policy"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        if key == ALL_CLUSTERS {
            return self.queue_every_cluster().await;
        }
        let Some((raw, cluster)) = live_cluster(self.store.as_ref(), key).await? else {
            return Ok(Action::Done);
        };
        let policies = self.policies().await?;
        let plan = plan(&cluster, &policies, self.clock.now());
        if plan.taints == cluster.spec.taints {
            return Ok(Action::Done);
        }
        write_taints(self.store.as_ref(), &raw, &plan.taints).await?;
        // One Event per policy and direction, naming the taints.
        let mut by_policy: BTreeMap<(&str, bool), Vec<String>> = BTreeMap::new();
        for c in &plan.changes {
            let action = if c.added { "added" } else { "removed" };
            self.changes
                .with_label_values(&[c.policy.as_str(), action])
                .inc();
            tracing::info!(cluster = key, policy = %c.policy, taint = %describe(&c.taint), action, "cluster taint policy applied");
            by_policy
                .entry((c.policy.as_str(), c.added))
                .or_default()
                .push(describe(&c.taint));
        }
        for ((policy, added), taints) in by_policy {
            let (kind, reason, verb, why) = if added {
                (
                    // Karmada's reason and type (docs/semantics.md §4.2).
                    EventType::Normal,
                    "TaintClusterSucceed",
                    "added",
                    "addOnConditions",
                )
            } else {
                (
                    EventType::Normal,
                    "UntaintClusterSucceed",
                    "removed",
                    "removeOnConditions",
                )
            };
            let message = format!(
                "ClusterTaintPolicy {policy} {verb} taints {} ({why} matched)",
                taints.join(", ")
            );
            self.events.cluster(&raw, kind, reason, &message).await;
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::runtime::testing::TestWorld;
    use crate::controllers::settings::ControllerSettings;
    use crate::testing::eventually;
    use chrono::{Duration, TimeZone};
    use flotilla_api::cluster::ClusterSpec;
    use flotilla_api::meta::{Condition, ConditionStatus};
    use flotilla_api::policy::cluster_taint_policy::{
        ClusterTaintPolicySpec, MatchCondition, MatchConditionOperator, PolicyTaint,
    };
    use flotilla_api::policy::ClusterAffinity;
    use serde_json::json;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).single().unwrap()
    }

    fn test(ty: &str, op: MatchConditionOperator, s: ConditionStatus) -> MatchCondition {
        MatchCondition {
            condition_type: ty.into(),
            operator: op,
            status_values: vec![s],
        }
    }

    /// A policy created at `created` tainting `key:effect` when `add` matches, untainting when
    /// `remove` matches.
    fn policy(
        name: &str,
        created: i64,
        add: Vec<MatchCondition>,
        remove: Vec<MatchCondition>,
        taints: &[(&str, TaintEffect, &str)],
        target: Option<ClusterAffinity>,
    ) -> ClusterTaintPolicy {
        let mut p = ClusterTaintPolicy::new(
            name,
            ClusterTaintPolicySpec {
                target_clusters: target,
                add_on_conditions: add,
                remove_on_conditions: remove,
                taints: taints
                    .iter()
                    .map(|(k, e, v)| PolicyTaint {
                        key: k.to_string(),
                        effect: *e,
                        value: v.to_string(),
                    })
                    .collect(),
            },
        );
        p.metadata.creation_timestamp = Some(Time::new(t(created)));
        p
    }

    fn cluster(conds: &[(&str, ConditionStatus)], taints: &[(&str, TaintEffect, &str)]) -> Cluster {
        let mut c = Cluster::new("m1", ClusterSpec::default());
        c.metadata.labels.insert("env".into(), "prod".into());
        c.status.conditions = conds
            .iter()
            .map(|(ty, s)| Condition::new(ty, *s, "r", ""))
            .collect();
        c.spec.taints = taints
            .iter()
            .map(|(k, e, v)| Taint {
                key: k.to_string(),
                value: v.to_string(),
                effect: *e,
                time_added: Some(Time::new(t(-1000))),
            })
            .collect();
        c
    }

    type Row = (
        &'static str,
        Cluster,
        Vec<ClusterTaintPolicy>,
        Option<Vec<(&'static str, &'static str, i64)>>,
    );

    /// Two policies sharing a taint: the older one's removeOnConditions match, the newer one's
    /// addOnConditions match. The newer one wins, and the taint stays as it was (same
    /// timeAdded), so nothing is written and tolerationSeconds keep counting.
    #[test]
    fn a_taint_two_policies_share_is_not_rewritten_every_pass() {
        use ConditionStatus::{False, True};
        use MatchConditionOperator::In;
        use TaintEffect::NoExecute;
        const KEY: &str = "example.com/degraded";
        let older = policy(
            "older",
            0,
            vec![test("DiskOK", In, False)],
            vec![test("DiskOK", In, True)],
            &[(KEY, NoExecute, "")],
            None,
        );
        let newer = policy(
            "newer",
            10,
            vec![test("NetworkOK", In, False)],
            vec![test("NetworkOK", In, True)],
            &[(KEY, NoExecute, "")],
            None,
        );
        let c = cluster(
            &[("DiskOK", True), ("NetworkOK", False)],
            &[(KEY, NoExecute, "")],
        );
        let policies = [older, newer];
        assert_eq!(desired_taints(&c, &policies, t(500)), None);
        let plan = plan(&c, &policies, t(500));
        assert!(plan.changes.is_empty(), "{:?}", plan.changes);
        assert_eq!(plan.taints[0].time_added, Some(Time::new(t(-1000))));
    }

    #[test]
    fn desired_taints_table() {
        use ConditionStatus::{False, True, Unknown};
        use MatchConditionOperator::{In, NotIn};
        use TaintEffect::{NoExecute, NoSchedule};
        const NET: &str = "example.com/network-down";
        let net_down = || {
            policy(
                "net",
                0,
                vec![test("NetworkOK", In, False)],
                vec![test("NetworkOK", In, True)],
                &[(NET, NoExecute, "")],
                None,
            )
        };
        let to = |names: &[&str]| {
            Some(ClusterAffinity {
                cluster_names: names.iter().map(|n| n.to_string()).collect(),
                ..Default::default()
            })
        };
        // The network-down policy without removeOn, for the clusters `names`.
        let net_down_for = |names: &[&str]| {
            policy(
                "net",
                0,
                vec![test("NetworkOK", In, False)],
                vec![],
                &[(NET, NoExecute, "")],
                to(names),
            )
        };
        // (what, cluster, policies, want: None = unchanged, else [(key, effect, timeAdded)])
        let table: Vec<Row> = vec![
            (
                "addOn match adds with timeAdded now",
                cluster(&[("NetworkOK", False)], &[]),
                vec![net_down()],
                Some(vec![(NET, "NoExecute", 0)]),
            ),
            (
                "removeOn match removes",
                cluster(&[("NetworkOK", True)], &[(NET, NoExecute, "")]),
                vec![net_down()],
                Some(vec![]),
            ),
            (
                "absent condition matches neither In nor NotIn",
                cluster(&[("Ready", True)], &[(NET, NoExecute, "")]),
                vec![
                    net_down(),
                    policy(
                        "notin",
                        1,
                        vec![test("NetworkOK", NotIn, True)],
                        vec![test("NetworkOK", NotIn, False)],
                        &[("x", NoSchedule, "")],
                        None,
                    ),
                ],
                None,
            ),
            (
                "existing taint keeps its value and timeAdded",
                cluster(&[("NetworkOK", False)], &[(NET, NoExecute, "old")]),
                vec![policy(
                    "net",
                    0,
                    vec![test("NetworkOK", In, False)],
                    vec![],
                    &[(NET, NoExecute, "new"), (NET, NoSchedule, "")],
                    None,
                )],
                Some(vec![(NET, "NoExecute", -1000), (NET, "NoSchedule", 0)]),
            ),
            (
                "clusters outside targetClusters are untouched",
                cluster(&[("NetworkOK", False)], &[]),
                vec![net_down_for(&["m2"])],
                None,
            ),
            (
                "... even when their conditions would remove",
                cluster(&[("NetworkOK", True)], &[(NET, NoExecute, "")]),
                vec![policy(
                    "net",
                    0,
                    vec![],
                    vec![test("NetworkOK", In, True)],
                    &[(NET, NoExecute, "")],
                    to(&["m2"]),
                )],
                None,
            ),
            (
                "a targeted cluster is tainted",
                cluster(&[("NetworkOK", False)], &[]),
                vec![net_down_for(&["m1"])],
                Some(vec![(NET, "NoExecute", 0)]),
            ),
            (
                "deleting (or having no) policy removes nothing",
                cluster(&[("NetworkOK", True)], &[(NET, NoExecute, "")]),
                vec![],
                None,
            ),
            (
                "a policy being deleted is ignored",
                cluster(&[("NetworkOK", True)], &[(NET, NoExecute, "")]),
                vec![{
                    let mut p = net_down();
                    p.metadata.deletion_timestamp = Some(Time::new(t(5)));
                    p
                }],
                None,
            ),
            (
                "other taints are kept, in order",
                cluster(
                    &[("Ready", Unknown)],
                    &[
                        ("user", NoSchedule, ""),
                        ("cluster.karmada.io/unreachable", NoSchedule, ""),
                    ],
                ),
                vec![policy(
                    "unreachable",
                    0,
                    vec![test("Ready", In, Unknown)],
                    vec![test("Ready", In, True)],
                    &[("cluster.karmada.io/unreachable", NoExecute, "")],
                    None,
                )],
                Some(vec![
                    ("user", "NoSchedule", -1000),
                    ("cluster.karmada.io/unreachable", "NoSchedule", -1000),
                    ("cluster.karmada.io/unreachable", "NoExecute", 0),
                ]),
            ),
            (
                "oldest first: a later policy's removal wins over an earlier add",
                cluster(&[("NetworkOK", False)], &[]),
                vec![
                    policy(
                        "later",
                        10,
                        vec![],
                        vec![test("NetworkOK", In, False)],
                        &[(NET, NoExecute, "")],
                        None,
                    ),
                    net_down(),
                ],
                None,
            ),
            (
                "oldest first: a later policy's add wins over an earlier removal, and the \
                 taint stays as it was (nothing to write)",
                cluster(&[("NetworkOK", False)], &[(NET, NoExecute, "")]),
                vec![
                    policy(
                        "later",
                        10,
                        vec![test("NetworkOK", In, False)],
                        vec![],
                        &[(NET, NoExecute, "")],
                        None,
                    ),
                    policy(
                        "earlier",
                        0,
                        vec![],
                        vec![test("NetworkOK", In, False)],
                        &[(NET, NoExecute, "")],
                        None,
                    ),
                ],
                None,
            ),
        ];
        for (what, c, policies, want) in table {
            let got = desired_taints(&c, &policies, t(100)).map(|ts| {
                ts.iter()
                    .map(|x| {
                        (
                            x.key.clone(),
                            x.effect.to_string(),
                            x.time_added
                                .map(|a| a.as_datetime().timestamp() - t(0).timestamp()),
                        )
                    })
                    .collect::<Vec<_>>()
            });
            let want = want.map(|w| {
                w.iter()
                    .map(|(k, e, at)| {
                        // Taints added now are stamped at t(100).
                        let at = if *at == 0 { 100 } else { *at };
                        (k.to_string(), e.to_string(), Some(at))
                    })
                    .collect::<Vec<_>>()
            });
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn changes_name_the_policy_that_made_them() {
        use MatchConditionOperator::In;
        let p = policy(
            "net",
            0,
            vec![test("NetworkOK", In, ConditionStatus::False)],
            vec![],
            &[("a", TaintEffect::NoExecute, "")],
            None,
        );
        let c = cluster(
            &[("NetworkOK", ConditionStatus::False)],
            &[("b", TaintEffect::NoSchedule, "")],
        );
        let got = plan(&c, &[p], t(0));
        assert_eq!(got.changes.len(), 1);
        assert_eq!(got.changes[0].policy, "net");
        assert!(got.changes[0].added);
        assert_eq!(got.changes[0].taint.key, "a");
    }

    struct Setup {
        world: TestWorld,
        queue: WorkQueue,
        controller: ClusterTaintPolicyController,
    }

    /// When the tests' worlds start.
    fn start() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
    }

    async fn setup() -> Setup {
        let world = TestWorld::at(start());
        let queue = WorkQueue::default();
        let controller = ClusterTaintPolicyController::new(
            world.store.clone(),
            world.shared_clock.clone(),
            world.events(),
            queue.clone(),
            &world.metrics,
        )
        .unwrap();
        Setup {
            world,
            queue,
            controller,
        }
    }

    async fn set_network(store: &Arc<dyn Store>, name: &str, status: Option<&str>) {
        let mut c = store
            .get(&well_known::clusters(), None, name)
            .await
            .unwrap();
        let mut conds =
            vec![json!({"type": "Ready", "status": "True", "reason": "ok", "message": ""})];
        if let Some(s) = status {
            conds.push(json!({"type": "NetworkOK", "status": s, "reason": "probe", "message": ""}));
        }
        c["status"] = json!({ "conditions": conds });
        store
            .update_status(&well_known::clusters(), c)
            .await
            .unwrap();
    }

    async fn taints(store: &Arc<dyn Store>, name: &str) -> Value {
        store
            .get(&well_known::clusters(), None, name)
            .await
            .unwrap()
            .lookup("/spec/taints")
            .cloned()
            .unwrap_or(json!([]))
    }

    #[tokio::test]
    async fn a_custom_condition_taints_and_its_recovery_untaints() {
        let s = setup().await;
        for name in ["m1", "m2"] {
            s.world
                .cluster(name, json!({"syncMode": "Pull"}), json!({}))
                .await;
        }
        s.world.store
            .create(
                &well_known::cluster_taint_policies(),
                json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterTaintPolicy",
                       "metadata": {"name": "network-down"},
                       "spec": {
                           "targetClusters": {"clusterNames": ["m1"]},
                           "addOnConditions": [{"conditionType": "NetworkOK", "operator": "In",
                                                "statusValues": ["False"]}],
                           "removeOnConditions": [{"conditionType": "NetworkOK", "operator": "In",
                                                   "statusValues": ["True"]}],
                           "taints": [{"key": "example.com/network-down", "effect": "NoExecute"}]}}),
            )
            .await
            .unwrap();

        // The policy's key queues every cluster.
        assert_eq!(
            s.controller.reconcile(ALL_CLUSTERS).await.unwrap(),
            Action::Done
        );
        assert_eq!(s.queue.len(), 2);

        // Condition False on both: only the targeted m1 is tainted, at the clock's time.
        set_network(&s.world.store, "m1", Some("False")).await;
        set_network(&s.world.store, "m2", Some("False")).await;
        for name in ["m1", "m2"] {
            s.controller.reconcile(name).await.unwrap();
        }
        assert_eq!(
            taints(&s.world.store, "m1").await,
            json!([{"key": "example.com/network-down", "effect": "NoExecute",
                    "timeAdded": "2026-01-01T00:00:00Z"}])
        );
        assert_eq!(taints(&s.world.store, "m2").await, json!([]));
        let events = s.world.stored_events().await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["reason"], "TaintClusterSucceed");
        assert_eq!(events[0]["involvedObject"]["name"], "m1");
        assert!(events[0]["message"].as_str().unwrap().contains(
            "ClusterTaintPolicy network-down added taints example.com/network-down:NoExecute"
        ));

        // Later reconciles keep the taint and its timeAdded, and write nothing.
        s.world.clock.advance(Duration::minutes(5));
        let version_of_m1 = || async {
            let m1 = s.world.store.get(&well_known::clusters(), None, "m1").await;
            m1.unwrap()["metadata"]["resourceVersion"].clone()
        };
        let before = version_of_m1().await;
        s.controller.reconcile("m1").await.unwrap();
        assert_eq!(before, version_of_m1().await);

        // The condition goes away: neither In nor NotIn matches, the taint stays.
        set_network(&s.world.store, "m1", None).await;
        s.controller.reconcile("m1").await.unwrap();
        assert_eq!(
            taints(&s.world.store, "m1").await.as_array().unwrap().len(),
            1
        );

        // It comes back True: removeOnConditions match, the taint goes.
        set_network(&s.world.store, "m1", Some("True")).await;
        s.controller.reconcile("m1").await.unwrap();
        assert_eq!(taints(&s.world.store, "m1").await, json!([]));

        // Deleting the policy removes nothing it added.
        set_network(&s.world.store, "m1", Some("False")).await;
        s.controller.reconcile("m1").await.unwrap();
        s.world
            .store
            .delete(
                &well_known::cluster_taint_policies(),
                None,
                "network-down",
                &Default::default(),
            )
            .await
            .unwrap();
        set_network(&s.world.store, "m1", Some("True")).await;
        s.controller.reconcile("m1").await.unwrap();
        assert_eq!(
            taints(&s.world.store, "m1").await.as_array().unwrap().len(),
            1
        );
    }

    /// Waits (at most 10 s) until `m1`'s taints are `want`.
    async fn wait_for_taints(store: &Arc<dyn Store>, want: Value, what: &str) {
        eventually(what, std::time::Duration::from_secs(10), || async {
            let got = taints(store, "m1").await;
            (got == want)
                .then_some(())
                .ok_or_else(|| format!("m1 has taints {got}"))
        })
        .await;
    }

    #[tokio::test]
    async fn running_it_wakes_on_policy_and_condition_changes() {
        // The controller as the server wires it, with no resync within the test.
        let world = TestWorld::with_settings(
            start(),
            ControllerSettings {
                resync: std::time::Duration::from_secs(3600),
                ..ControllerSettings::default()
            },
        );
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let handle = crate::controllers::runtime::controller::spawn(
            world.store.clone(),
            crate::controllers::wiring::cluster_taint_policy(&world.ctx).unwrap(),
            None,
            stop_rx,
        );
        world
            .store
            .create(
                &well_known::clusters(),
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                       "metadata": {"name": "m1"}, "spec": {"syncMode": "Pull"}}),
            )
            .await
            .unwrap();
        set_network(&world.store, "m1", Some("False")).await;
        // The policy arrives after the cluster's condition: its change reaches every cluster.
        let mut p = json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterTaintPolicy",
            "metadata": {"name": "network-down"},
            "spec": {"addOnConditions": [{"conditionType": "NetworkOK", "operator": "In",
                                          "statusValues": ["False"]}],
                     "removeOnConditions": [{"conditionType": "NetworkOK", "operator": "In",
                                             "statusValues": ["True"]}],
                     "taints": [{"key": "example.com/network-down", "effect": "NoExecute"}]}});
        let created = world
            .store
            .create(&well_known::cluster_taint_policies(), p.clone())
            .await
            .unwrap();
        let stamp = "2026-01-01T00:00:00Z";
        wait_for_taints(
            &world.store,
            json!([{"key": "example.com/network-down", "effect": "NoExecute", "timeAdded": stamp}]),
            "the new policy's taint",
        )
        .await;
        // A spec change of the policy: its new taint is added too.
        p["metadata"] = created["metadata"].clone();
        p["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "example.com/network-down", "effect": "NoSchedule"}));
        world
            .store
            .update(&well_known::cluster_taint_policies(), p)
            .await
            .unwrap();
        wait_for_taints(
            &world.store,
            json!([{"key": "example.com/network-down", "effect": "NoExecute", "timeAdded": stamp},
                   {"key": "example.com/network-down", "effect": "NoSchedule", "timeAdded": stamp}]),
            "the updated policy's second taint",
        )
        .await;
        // The cluster's condition recovers: both go.
        set_network(&world.store, "m1", Some("True")).await;
        wait_for_taints(&world.store, json!([]), "the taints to go on recovery").await;
        stop_tx.send(true).unwrap();
        handle.stop().await;
    }

    #[test]
    fn resource_summary_reports_do_not_wake_it() {
        let base = json!({"metadata": {"name": "m1", "labels": {"a": "b"}}, "spec": {"syncMode": "Pull"},
                          "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "x"}]}});
        let mut summary = base.clone();
        summary["status"]["resourceSummary"] = json!({"allocatable": {"cpu": "4"}});
        summary["status"]["conditions"][0]["message"] = json!("still fine");
        assert_eq!(cluster_fingerprint(&base), cluster_fingerprint(&summary));
        let mut cond = base.clone();
        cond["status"]["conditions"][0]["status"] = json!("False");
        assert_ne!(cluster_fingerprint(&base), cluster_fingerprint(&cond));
        let mut label = base.clone();
        label["metadata"]["labels"]["a"] = json!("c");
        assert_ne!(cluster_fingerprint(&base), cluster_fingerprint(&label));
    }
}
