//! The fleet page (`/ui`, docs/ui.md) in a real headless browser: Debian's Chromium driven
//! through chromedriver ([`flotilla_tests::browser`]), against a real server and real pull
//! agents on 127.0.0.1, with every other host unresolvable for the browser.
//!
//! The failover check follows scenario 02 as a user would watch it: log in (a wrong token
//! first), see the members, apply the scenario and see member1:1 and member2:2 in the matrix,
//! SIGKILL member1's agent and watch the page, without a reload, show member1 Unknown, then
//! tainted, then the replicas on member2, then the binding's history entry. Before the kill it
//! asks "what if member2 fails?" and gets the dry-run's predicted move. When member1 returns,
//! its old Work leaves the binding's chain. Screenshots before and after go to
//! `target/ui-test/`, from where docs/images takes them.
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

/// Waits until the `data-field` cell `field` of `cluster`'s row in the members table has a text
/// for which `test` (a JavaScript expression over the text `t`) is true.
fn wait_member_field(browser: &Browser, cluster: &str, field: &str, test: &str) -> String {
    browser
        .wait_text(
            &format!("{cluster}'s {field} where {test}"),
            STEP,
            &format!("#members tr[data-cluster=\"{cluster}\"] [data-field=\"{field}\"]"),
            test,
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
    let (server, api, [mut member1, _member2, _member3]) =
        flotilla_tests::fast_pull_fleet(data.path());
    let out = output_dir("failover");
    println!("screenshots in {}", out.display());

    // The server's certificate is self-signed (HTTPS is the default mode).
    let browser = Browser::start(&["--ignore-certificate-errors"]).unwrap();
    browser.goto(&format!("{}/ui", server.url)).unwrap();

    // A wrong token: the 401 and the server's own message.
    log_in(&browser, "not-a-token");
    let refused = browser
        .wait_text(
            "the 401 of a wrong token",
            STEP,
            "#login-error",
            "t.startsWith('401')",
        )
        .unwrap();
    assert!(refused.contains("Unauthorized"), "{refused}");
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
        wait_member_field(&browser, member, "ready", "t === 'Ready'");
        assert_eq!(
            text_of(
                &browser,
                &format!("#members tr[data-cluster=\"{member}\"] [data-field=\"mode\"]")
            ),
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
    browser.click("button[data-whatif=\"member2\"]").unwrap();
    let moved = browser
        .wait_text(
            "the predicted move off member2",
            STEP,
            &format!("#whatif-result [data-move=\"{NGINX}\"]"),
            "true",
        )
        .unwrap();
    assert!(moved.contains("member1:1 member2:2 → member1:3"), "{moved}");
    browser.screenshot(&out.join("before.png")).unwrap();

    // member1's agent dies: Unknown, then the NoExecute taint, then the replicas on member2,
    // then the history entry, all without a reload.
    member1.process.kill();
    wait_member_field(&browser, "member1", "ready", "t === 'Unknown'");
    wait_member_field(
        &browser,
        "member1",
        "taints",
        "t.includes('cluster.karmada.io/unreachable:NoExecute')",
    );
    wait_cell(&browser, "member2", "3");
    assert_eq!(
        placement_of(&api, RB),
        Some(vec![("member2".to_string(), 3)]),
        "the page shows what the API has"
    );
    browser
        .click(&format!("[data-open-binding=\"{NGINX}\"]"))
        .unwrap();
    let history_entry = "#binding-detail [data-history-entry][data-from-cluster=\"member1\"]";
    let entry = browser
        .wait_text(
            "the failover history entry from member1",
            STEP,
            history_entry,
            "true",
        )
        .unwrap();
    assert!(entry.contains("ClusterFailover"), "{entry}");
    // The chain and explain: member1 is filtered now (not Ready, tainted).
    browser
        .wait_text(
            "explain's answer for member1",
            STEP,
            "#binding-detail tr[data-explain=\"member1\"]",
            "t.includes('filtered')",
        )
        .unwrap();

    // The old copy's end (member2's copy Healthy) reaches the timeline live as well.
    browser
        .wait_text(
            "the history entry's old copy gone",
            STEP,
            history_entry,
            "t.includes('old copy gone')",
        )
        .unwrap();
    // member1's Work waits for its member, marked for deletion, and the chain says so.
    let member1_work = "#binding-detail .chain [data-work=\"member1\"]";
    browser
        .wait_text(
            "member1's Work being deleted",
            STEP,
            member1_work,
            "t.includes('(being deleted)')",
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

    // member1 returns: its copy goes, then its Work, and the open binding's chain drops it
    // though the binding itself does not change (the page asks for its Works on every poll).
    let _member1 = pull_agent(&server, "member1", data.path());
    wait_member_field(&browser, "member1", "ready", "t === 'Ready'");
    browser
        .wait_for(
            "member1's Work gone from the chain",
            STEP,
            &format!(
                "return document.querySelector('#binding-detail .chain') !== null \
                 && document.querySelector('{member1_work}') === null;"
            ),
        )
        .unwrap();
    assert!(flotilla_tests::works_on(&api, "member1").is_empty());

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
            .wait_text(
                status,
                STEP,
                "#login-error",
                &format!("t.startsWith('{status}')"),
            )
            .unwrap();
        assert!(shown.contains(message), "{shown}");
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

/// Waits until the page's feed status says the events feed is `state` (`live`, `paused`).
fn wait_events_feed(browser: &Browser, state: &str) {
    browser
        .wait_text(
            &format!("the events feed {state}"),
            STEP,
            "#feed-status",
            &format!("t.includes('events: {state}')"),
        )
        .unwrap();
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

/// Writes an Event with `reason` about ConfigMap default/cfg, as a user's tools would.
fn post_event(api: &ApiClient, reason: &str) {
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": reason.to_lowercase(), "namespace": "default"},
        "involvedObject": {"kind": "ConfigMap", "namespace": "default", "name": "cfg"},
        "reason": reason, "message": "written while the page was not looking",
        "type": "Normal"
    });
    let (code, body) = api
        .send("POST", "/api/v1/namespaces/default/events", Some(&event))
        .unwrap();
    assert_eq!(code, 201, "{body}");
}

#[test]
fn a_hidden_tab_holds_no_watch_and_catches_up_when_shown() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--plain-http"]).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    post_event(&api, "BeforeTheLogin");
    let browser = Browser::start(&[]).unwrap();
    browser.goto(&format!("{}/ui", server.url)).unwrap();
    log_in(&browser, &server.token);
    browser
        .wait_for(
            "the three watches open",
            STEP,
            "return window.__flotillaUi.watchesOpen === 3;",
        )
        .unwrap();
    let page = browser.window().unwrap();

    // Another tab in front: the page is hidden and ends its watches; an Event comes meanwhile.
    let other = browser.new_tab().unwrap();
    browser.switch_to(&other).unwrap();
    post_event(&api, "WhileHidden");
    // (The hidden page's watches end on its visibilitychange, at once; a second lets a page
    // that kept or reopened one do so before it is looked at.)
    std::thread::sleep(Duration::from_secs(1));
    browser.switch_to(&page).unwrap();
    let seen = browser
        .wait_for(
            "the page shown again",
            STEP,
            "const u = window.__flotillaUi; \
             return !document.hidden && u.watchesOpenWhenShown !== null ? u : null;",
        )
        .unwrap();
    assert!(seen["hiddenCount"].as_u64().unwrap() >= 1, "{seen}");
    assert_eq!(
        seen["watchesOpenWhenShown"], 0,
        "watches held while hidden: {seen}"
    );
    assert_eq!(
        seen["watchesOpenedHidden"], 0,
        "watches opened while hidden: {seen}"
    );
    // Shown again, it resumes from its resourceVersion and shows what came meanwhile.
    browser
        .wait_for(
            "the Event written while hidden",
            STEP,
            "return document.querySelector('#events [data-event][data-reason=\"WhileHidden\"]') !== null;",
        )
        .unwrap();
    browser
        .wait_for(
            "the three watches open again",
            STEP,
            "return window.__flotillaUi.watchesOpen === 3;",
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
    let post_event = |i: usize| post_event(&api, &format!("WhilePaused{i}"));
    post_event(0);
    let browser = Browser::start(&[]).unwrap();
    browser.goto(&format!("{}/ui", server.url)).unwrap();
    log_in(&browser, &server.token);
    wait_events_feed(&browser, "live");

    // Paused, the page holds no watch; meanwhile 60 Events are written.
    set_paused(&browser, true);
    wait_events_feed(&browser, "paused");
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
    wait_events_feed(&browser, "live");
}

#[test]
fn a_token_refused_mid_session_brings_the_login_back_with_the_reason() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("server");
    let mut server = Server::start(&dir, &["--plain-http"]).unwrap();
    let browser = Browser::start(&[]).unwrap();
    browser.goto(&format!("{}/ui", server.url)).unwrap();
    log_in(&browser, &server.token);
    wait_events_feed(&browser, "live");

    // The server comes back on its address with another admin token: the page's next call
    // (a watch resuming, or the 5 s poll) is refused, and the page says so at its login.
    let addr = server.listen_addr().to_string();
    server.process.kill();
    std::fs::write(dir.join("admin.token"), "a-rotated-admin-token\n").unwrap();
    let server = Server::start_on(&dir, &addr, &["--plain-http"]).unwrap();
    assert_eq!(server.token, "a-rotated-admin-token");
    let said = browser
        .wait_text(
            "the login again, with the 401",
            STEP,
            "#login-error",
            "t.startsWith('401 Unauthorized') && !document.querySelector('#login').hidden",
        )
        .unwrap();
    assert!(said.contains("log in again"), "{said}");
    assert!(
        !text_of(&browser, "#app[hidden]").is_null(),
        "the fleet is hidden once the token is refused"
    );
    // The new token works in the same page.
    log_in(&browser, &server.token);
    wait_events_feed(&browser, "live");
}

#[test]
fn an_unhealthy_application_shows_when_it_will_move() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(
        data.path(),
        &[
            "--plain-http",
            "--sim-members",
            "3",
            "--sim-pod-startup-delay-ms",
            "100",
        ],
    )
    .unwrap();
    let api = ApiClient::admin(&server).unwrap();
    wait_members_ready(&api, 3);
    // Scenario 03 as the guide has it: the application moves after 120 s Unhealthy.
    post_manifests(&api, &scenario_text("03-application-failover.yaml"));
    let first = eventually(
        "nginx Healthy on one member",
        STEP,
        || match placement_of(&api, RB)?.as_slice() {
            [(name, 2)] if healthy_on(&api, RB, name) => Some(name.clone()),
            _ => None,
        },
    );
    let browser = Browser::start(&[]).unwrap();
    browser.goto(&format!("{}/ui", server.url)).unwrap();
    log_in(&browser, &server.token);
    wait_cell(&browser, &first, "2");
    browser
        .click(&format!("[data-open-binding=\"{NGINX}\"]"))
        .unwrap();

    // The application fails on its member; the member itself stays Ready.
    flotilla_tests::sim_fault(&server, &first, "cordon", &json!({"enabled": true}));
    flotilla_tests::sim_fault(
        &server,
        &first,
        "delete-pods",
        &json!({"namespace": "default", "labelSelector": "app=nginx"}),
    );
    let shown = browser
        .wait_text(
            "the application failover's countdown",
            STEP,
            &format!("#binding-detail [data-app-failover=\"{first}\"]"),
            "t.includes('application failover at')",
        )
        .unwrap();
    // "Unhealthy on <member> since <t>: application failover at <t + 120 s> (in …)", with the
    // time the server's explain gives.
    let path = RB.replace("/nginx-deployment", "/nginx-deployment/explain");
    let since = api.get(&path).unwrap()["failover"]["unhealthySince"][first.as_str()]
        .as_str()
        .unwrap()
        .to_string();
    let since_at = chrono::DateTime::parse_from_rfc3339(&since).unwrap();
    let due = (since_at + chrono::Duration::seconds(120))
        .with_timezone(&chrono::Utc)
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    assert!(
        shown.contains(&format!("since {since}")),
        "{shown} / {since}"
    );
    assert!(
        shown.contains(&format!("application failover at {due} (in ")),
        "{shown} / due {due}"
    );
    assert_eq!(
        placement_of(&api, RB),
        Some(vec![(first, 2)]),
        "not moved yet"
    );
}
