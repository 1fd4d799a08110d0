//! The kinds and subresources the API computes instead of reading and writing the store, in one
//! table, [`COMPUTED`]: the kinds `EvictionBrake` and `Failover` (get and list, built at the
//! moment of the request), `FailoverSimulation` (create only, never stored), and the
//! subresources `explain` of the bindings and `scale` of the replicated workloads. For each it
//! says where it is served, the verbs discovery lists and how it answers; each one's own logic
//! stays in its module (`eviction_brakes`, `failovers`, `simulation`, `explain`, `scale`).
//!
//! The table is consulted by `routes::resources::serve`, the one dispatch point (a target the
//! table names goes to its entry, anything else to the store's CRUD), by `routes::discovery`
//! (verbs and subresource entries) and, through the router, by `wire::metrics` (which
//! subresources get a label of their own). The
//! kinds' paths resolve because the kinds table (`flotilla_api::kinds`) declares them.
//!
//! The kinds computed on read share their answering here: get (404 when no object has the
//! name), list, a kubectl Table with the kind's own columns, JSON or YAML; anything else (a
//! write, a watch, a subresource) is 405, since nothing of them is stored.

use crate::api::access::auth::Principal;
use crate::api::error::{ApiError, ApiResult};
use crate::api::http::options::Params;
use crate::api::wire::body::{negotiate, respond};
use crate::api::wire::table::{self, Column};
use crate::api::wire::target::Target;
use crate::api::ApiState;
use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use flotilla_api::kinds::{ResourceType, FLOTILLA_GROUP};
use flotilla_api::simulation::FAILOVER_SIMULATIONS;
use futures::future::BoxFuture;
use serde_json::{json, Value};

pub mod eviction_brakes;
pub mod explain;
pub mod failovers;
pub mod scale;
pub mod simulation;

/// One computed kind or subresource.
pub struct Computed {
    /// Where it is served.
    pub at: At,
    /// The verbs it answers, as discovery lists them.
    pub verbs: &'static [&'static str],
    /// How it answers.
    pub answer: Answer,
}

/// Where a computed entry is served.
pub enum At {
    /// A kind of its own: `/apis/<group>/<version>/<plural>[/<name>]`.
    Kind {
        /// Its group.
        group: &'static str,
        /// Its plural.
        plural: &'static str,
    },
    /// A subresource, `<plural>/<name>/<subresource>`, of the kinds `of` accepts.
    Subresource {
        /// The subresource's name (`scale`).
        name: &'static str,
        /// Whether a kind has it.
        of: fn(&ResourceType) -> bool,
        /// What discovery lists for it (`None`: it is not listed).
        listed_as: Option<Listed>,
    },
}

/// A subresource's entry in discovery: the group, version and kind of what it answers with.
pub struct Listed {
    /// Group (`autoscaling`).
    pub group: &'static str,
    /// Version (`v1`).
    pub version: &'static str,
    /// Kind (`Scale`).
    pub kind: &'static str,
}

/// How a computed entry answers.
pub enum Answer {
    /// Get and list of objects computed on read, answered by [`Computed::serve`] with the
    /// objects `read` builds (given the name of a get and the query) and a Table of `columns`;
    /// anything else is 405, `read_only_because` says why.
    Read {
        /// The objects of a get (among which the name is looked up) or of a list.
        read: ReadFn,
        /// The Table's columns.
        columns: fn() -> Vec<Column>,
        /// Why only get and list are allowed, for the 405.
        read_only_because: &'static str,
    },
    /// The handler answers every request (its verbs, and the 405 of the others) itself.
    Request(RequestFn),
}

/// Builds the objects of a kind computed on read.
pub type ReadFn =
    for<'a> fn(&'a ApiState, Option<&'a str>, &'a Params) -> BoxFuture<'a, ApiResult<Vec<Value>>>;

/// Answers a whole request.
pub type RequestFn = for<'a> fn(Call<'a>) -> BoxFuture<'a, ApiResult<Response>>;

/// One request to a computed entry: everything its handler may read.
pub struct Call<'a> {
    /// The server's state.
    pub state: &'a ApiState,
    /// Who calls.
    pub who: &'a Principal,
    /// The method.
    pub method: Method,
    /// What the path addresses.
    pub target: Target,
    /// The query.
    pub params: Params,
    /// The request headers.
    pub headers: HeaderMap,
    /// The request body.
    pub body: Body,
}

/// Every stored binding of both kinds, each with its Kind (the ResourceBindings first); a
/// failed read is `error` of the store's error and the kind it read.
pub async fn every_binding(
    state: &ApiState,
    error: impl Fn(crate::store::StoreError, &ResourceType) -> ApiError,
) -> ApiResult<Vec<(&'static str, Value)>> {
    let mut bindings = Vec::new();
    for (rt, kind) in flotilla_api::kinds::well_known::binding_kinds() {
        let list = state
            .store
            .list(&rt, None, &crate::store::ListOptions::default())
            .await
            .map_err(|e| error(e, &rt))?;
        bindings.extend(list.items.into_iter().map(|b| (kind, b)));
    }
    Ok(bindings)
}

/// Every computed kind and subresource.
pub static COMPUTED: &[Computed] = &[
    Computed {
        at: At::Kind {
            group: FLOTILLA_GROUP,
            plural: self::eviction_brakes::PLURAL,
        },
        verbs: &["get", "list"],
        answer: Answer::Read {
            read: |state, _, _| Box::pin(self::eviction_brakes::objects(state)),
            columns: self::eviction_brakes::columns,
            read_only_because: "are computed on read",
        },
    },
    Computed {
        at: At::Kind {
            group: FLOTILLA_GROUP,
            plural: self::failovers::PLURAL,
        },
        verbs: &["get", "list"],
        answer: Answer::Read {
            read: |state, name, params| Box::pin(self::failovers::read(state, name, params)),
            columns: self::failovers::columns,
            read_only_because: "are computed on read from the bindings' failover history",
        },
    },
    Computed {
        at: At::Kind {
            group: FLOTILLA_GROUP,
            plural: FAILOVER_SIMULATIONS,
        },
        verbs: &["create"],
        answer: Answer::Request(|c| Box::pin(self::simulation::serve(c))),
    },
    Computed {
        at: At::Subresource {
            name: "explain",
            of: self::explain::explains,
            listed_as: None,
        },
        verbs: &["get"],
        answer: Answer::Request(|c| {
            Box::pin(async move {
                self::explain::serve(c.state, &c.method, &c.target, &c.headers).await
            })
        }),
    },
    Computed {
        at: At::Subresource {
            name: "scale",
            of: self::scale::supports_scale,
            listed_as: Some(Listed {
                group: "autoscaling",
                version: "v1",
                kind: "Scale",
            }),
        },
        verbs: &["get", "patch", "update"],
        answer: Answer::Request(|c| Box::pin(self::scale::serve(c))),
    },
];

/// The entry that serves `target`, if any: its kind's, or its subresource's.
pub fn find(target: &Target) -> Option<&'static Computed> {
    COMPUTED.iter().find(|c| match &c.at {
        At::Kind { group, plural } => target.rt.group == *group && target.rt.plural == *plural,
        At::Subresource { name, of, .. } => {
            target.subresource.as_deref() == Some(*name) && of(&target.rt)
        }
    })
}

/// The verbs of a computed kind (`None` for a stored kind).
pub fn kind_verbs(rt: &ResourceType) -> Option<&'static [&'static str]> {
    COMPUTED.iter().find_map(|c| match c.at {
        At::Kind { group, plural } if rt.group == group && rt.plural == plural => Some(c.verbs),
        _ => None,
    })
}

/// The computed subresources of `rt` that discovery lists: name, what they answer with, verbs.
pub fn listed_subresources(
    rt: &ResourceType,
) -> impl Iterator<Item = (&'static str, &'static Listed, &'static [&'static str])> + '_ {
    COMPUTED.iter().filter_map(move |c| match &c.at {
        At::Subresource {
            name,
            of,
            listed_as: Some(listed),
        } if of(rt) => Some((*name, listed, c.verbs)),
        _ => None,
    })
}

/// Whether `name` is a computed subresource of some kind.
pub fn is_subresource(name: &str) -> bool {
    COMPUTED
        .iter()
        .any(|c| matches!(c.at, At::Subresource { name: n, .. } if n == name))
}

impl Computed {
    /// Answers `call`.
    pub async fn serve(&self, call: Call<'_>) -> ApiResult<Response> {
        match &self.answer {
            Answer::Request(handler) => handler(call).await,
            Answer::Read {
                read,
                columns,
                read_only_because,
            } => {
                check_read(&call, read_only_because)?;
                let name = call.target.name.as_deref();
                let items = read(call.state, name, &call.params).await?;
                respond_read(&call, *columns, items)
            }
        }
    }
}

/// 405 for anything but a plain get or list (a write, a watch, a subresource).
fn check_read(call: &Call<'_>, because: &str) -> ApiResult<()> {
    let watch = call
        .params
        .get("watch")
        .is_some_and(|w| w == "true" || w == "1");
    if call.method != Method::GET || watch || call.target.subresource.is_some() {
        return Err(ApiError::MethodNotAllowed(format!(
            "{} {because}: only get and list are allowed",
            call.target.rt.plural
        )));
    }
    Ok(())
}

/// Answers the get of the target's name (404 when no item has that name) or the list of
/// `items`, as JSON, YAML or a Table.
fn respond_read(
    call: &Call<'_>,
    columns: fn() -> Vec<Column>,
    items: Vec<Value>,
) -> ApiResult<Response> {
    let encoding = negotiate(&call.headers)?;
    let as_table = call
        .headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(table::wants_table);
    let rt = &call.target.rt;
    let now = call.state.clock.now();
    let body = match call.target.name.as_deref() {
        Some(name) => {
            let obj = items
                .into_iter()
                .find(|o| o["metadata"]["name"] == name)
                .ok_or_else(|| ApiError::NotFound {
                    message: format!("{}.{} \"{name}\" not found", rt.plural, rt.group),
                    name: Some(name.to_string()),
                    group: rt.group.clone(),
                    kind: rt.plural.clone(),
                })?;
            if as_table {
                table::render(&columns(), &[obj], 0, None, now)
            } else {
                obj
            }
        }
        None if as_table => table::render(&columns(), &items, 0, None, now),
        None => json!({
            "apiVersion": rt.api_version(),
            "kind": format!("{}List", rt.kind),
            "metadata": {"resourceVersion": "0"},
            "items": items,
        }),
    };
    Ok(respond(StatusCode::OK, &body, encoding))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::kinds::{builtin_by_plural, builtin_resources, well_known};

    fn target(rt: ResourceType, sub: Option<&str>) -> Target {
        Target {
            rt,
            view: None,
            namespace: None,
            name: Some("x".into()),
            subresource: sub.map(String::from),
        }
    }

    #[test]
    fn every_computed_kind_is_a_served_kind_and_every_flotilla_kind_is_computed() {
        for c in COMPUTED {
            if let At::Kind { group, plural } = c.at {
                let rt = builtin_by_plural(group, plural)
                    .unwrap_or_else(|| panic!("{group}/{plural} is not in the kinds table"));
                assert!(find(&target(rt.clone(), None)).is_some());
                assert_eq!(kind_verbs(&rt), Some(c.verbs));
            }
        }
        // Nothing of the flotilla.io group is stored: each of its kinds is computed.
        for rt in builtin_resources() {
            if rt.group == FLOTILLA_GROUP {
                assert!(kind_verbs(&rt).is_some(), "{} is not computed", rt.plural);
            }
        }
    }

    #[test]
    fn subresources_are_found_on_their_kinds_only() {
        let deployments = builtin_by_plural("apps", "deployments").unwrap();
        assert!(find(&target(deployments.clone(), Some("scale"))).is_some());
        assert!(find(&target(deployments.clone(), None)).is_none());
        assert!(find(&target(deployments.clone(), Some("explain"))).is_none());
        assert!(find(&target(well_known::works(), Some("scale"))).is_none());
        for rt in [
            well_known::resource_bindings(),
            well_known::cluster_resource_bindings(),
        ] {
            assert!(find(&target(rt.clone(), Some("explain"))).is_some());
            assert!(find(&target(rt, Some("status"))).is_none());
        }
        let listed: Vec<_> = listed_subresources(&deployments)
            .map(|(name, l, verbs)| (name, l.group, l.version, l.kind, verbs))
            .collect();
        assert_eq!(
            listed,
            [(
                "scale",
                "autoscaling",
                "v1",
                "Scale",
                &["get", "patch", "update"][..]
            )]
        );
        // explain is served but not listed in discovery.
        assert_eq!(
            listed_subresources(&well_known::resource_bindings()).count(),
            0
        );
        assert!(is_subresource("scale") && is_subresource("explain"));
        assert!(!is_subresource("status"));
        assert_eq!(kind_verbs(&well_known::clusters()), None);
    }
}
