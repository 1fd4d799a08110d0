// @ts-check
// The fleet page (docs/ui.md). Everything it shows comes from the server's API, read with the
// user's bearer token: three watches (clusters, resourcebindings, events), a poll of the
// eviction brakes and the member leases every 5 s, an open binding's explain and Works when it
// changes and every 5 s, and on demand the failover dry-run (api.js). This module wires the
// page: the login, the feeds and polls, the redraw at most once per animation frame of the
// parts whose markup changed (the views are pure functions of the state), and the controls.

import * as api from "./api.js";
import { brakesView } from "./brakes.js";
import { bindingView } from "./binding.js";
import { eventsView } from "./events.js";
import { keyOf, pagerMarkup } from "./format.js";
import { ui } from "./hooks.js";
import { matrixView } from "./matrix.js";
import { membersView } from "./members.js";
import { applyBinding, applyCluster, applyEvent, MAX_EVENTS, resetFeeds, state } from "./state.js";
import { whatIfAsking, whatIfView } from "./whatif.js";

/** @typedef {import("./api.js").FeedEvent} FeedEvent */

/**
 * @param {string} id
 * @returns {HTMLElement}
 */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
/**
 * @param {string} id
 * @returns {HTMLInputElement}
 */
const input = (id) => /** @type {HTMLInputElement} */ (document.getElementById(id));

/** @type {api.Feed[]} */
let feeds = [];
/** @type {number[]} */
let polls = [];
let dirty = false;

// ---- login ----
/** @param {string} token */
async function login(token) {
  api.useToken(token.trim());
  $("login-error").textContent = "";
  try {
    await api.checkToken();
  } catch (e) {
    $("login-error").textContent = e instanceof api.ApiError ? e.describe() : "the server could not be reached: " + /** @type {Error} */ (e).message;
    api.useToken("");
    return;
  }
  api.keepToken();
  $("login").hidden = true; $("app").hidden = false; $("logout-button").hidden = false;
  start();
}
/** @param {string} message why, shown at the login ("" for none) */
function logout(message) {
  stop();
  api.forgetToken();
  $("app").hidden = true; $("login").hidden = false; $("logout-button").hidden = true;
  $("login-error").textContent = message || "";
}
/** @param {api.ApiError} e a 401 */
function refused(e) { logout(e.describe() + " (log in again)"); }

// ---- live data ----
/** Whether live updates are held: a hidden tab holds no connection, nor a paused page. */
function held() { return document.hidden || state.paused; }
/** @type {api.FeedHost} */
const host = { held, changed: schedule, refused };
/** @param {FeedEvent} ev */
function bindingEvent(ev) {
  applyBinding(ev);
  if (ev.object && state.open === keyOf(ev.object)) refreshOpen(false);
}
function start() {
  stop();
  resetFeeds();
  feeds = [
    new api.Feed("clusters", api.API.clusters, applyCluster, "", host),
    new api.Feed("bindings", api.API.bindings, bindingEvent, "", host),
    new api.Feed("events", api.API.events, applyEvent, "limit=" + MAX_EVENTS, host),
  ];
  for (const f of feeds) f.run();
  poll();
  polls.push(setInterval(poll, 5000));
  // Ages and countdowns move every second.
  polls.push(setInterval(schedule, 1000));
}
function stop() {
  for (const f of feeds) f.stop();
  for (const p of polls) clearInterval(p);
  feeds = []; polls = [];
}
async function poll() {
  if (held() || !api.currentToken()) return;
  try {
    state.brakes = await api.listBrakes();
    const leases = await api.listLeases();
    state.leases = new Map(leases.map((l) => [String(l.metadata.name), l]));
    // The Works are not watched: an open binding's are asked again here, so a Work deleted
    // after the binding's last change (the old copy, once gone) leaves the chain.
    if (state.open) refreshOpen(true);
    schedule();
  } catch (e) {
    if (e instanceof api.ApiError && e.code === 401) refused(e);
  }
}
document.addEventListener("visibilitychange", () => {
  // A hidden tab holds no connection: the watches end and resume from their resourceVersion.
  if (document.hidden) {
    ui.hiddenCount += 1;
    for (const f of feeds) f.pause();
  } else {
    ui.watchesOpenWhenShown = ui.watchesOpen;
    poll(); schedule();
  }
});

// ---- one binding ----
/** @param {string} key */
function openBinding(key) {
  state.open = key; state.openExtra = null;
  refreshOpen(true);
  schedule();
}
/** @type {number | undefined} */
let refreshTimer;
/** @param {boolean} now at once, or within a second */
function refreshOpen(now) {
  // explain and the Works are asked again when the binding changes (at most once a second) and
  // on every poll.
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(fetchOpen, now ? 0 : 1000);
}
async function fetchOpen() {
  const key = state.open;
  const b = key && state.bindings.get(key);
  if (!b) return;
  /** @type {import("./state.js").OpenExtra} */
  const extra = { explain: null, works: [], error: null };
  try {
    extra.explain = await api.explain(String(b.metadata.namespace), String(b.metadata.name));
    const id = (b.metadata.labels || {})["resourcebinding.karmada.io/permanent-id"];
    if (id) extra.works = await api.worksOf(id);
  } catch (e) {
    extra.error = api.describe(e);
  }
  if (state.open === key) { state.openExtra = extra; schedule(); }
}

// ---- what if this member fails? ----
/** @param {string} cluster */
async function whatIf(cluster) {
  html("whatif-result", whatIfAsking(cluster));
  try {
    state.whatif = { cluster, answer: await api.simulateFailure(cluster) };
  } catch (e) {
    state.whatif = { cluster, error: api.describe(e) };
  }
  lastHtml.delete("whatif-result");
  const shown = whatIfView(state);
  if (shown !== null) html("whatif-result", shown);
}

// ---- rendering: at most once per animation frame ----
function schedule() {
  if (dirty) return;
  dirty = true;
  requestAnimationFrame(render);
}
// Replaces an element's content only when it changed, so an unchanged view costs no layout.
/** @type {Map<string, string>} */
const lastHtml = new Map();
/**
 * @param {string} id
 * @param {string} text markup
 */
function html(id, text) {
  if (lastHtml.get(id) === text) return;
  lastHtml.set(id, text);
  $(id).innerHTML = text;
}
/**
 * The pages each pager showed when last drawn, for its buttons.
 * @type {Record<string, { current: number, pages: number, go: (page: number) => void }>}
 */
const pagers = {
  "members-pager": { current: 0, pages: 0, go: (p) => { state.membersPage = p; schedule(); } },
  "matrix-pager": { current: 0, pages: 0, go: (p) => { state.matrixPage = p; schedule(); } },
};
/**
 * @param {string} id
 * @param {number} pages
 * @param {number} current
 */
function drawPager(id, pages, current) {
  pagers[id].current = current; pagers[id].pages = pages;
  html(id, pagerMarkup(pages, current));
}
function render() {
  dirty = false;
  if ($("app").hidden) return;
  const began = performance.now();
  const now = Date.now();
  $("feed-status").textContent = feeds.map((f) => f.name + ": " + f.status).join(" · ");
  html("brake-banner", brakesView(state));

  const members = membersView(state, now);
  $("members-summary").textContent = members.summary;
  state.membersPage = members.page;
  drawPager("members-pager", members.pages, members.page);
  for (const { name, ready, taints } of members.drawn) {
    const seen = ui.shown[name];
    if (!seen || seen.ready !== ready || seen.taints !== taints) ui.shown[name] = { ready, taints, at: Date.now() };
  }
  html("members", members.table);

  const matrix = matrixView(state, { filter: input("binding-filter").value.trim().toLowerCase(), problems: input("problems-only").checked });
  state.matrixPage = matrix.page;
  drawPager("matrix-pager", matrix.pages, matrix.page);
  $("matrix-summary").textContent = matrix.summary;
  html("matrix", matrix.table);

  const detail = bindingView(state, now);
  if (detail !== null) html("binding-detail", detail);

  const events = eventsView(state, input("event-filter").value.trim().toLowerCase());
  $("events-summary").textContent = events.summary;
  html("events", events.table);

  ui.renders += 1;
  ui.lastRenderAt = performance.now();
  ui.longestRenderMs = Math.max(ui.longestRenderMs, ui.lastRenderAt - began);
  // The first render: every feed's first page drawn; listed: every feed's whole list in.
  if (ui.firstRenderAt === null && feeds.every((f) => f.firstPageAt !== null || f.rv !== null)) ui.firstRenderAt = ui.lastRenderAt;
  if (ui.listedAt === null && feeds.every((f) => f.rv !== null)) ui.listedAt = ui.lastRenderAt;
}

// ---- wiring ----
$("login-button").addEventListener("click", () => login(input("token").value));
input("token").addEventListener("keydown", (e) => { if (e.key === "Enter") login(input("token").value); });
$("logout-button").addEventListener("click", () => logout(""));
input("pause-live").addEventListener("change", (e) => {
  state.paused = /** @type {HTMLInputElement} */ (e.target).checked;
  for (const f of feeds) if (state.paused) f.pause();
});
for (const id of ["binding-filter", "problems-only", "event-filter"]) $(id).addEventListener("input", () => { state.matrixPage = 0; schedule(); });
for (const id of Object.keys(pagers)) {
  $(id).addEventListener("click", (e) => {
    const p = /** @type {HTMLElement} */ (e.target).dataset.page;
    const { current, pages, go } = pagers[id];
    if (p === "prev" && current > 0) go(current - 1);
    if (p === "next" && current < pages - 1) go(current + 1);
  });
}
document.addEventListener("click", (e) => {
  const t = /** @type {HTMLElement} */ (e.target);
  if (t.dataset && t.dataset.openBinding) openBinding(t.dataset.openBinding);
  if (t.dataset && t.dataset.whatif) whatIf(t.dataset.whatif);
});
if (api.currentToken()) login(api.currentToken());
