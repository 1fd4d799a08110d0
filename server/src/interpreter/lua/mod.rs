//! The Lua sandbox customizations run in (mlua, Lua 5.4 vendored, safe API only).
//!
//! - Libraries: the base library without `load`, `loadfile`, `dofile`, `collectgarbage`,
//!   `getmetatable`, `setmetatable` and `print`; `string` (without `string.dump`), `table`,
//!   `math`; no `io`, `os`, `debug`, `package`, `coroutine`, `utf8`. Only text chunks load.
//!   `require("kube")` (and the global `kube`) give Karmada's helper library ([`kube`]);
//!   `require` of anything else is an error.
//! - Memory: each state has a hard limit ([`SandboxLimits::memory_bytes`], 16 MiB by default);
//!   an allocation past it fails with a memory error.
//! - Time: an instruction-count hook (every 1000 instructions) stops a call once it has run
//!   [`SandboxLimits::instruction_budget`] Lua instructions (20 million by default: about
//!   0.5 s in a debug build, several times less in a release build; deterministic, so a
//!   loaded machine does not make a good script fail), or, as a backstop for work done inside C functions, once it has run
//!   [`SandboxLimits::wall_clock_budget`] (1 s). `pcall`/`xpcall` cannot swallow that error.
//!   Lua's pattern functions run in C where hooks do not fire, so `string.find`, `match`,
//!   `gmatch` and `gsub` refuse a pattern whose worst case on the subject is too expensive
//!   ([`pattern_cost`]).
//! - State: one Lua state per customization ([`ScriptSet`]), built once, every script loaded
//!   in its own environment (so helper globals of two scripts cannot collide), behind a
//!   mutex; a state that hit the time or memory limit is dropped and rebuilt on next use.
//! - Values: JSON objects go in as Lua tables (JSON `null` reads as `nil`, arrays keep their
//!   array-ness), results come back as JSON; whole-number floats come back as integers.

pub mod kube;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::binding::ReplicaRequirements;
use mlua::chunk::ChunkMode;
use mlua::serde::{DeserializeOptions, SerializeOptions};
use mlua::{
    Function, HookTriggers, Lua, LuaOptions, LuaSerdeExt, MultiValue, StdLib, Table, VmState,
};
use parking_lot::Mutex;
use serde_json::Value;

use super::Operation;

/// Limits of every Lua state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Most memory one state may allocate, in bytes.
    pub memory_bytes: usize,
    /// Most Lua VM instructions one call (or the loading of a script) may execute, counted
    /// in steps of 1000.
    pub instruction_budget: u64,
    /// Longest one call may run by the clock, whatever it executes (a backstop for time
    /// spent inside C library functions, which the instruction count does not see).
    pub wall_clock_budget: Duration,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_bytes: 16 << 20,
            instruction_budget: 20_000_000,
            wall_clock_budget: Duration::from_secs(1),
        }
    }
}

/// What went wrong in the sandbox.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The Lua state could not be set up.
    #[error("the Lua sandbox could not be created: {0}")]
    Sandbox(String),
    /// The script does not parse, or failed while loading.
    #[error("the script does not load: {0}")]
    Load(String),
    /// The script does not define its entry function.
    #[error("the script does not define function {0}")]
    MissingFunction(&'static str),
    /// The script raised an error.
    #[error("the script failed: {0}")]
    Runtime(String),
    /// The script ran past its time budget and was stopped.
    #[error("the script ran past its time budget ({instructions} instructions or {wall_clock:?}) and was stopped")]
    Timeout {
        /// The instruction budget.
        instructions: u64,
        /// The wall-clock budget.
        wall_clock: Duration,
    },
    /// The script needed more memory than allowed.
    #[error("the script needed more than {0} bytes of memory and was stopped")]
    OutOfMemory(usize),
    /// An argument or result could not be converted between JSON and Lua.
    #[error("a value could not be converted between JSON and Lua: {0}")]
    Conversion(String),
}

const REGISTRY_KUBE: &str = "flotilla.kube";

/// The scripts of one customization and the Lua state they run in.
pub struct ScriptSet {
    label: String,
    scripts: BTreeMap<Operation, String>,
    limits: SandboxLimits,
    state: Mutex<Option<Vm>>,
}

struct Vm {
    lua: Lua,
    functions: BTreeMap<Operation, Function>,
    expired: Arc<AtomicBool>,
}

impl ScriptSet {
    /// Scripts by operation; nothing is compiled until [`ScriptSet::compile`] or a call.
    pub fn new(label: &str, scripts: BTreeMap<Operation, String>, limits: SandboxLimits) -> Self {
        ScriptSet {
            label: label.to_string(),
            scripts,
            limits,
            state: Mutex::new(None),
        }
    }

    /// True when a script for `operation` is set.
    pub fn has(&self, operation: Operation) -> bool {
        self.scripts.contains_key(&operation)
    }

    /// Builds the state now (if not built), reporting the first script that fails.
    pub fn compile(&self) -> Result<(), (Operation, ScriptError)> {
        let mut state = self.state.lock();
        if state.is_none() {
            *state = Some(Vm::build(&self.label, &self.scripts, self.limits)?);
        }
        Ok(())
    }

    /// Calls `operation`'s entry function with `args` (as Lua tables) and returns its results
    /// as JSON (`null` for `nil`).
    pub fn call(&self, operation: Operation, args: &[&Value]) -> Result<Vec<Value>, ScriptError> {
        let mut state = self.state.lock();
        let vm = match state.take() {
            Some(vm) => vm,
            None => Vm::build(&self.label, &self.scripts, self.limits).map_err(|(_, e)| e)?,
        };
        let result = vm.call(operation, args, self.limits);
        // A state stopped for time or memory may be half-way through anything: start afresh.
        if !matches!(
            result,
            Err(ScriptError::Timeout { .. }) | Err(ScriptError::OutOfMemory(_))
        ) {
            *state = Some(vm);
        }
        result
    }
}

fn sandbox_error(e: mlua::Error) -> ScriptError {
    ScriptError::Sandbox(e.to_string())
}

impl Vm {
    fn build(
        label: &str,
        scripts: &BTreeMap<Operation, String>,
        limits: SandboxLimits,
    ) -> Result<Vm, (Operation, ScriptError)> {
        let first = scripts
            .keys()
            .next()
            .copied()
            .unwrap_or(Operation::InterpretHealth);
        let expired = Arc::new(AtomicBool::new(false));
        let lua = new_sandbox(expired.clone()).map_err(|e| (first, e))?;
        lua.set_memory_limit(limits.memory_bytes)
            .map_err(|e| (first, sandbox_error(e)))?;
        let globals = lua.globals();
        let mut functions = BTreeMap::new();
        for (op, source) in scripts {
            let op = *op;
            let env = (|| -> mlua::Result<Table> {
                let env = lua.create_table()?;
                let meta = lua.create_table()?;
                meta.set("__index", globals.clone())?;
                env.set_metatable(Some(meta))?;
                Ok(env)
            })()
            .map_err(|e| (op, sandbox_error(e)))?;
            let chunk = lua
                .load(source.as_str())
                .set_name(format!("{label}/{}", op.customization_field()))
                .set_mode(ChunkMode::Text)
                .set_environment(env.clone());
            with_budget(&lua, &expired, limits, || chunk.exec()).map_err(|e| {
                (
                    op,
                    match e {
                        ScriptError::Runtime(m) => ScriptError::Load(m),
                        other => other,
                    },
                )
            })?;
            match env.raw_get::<mlua::Value>(op.lua_function()) {
                Ok(mlua::Value::Function(f)) => {
                    functions.insert(op, f);
                }
                _ => return Err((op, ScriptError::MissingFunction(op.lua_function()))),
            }
        }
        Ok(Vm {
            lua,
            functions,
            expired,
        })
    }

    fn call(
        &self,
        operation: Operation,
        args: &[&Value],
        limits: SandboxLimits,
    ) -> Result<Vec<Value>, ScriptError> {
        let function = self
            .functions
            .get(&operation)
            .ok_or(ScriptError::MissingFunction(operation.lua_function()))?;
        let mut lua_args = Vec::with_capacity(args.len());
        for arg in args {
            let v = to_lua(&self.lua, arg).map_err(|e| classify(e, false, limits))?;
            lua_args.push(v);
        }
        let results: MultiValue = with_budget(&self.lua, &self.expired, limits, || {
            function.call::<MultiValue>(MultiValue::from_vec(lua_args))
        })?;
        let mut out = Vec::with_capacity(results.len());
        for v in results {
            let mut json = from_lua(&self.lua, v)?;
            normalize_numbers(&mut json);
            out.push(json);
        }
        Ok(out)
    }
}

/// A Lua state with only the safe libraries, the `pcall` guard, the pattern guard and `kube`.
fn new_sandbox(expired: Arc<AtomicBool>) -> Result<Lua, ScriptError> {
    let lua = Lua::new_with(
        StdLib::STRING | StdLib::TABLE | StdLib::MATH,
        LuaOptions::new(),
    )
    .map_err(sandbox_error)?;
    (|| -> mlua::Result<()> {
        let globals = lua.globals();
        for name in [
            "dofile",
            "loadfile",
            "load",
            "loadstring",
            "collectgarbage",
            "getmetatable",
            "setmetatable",
            "print",
            "require",
        ] {
            globals.raw_set(name, mlua::Value::Nil)?;
        }
        let string: Table = globals.get("string")?;
        string.raw_set("dump", mlua::Value::Nil)?;

        let kube = kube::library(&lua)?;
        lua.set_named_registry_value(REGISTRY_KUBE, kube.clone())?;
        globals.raw_set("kube", kube)?;
        let require = lua.create_function(|lua, name: String| {
            if name == "kube" {
                lua.named_registry_value::<Table>(REGISTRY_KUBE)
            } else {
                Err(mlua::Error::runtime(format!(
                    "module '{name}' is not available in the sandbox (only 'kube' is)"
                )))
            }
        })?;
        globals.raw_set("require", require)?;

        let is_expired = lua.create_function(move |_, ()| Ok(expired.load(Ordering::Relaxed)))?;
        let cost_check =
            lua.create_function(|_, (subject, pattern): (mlua::Value, mlua::Value)| {
                if let (Some(s), Some(p)) = (lua_text_len(&subject), lua_text(&pattern)) {
                    let cost = pattern_cost(s, &p);
                    if cost > PATTERN_COST_LIMIT {
                        return Err(mlua::Error::runtime(format!(
                        "pattern {p:?} is too expensive on a subject of {s} bytes for the sandbox"
                    )));
                    }
                }
                Ok(())
            })?;
        lua.load(GUARDS)
            .set_name("sandbox guards")
            .set_mode(ChunkMode::Text)
            .call::<()>((is_expired, cost_check))?;
        Ok(())
    })()
    .map_err(sandbox_error)?;
    Ok(lua)
}

/// Lua run once per state: `pcall`/`xpcall` that re-raise once the time budget is spent, and
/// the pattern functions behind a cost check. Upvalues keep the originals out of reach.
const GUARDS: &str = r#"
local expired, check = ...
local pcall0, xpcall0, error0 = pcall, xpcall, error
local pack, unpack = table.pack, table.unpack
local function rethrow(r)
  if expired() then error0("time budget exceeded", 0) end
  return unpack(r, 1, r.n)
end
pcall = function(...) return rethrow(pack(pcall0(...))) end
xpcall = function(...) return rethrow(pack(xpcall0(...))) end
local find, match, gmatch, gsub = string.find, string.match, string.gmatch, string.gsub
string.find = function(s, p, init, plain)
  if not plain then check(s, p) end
  return find(s, p, init, plain)
end
string.match = function(s, p, ...) check(s, p) return match(s, p, ...) end
string.gmatch = function(s, p, ...) check(s, p) return gmatch(s, p, ...) end
string.gsub = function(s, p, ...) check(s, p) return gsub(s, p, ...) end
"#;

/// Worst-case steps allowed for one pattern call.
const PATTERN_COST_LIMIT: f64 = 1e8;

fn lua_text(v: &mlua::Value) -> Option<String> {
    match v {
        mlua::Value::String(s) => Some(s.to_string_lossy()),
        mlua::Value::Integer(i) => Some(i.to_string()),
        mlua::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn lua_text_len(v: &mlua::Value) -> Option<usize> {
    match v {
        mlua::Value::String(s) => Some(s.as_bytes().len()),
        other => lua_text(other).map(|s| s.len()),
    }
}

/// A bound on the steps Lua's backtracking matcher may take for `pattern` on a subject of
/// `subject_len` bytes: every start position, times the subject length per repetition item
/// (`*`, `+`, `-`, `%b`), times two per optional item (`?`).
pub fn pattern_cost(subject_len: usize, pattern: &str) -> f64 {
    let bytes = pattern.as_bytes();
    let (mut repeats, mut optionals) = (0i32, 0i32);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                if bytes.get(i + 1) == Some(&b'b') {
                    repeats += 1;
                    i += 2;
                }
                i += 2;
            }
            b'[' => {
                i += 1;
                if bytes.get(i) == Some(&b'^') {
                    i += 1;
                }
                // A `]` right after `[` or `[^` is part of the set.
                if bytes.get(i) == Some(&b']') {
                    i += 1;
                }
                while i < bytes.len() && bytes[i] != b']' {
                    i += if bytes[i] == b'%' { 2 } else { 1 };
                }
                i += 1;
            }
            b'*' | b'+' | b'-' => {
                repeats += 1;
                i += 1;
            }
            b'?' => {
                optionals += 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    let n = subject_len as f64 + 1.0;
    n.powi(repeats + 1) * 2f64.powi(optionals)
}

/// Runs `f` with the time budget armed.
fn with_budget<R>(
    lua: &Lua,
    expired: &Arc<AtomicBool>,
    limits: SandboxLimits,
    f: impl FnOnce() -> mlua::Result<R>,
) -> Result<R, ScriptError> {
    const STEP: u32 = 1000;
    expired.store(false, Ordering::Relaxed);
    let deadline = Instant::now() + limits.wall_clock_budget;
    let flag = expired.clone();
    let executed = AtomicU64::new(0);
    let budget = limits.instruction_budget;
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(STEP),
        move |_, _| {
            let done = executed.fetch_add(u64::from(STEP), Ordering::Relaxed) + u64::from(STEP);
            if flag.load(Ordering::Relaxed) || done > budget || Instant::now() >= deadline {
                flag.store(true, Ordering::Relaxed);
                Err(mlua::Error::runtime("time budget exceeded"))
            } else {
                Ok(VmState::Continue)
            }
        },
    )
    .map_err(sandbox_error)?;
    let out = f();
    lua.remove_hook();
    let timed_out = expired.swap(false, Ordering::Relaxed);
    match out {
        Ok(_) if timed_out => Err(timeout(limits)),
        Ok(r) => Ok(r),
        Err(e) => Err(classify(e, timed_out, limits)),
    }
}

fn timeout(limits: SandboxLimits) -> ScriptError {
    ScriptError::Timeout {
        instructions: limits.instruction_budget,
        wall_clock: limits.wall_clock_budget,
    }
}

fn classify(e: mlua::Error, timed_out: bool, limits: SandboxLimits) -> ScriptError {
    if timed_out {
        return timeout(limits);
    }
    match e {
        mlua::Error::MemoryError(_) => ScriptError::OutOfMemory(limits.memory_bytes),
        mlua::Error::SyntaxError { message, .. } => ScriptError::Load(message),
        mlua::Error::CallbackError { cause, .. } => classify((*cause).clone(), false, limits),
        mlua::Error::RuntimeError(m) if m.contains("not enough memory") => {
            ScriptError::OutOfMemory(limits.memory_bytes)
        }
        other => ScriptError::Runtime(other.to_string()),
    }
}

/// JSON into Lua: `null` is `nil`, arrays keep their array-ness.
pub(crate) fn to_lua(lua: &Lua, v: &Value) -> mlua::Result<mlua::Value> {
    lua.to_value_with(
        v,
        SerializeOptions::new()
            .serialize_none_to_null(false)
            .serialize_unit_to_null(false),
    )
}

/// Lua into JSON; functions and other non-data values are errors.
pub(crate) fn from_lua(lua: &Lua, v: mlua::Value) -> Result<Value, ScriptError> {
    lua.from_value_with::<Value>(v, DeserializeOptions::new().sort_keys(true))
        .map_err(|e| ScriptError::Conversion(e.to_string()))
}

/// Lua has one number type for counts and fractions: a whole-number float (`3.0`, from `/`)
/// is written back as the integer it is.
pub fn normalize_numbers(v: &mut Value) {
    match v {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64() {
                if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    *v = Value::from(f as i64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_numbers),
        Value::Object(map) => map.values_mut().for_each(normalize_numbers),
        _ => {}
    }
}

/// The `requires` table of `GetReplicas` as [`ReplicaRequirements`]; an empty `nodeClaim`
/// counts as none.
pub fn requirements_from(v: &Value) -> Result<ReplicaRequirements, String> {
    let mut v = v.clone();
    if let Value::Object(map) = &mut v {
        let empty_claim = match map.get("nodeClaim") {
            Some(Value::Object(claim)) => claim.values().all(|x| match x {
                Value::Null => true,
                Value::Object(m) => m.is_empty(),
                Value::Array(a) => a.is_empty(),
                _ => false,
            }),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty_claim {
            map.remove("nodeClaim");
        }
        // Empty Lua tables read as objects; the lists must be lists.
        if let Some(Value::Object(claim)) = map.get_mut("nodeClaim") {
            if matches!(claim.get("tolerations"), Some(Value::Object(m)) if m.is_empty()) {
                claim.remove("tolerations");
            }
        }
    }
    serde_json::from_value(v).map_err(|e| format!("requires is not a replica requirement: {e}"))
}

#[cfg(test)]
mod tests;
