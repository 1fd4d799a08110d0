//! `scripts/demo.sh`, the failover demo the README names, run as a user runs it, with the
//! binaries of this build (`FLOTILLA_BIN_DIR`): it must exit 0 and print its timeline, every
//! key line stamped `+<seconds>s` and in the order of the story (scenario 02 placed; member1
//! killed, Unknown, tainted, evicted; rescheduled and Healthy on member2; member1's Work waiting,
//! then removed when it returns; the dry-run of member2 failing equal to what happens; three
//! more members killed and the brake holding, with the EvictionBrake object's reason). A run
//! whose step misses its deadline must exit non-zero naming the step. Either way the demo
//! leaves no process and no temporary directory behind. The script is killed (its whole
//! process group) if it has not ended within a generous deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{bench::until, binary, require_kubectl, Process};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// A run takes about 30 s on two idle cores with debug binaries; CI machines are busier.
const DEMO_DEADLINE: Duration = Duration::from_secs(300);

/// The key lines of the timeline, in order: (what the line contains, whether it is a stamped
/// `+<seconds>s` line of the timeline rather than an explanation under one).
const TIMELINE: &[(&str, bool)] = &[
    ("6 members Ready", true),
    ("eviction brake Normal", true),
    ("nginx placed: member1:1,member2:2", true),
    ("member1's agent killed (SIGKILL)", true),
    ("member1 Ready=Unknown", true),
    (
        "member1 tainted cluster.karmada.io/unreachable:NoExecute",
        true,
    ),
    (
        "nginx evicted from member1 (EvictWorkloadFromClusterSucceed)",
        true,
    ),
    ("replicas rescheduled: member2:3", true),
    ("Healthy on member2", true),
    ("member1's Work waits for it (deletionTimestamp set", true),
    ("member1 back: stale Work removed", true),
    ("predicted: nginx member2:3 -> member1:3", true),
    ("member2's agent killed (SIGKILL)", true),
    ("actual: nginx member1:3, as predicted", true),
    ("Healthy on member1", true),
    ("member3, member4 and member5 killed (SIGKILL)", true),
    ("the brake holds: PartialDisruption", true),
    (
        "4 of 6 clusters of region (none) are not Ready (more than 55%)",
        false,
    ),
    ("queued, each waiting its turn: member", false),
    ("$ kubectl get evictionbrakes -o wide", false),
    (
        "flotilla_eviction_brake_clusters_queued{region=\"(none)\"}",
        false,
    ),
    ("web still on", true),
    ("every step met its deadline", false),
];

/// Fails loudly when a tool the demo drives is missing (never skips).
fn require_tools() {
    require_kubectl();
    for tool in ["bash", "curl", "jq"] {
        let ok = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "{tool} is not installed: run scripts/setup.sh (scripts/demo.sh needs it)"
        );
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/demo.sh")
}

/// The directory of this build's `flotilla-server` and `flotilla-agent`.
fn bin_dir() -> PathBuf {
    let server = binary("flotilla-server").unwrap();
    let agent = binary("flotilla-agent").unwrap();
    let dir = server.parent().unwrap().to_path_buf();
    assert_eq!(agent.parent(), Some(dir.as_path()));
    dir
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs the demo with `FLOTILLA_BIN_DIR=bins`, its temporary directory under `scratch`, and
/// `env`; kills its process group if it has not ended by [`DEMO_DEADLINE`].
fn run_demo(bins: &Path, scratch: &Path, env: &[(&str, &str)]) -> Run {
    let out = scratch.with_extension("out");
    let err = scratch.with_extension("err");
    let child = Command::new("bash")
        .arg(script())
        .env("FLOTILLA_BIN_DIR", bins)
        .env("TMPDIR", scratch)
        .envs(env.iter().copied())
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("starting scripts/demo.sh");
    // Dropped (the whole group SIGKILLed) also when this test fails.
    let mut demo = Process {
        child,
        name: "scripts/demo.sh".into(),
    };
    let ended = until("scripts/demo.sh to end", DEMO_DEADLINE, || {
        demo.child.try_wait().ok().flatten()
    });
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    match ended {
        Ok(status) => Run {
            status,
            stdout: read(&out),
            stderr: read(&err),
        },
        Err(e) => {
            demo.kill();
            panic!(
                "{e:#}: killed it.\n--- stdout\n{}\n--- stderr\n{}",
                read(&out),
                read(&err)
            )
        }
    }
}

/// The seconds a timeline line is stamped with (`   +12.3s  ...`), if it is one.
fn stamp(line: &str) -> Option<f64> {
    let rest = line.trim_start().strip_prefix('+')?;
    let (secs, _) = rest.split_once("s  ")?;
    secs.parse().ok()
}

/// What is left of the demo: the processes whose command line names `scratch` (the server and
/// agents have their data directories there), and the entries of `scratch`.
fn leftovers(scratch: &Path) -> (Vec<String>, Vec<PathBuf>) {
    let needle = scratch.to_string_lossy().to_string();
    let processes = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&needle))
        .collect();
    let files = std::fs::read_dir(scratch)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    (processes, files)
}

#[test]
fn the_demo_runs_and_prints_its_timeline() {
    require_tools();
    let bins = bin_dir();
    let data = tempfile::tempdir().unwrap();
    let scratch = data.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let run = run_demo(&bins, &scratch, &[]);
    let all = format!("--- stdout\n{}\n--- stderr\n{}", run.stdout, run.stderr);
    assert!(run.status.success(), "demo.sh exited {}\n{all}", run.status);
    println!("{}", run.stdout);

    let lines: Vec<&str> = run.stdout.lines().collect();
    let mut at = 0;
    for (want, stamped) in TIMELINE {
        let Some(i) = lines[at..].iter().position(|l| l.contains(want)) else {
            panic!("no line {want:?} after line {at} of the timeline\n{all}");
        };
        at += i;
        assert_eq!(
            stamp(lines[at]).is_some(),
            *stamped,
            "{:?} stamped +<seconds>s: {stamped}\n{all}",
            lines[at]
        );
    }
    let stamps: Vec<f64> = lines.iter().filter_map(|l| stamp(l)).collect();
    assert!(
        stamps.windows(2).all(|w| w[0] <= w[1]),
        "the stamps go forward: {stamps:?}\n{all}"
    );
    assert_eq!(
        leftovers(&scratch),
        (vec![], vec![]),
        "no process or file left"
    );
}

#[test]
fn a_step_that_misses_its_deadline_fails_the_demo_and_stops_everything() {
    require_tools();
    let bins = bin_dir();
    let data = tempfile::tempdir().unwrap();
    // The real server, and agents that say they listen and do nothing: no member is ever
    // Ready, so the first step misses its deadline (60 s at 5%: 3 s).
    let fake = data.path().join("bin");
    std::fs::create_dir(&fake).unwrap();
    std::os::unix::fs::symlink(bins.join("flotilla-server"), fake.join("flotilla-server")).unwrap();
    let agent = fake.join("flotilla-agent");
    std::fs::write(
        &agent,
        "#!/usr/bin/env bash\necho 'flotilla-agent listening on http://127.0.0.1:9'\n\
         while :; do sleep 0.2; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let scratch = data.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let run = run_demo(&fake, &scratch, &[("FLOTILLA_DEMO_DEADLINE_PERCENT", "5")]);
    let all = format!("--- stdout\n{}\n--- stderr\n{}", run.stdout, run.stderr);
    assert_eq!(run.status.code(), Some(1), "{all}");
    assert!(
        run.stderr.contains(
            "FAILED at step \"1. A fleet of six members: member1..member3 pull agents, \
             member4..member6 push agents\": not within 3 s: 6 members Ready"
        ),
        "{all}"
    );
    assert!(!run.stdout.contains("every step met its deadline"), "{all}");
    assert_eq!(
        leftovers(&scratch),
        (vec![], vec![]),
        "no process or file left"
    );
}
