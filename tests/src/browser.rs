//! A real headless browser for the fleet page's tests: Debian's Chromium driven through its
//! `chromedriver` with a small W3C WebDriver client (JSON over HTTP on 127.0.0.1).
//!
//! [`Browser::start`] spawns `chromedriver` on a free port and opens one session of
//! `/usr/bin/chromium` in headless mode with a fresh profile and every host but 127.0.0.1
//! unresolvable, so a page that reached for a CDN would fail visibly. Both are installed by
//! `scripts/setup.sh`; a missing one fails the test loudly, never skips it. Dropping the
//! `Browser` ends the session and kills the driver's process group (the browser with it), also
//! when the test panics.
//!
//! The client covers what the tests need: open a URL, run a script and read its JSON answer,
//! wait for a script to answer something truthy or for an element's text to pass a test, click,
//! switch tabs, and take a screenshot.

use crate::Process;
use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The browser and its driver, as Debian's packages install them.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's `chromium-driver`.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// One WebDriver session of a headless Chromium.
pub struct Browser {
    /// chromedriver; dropped (its process group killed) after the session ends.
    driver: Process,
    http: reqwest::blocking::Client,
    /// `http://127.0.0.1:<port>/session/<id>`.
    session: String,
    /// The browser's fresh profile (`--user-data-dir`), removed when the `Browser` is dropped.
    profile: tempfile::TempDir,
}

/// Fails loudly when the browser or its driver is missing (never a skipped test).
pub fn require_chromium() {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is not installed: run scripts/setup.sh (the fleet page's browser test needs \
             Debian's chromium and chromium-driver)"
        );
    }
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium session; `extra_args` go to Chromium
    /// (e.g. `--ignore-certificate-errors` for a server's self-signed certificate).
    pub fn start(extra_args: &[&str]) -> Result<Browser> {
        require_chromium();
        let port = free_port()?;
        // Its own process group, so that dropping it kills the browser it started too.
        let driver = Process {
            child: Command::new(CHROMEDRIVER)
                .process_group(0)
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {CHROMEDRIVER}"))?,
            name: "chromedriver".into(),
        };
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let base = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir()?;
        let mut browser = Browser {
            driver,
            http,
            session: String::new(),
            profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = browser
                .http
                .get(format!("{base}/status"))
                .send()
                .ok()
                .and_then(|r| r.json::<Value>().ok())
                .and_then(|v| v["value"]["ready"].as_bool())
                .unwrap_or(false);
            if ready {
                break;
            }
            if Instant::now() > deadline {
                bail!("chromedriver on port {port} did not become ready within 20 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut args: Vec<String> = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--no-proxy-server",
            "--window-size=1400,1500",
            // Every host but the server's is unreachable: the page must need no other.
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!(
            "--user-data-dir={}",
            browser.profile.path().display()
        ));
        args.extend(extra_args.iter().map(|s| s.to_string()));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}
        }}});
        let answer = browser.send("POST", &format!("{base}/session"), Some(caps))?;
        let id = answer["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no session id in {answer}"))?;
        browser.session = format!("{base}/session/{id}");
        Ok(browser)
    }

    /// One WebDriver command; answers its `value`, or the driver's error.
    fn send(&self, method: &str, url: &str, body: Option<Value>) -> Result<Value> {
        let req = match method {
            "POST" => self.http.post(url).json(&body.unwrap_or_else(|| json!({}))),
            "DELETE" => self.http.delete(url),
            _ => self.http.get(url),
        };
        let resp = req.send().with_context(|| format!("{method} {url}"))?;
        let status = resp.status();
        let v: Value = resp.json().with_context(|| format!("{method} {url}"))?;
        if !status.is_success() {
            bail!(
                "{method} {url}: {status}: {} {}",
                v["value"]["error"],
                v["value"]["message"]
            );
        }
        Ok(v["value"].clone())
    }

    /// Opens a URL in the session's window.
    pub fn goto(&self, url: &str) -> Result<()> {
        self.send(
            "POST",
            &format!("{}/url", self.session),
            Some(json!({ "url": url })),
        )
        .map(|_| ())
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the page and answers what
    /// it returns.
    pub fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value> {
        self.send(
            "POST",
            &format!("{}/execute/sync", self.session),
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Runs `script` every 100 ms until it answers something other than null, false, 0 or "",
    /// and answers that; fails after `deadline` with `what` and the last answer.
    pub fn wait_for(&self, what: &str, deadline: Duration, script: &str) -> Result<Value> {
        let until = Instant::now() + deadline;
        loop {
            let last = match self.execute(script, vec![]) {
                Ok(v) if truthy(&v) => return Ok(v),
                Ok(v) => v,
                Err(e) => json!(e.to_string()),
            };
            if Instant::now() > until {
                bail!("the page did not show {what} within {deadline:?}; last answer: {last}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the first element `selector` matches has a text for which the JavaScript
    /// expression `test` (over the text, `t`) is true, and answers that text.
    pub fn wait_text(
        &self,
        what: &str,
        deadline: Duration,
        selector: &str,
        test: &str,
    ) -> Result<String> {
        let script = format!(
            "const e = document.querySelector({}); if (!e) return null; \
             const t = e.textContent; return ({test}) ? {{ text: t }} : null;",
            json!(selector)
        );
        let found = self.wait_for(what, deadline, &script)?;
        Ok(found["text"].as_str().unwrap_or_default().to_string())
    }

    /// Clicks the first element `selector` matches, as a user would.
    pub fn click(&self, selector: &str) -> Result<()> {
        let found = self.execute(
            "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e;",
            vec![json!(selector)],
        )?;
        if found != json!(true) {
            bail!("nothing on the page matches {selector} to click");
        }
        Ok(())
    }

    /// The handle of the current window (tab).
    pub fn window(&self) -> Result<String> {
        let v = self.send("GET", &format!("{}/window", self.session), None)?;
        v.as_str()
            .map(String::from)
            .ok_or_else(|| anyhow!("no window handle in {v}"))
    }

    /// Opens a new tab and answers its handle; the current tab stays current.
    pub fn new_tab(&self) -> Result<String> {
        let v = self.send(
            "POST",
            &format!("{}/window/new", self.session),
            Some(json!({"type": "tab"})),
        )?;
        v["handle"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| anyhow!("no handle in {v}"))
    }

    /// Makes the tab `handle` current, in front: the tab that was in front is hidden
    /// (`document.hidden`), as when a user switches tabs.
    pub fn switch_to(&self, handle: &str) -> Result<()> {
        self.send(
            "POST",
            &format!("{}/window", self.session),
            Some(json!({ "handle": handle })),
        )
        .map(|_| ())
    }

    /// Saves a PNG of the window at `path`.
    pub fn screenshot(&self, path: &Path) -> Result<()> {
        let v = self.send("GET", &format!("{}/screenshot", self.session), None)?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().ok_or_else(|| anyhow!("no screenshot data"))?)?;
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }
}

/// JavaScript's truthiness of a JSON answer.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self
                .http
                .delete(&self.session)
                .timeout(Duration::from_secs(5))
                .send();
        }
        self.driver.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truthiness_is_javascripts() {
        let table = [
            (json!(null), false),
            (json!(false), false),
            (json!(0), false),
            (json!(""), false),
            (json!(true), true),
            (json!(2), true),
            (json!("x"), true),
            (json!([]), true),
            (json!({}), true),
        ];
        for (v, want) in table {
            assert_eq!(truthy(&v), want, "{v}");
        }
    }
}
