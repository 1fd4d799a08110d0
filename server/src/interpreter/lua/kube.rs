//! The `kube` helper library of customization scripts, with Karmada's names and meanings
//! (`local kube = require("kube")`):
//! - `kube.resourceAdd(q1, q2, ...)`: the sum of quantities, as a quantity string;
//! - `kube.getResourceQuantity(q)`: a quantity's value as a number (`"1500m"` → 1.5);
//! - `kube.accuratePodRequirements(podTemplate)`: the requirements of one pod of a pod
//!   template (`{metadata, spec}`), as the native rules compute them;
//! - `kube.getPodDependencies(podTemplate, namespace)`: the ConfigMaps, Secrets,
//!   ServiceAccount and PVCs a pod template refers to (namespace `default` when nil).

use flotilla_api::quantity::Quantity;
use mlua::{Lua, Table, Variadic};
use serde_json::Value;

use super::{from_lua, to_lua};
use crate::interpreter::native::{dependencies, replica};

fn quantity(v: &mlua::Value) -> mlua::Result<Quantity> {
    let text = match v {
        mlua::Value::Nil => return Ok(Quantity::default()),
        mlua::Value::String(s) => s.to_string_lossy(),
        mlua::Value::Integer(i) => i.to_string(),
        mlua::Value::Number(n) => n.to_string(),
        other => {
            return Err(mlua::Error::runtime(format!(
                "expected a quantity string, got a {}",
                other.type_name()
            )))
        }
    };
    Quantity::parse(&text).map_err(|e| mlua::Error::runtime(e.to_string()))
}

fn json_arg(lua: &Lua, v: mlua::Value, what: &str) -> mlua::Result<Value> {
    match v {
        mlua::Value::Table(_) => {
            from_lua(lua, v).map_err(|e| mlua::Error::runtime(format!("{what}: {e}")))
        }
        other => Err(mlua::Error::runtime(format!(
            "{what} must be a table, got a {}",
            other.type_name()
        ))),
    }
}

/// The `kube` table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let kube = lua.create_table()?;
    kube.set(
        "resourceAdd",
        lua.create_function(|_, args: Variadic<mlua::Value>| {
            let mut sum = Quantity::default();
            for v in args.iter() {
                sum = sum.plus(&quantity(v)?);
            }
            Ok(sum.to_string())
        })?,
    )?;
    kube.set(
        "getResourceQuantity",
        lua.create_function(|_, v: mlua::Value| {
            let q = quantity(&v)?;
            if q.milli_value() < 0 {
                return Err(mlua::Error::runtime(format!("negative quantity {q}")));
            }
            Ok(q.milli_value() as f64 / 1000.0)
        })?,
    )?;
    kube.set(
        "accuratePodRequirements",
        lua.create_function(|lua, template: mlua::Value| {
            let template = json_arg(lua, template, "the pod template")?;
            let requirements = replica::pod_template_requirements(&template)
                .map_err(|e| mlua::Error::runtime(e.to_string()))?;
            let json = serde_json::to_value(&requirements)
                .map_err(|e| mlua::Error::runtime(e.to_string()))?;
            to_lua(lua, &json)
        })?,
    )?;
    kube.set(
        "getPodDependencies",
        lua.create_function(
            |lua, (template, namespace): (mlua::Value, Option<String>)| {
                let template = json_arg(lua, template, "the pod template")?;
                let namespace = namespace.unwrap_or_else(|| "default".to_string());
                let spec = template.get("spec").cloned().unwrap_or(Value::Null);
                let deps = dependencies::pod_dependencies(&spec, &namespace)
                    .map_err(|e| mlua::Error::runtime(e.to_string()))?;
                let json =
                    serde_json::to_value(&deps).map_err(|e| mlua::Error::runtime(e.to_string()))?;
                to_lua(lua, &json)
            },
        )?,
    )?;
    Ok(kube)
}
