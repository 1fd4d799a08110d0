//! The write of a changed object, shared by PUT and PATCH (resources.rs) and by the `scale`
//! subresource (scale.rs), so that each goes through the same admission, dry run and
//! compare-and-swap as the others.

use super::admission;
use crate::api::error::ApiResult;
use crate::api::http::options::Params;
use crate::api::wire::target::Target;
use crate::api::ApiState;
use flotilla_api::kinds::ResourceType;
use serde_json::Value;
use std::sync::Arc;

/// Writes `obj` over `old` (a PUT, a PATCH, a `scale` write): admission of the new object,
/// or of its status alone for the `status` subresource, nothing more under a dry run, then
/// the store's compare-and-swap on the resourceVersion `obj` carries and what follows a write.
pub async fn write_update(
    state: &ApiState,
    target: &Target,
    rt: &ResourceType,
    params: &Params,
    mut obj: Value,
    old: &Value,
) -> ApiResult<Arc<Value>> {
    let is_status = target.subresource.as_deref() == Some("status");
    if is_status {
        admission::admit_status(rt, &obj)?;
    } else {
        admission::admit(state, rt, &mut obj, Some(old))?;
    }
    if params.dry_run() {
        return Ok(Arc::new(obj));
    }
    // A status write (the agents' Work status) is answered from the object as stored, shared.
    let result = if is_status {
        state.store.update_status_shared(rt, obj).await
    } else {
        state.store.update(rt, obj).await.map(Arc::new)
    };
    let updated = result.map_err(|e| target.store_err(e))?;
    admission::after_write(state, rt).await;
    Ok(updated)
}
