//! Feeds `ResourceInterpreterCustomization` objects (config.karmada.io/v1alpha1) into the
//! interpreter: a stored customization is compiled and used; a deleted one is dropped. A
//! customization whose Lua does not compile is reported with an Event and not used.

use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::events::{EventRecorder, EventType};
use crate::interpreter::{Interpreter, ResourceInterpreterCustomization};
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::builtin_by_plural;
use std::sync::Arc;

/// The controller.
pub struct CustomizationsController {
    store: Arc<dyn Store>,
    interpreter: Arc<Interpreter>,
    events: EventRecorder,
}

impl CustomizationsController {
    /// A controller feeding `interpreter`.
    pub fn new(
        store: Arc<dyn Store>,
        interpreter: Arc<Interpreter>,
        events: EventRecorder,
    ) -> Self {
        Self {
            store,
            interpreter,
            events,
        }
    }
}

#[async_trait]
impl Reconciler for CustomizationsController {
    fn name(&self) -> &'static str {
        "customizations"
    }

    async fn reconcile(&self, key: &str) -> Result<Action, ReconcileError> {
        let Some(rt) = builtin_by_plural(
            flotilla_api::kinds::CONFIG_GROUP,
            "resourceinterpretercustomizations",
        ) else {
            return Ok(Action::Done);
        };
        let raw = match self.store.get(&rt, None, key).await {
            Ok(v) => v,
            Err(StoreError::NotFound { .. }) => {
                self.interpreter.remove_customization(key);
                return Ok(Action::Done);
            }
            Err(e) => return Err(e.into()),
        };
        if raw.lookup("/metadata/deletionTimestamp").is_some() {
            self.interpreter.remove_customization(key);
            return Ok(Action::Done);
        }
        let parsed: Result<ResourceInterpreterCustomization, _> =
            serde_json::from_value(raw.clone());
        let result = match parsed {
            Ok(c) => self
                .interpreter
                .add_customization(&c)
                .map_err(|e| flotilla_support::error_chain(&e)),
            Err(e) => Err(format!("the customization does not decode: {e}")),
        };
        if let Err(message) = result {
            self.interpreter.remove_customization(key);
            tracing::warn!(customization = key, error = %message, "customization not used");
            self.events
                .record(&raw, EventType::Warning, "CustomizationInvalid", &message)
                .await;
        }
        Ok(Action::Done)
    }
}
