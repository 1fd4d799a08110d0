//! The docs' examples are tests: every ```sh block of the pages below runs, top to bottom,
//! against a fresh `flotilla-server` with FLOTILLA, TOKEN and KUBECONFIG set, and must exit 0
//! (```shell blocks are shown, not run: they start servers of their own).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{require_kubectl, Server};
use std::path::Path;
use std::process::Command;

/// The ```sh blocks of a markdown file, with the line each starts on.
fn sh_blocks(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == "```sh" => current = Some((i + 1, String::new())),
            Some(_) if line.trim_start() == "```" => out.extend(current.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

fn run_page(page: &str) {
    run_page_with(page, &[], |_| Vec::new());
}

/// Runs a page against a server started with `server_args`; `env` adds variables once the
/// server runs.
fn run_page_with(page: &str, server_args: &[&str], env: impl Fn(&Server) -> Vec<(String, String)>) {
    require_kubectl();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(page);
    let text = std::fs::read_to_string(&path).unwrap();
    let blocks = sh_blocks(&text);
    assert!(!blocks.is_empty(), "{page} has no sh examples");
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), server_args).unwrap();
    let extra = env(&server);
    for (line, block) in blocks {
        // Every command the block runs, with its arguments expanded, goes to a trace file
        // (not to the block's own stderr, which examples may capture), shown on failure.
        let trace = home.path().join(format!("trace-{line}"));
        let traced = format!(
            "exec 9>'{}'; BASH_XTRACEFD=9; set -x\n{block}",
            trace.display()
        );
        let out = Command::new("bash")
            .args(["-eu", "-c", &traced])
            .env("FLOTILLA", &server.url)
            .env("TOKEN", &server.token)
            .env("KUBECONFIG", server.kubeconfig())
            .env("CURL_CA_BUNDLE", server.data_dir.join("tls.crt"))
            .env("KUBECACHEDIR", home.path().join("kube-cache"))
            .env("HOME", home.path())
            .envs(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{page}:{line}: example failed\n--- block ---\n{block}--- stdout ---\n{}--- stderr ---\n{}--- trace ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&trace).unwrap_or_default()
        );
    }
}

#[test]
fn api_page_examples_run() {
    run_page("api.md");
}

/// The URL of the server's simulated members (`--sim-members`).
#[test]
fn members_page_examples_run() {
    run_page_with(
        "members.md",
        &["--sim-members", "2", "--sim-pod-startup-delay-ms", "100"],
        |server| {
            vec![(
                "MEMBER".to_string(),
                format!("{}/members/member1", server.sim_members_url()),
            )]
        },
    );
}

#[test]
fn scheduling_page_examples_run() {
    // The page reads explanations with jq (scripts/setup.sh installs it).
    let jq = Command::new("jq").arg("--version").output();
    assert!(
        jq.is_ok_and(|o| o.status.success()),
        "jq is missing: run scripts/setup.sh"
    );
    run_page_with(
        "scheduling.md",
        &[
            "--sim-members",
            "5",
            "--sim-pod-startup-delay-ms",
            "100",
            "--sim-cluster-status-update-frequency-ms",
            "1000",
        ],
        |server| vec![("MEMBERS".to_string(), server.sim_members_url())],
    );
}

#[test]
fn dependencies_page_examples_run() {
    run_page_with(
        "dependencies.md",
        &["--sim-members", "2", "--sim-pod-startup-delay-ms", "100"],
        |server| vec![("MEMBERS".to_string(), server.sim_members_url())],
    );
}

#[test]
fn failover_page_examples_run() {
    run_page_with(
        "failover.md",
        &[
            "--sim-members",
            "3",
            "--sim-pod-startup-delay-ms",
            "100",
            "--sim-api",
            "flink.apache.org/v1beta1/FlinkDeployment",
        ],
        |server| {
            vec![
                (
                    "EXAMPLES".to_string(),
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../examples")
                        .display()
                        .to_string(),
                ),
                ("MEMBERS".to_string(), server.sim_members_url()),
            ]
        },
    );
}

#[test]
fn sh_block_extraction() {
    let md = "text\n```sh\necho a\n```\n```yaml\nx: 1\n```\n```sh\necho b\necho c\n```\n";
    assert_eq!(
        sh_blocks(md),
        vec![
            (2, "echo a\n".to_string()),
            (8, "echo b\necho c\n".to_string())
        ]
    );
}
