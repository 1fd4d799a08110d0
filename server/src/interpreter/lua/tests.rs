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
