//! What the kinds computed on read (`EvictionBrake`, `Failover`) share: they answer get and
//! list only, from objects built at the moment of the request, as JSON, YAML or a kubectl
//! Table; nothing of them is stored, so there is no watch and no write.

use super::body::{negotiate, respond};
use super::error::{ApiError, ApiResult};
use super::options::Params;
use super::table;
use super::target::Target;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use chrono::{DateTime, Utc};
use flotilla_api::kinds::FLOTILLA_GROUP;
use serde_json::{json, Value};

/// A computed kind of the flotilla.io group.
#[derive(Clone, Copy, Debug)]
pub struct ComputedKind {
    /// Its kind (`EvictionBrake`).
    pub kind: &'static str,
    /// Its plural (`evictionbrakes`).
    pub plural: &'static str,
    /// Why only get and list are allowed, for the 405.
    pub read_only_because: &'static str,
}

impl ComputedKind {
    /// 405 for anything but a plain get or list (a write, a watch, a subresource).
    pub fn check_read(&self, method: &Method, target: &Target, params: &Params) -> ApiResult<()> {
        let watch = params.get("watch").is_some_and(|w| w == "true" || w == "1");
        if *method != Method::GET || watch || target.subresource.is_some() {
            return Err(ApiError::MethodNotAllowed(format!(
                "{} {}: only get and list are allowed",
                self.plural, self.read_only_because
            )));
        }
        Ok(())
    }

    /// Answers the get of `name` (404 when no item has that name) or the list of `items`.
    pub fn respond(
        &self,
        name: Option<&str>,
        items: Vec<Value>,
        headers: &HeaderMap,
        now: DateTime<Utc>,
    ) -> ApiResult<Response> {
        let encoding = negotiate(headers)?;
        let as_table = headers
            .get(axum::http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(table::wants_table);
        let body = match name {
            Some(name) => {
                let obj = items
                    .into_iter()
                    .find(|o| o["metadata"]["name"] == name)
                    .ok_or_else(|| ApiError::NotFound {
                        message: format!("{}.{FLOTILLA_GROUP} \"{name}\" not found", self.plural),
                        name: Some(name.to_string()),
                        group: FLOTILLA_GROUP.to_string(),
                        kind: self.plural.to_string(),
                    })?;
                if as_table {
                    table::table(FLOTILLA_GROUP, self.kind, &[obj], 0, None, now)
                } else {
                    obj
                }
            }
            None if as_table => table::table(FLOTILLA_GROUP, self.kind, &items, 0, None, now),
            None => json!({
                "apiVersion": format!("{FLOTILLA_GROUP}/v1alpha1"),
                "kind": format!("{}List", self.kind),
                "metadata": {"resourceVersion": "0"},
                "items": items,
            }),
        };
        Ok(respond(StatusCode::OK, &body, encoding))
    }
}
