//! The fleet page (`/ui`, docs/ui.md) in a real headless browser: Debian's Chromium driven
//! through chromedriver ([`flotilla_tests::browser`]), against a real server and real pull
//! agents on 127.0.0.1, with every other host unresolvable for the browser.
//!
//! The failover check follows scenario 02 as a user would watch it: log in (a wrong token
//! first), see the members, apply the scenario and see member1:1 and member2:2 in the matrix,
//! SIGKILL member1's agent and watch the page, without a reload, show member1 Unknown, then
//! tainted, then the replicas on member2, then the binding's history entry. Before the kill it
//! asks "what if member2 fails?" and gets the dry-run's predicted move. Screenshots before and after go to `target/ui-test/`, from where
//! docs/images takes them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::browser::Browser;
use flotilla_tests::{
    eventually, healthy_on, placement_of, post_manifests, pull_agent, scenario_text,
    wait_members_ready, ApiClient, Server,
};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";
const NGINX: &str = "default/nginx-deployment";
const STEP: Duration = Duration::from_secs(60);

/// Where a test's screenshots go: `target/ui-test/<test>/`.
fn output_dir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("ui-test")
        .join(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Types `token` into the login form and presses the button.
fn log_in(browser: &Browser, token: &str) {
    browser
        .execute(
            "document.querySelector('#token').value = arguments[0]; \
             document.querySelector('#login-button').click(); return true;",
            vec![json!(token)],
        )
        .unwrap();
}

/// The text of the first element `selector` matches, or null.
fn text_of(browser: &Browser, selector: &str) -> Value {
    browser
        .execute(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(selector)],
        )
        .unwrap()
}

/// Waits until the matrix cell of scenario 02's binding on `cluster` shows `replicas`.
fn wait_cell(browser: &Browser, cluster: &str, replicas: &str) {
    let script = format!(
        "const c = document.querySelector('#matrix td[data-binding=\"{NGINX}\"][data-cluster=\"{cluster}\"]'); \
         return c && c.getAttribute('data-replicas') === '{replicas}';"
    );
    browser
        .wait_for(
            &format!("{NGINX} with {replicas} replica(s) on {cluster}"),
            STEP,
            &script,
        )
        .unwrap();
}

#[test]
fn the_page_follows_a_failover_live_and_answers_what_if() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(
        &data.path().join("server"),
        flotilla_tests::FAST_PULL_FAILOVER,
    )
    .unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let mut member1 = pull_agent(&server, "member1", data.path());
    let _member2 = pull_agent(&server, "member2", data.path());
    let _member3 = pull_agent(&server, "member3", data.path());
    wait_members_ready(&api, 3);
    let out = output_dir("failover");
    println!("screenshots in {}", out.display());

    // The server's certificate is self-signed (HTTPS is the default mode).
    let browser = Browser::start(&["--ignore-certificate-errors"]).unwrap();
    browser.goto(&format!("{}/ui", server.url)).unwrap();

    // A wrong token: the 401 and the server's own message.
    log_in(&browser, "not-a-token");
    let refused = browser
        .wait_for(
            "the 401 of a wrong token",
            STEP,
            "const e = document.querySelector('#login-error'); \
             return e && e.textContent.startsWith('401') ? e.textContent : null;",
        )
        .unwrap();
    assert!(
        refused.as_str().unwrap().contains("Unauthorized"),
        "{refused}"
    );
    assert!(
        !text_of(&browser, "#app[hidden]").is_null(),
        "nothing of the fleet shows before a login"
    );

    // The admin token: the three members, Ready, in pull mode.
    log_in(&browser, &server.token);
    browser
        .wait_for(
            "three members",
            STEP,
            "return document.querySelectorAll('#members tr[data-cluster]').length === 3;",
        )
        .unwrap();
    browser
        .execute("window.__noReload = 1; return true;", vec![])
        .unwrap();
    for member in ["member1", "member2", "member3"] {
        let row = format!("#members tr[data-cluster=\"{member}\"]");
        browser
            .wait_for(
                &format!("{member} Ready"),
                STEP,
                &format!(
                    "const e = document.querySelector('{row} [data-field=\"ready\"]'); \
                     return e && e.textContent === 'Ready';"
                ),
            )
            .unwrap();
        assert_eq!(
            text_of(&browser, &format!("{row} [data-field=\"mode\"]")),
            json!("Pull")
        );
    }

    // Scenario 02: member1:1 and member2:2 in the matrix.
    post_manifests(&api, &scenario_text("02-divided-weighted-failover.yaml"));
    wait_cell(&browser, "member1", "1");
    wait_cell(&browser, "member2", "2");
    eventually("both copies Healthy", STEP, || {
        (healthy_on(&api, RB, "member1") && healthy_on(&api, RB, "member2")).then_some(())
    });
    browser
        .wait_for(
            "member1's copy Healthy in the matrix",
            STEP,
            &format!(
                "const c = document.querySelector('#matrix td[data-binding=\"{NGINX}\"][data-cluster=\"member1\"]'); \
                 return c && c.getAttribute('data-health') === 'Healthy';"
            ),
        )
        .unwrap();
    // What if member2 failed? The dry-run answers: nginx would go to member1 whole.
    browser
        .execute(
            "document.querySelector('button[data-whatif=\"member2\"]').click(); return true;",
            vec![],
        )
        .unwrap();
    let moved = browser
        .wait_for(
            "the predicted move off member2",
            STEP,
            &format!(
                "const e = document.querySelector('#whatif-result [data-move=\"{NGINX}\"]'); \
                 return e ? e.textContent : null;"
            ),
        )
        .unwrap();
    assert!(
        moved
            .as_str()
            .unwrap()
            .contains("member1:1 member2:2 → member1:3"),
        "{moved}"
    );
    browser.screenshot(&out.join("before.png")).unwrap();

    // member1's agent dies: Unknown, then the NoExecute taint, then the replicas on member2,
    // then the history entry, all without a reload.
    member1.process.kill();
    let row = "#members tr[data-cluster=\"member1\"]";
    browser
        .wait_for(
            "member1 Unknown",
            STEP,
            &format!(
                "const e = document.querySelector('{row} [data-field=\"ready\"]'); \
                 return e && e.textContent === 'Unknown';"
            ),
        )
        .unwrap();
    browser
        .wait_for(
            "member1's NoExecute taint",
            STEP,
            &format!(
                "const e = document.querySelector('{row} [data-field=\"taints\"]'); \
                 return e && e.textContent.includes('cluster.karmada.io/unreachable:NoExecute');"
            ),
        )
        .unwrap();
    wait_cell(&browser, "member2", "3");
    assert_eq!(
        placement_of(&api, RB),
        Some(vec![("member2".to_string(), 3)]),
        "the page shows what the API has"
    );
    browser
        .execute(
            "document.querySelector(arguments[0]).click(); return true;",
            vec![json!(format!("[data-open-binding=\"{NGINX}\"]"))],
        )
        .unwrap();
    let entry = browser
        .wait_for(
            "the failover history entry from member1",
            STEP,
            "const e = document.querySelector('#binding-detail [data-history-entry][data-from-cluster=\"member1\"]'); \
             return e ? e.textContent : null;",
        )
        .unwrap();
    assert!(
        entry.as_str().unwrap().contains("ClusterFailover"),
        "{entry}"
    );
    // The chain and explain: member1 is filtered now (not Ready, tainted).
    browser
        .wait_for(
            "explain's answer for member1",
            STEP,
            "const e = document.querySelector('#binding-detail tr[data-explain=\"member1\"]'); \
             return e && e.textContent.includes('filtered') ? e.textContent : null;",
        )
        .unwrap();

    // The old copy's end (member2's copy Healthy) reaches the timeline live as well.
    browser
        .wait_for(
            "the history entry's old copy gone",
            STEP,
            "const e = document.querySelector('#binding-detail [data-history-entry][data-from-cluster=\"member1\"]'); \
             return e && e.textContent.includes('old copy gone');",
        )
        .unwrap();
    browser
        .wait_for(
            "the activity list with the eviction",
            STEP,
            "return document.querySelector('#events [data-event][data-reason=\"EvictWorkloadFromClusterSucceed\"]') !== null;",
        )
        .unwrap();
    browser.screenshot(&out.join("after.png")).unwrap();

    assert_eq!(
        browser
            .execute("return window.__noReload === 1;", vec![])
            .unwrap(),
        json!(true),
        "the page was never reloaded"
    );
    // Nothing but the server was asked for anything.
    let origin = server.url.trim_end_matches('/').to_string();
    let requests = browser
        .execute(
            "return performance.getEntriesByType('resource').map(e => e.name);",
            vec![],
        )
        .unwrap();
    let requests = requests.as_array().unwrap();
    assert!(!requests.is_empty());
    for url in requests {
        assert!(
            url.as_str().unwrap().starts_with(&origin),
            "the page asked {url}, not the server {origin}"
        );
    }
}

#[test]
fn a_refused_login_names_its_status_over_plain_http() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&data.path().join("server"), &["--plain-http"]).unwrap();
    assert!(server.url.starts_with("http://"), "{}", server.url);
    let member = flotilla_tests::register_member(&server, "m1");
    let browser = Browser::start(&[]).unwrap();
    browser.goto(&format!("{}/ui", server.url)).unwrap();

    // (token, what the login error starts with, what it must also say)
    let table = [
        ("wrong", "401 Unauthorized", ""),
        // A member agent's credential is valid but may read only its own cluster.
        (
            member.as_str(),
            "403 Forbidden",
            "the agent of cluster \"m1\" may not GET",
        ),
    ];
    for (token, status, message) in table {
        log_in(&browser, token);
        let shown = browser
            .wait_for(
                status,
                STEP,
                &format!(
                    "const e = document.querySelector('#login-error'); \
                     return e && e.textContent.startsWith('{status}') ? e.textContent : null;"
                ),
            )
            .unwrap();
        assert!(shown.as_str().unwrap().contains(message), "{shown}");
        assert!(
            !text_of(&browser, "#app[hidden]").is_null(),
            "a refused login shows nothing of the fleet"
        );
    }
    log_in(&browser, &server.token);
    browser
        .wait_for(
            "the app after a good login",
            STEP,
            "return document.querySelector('#app') && !document.querySelector('#app').hidden \
             && document.querySelector('#login').hidden;",
        )
        .unwrap();
    assert_eq!(text_of(&browser, "#login-error"), json!(""));
}

/// Sets the "pause live updates" switch as a user's click would.
fn set_paused(browser: &Browser, paused: bool) {
    browser
        .execute(
            "const p = document.querySelector('#pause-live'); p.checked = arguments[0]; \
             p.dispatchEvent(new Event('change')); return true;",
            vec![json!(paused)],
        )
        .unwrap();
}

#[test]
fn paused_past_the_event_log_the_page_lists_again_and_catches_up() {
    let data = tempfile::tempdir().unwrap();
    // A short event log: a watch resumed from before 60 writes is 410 Gone.
    let server = Server::start(
        &data.path().join("server"),
        &["--plain-http", "--event-log-capacity", "20"],
    )
    .unwrap();
    let api = ApiClient::admin(&server).unwrap();
    // Events are written as a user's tools would; the first one before the page lists, so the
    // list has a resourceVersion of its own (an empty store's is 0, from which a watch starts
    // afresh instead of resuming).
    let post_event = |i: usize| {
        let event = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("paused-{i}"), "namespace": "default"},
            "involvedObject": {"kind": "ConfigMap", "namespace": "default", "name": "cfg"},
            "reason": format!("WhilePaused{i}"), "message": "written while the page was paused",
            "type": "Normal"
        });
        let (code, body) = api
            .send("POST", "/api/v1/namespaces/default/events", Some(&event))
            .unwrap();
        assert_eq!(code, 201, "{body}");
    };
    post_event(0);
    let browser = Browser::start(&[]).unwrap();
    browser.goto(&format!("{}/ui", server.url)).unwrap();
    log_in(&browser, &server.token);
    let live = "const s = document.querySelector('#feed-status'); \
                return s && s.textContent.includes('events: live');";
    browser
        .wait_for("the events feed live", STEP, live)
        .unwrap();

    // Paused, the page holds no watch; meanwhile 60 Events are written.
    set_paused(&browser, true);
    browser
        .wait_for(
            "the events feed paused",
            STEP,
            "return document.querySelector('#feed-status').textContent.includes('events: paused');",
        )
        .unwrap();
    for i in 1..60 {
        post_event(i);
    }

    // Resumed: its watch's resourceVersion is gone (410), so it lists again and shows them.
    set_paused(&browser, false);
    browser
        .wait_for(
            "the Event written last while paused",
            STEP,
            "return document.querySelector('#events [data-event][data-reason=\"WhilePaused59\"]') !== null;",
        )
        .unwrap();
    let relists = browser
        .execute("return window.__flotillaUi.relists;", vec![])
        .unwrap();
    assert!(relists.as_u64().unwrap() >= 1, "relists: {relists}");
    browser
        .wait_for("the events feed live again", STEP, live)
        .unwrap();
}
