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
//!   loaded machine does not make a good script fail), or, as a backstop for work done inside
//!   C functions, once it has run [`SandboxLimits::wall_clock_budget`] (1 s). Hooks do not fire
//!   inside C, so the clock is also read by a hook at every function call (a loop of
//!   expensive library calls stops at the first call past the deadline), and the C loops
//!   whose length memory does not bound are bounded before they start: `string.find`,
//!   `match`, `gmatch` and `gsub` refuse a pattern whose worst case on the subject is too
//!   expensive ([`pattern_cost`]), `string.rep` of an empty string is `""` without looping,
//!   and `table.move` refuses more elements than the memory limit could hold.
//!   `pcall`/`xpcall` cannot swallow the time-budget error.
//! - Results: a value a script returns (or hands to a `kube` helper) is measured before it is
//!   converted to JSON, outside the sandbox's limits: more than [`MAX_VALUE_BYTES`] as JSON
//!   or [`MAX_VALUE_ITEMS`] values (a table shared many times counts each time: the JSON
//!   repeats it), or nesting deeper than [`MAX_VALUE_DEPTH`], is a conversion error.
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
use mlua::debug::DebugEvent;
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
    budget: Arc<Budget>,
}

/// The time budget of the call running in one state, shared by the hook and the `pcall`
/// guard.
#[derive(Default)]
struct Budget {
    /// Set once the budget is spent; stays set until the call returns, so `pcall` cannot
    /// swallow the error.
    expired: AtomicBool,
    /// When the running call must stop by the clock; `None` between calls.
    deadline: Mutex<Option<Instant>>,
}

impl Budget {
    fn arm(&self, deadline: Instant) {
        self.expired.store(false, Ordering::Relaxed);
        *self.deadline.lock() = Some(deadline);
    }

    /// Disarms the budget; true when it was spent.
    fn disarm(&self) -> bool {
        *self.deadline.lock() = None;
        self.expired.swap(false, Ordering::Relaxed)
    }

    fn is_expired(&self) -> bool {
        self.expired.load(Ordering::Relaxed)
    }

    /// An error once the budget is spent (by the hook, or now by the clock).
    fn check(&self) -> mlua::Result<()> {
        let past_deadline = self.deadline.lock().is_some_and(|d| Instant::now() >= d);
        if past_deadline {
            self.expired.store(true, Ordering::Relaxed);
        }
        if self.is_expired() {
            return Err(mlua::Error::runtime("time budget exceeded"));
        }
        Ok(())
    }
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
        let budget = Arc::new(Budget::default());
        let lua = new_sandbox(budget.clone(), limits).map_err(|e| (first, e))?;
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
            with_budget(&lua, &budget, limits, || chunk.exec()).map_err(|e| {
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
            budget,
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
        let results: MultiValue = with_budget(&self.lua, &self.budget, limits, || {
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

/// A Lua state with only the safe libraries, the `pcall` guard, the library guards and `kube`.
fn new_sandbox(budget: Arc<Budget>, limits: SandboxLimits) -> Result<Lua, ScriptError> {
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

        let is_expired = lua.create_function(move |_, ()| Ok(budget.is_expired()))?;
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
        // A Lua array slot takes 16 bytes: a move of more elements than that copies nils.
        let max_move = i64::try_from(limits.memory_bytes / 16).unwrap_or(i64::MAX);
        lua.load(GUARDS)
            .set_name("sandbox guards")
            .set_mode(ChunkMode::Text)
            .call::<()>((is_expired, cost_check, max_move))?;
        Ok(())
    })()
    .map_err(sandbox_error)?;
    Ok(lua)
}

/// Lua run once per state: `pcall`/`xpcall` that re-raise once the time budget is spent; the
/// pattern functions behind a cost check; `string.rep` and `table.move` bounded. Upvalues keep
/// the originals out of reach.
const GUARDS: &str = r#"
local expired, check, max_move = ...
local pcall0, xpcall0, error0, type0 = pcall, xpcall, error, type
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
local rep, move = string.rep, table.move
string.rep = function(s, n, sep)
  -- Lua copies an empty piece n times in a C loop; the result is "" whatever n is.
  if type0(n) == "number" and n > 1 and s == "" and (sep == nil or sep == "") then n = 1 end
  return rep(s, n, sep)
end
table.move = function(a1, f, e, t, a2)
  if type0(f) == "number" and type0(e) == "number" and e - f >= max_move then
    error0("table.move of more elements than the sandbox's memory holds", 2)
  end
  return move(a1, f, e, t, a2)
end
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
/// (`*`, `+`, `-`, `%b`) and per back reference (`%1`..`%9`), times two per optional item
/// (`?`).
pub fn pattern_cost(subject_len: usize, pattern: &str) -> f64 {
    let bytes = pattern.as_bytes();
    let (mut repeats, mut optionals) = (0i32, 0i32);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                match bytes.get(i + 1) {
                    Some(b'b') => {
                        repeats += 1;
                        i += 2;
                    }
                    // A back reference compares up to the whole subject at each step.
                    Some(b'1'..=b'9') => repeats += 1,
                    _ => {}
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
    budget: &Arc<Budget>,
    limits: SandboxLimits,
    f: impl FnOnce() -> mlua::Result<R>,
) -> Result<R, ScriptError> {
    const STEP: u32 = 1000;
    budget.arm(Instant::now() + limits.wall_clock_budget);
    let hook_budget = budget.clone();
    let executed = AtomicU64::new(0);
    let instructions = limits.instruction_budget;
    // Counted instructions, and every call: a C function's work is invisible to the count, so
    // the clock is read before each one starts.
    lua.set_hook(
        HookTriggers::new().on_calls().every_nth_instruction(STEP),
        move |_, debug| {
            if debug.event() == DebugEvent::Count {
                let done = executed.fetch_add(u64::from(STEP), Ordering::Relaxed) + u64::from(STEP);
                if done > instructions {
                    hook_budget.expired.store(true, Ordering::Relaxed);
                }
            }
            hook_budget.check().map(|()| VmState::Continue)
        },
    )
    .map_err(sandbox_error)?;
    let out = f();
    lua.remove_hook();
    let timed_out = budget.disarm();
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
        other => ScriptError::Runtime(without_traceback(&other.to_string())),
    }
}

/// A Lua error message without the stack traceback mlua appends (the first line names the
/// script and line already; events and logs stay short).
fn without_traceback(message: &str) -> String {
    let message = message
        .split_once("\nstack traceback:")
        .map_or(message, |(head, _)| head);
    message
        .strip_prefix("runtime error: ")
        .unwrap_or(message)
        .to_string()
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

/// Most bytes a Lua value may take as JSON (a Kubernetes object is at most 1.5 MiB).
pub const MAX_VALUE_BYTES: usize = 4 << 20;
/// Deepest nesting of tables a Lua value may have.
pub const MAX_VALUE_DEPTH: usize = 100;
/// Most values (tables, strings, numbers...) a Lua value may be made of, counted as in the JSON.
pub const MAX_VALUE_ITEMS: usize = 200_000;

/// How large a Lua value may be as JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueLimits {
    /// Most bytes (roughly: strings, keys and punctuation; 8 per number or boolean).
    pub bytes: usize,
    /// Most values.
    pub items: usize,
    /// Deepest nesting of tables.
    pub depth: usize,
}

/// The limits of every value converted from Lua.
pub const VALUE_LIMITS: ValueLimits = ValueLimits {
    bytes: MAX_VALUE_BYTES,
    items: MAX_VALUE_ITEMS,
    depth: MAX_VALUE_DEPTH,
};

/// Lua into JSON; functions and other non-data values are errors, and so are values too
/// large or too deep ([`check_value_size`]).
pub(crate) fn from_lua(lua: &Lua, v: mlua::Value) -> Result<Value, ScriptError> {
    check_value_size(&v, VALUE_LIMITS)?;
    lua.from_value_with::<Value>(
        v,
        DeserializeOptions::new()
            .sort_keys(true)
            .recursion_limit(MAX_VALUE_DEPTH + 1),
    )
    .map_err(|e| ScriptError::Conversion(e.to_string()))
}

/// Measures a Lua value as the JSON it would become, without building it and without
/// recursion: an error when it is larger than `limits` allow (a table referenced many times
/// counts every time, as the JSON repeats it; a table containing itself never ends and so is
/// too large or too deep). The conversion runs outside the sandbox's memory and time limits,
/// so a small state must not become a huge value.
pub fn check_value_size(v: &mlua::Value, limits: ValueLimits) -> Result<(), ScriptError> {
    fn weight(v: &mlua::Value) -> usize {
        match v {
            mlua::Value::String(s) => s.as_bytes().len() + 2,
            mlua::Value::Table(_) => 2,
            _ => 8,
        }
    }
    let too_large = || {
        ScriptError::Conversion(format!(
            "the value is larger than {} bytes or {} items as JSON",
            limits.bytes, limits.items
        ))
    };
    let (mut bytes, mut items) = (0usize, 0usize);
    let mut pending = vec![(v.clone(), 0usize)];
    while let Some((value, depth)) = pending.pop() {
        bytes = bytes.saturating_add(weight(&value));
        items += 1;
        if bytes > limits.bytes || items > limits.items {
            return Err(too_large());
        }
        let mlua::Value::Table(table) = value else {
            continue;
        };
        if depth >= limits.depth {
            return Err(ScriptError::Conversion(format!(
                "the value nests tables deeper than {} levels",
                limits.depth
            )));
        }
        for pair in table.pairs::<mlua::Value, mlua::Value>() {
            let (key, item) = pair.map_err(|e| ScriptError::Conversion(e.to_string()))?;
            bytes = bytes.saturating_add(weight(&key));
            if bytes > limits.bytes {
                return Err(too_large());
            }
            pending.push((item, depth + 1));
        }
    }
    Ok(())
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
