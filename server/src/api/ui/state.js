// @ts-check
// The page's state and its updates: what the feeds and polls brought (clusters, bindings,
// Events, brakes, leases), what the user opened or asked (a binding, a what-if, the pages
// shown), and the questions the views ask of it. Nothing here draws or calls the API.

import { condition, keyOf, ms } from "./format.js";

/** @typedef {import("./api.js").Binding} Binding */
/** @typedef {import("./api.js").Cluster} Cluster */
/** @typedef {import("./api.js").EvictionBrake} EvictionBrake */
/** @typedef {import("./api.js").EvictionTask} EvictionTask */
/** @typedef {import("./api.js").Explain} Explain */
/** @typedef {import("./api.js").FailoverSimulation} FailoverSimulation */
/** @typedef {import("./api.js").FeedEvent} FeedEvent */
/** @typedef {import("./api.js").KubeEvent} KubeEvent */
/** @typedef {import("./api.js").KubeObject} KubeObject */
/** @typedef {import("./api.js").Lease} Lease */
/** @typedef {import("./api.js").Work} Work */

/**
 * @typedef {object} OpenExtra What the page asked about the open binding.
 * @property {Explain | null} explain
 * @property {Work[]} works
 * @property {string | null} error why it could not be asked
 */
/**
 * @typedef {object} WhatIf The failover dry-run's answer for one member.
 * @property {string} cluster
 * @property {FailoverSimulation} [answer]
 * @property {string} [error]
 */
/**
 * @typedef {object} State
 * @property {Map<string, Cluster>} clusters by name
 * @property {Map<string, Binding>} bindings by namespace/name
 * @property {KubeEvent[]} events newest first, at most MAX_EVENTS
 * @property {EvictionBrake[]} brakes
 * @property {Map<string, Lease>} leases by member name
 * @property {number} membersPage zero-based
 * @property {number} matrixPage zero-based
 * @property {string | null} open the open binding's key
 * @property {OpenExtra | null} openExtra
 * @property {WhatIf | null} whatif
 * @property {boolean} paused "pause live updates" is on
 * @property {string[] | null} bindingsSorted the bindings' keys in order, sorted again only
 *   when one is added or deleted (null: to sort)
 */

// How much the views draw: matrix rows a page, member rows a page, matrix columns, Events
// kept, Events shown.
export const PAGE_ROWS = 50, MEMBER_ROWS = 100, MAX_COLUMNS = 40, MAX_EVENTS = 1000, SHOWN_EVENTS = 200;

/** @type {State} */
export const state = {
  clusters: new Map(), bindings: new Map(), events: [], brakes: [], leases: new Map(),
  membersPage: 0, matrixPage: 0, open: null, openExtra: null,
  whatif: null, paused: false, bindingsSorted: null,
};

// ---- updates ----
/** Forgets every object the feeds brought, before they start again. */
export function resetFeeds() {
  state.clusters.clear(); state.bindings.clear(); state.events = []; state.bindingsSorted = null;
}
/**
 * Applies a feed's events to a map keyed by namespace/name; answers whether the set of keys
 * changed (an object added or deleted), not only an object.
 * @template {KubeObject} T
 * @param {Map<string, T>} map
 * @returns {(ev: FeedEvent) => boolean}
 */
function mapApply(map) {
  return (ev) => {
    if (ev.type === "RESET" || ev.type === "PAGE") {
      if (ev.type === "RESET") map.clear();
      for (const o of ev.items) map.set(keyOf(o), /** @type {T} */ (o));
      return true;
    }
    const k = keyOf(ev.object);
    if (ev.type === "DELETED") return map.delete(k);
    const added = !map.has(k);
    map.set(k, /** @type {T} */ (ev.object));
    return added;
  };
}
const clusterApply = mapApply(state.clusters);
const bindingApply = mapApply(state.bindings);
/** @param {FeedEvent} ev the clusters feed's */
export function applyCluster(ev) { clusterApply(ev); }
/** @param {FeedEvent} ev the bindings feed's */
export function applyBinding(ev) {
  if (bindingApply(ev)) state.bindingsSorted = null;
}
/**
 * @param {KubeEvent} e
 * @returns {number} when an Event last happened, in milliseconds (0 when it says nothing)
 */
function eventTime(e) { return ms(e.lastTimestamp || e.eventTime || e.firstTimestamp || (e.metadata || {}).creationTimestamp) || 0; }
/** @param {FeedEvent} ev the events feed's */
export function applyEvent(ev) {
  if (ev.type === "RESET") {
    state.events = /** @type {KubeEvent[]} */ (ev.items).slice().sort((a, b) => eventTime(b) - eventTime(a)).slice(0, MAX_EVENTS);
    return;
  }
  if (ev.type === "PAGE") return;
  const k = keyOf(ev.object);
  state.events = state.events.filter((e) => keyOf(e) !== k);
  if (ev.type !== "DELETED") state.events.unshift(ev.object);
  if (state.events.length > MAX_EVENTS) state.events.length = MAX_EVENTS;
}

// ---- questions the views ask ----
/** @returns {string[]} the bindings' keys, sorted */
export function sortedBindings() {
  if (state.bindingsSorted === null) state.bindingsSorted = [...state.bindings.keys()].sort();
  return state.bindingsSorted;
}
/**
 * @param {Binding} b
 * @returns {Map<string, number | undefined>} replicas by cluster
 */
export function placement(b) { return new Map(((b.spec || {}).clusters || []).map((t) => [t.name, t.replicas])); }
/**
 * @param {Binding} b
 * @returns {Map<string, string>} the health each cluster reports ("Unknown" when applied
 *   without one, "" when not applied)
 */
export function healthOf(b) { return new Map(((b.status || {}).aggregatedStatus || []).map((a) => [a.clusterName, a.health || (a.applied ? "Unknown" : "")])); }
/**
 * @param {Binding} b
 * @returns {EvictionTask[]}
 */
export function tasksOf(b) { return (b.spec || {}).gracefulEvictionTasks || []; }
/**
 * Whether a binding has something to look at: an eviction task, a health that is not
 * Healthy, a failed scheduling, or a cluster that is not Ready.
 * @param {State} s
 * @param {Binding} b
 * @returns {boolean}
 */
export function troubled(s, b) {
  if (tasksOf(b).length) return true;
  for (const h of healthOf(b).values()) if (h && h !== "Healthy") return true;
  const sc = condition(b, "Scheduled");
  if (sc && sc.status !== "True") return true;
  for (const name of placement(b).keys()) {
    const c = s.clusters.get(name);
    const r = c && condition(c, "Ready");
    if (!r || r.status !== "True") return true;
  }
  return false;
}
/**
 * The eviction brake of a region (a cluster without one is in "(none)").
 * @param {State} s
 * @param {string | undefined} region
 * @returns {EvictionBrake | undefined}
 */
export function brakeOf(s, region) {
  const want = region || "(none)";
  return s.brakes.find((b) => (b.status || {}).region === want);
}
/**
 * The members, the ones with something wrong (not Ready, or tainted) first, then by name.
 * @param {State} s
 * @returns {Cluster[]}
 */
export function memberRows(s) {
  /** @param {Cluster} c */
  const rank = (c) => { const r = condition(c, "Ready"); return r && r.status === "True" && !(c.spec.taints || []).length ? 1 : 0; };
  return [...s.clusters.values()].sort((a, b) => rank(a) - rank(b) || String(a.metadata.name).localeCompare(String(b.metadata.name)));
}
