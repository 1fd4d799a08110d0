use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;

fn limits() -> SandboxLimits {
    SandboxLimits {
        memory_bytes: 8 << 20,
        instruction_budget: 1_000_000,
        wall_clock_budget: Duration::from_secs(5),
    }
}

fn health_set(script: &str) -> ScriptSet {
    ScriptSet::new(
        "test",
        BTreeMap::from([(Operation::InterpretHealth, script.to_string())]),
        limits(),
    )
}

fn run(script: &str, arg: Value) -> Result<Vec<Value>, ScriptError> {
    health_set(script).call(Operation::InterpretHealth, &[&arg])
}

#[test]
fn calls_the_entry_function_with_json_as_tables() {
    let script = r#"
        function InterpretHealth(obj)
          return obj.status.ready == obj.spec.replicas and obj.metadata.labels.app == 'web'
        end"#;
    let obj = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 2}, "status": {"ready": 2}});
    assert_eq!(run(script, obj), Ok(vec![json!(true)]));
}

#[test]
fn json_round_trip() {
    let script = "function InterpretHealth(obj) return obj end";
    let obj =
        json!({"a": [1, 2, {"b": "c"}], "empty": [], "f": 1.5, "n": null, "t": true, "o": {}});
    let out = run(script, obj).expect("round trip");
    // null reads as nil (so the key is gone); arrays, even empty ones, stay arrays.
    assert_eq!(
        out,
        vec![json!({"a": [1, 2, {"b": "c"}], "empty": [], "f": 1.5, "t": true, "o": {}})]
    );
}

#[test]
fn whole_floats_come_back_as_integers() {
    let script = "function InterpretHealth(obj) return { half = obj.n / 2, third = obj.n / 3 } end";
    let out = run(script, json!({"n": 6})).expect("numbers");
    assert_eq!(out, vec![json!({"half": 3, "third": 2})]);
    let out = run(script, json!({"n": 1})).expect("numbers");
    assert_eq!(out[0]["half"], json!(0.5));
}

#[test]
fn nil_result_reads_as_null() {
    assert_eq!(
        run("function InterpretHealth(obj) end", json!({})),
        Ok(vec![])
    );
    assert_eq!(
        run("function InterpretHealth(obj) return nil end", json!({})),
        Ok(vec![Value::Null])
    );
}

#[test]
fn script_errors_are_errors() {
    let err = run(
        "function InterpretHealth(obj) return obj.status.phase end",
        json!({}),
    )
    .expect_err("indexing nil");
    assert!(
        matches!(err, ScriptError::Runtime(ref m) if m.contains("status")),
        "{err}"
    );
    let err = run(
        "function InterpretHealth(obj) error('custom failure') end",
        json!({}),
    )
    .expect_err("error()");
    assert!(
        matches!(err, ScriptError::Runtime(ref m) if m.contains("custom failure")),
        "{err}"
    );
}

#[test]
fn load_errors_name_the_problem() {
    let set = health_set("function InterpretHealth(obj) return end end");
    assert!(matches!(
        set.compile(),
        Err((Operation::InterpretHealth, ScriptError::Load(_)))
    ));
    let set = health_set("function SomethingElse() return true end");
    assert_eq!(
        set.compile(),
        Err((
            Operation::InterpretHealth,
            ScriptError::MissingFunction("InterpretHealth")
        ))
    );
    let set = health_set("error('boom at load')");
    assert!(
        matches!(set.compile(), Err((_, ScriptError::Load(ref m))) if m.contains("boom at load"))
    );
}

#[test]
fn an_infinite_loop_is_stopped() {
    let started = Instant::now();
    let err = run(
        "function InterpretHealth(obj) while true do end end",
        json!({}),
    )
    .expect_err("loop");
    assert_eq!(
        err,
        ScriptError::Timeout {
            instructions: 1_000_000,
            wall_clock: Duration::from_secs(5)
        }
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped promptly"
    );
}

#[test]
fn an_infinite_loop_at_load_time_is_stopped() {
    let set = health_set("while true do end");
    assert_eq!(
        set.compile(),
        Err((
            Operation::InterpretHealth,
            ScriptError::Timeout {
                instructions: 1_000_000,
                wall_clock: Duration::from_secs(5)
            }
        ))
    );
}

#[test]
fn pcall_cannot_swallow_the_timeout() {
    let scripts = [
        "function InterpretHealth(obj) while true do pcall(function() while true do end end) end end",
        "function InterpretHealth(obj) pcall(function() while true do end end) return true end",
        "function InterpretHealth(obj) while true do xpcall(function() while true do end end, function(e) return e end) end end",
        "function InterpretHealth(obj) local ok = pcall(pcall, function() while true do end end) return ok end",
    ];
    for script in scripts {
        let started = Instant::now();
        assert_eq!(
            run(script, json!({})),
            Err(ScriptError::Timeout {
                instructions: 1_000_000,
                wall_clock: Duration::from_secs(5)
            }),
            "{script}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{script}");
    }
}

#[test]
fn deep_recursion_is_an_error() {
    let err = run(
        "function InterpretHealth(obj) local function f(n) return 1 + f(n + 1) end return f(1) end",
        json!({}),
    )
    .expect_err("recursion");
    assert!(
        matches!(
            err,
            ScriptError::Runtime(_) | ScriptError::OutOfMemory(_) | ScriptError::Timeout { .. }
        ),
        "{err}"
    );
}

#[test]
fn a_huge_allocation_is_stopped() {
    let scripts = [
        "function InterpretHealth(obj) return string.rep('x', 1 << 30) end",
        "function InterpretHealth(obj) local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 4096) .. i end return true end",
        "function InterpretHealth(obj) local s = 'x' while true do s = s .. s end end",
    ];
    for script in scripts {
        let err = run(script, json!({})).expect_err(script);
        assert_eq!(
            err,
            ScriptError::OutOfMemory(limits().memory_bytes),
            "{script}"
        );
    }
}

#[test]
fn a_state_stopped_for_memory_is_rebuilt_and_works_again() {
    let set = health_set(
        "function InterpretHealth(obj) if obj.big then return string.rep('x', 1 << 30) end return true end",
    );
    assert!(set
        .call(Operation::InterpretHealth, &[&json!({"big": true})])
        .is_err());
    assert_eq!(
        set.call(Operation::InterpretHealth, &[&json!({})]),
        Ok(vec![json!(true)])
    );
}

#[test]
fn dangerous_functions_are_absent() {
    let absent = [
        "os",
        "io",
        "debug",
        "package",
        "coroutine",
        "utf8",
        "dofile",
        "loadfile",
        "load",
        "loadstring",
        "collectgarbage",
        "getmetatable",
        "setmetatable",
        "print",
    ];
    for name in absent {
        let script = format!("function InterpretHealth(obj) return {name} == nil end");
        assert_eq!(
            run(&script, json!({})),
            Ok(vec![json!(true)]),
            "{name} must be absent"
        );
    }
    assert_eq!(
        run(
            "function InterpretHealth(obj) return string.dump == nil end",
            json!({})
        ),
        Ok(vec![json!(true)])
    );
    let err = run(
        "function InterpretHealth(obj) os.execute('true') end",
        json!({}),
    )
    .expect_err("os.execute");
    assert!(matches!(err, ScriptError::Runtime(_)), "{err}");
    let err = run(
        "function InterpretHealth(obj) return require('os') end",
        json!({}),
    )
    .expect_err("require os");
    assert!(
        matches!(err, ScriptError::Runtime(ref m) if m.contains("not available")),
        "{err}"
    );
}

#[test]
fn safe_libraries_are_there() {
    let script = r#"
        function InterpretHealth(obj)
          local parts = {}
          for w in string.gmatch('a,b,c', '[^,]+') do table.insert(parts, w) end
          return table.concat(parts, '-') .. ':' .. string.format('%d', math.max(3, 7)) .. ':' .. tostring(math.floor(2.7))
        end"#;
    assert_eq!(run(script, json!({})), Ok(vec![json!("a-b-c:7:2")]));
}

#[test]
fn binary_chunks_are_refused() {
    // Lua bytecode starts with "\27Lua"; only text chunks load.
    let set = health_set("\x1bLuaT\x00garbage");
    assert!(matches!(set.compile(), Err((_, ScriptError::Load(_)))));
}

#[test]
fn expensive_patterns_are_refused_not_run() {
    let script = r#"
        function InterpretHealth(obj)
          local s = string.rep('a', 100000)
          return string.find(s, '.-.-.-.-b') ~= nil
        end"#;
    let started = Instant::now();
    let err = run(script, json!({})).expect_err("pattern");
    assert!(
        matches!(err, ScriptError::Runtime(ref m) if m.contains("too expensive")),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // Plain finds are not patterns.
    let plain = r#"
        function InterpretHealth(obj)
          return string.find(string.rep('a', 100000), '.-.-b', 1, true) == nil
        end"#;
    assert_eq!(run(plain, json!({})), Ok(vec![json!(true)]));
}

#[test]
fn pattern_cost_table() {
    let rows: &[(usize, &str, f64)] = &[
        (10, "abc", 11.0),
        (10, "a*", 121.0),
        (10, "^(%d+)(%a*)$", 1331.0),
        (10, "[%a-z]+", 121.0),
        (10, "a?b?", 44.0),
        (10, "%*%-", 11.0),
        (10, "%b()", 121.0),
        // A back reference compares up to the subject's length at each step.
        (10, "(.-)%1", 1331.0),
        (10, "%f[%w]%w+", 121.0),
    ];
    for (len, pattern, want) in rows {
        assert_eq!(pattern_cost(*len, pattern), *want, "{pattern}");
    }
}

#[test]
fn scripts_have_separate_globals() {
    let scripts = BTreeMap::from([
        (
            Operation::InterpretHealth,
            "helper = 1 function InterpretHealth(obj) return helper end".to_string(),
        ),
        (
            Operation::InterpretStatus,
            "helper = 2 function ReflectStatus(obj) return { v = helper } end".to_string(),
        ),
    ]);
    let set = ScriptSet::new("test", scripts, limits());
    assert_eq!(
        set.call(Operation::InterpretHealth, &[&json!({})]),
        Ok(vec![json!(1)])
    );
    assert_eq!(
        set.call(Operation::InterpretStatus, &[&json!({})]),
        Ok(vec![json!({"v": 2})])
    );
}

#[test]
fn kube_library() {
    let script = r#"
        local kube = require("kube")
        function InterpretHealth(obj)
          local req = kube.accuratePodRequirements(obj.template)
          local deps = kube.getPodDependencies(obj.template, 'ns')
          return {
            sum = kube.resourceAdd('100m', '1', nil),
            value = kube.getResourceQuantity('1500m'),
            memory = kube.getResourceQuantity('1Ki'),
            cpu = req.resourceRequest.cpu,
            priority = req.priorityClassName,
            deps = deps,
            global = kube == _G.kube,
          }
        end"#;
    let obj = json!({"template": {"metadata": {"namespace": "ns"}, "spec": {
        "priorityClassName": "high",
        "containers": [{"resources": {"requests": {"cpu": "250m"}}, "envFrom": [{"secretRef": {"name": "s"}}]}]
    }}});
    let out = run(script, obj).expect("kube");
    assert_eq!(
        out[0],
        json!({
            "sum": "1100m",
            "value": 1.5,
            "memory": 1024,
            "cpu": "250m",
            "priority": "high",
            "deps": [{"apiVersion": "v1", "kind": "Secret", "namespace": "ns", "name": "s"}],
            "global": true,
        })
    );
    let err = run(
        "function InterpretHealth(obj) return kube.getResourceQuantity('lots') end",
        json!({}),
    )
    .expect_err("bad quantity");
    assert!(matches!(err, ScriptError::Runtime(_)), "{err}");
}

#[test]
fn functions_in_results_are_conversion_errors() {
    let err = run(
        "function InterpretHealth(obj) return { f = function() end } end",
        json!({}),
    )
    .expect_err("function");
    assert!(matches!(err, ScriptError::Conversion(_)), "{err}");
}

#[test]
fn calls_from_many_threads() {
    let set = std::sync::Arc::new(health_set(
        "function InterpretHealth(obj) local n = 0 for i = 1, 1000 do n = n + i end return n == obj.want end",
    ));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let set = set.clone();
            std::thread::spawn(move || {
                let want = if i % 2 == 0 { 500500 } else { 1 };
                set.call(Operation::InterpretHealth, &[&json!({"want": want})])
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let got = h.join().expect("thread");
        assert_eq!(got, Ok(vec![json!(i % 2 == 0)]));
    }
}

#[test]
fn requirements_from_lua_tables() {
    let req = requirements_from(&json!({"resourceRequest": {"cpu": 0.5, "memory": "1Gi"}, "nodeClaim": {}, "namespace": "ns"}))
        .expect("requirements");
    assert_eq!(
        req.resource_request.get("cpu").map(|q| q.milli_value()),
        Some(500)
    );
    assert!(req.node_claim.is_none());
    let req =
        requirements_from(&json!({"nodeClaim": {"nodeSelector": {"a": "b"}, "tolerations": {}}}))
            .expect("claim");
    assert_eq!(req.node_claim.map(|c| c.node_selector.len()), Some(1));
    assert!(requirements_from(&json!({"resourceRequest": {"cpu": "lots"}})).is_err());
}

#[test]
fn the_wall_clock_backstop_stops_work_done_in_c() {
    // Few instructions, much work inside string.rep: the clock stops it.
    let limits = SandboxLimits {
        memory_bytes: 8 << 20,
        instruction_budget: u64::MAX,
        wall_clock_budget: Duration::from_millis(200),
    };
    let set = ScriptSet::new(
        "c-work",
        BTreeMap::from([(
            Operation::InterpretHealth,
            "function InterpretHealth(o) while true do local s = string.rep('x', 1000000) end end"
                .to_string(),
        )]),
        limits,
    );
    let started = Instant::now();
    let err = set
        .call(Operation::InterpretHealth, &[&json!({})])
        .expect_err("stopped");
    assert!(matches!(err, ScriptError::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// What a hostile script must end in.
#[derive(Debug)]
enum Want {
    Timeout,
    OutOfMemory,
    /// A script error whose message contains this.
    Runtime(&'static str),
    /// A result refused before conversion, with this in the message.
    Conversion(&'static str),
    /// Stopped one way or another (Lua's own stack limit and the memory limit race).
    StackOrMemory,
    /// Defused: it runs, quickly, to this result.
    Value(Value),
}

/// Every hostile case the sandbox must stop, with a benign script in the same state that must
/// still work afterwards.
#[test]
fn hostile_scripts_are_stopped_and_the_state_goes_on() {
    let limits = SandboxLimits {
        memory_bytes: 8 << 20,
        instruction_budget: 1_000_000,
        wall_clock_budget: Duration::from_secs(1),
    };
    let body = |b: &str| format!("function InterpretHealth(obj) {b} end");
    let cases: Vec<(&str, String, Want)> = vec![
        ("infinite loop", body("while true do end"), Want::Timeout),
        ("recursion without end", body("local function f() return f() end return f()"), Want::Timeout),
        ("loop swallowed by pcall", body("while true do pcall(error) end"), Want::Timeout),
        (
            "loop inside a gsub callback",
            body("return string.gsub(string.rep('a', 10), '.', function() while true do end end)"),
            Want::Timeout,
        ),
        (
            "loop of affordable but slow patterns (work in C)",
            body("local s = string.rep('a', 5000) while true do string.find(s, '.-b') end"),
            Want::Timeout,
        ),
        (
            "loop of sorts (work in C)",
            body("local t = {} for i = 1, 100000 do t[i] = i end while true do table.sort(t) end"),
            Want::Timeout,
        ),
        (
            "catastrophic backtracking",
            body("return string.find(string.rep('a', 100000), '.-.-.-.-b')"),
            Want::Runtime("too expensive"),
        ),
        (
            "back reference backtracking",
            body("return string.match(string.rep('a', 9000), '(.-)%1b')"),
            Want::Runtime("too expensive"),
        ),
        ("os.execute", body("return os.execute('touch /tmp/pwned')"), Want::Runtime("os")),
        ("io.open", body("return io.open('/etc/passwd'):read('a')"), Want::Runtime("io")),
        ("require('os')", body("return require('os').execute('id')"), Want::Runtime("not available")),
        ("require('io')", body("return require('io')"), Want::Runtime("not available")),
        ("load", body("return load('return 1')()"), Want::Runtime("load")),
        ("loadstring", body("return loadstring('return 1')()"), Want::Runtime("loadstring")),
        ("dofile", body("return dofile('/etc/passwd')"), Want::Runtime("dofile")),
        ("loadfile", body("return loadfile('/etc/passwd')"), Want::Runtime("loadfile")),
        ("debug.sethook", body("debug.sethook() while true do end"), Want::Runtime("debug")),
        ("debug.getregistry", body("return debug.getregistry()"), Want::Runtime("debug")),
        ("collectgarbage", body("collectgarbage('stop')"), Want::Runtime("collectgarbage")),
        ("string.dump", body("return string.dump(InterpretHealth)"), Want::Runtime("dump")),
        ("coroutine", body("return coroutine.wrap(function() end)"), Want::Runtime("coroutine")),
        (
            "setmetatable with __gc",
            body("setmetatable({}, {__gc = function() while true do end end})"),
            Want::Runtime("setmetatable"),
        ),
        ("the string metatable", body("return getmetatable('').__index"), Want::Runtime("getmetatable")),
        ("string.rep bomb", body("return string.rep('x', 1 << 30)"), Want::OutOfMemory),
        ("string.rep separator bomb", body("return string.rep('x', 100, string.rep('y', 1 << 22))"), Want::OutOfMemory),
        ("doubling a string", body("local s = 'x' while true do s = s .. s end"), Want::OutOfMemory),
        (
            "table memory bomb",
            body("local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end"),
            Want::OutOfMemory,
        ),
        (
            "table.concat bomb",
            body("local t = {} for i = 1, 64 do t[i] = string.rep('x', 1 << 20) end return table.concat(t)"),
            Want::OutOfMemory,
        ),
        ("deep recursion", body("local function f(n) return 1 + f(n + 1) end return f(1)"), Want::StackOrMemory),
        (
            "string.rep of an empty string a trillion times (a C loop)",
            body("return #string.rep('', 1 << 40) == 0 and #string.rep('', 1 << 40, '') == 0"),
            Want::Value(json!(true)),
        ),
        ("table.move of 2^40 nils (a C loop)", body("return table.move({}, 1, 1 << 40, 1)"), Want::Runtime("table.move")),
        ("table.unpack of a huge range", body("return table.unpack({}, 1, 1e8)"), Want::Runtime("too many results")),
        ("string.format with a huge width", body("return string.format('%99999999d', 1)"), Want::Runtime("invalid conversion")),
        (
            "a result of 2^26 shared tables",
            body("local t = {} for i = 1, 26 do t = {t, t} end return t"),
            Want::Conversion("larger than"),
        ),
        (
            "a result nested 1000 deep",
            body("local t = {} for i = 1, 1000 do t = {t} end return t"),
            Want::Conversion("deeper than"),
        ),
        ("a result containing itself", body("local t = {} t.t = t return t"), Want::Conversion("")),
        (
            "a kube helper given 2^26 shared tables",
            body("local t = {} for i = 1, 26 do t = {t, t} end return kube.accuratePodRequirements({spec = {containers = t}})"),
            Want::Runtime("larger than"),
        ),
    ];
    for (name, script, want) in cases {
        let set = ScriptSet::new(
            name,
            BTreeMap::from([
                (Operation::InterpretHealth, script.clone()),
                (
                    Operation::InterpretStatus,
                    "function ReflectStatus(obj) return { ok = obj.ok } end".to_string(),
                ),
            ]),
            limits,
        );
        let started = Instant::now();
        let got = set.call(Operation::InterpretHealth, &[&json!({})]);
        let elapsed = started.elapsed();
        let ok = match (&want, &got) {
            (Want::Timeout, Err(ScriptError::Timeout { .. })) => true,
            (Want::OutOfMemory, Err(ScriptError::OutOfMemory(n))) => *n == limits.memory_bytes,
            (Want::Runtime(m), Err(ScriptError::Runtime(got))) => got.contains(m),
            (Want::Conversion(m), Err(ScriptError::Conversion(got))) => got.contains(m),
            (
                Want::StackOrMemory,
                Err(ScriptError::OutOfMemory(_)) | Err(ScriptError::Runtime(_)),
            ) => true,
            (Want::Value(v), Ok(got)) => got.as_slice() == [v.clone()],
            _ => false,
        };
        assert!(ok, "{name}: wanted {want:?}, got {got:?}");
        // Stopped by its budget, not hung: the slowest cases run a whole C call past the
        // 1 s clock.
        assert!(
            elapsed < Duration::from_secs(10),
            "{name}: took {elapsed:?}"
        );
        assert_eq!(
            set.call(Operation::InterpretStatus, &[&json!({"ok": 1})]),
            Ok(vec![json!({"ok": 1})]),
            "{name}: the state works afterwards"
        );
    }
}

#[test]
fn value_size_table() {
    let lua = Lua::new();
    let limits = ValueLimits {
        bytes: 100,
        items: 10,
        depth: 3,
    };
    let rows: &[(&str, Result<(), &str>)] = &[
        ("return 1", Ok(())),
        ("return {a = 'b', c = {1, 2}}", Ok(())),
        ("return {{{}}}", Ok(())),
        ("return {{{{}}}}", Err("deeper than 3")),
        ("return string.rep('x', 99)", Err("larger than")),
        ("return {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}", Err("larger than")),
        (
            "local t = {} return {t, t, t, t, t, t, t, t, t, t}",
            Err("larger than"),
        ),
        ("local t = {} t[1] = t return t", Err("deeper than 3")),
    ];
    for (script, want) in rows {
        let v: mlua::Value = lua.load(*script).eval().expect(script);
        match (check_value_size(&v, limits), want) {
            (Ok(()), Ok(())) => {}
            (Err(ScriptError::Conversion(m)), Err(w)) if m.contains(w) => {}
            (got, want) => panic!("{script}: wanted {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn error_messages_name_the_line_without_a_traceback() {
    let err = run(
        "function InterpretHealth(obj)\n  return string.format('%99999999d', 1)\nend",
        json!({}),
    )
    .expect_err("format");
    assert_eq!(
        err,
        ScriptError::Runtime(
            "[string \"test/healthInterpretation\"]:2: invalid conversion specification: '%99999999d'"
                .to_string()
        )
    );
}
