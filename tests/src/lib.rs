//! Helpers for Flotilla's end-to-end tests: start the real binaries on 127.0.0.1 with port 0,
//! stop them when the test ends (also when it fails), run kubectl against them, and wait with
//! deadlines that say what they waited for.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The directory holding the workspace's built binaries (`target/<profile>`).
fn bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test-binary>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| anyhow!("unexpected test binary location {}", exe.display()))?;
    Ok(dir.to_path_buf())
}

/// Path of a workspace binary, building it first if this test run did not.
pub fn binary(name: &str) -> Result<PathBuf> {
    let path = bin_dir()?.join(name);
    if path.exists() {
        return Ok(path);
    }
    let package = match name {
        "flotilla-agent" => "flotilla-agent",
        _ => "flotilla-server",
    };
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", package, "--bin", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .context("running cargo build")?;
    if !status.success() || !path.exists() {
        bail!("could not build {name}");
    }
    Ok(path)
}

/// A child process that is killed and reaped when dropped.
pub struct Process {
    /// The child.
    pub child: Child,
    /// What it is, for messages.
    pub name: String,
}

impl Process {
    /// Sends SIGKILL and reaps.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits up to `within` for a clean exit; returns whether it exited 0.
    pub fn terminate(&mut self, within: Duration) -> Result<bool> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status.success());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        bail!("{} did not exit within {within:?} of SIGTERM", self.name)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `flotilla-server` process.
pub struct Server {
    /// The process.
    pub process: Process,
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// The admin token it wrote.
    pub token: String,
}

impl Server {
    /// Starts `flotilla-server --listen 127.0.0.1:0 --data-dir <dir> <extra...>` and waits until
    /// it prints its URL.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Result<Server> {
        let bin = binary("flotilla-server")?;
        let mut child = Command::new(bin)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning flotilla-server")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut process = Process {
            child,
            name: "flotilla-server".into(),
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let url = loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    if let Some(url) = line.strip_prefix("flotilla-server listening on ") {
                        break url.trim().to_string();
                    }
                }
                Err(_) => {
                    process.kill();
                    bail!("flotilla-server did not print its URL within 60s");
                }
            }
        };
        let token = std::fs::read_to_string(data_dir.join("admin.token"))?
            .trim()
            .to_string();
        Ok(Server {
            process,
            url,
            data_dir: data_dir.to_path_buf(),
            token,
        })
    }

    /// Path of the kubeconfig the server wrote.
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("kubeconfig")
    }
}

/// Whether kubectl is installed; prints a loud message when it is not.
pub fn kubectl_available() -> bool {
    let ok = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("\n!!!!!!!! kubectl is not installed: SKIPPING the kubectl tests !!!!!!!!\n");
    }
    ok
}

/// Runs kubectl against a server with its own discovery cache directory.
pub struct Kubectl {
    kubeconfig: PathBuf,
    cache_dir: tempfile::TempDir,
}

impl Kubectl {
    /// A kubectl for `server`.
    pub fn new(server: &Server) -> Result<Kubectl> {
        Ok(Kubectl {
            kubeconfig: server.kubeconfig(),
            cache_dir: tempfile::tempdir()?,
        })
    }

    /// The command, with kubeconfig and cache dir set.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache_dir.path())
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs kubectl and returns its output, whether it succeeded or not.
    pub fn output(&self, args: &[&str]) -> Result<Output> {
        Ok(self.command(args).output()?)
    }

    /// Runs kubectl and returns stdout; fails with stderr when kubectl fails.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = self.output(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }
}

/// Polls `check` every 50 ms until it returns `Some`, failing after `within` with `what`.
pub fn wait_for<T>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {within:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Path of the shared failover scenarios (`../shared/scenarios` beside the repository).
pub fn scenarios_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/scenarios");
    dir.is_dir().then_some(dir)
}
