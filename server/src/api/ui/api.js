// @ts-check
// The page's side of the API: the bearer token (kept in the tab's sessionStorage), calls that
// turn a refusal into an ApiError with the server's own message, the few reads and the dry-run
// the page asks for, and the live feeds: list in pages, then watch from the list's
// resourceVersion, as fetch streams of one JSON event per line (EventSource cannot send a
// bearer header). The types of the objects the API answers are declared here.

import { ui } from "./hooks.js";

/**
 * @typedef {object} ObjectMeta
 * @property {string} [name]
 * @property {string} [namespace]
 * @property {string} [resourceVersion]
 * @property {string} [creationTimestamp]
 * @property {string} [deletionTimestamp]
 * @property {Record<string, string>} [labels]
 * @property {Record<string, string>} [annotations]
 */
/**
 * @typedef {object} Condition
 * @property {string} type
 * @property {string} status True, False or Unknown
 * @property {string} [reason]
 * @property {string} [message]
 * @property {string} [lastTransitionTime]
 * @property {string} [lastHeartbeatTime]
 */
/**
 * @typedef {object} KubeObject Any object the API answers with.
 * @property {string} [apiVersion]
 * @property {string} [kind]
 * @property {ObjectMeta} metadata
 * @property {{ conditions?: Condition[] }} [status]
 */
/**
 * @typedef {object} Taint
 * @property {string} key
 * @property {string} [value]
 * @property {string} effect NoSchedule or NoExecute
 * @property {string} [timeAdded]
 */
/**
 * @typedef {object} ClusterSpec
 * @property {string} [syncMode] Push or Pull
 * @property {string} [region]
 * @property {Taint[]} [taints]
 */
/** @typedef {KubeObject & { spec: ClusterSpec }} Cluster A member. */
/**
 * @typedef {object} TargetCluster
 * @property {string} name
 * @property {number} [replicas]
 */
/**
 * @typedef {object} EvictionTask One of a binding's `gracefulEvictionTasks`.
 * @property {string} fromCluster
 * @property {string} reason
 * @property {string} [producer]
 * @property {string} [purgeMode]
 * @property {string} [creationTimestamp]
 * @property {number} [gracePeriodSeconds]
 */
/**
 * @typedef {object} Toleration
 * @property {string} [key]
 * @property {string} [operator]
 * @property {string} [effect]
 * @property {number} [tolerationSeconds]
 */
/**
 * @typedef {object} AggregatedStatusItem
 * @property {string} clusterName
 * @property {string} [health]
 * @property {boolean} [applied]
 */
/**
 * @typedef {object} FailoverHistoryEntry
 * @property {string} reason
 * @property {string} fromCluster
 * @property {string} [evictionReason]
 * @property {string[]} [targetCluster]
 * @property {string} [message]
 * @property {string} [oldCopyGoneReason]
 * @property {string} [failoverTime]
 * @property {string} [rescheduledTime]
 * @property {string} [healthyTime]
 * @property {string} [oldCopyGoneTime]
 * @property {string} [failedBackTime]
 */
/**
 * @typedef {object} BindingSpec
 * @property {{ kind?: string, namespace?: string, name?: string }} [resource]
 * @property {number} [replicas]
 * @property {TargetCluster[]} [clusters]
 * @property {EvictionTask[]} [gracefulEvictionTasks]
 * @property {{ clusterTolerations?: Toleration[] }} [placement]
 * @property {{ application?: { decisionConditions?: { tolerationSeconds?: number } } }} [failover]
 */
/**
 * @typedef {object} BindingStatus
 * @property {Condition[]} [conditions]
 * @property {AggregatedStatusItem[]} [aggregatedStatus]
 * @property {FailoverHistoryEntry[]} [failoverHistory]
 */
/** @typedef {KubeObject & { spec?: BindingSpec, status?: BindingStatus }} Binding A ResourceBinding. */
/**
 * @typedef {KubeObject & {
 *   involvedObject?: { kind?: string, namespace?: string, name?: string },
 *   reason?: string, message?: string, type?: string, count?: number,
 *   lastTimestamp?: string, eventTime?: string, firstTimestamp?: string,
 * }} KubeEvent An Event.
 */
/**
 * @typedef {object} BrakeStatus
 * @property {string} [region]
 * @property {string} [state] Normal, PartialDisruption, FullDisruption, ...
 * @property {string} [rate]
 * @property {string} [message]
 * @property {Array<{ cluster?: string, name?: string } | string>} [queuedClusters]
 * @property {number} [heldEvictions]
 */
/** @typedef {KubeObject & { status?: BrakeStatus }} EvictionBrake */
/** @typedef {KubeObject & { spec: { renewTime?: string } }} Lease A member's lease. */
/** @typedef {KubeObject} Work */
/**
 * @typedef {object} ExplainCluster
 * @property {string} name
 * @property {boolean} selected
 * @property {string} [filter]
 * @property {string} [reason]
 * @property {string} [summary]
 */
/**
 * @typedef {object} Explain A binding's `explain` answer.
 * @property {{ status?: string, reason?: string, message?: string }} [result]
 * @property {ExplainCluster[]} [clusters]
 * @property {{ blocked?: Array<{ cluster: string, until: string }>,
 *   unhealthySince?: Record<string, string> }} [failover]
 */
/**
 * @typedef {object} SimulationStatus A FailoverSimulation's answer.
 * @property {{ affected?: number, bindings?: number, evictions?: number, delayed?: number,
 *   held?: number, unplaceable?: number }} [summary]
 * @property {{ clusters?: Array<{ cluster: string, ready: string, notReadyAfterSeconds: number,
 *   noExecuteAfterSeconds?: number | null }> }} [timeline]
 * @property {Array<{ namespace?: string, name: string, clustersBefore?: TargetCluster[],
 *   clustersAfter?: TargetCluster[],
 *   evictions?: Array<{ cluster: string, afterSeconds: number, brake?: boolean, oldCopy?: { fate?: string } }>,
 *   held?: Array<{ cluster: string, reason?: string, message?: string }> }>} [bindings]
 * @property {Array<{ namespace?: string, name: string, reason: string, message: string,
 *   keeps?: string[] }>} [unplaceable]
 * @property {{ message?: string, regions?: Array<{ region: string, state: string, rate: string,
 *   delayedEvictions?: number }> }} [brake]
 */
/** @typedef {KubeObject & { status?: SimulationStatus }} FailoverSimulation */
/**
 * @typedef {object} List A list's answer.
 * @property {{ resourceVersion?: string, continue?: string, remainingItemCount?: number }} [metadata]
 * @property {KubeObject[]} [items]
 */
/**
 * @typedef {{ type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR",
 *   object: KubeObject & { code?: number, message?: string } }} WatchEvent One line of a watch.
 */
/**
 * @typedef {WatchEvent | { type: "RESET", items: KubeObject[], object?: undefined }
 *   | { type: "PAGE", items: KubeObject[], object?: undefined }} FeedEvent
 *   What a feed hands its `apply`: a watch event, or a list's objects (RESET replaces what
 *   was there, PAGE adds to it).
 */

/** Where the page reads. */
export const API = {
  clusters: "/apis/cluster.karmada.io/v1alpha1/clusters",
  bindings: "/apis/work.karmada.io/v1alpha2/resourcebindings",
  events: "/api/v1/events",
  brakes: "/apis/flotilla.io/v1alpha1/evictionbrakes",
  leases: "/apis/coordination.k8s.io/v1/namespaces/karmada-cluster/leases",
  works: "/apis/work.karmada.io/v1alpha1/works",
  simulations: "/apis/flotilla.io/v1alpha1/failoversimulations",
};
// A list's first page is small, to draw at once; the rest come in larger pages.
const FIRST_PAGE = 500, LIST_PAGE = 2500;
/** @type {Record<number, string>} */
const STATUS_TEXT = { 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 410: "Gone", 422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable" };

// ---- the token ----
const TOKEN_KEY = "flotilla.token";
let token = sessionStorage.getItem(TOKEN_KEY) || "";
/** @returns {string} the token the page calls with, "" when none */
export function currentToken() { return token; }
/** @param {string} t the token to call with from now on ("" for none) */
export function useToken(t) { token = t; }
/** Keeps the current token for this tab (sessionStorage: gone when the tab closes). */
export function keepToken() { sessionStorage.setItem(TOKEN_KEY, token); }
/** Forgets the token, here and in the tab's storage. */
export function forgetToken() { sessionStorage.removeItem(TOKEN_KEY); token = ""; }

// ---- calls ----
/** A refusal: the status code and the server's own message. */
export class ApiError extends Error {
  /**
   * @param {number} code
   * @param {string} message
   */
  constructor(code, message) { super(message); this.code = code; }
  /** @returns {string} e.g. `401 Unauthorized: the token is not valid` */
  describe() { return this.code + " " + (STATUS_TEXT[this.code] || "") + ": " + this.message; }
}
/**
 * What a failed call says, for people.
 * @param {unknown} e
 * @returns {string}
 */
export function describe(e) { return e instanceof ApiError ? e.describe() : /** @type {Error} */ (e).message; }

/**
 * One call with the token; a refusal throws an ApiError.
 * @param {string} path
 * @param {RequestInit & { headers?: Record<string, string> }} [options]
 * @returns {Promise<Response>}
 */
export async function call(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + token, Accept: "application/json" }, options.headers || {});
  const res = await fetch(path, Object.assign({}, options, { headers }));
  if (!res.ok) {
    let message = res.statusText || "";
    try { const s = await res.json(); if (s && s.message) message = s.message; } catch (_) { /* not a Status */ }
    throw new ApiError(res.status, message);
  }
  return res;
}
/**
 * @param {string} path
 * @returns {Promise<any>} the answer's JSON
 */
export async function getJson(path) { return (await call(path)).json(); }

/** Checks the token with one cheap authenticated GET: a single Cluster. */
export async function checkToken() { await getJson(API.clusters + "?limit=1"); }
/** @returns {Promise<EvictionBrake[]>} every region's eviction brake */
export async function listBrakes() { return (await getJson(API.brakes)).items || []; }
/** @returns {Promise<Lease[]>} the member leases */
export async function listLeases() { return (await getJson(API.leases)).items || []; }
/**
 * A binding's `explain`.
 * @param {string} namespace
 * @param {string} name
 * @returns {Promise<Explain>}
 */
export async function explain(namespace, name) {
  return getJson(API.bindings.replace("/resourcebindings", "/namespaces/" + encodeURIComponent(namespace) + "/resourcebindings/" + encodeURIComponent(name) + "/explain"));
}
/**
 * The Works of the binding with permanent id `id`.
 * @param {string} id
 * @returns {Promise<Work[]>}
 */
export async function worksOf(id) {
  return (await getJson(API.works + "?labelSelector=" + encodeURIComponent("resourcebinding.karmada.io/permanent-id=" + id))).items || [];
}
/**
 * The failover dry-run: what would happen if `cluster` failed now (it writes nothing).
 * @param {string} cluster
 * @returns {Promise<FailoverSimulation>}
 */
export async function simulateFailure(cluster) {
  const res = await call(API.simulations, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ apiVersion: "flotilla.io/v1alpha1", kind: "FailoverSimulation", metadata: { name: "ui-" + cluster }, spec: { failedClusters: [cluster] } }),
  });
  return res.json();
}

/**
 * @param {number} ms
 * @returns {Promise<void>}
 */
function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

/**
 * @typedef {object} FeedHost What a feed asks of the page.
 * @property {() => boolean} held whether live updates are held (the tab hidden or paused)
 * @property {() => void} changed something to draw: the feed's data or its status
 * @property {(e: ApiError) => void} refused the token was refused (401): every feed stops
 */

// ---- live data: list, then watch from the list's resourceVersion ----
export class Feed {
  /**
   * @param {string} name shown in the feed status
   * @param {string} path the list's path
   * @param {(ev: FeedEvent) => void} apply takes the feed's objects and events
   * @param {string} listQuery one page of this query instead of the pages ("" for pages)
   * @param {FeedHost} host
   */
  constructor(name, path, apply, listQuery, host) {
    this.name = name; this.path = path; this.apply = apply; this.listQuery = listQuery || ""; this.host = host;
    /** @type {string | null} */
    this.rv = null;
    /** @type {AbortController | null} */
    this.abort = null;
    this.stopped = false; this.delay = 500; this.status = "starting";
    /** @type {number | null} */
    this.firstPageAt = null;
    this.listedOnce = false;
  }
  stop() { this.stopped = true; if (this.abort) this.abort.abort(); }
  pause() { if (this.abort) this.abort.abort(); }
  async run() {
    while (!this.stopped) {
      if (this.host.held()) { this.status = "paused"; await sleep(500); continue; }
      try {
        if (this.rv === null) await this.list();
        await this.watch();
        this.delay = 500;
      } catch (err) {
        const e = /** @type {Error} */ (err);
        if (this.stopped) return;
        if (e instanceof ApiError && e.code === 401) { this.host.refused(e); return; }
        if (e instanceof ApiError && e.code === 410) { this.rv = null; ui.relists += 1; continue; }
        if (e.name === "AbortError") continue;
        this.status = "retrying: " + describe(e);
        this.host.changed();
        // Exponential back-off with jitter, at most 30 s.
        await sleep(this.delay * (0.5 + Math.random()));
        this.delay = Math.min(this.delay * 2, 30000);
      }
    }
  }
  // Lists in pages, FIRST_PAGE then LIST_PAGE objects (one page of `listQuery` when given). The first listing shows
  // each page as it arrives, so a large fleet draws its first rows at once; a relist (after a
  // 410) swaps the whole new list in at the end, so nothing flickers. The watch starts from the
  // first page's resourceVersion: the later pages are read later, and the watch replays
  // whatever changed meanwhile, in order.
  async list() {
    this.status = "listing";
    const progressive = this.rv === null && !this.listedOnce;
    /** @type {KubeObject[]} */
    const items = [];
    let cont = "";
    /** @type {string | null} */
    let rv = null;
    do {
      const query = this.listQuery || (cont ? "limit=" + LIST_PAGE + "&continue=" + encodeURIComponent(cont) : "limit=" + FIRST_PAGE);
      /** @type {List} */
      const body = await getJson(this.path + "?" + query);
      const meta = body.metadata || {};
      if (rv === null) rv = meta.resourceVersion || "0";
      const page = body.items || [];
      if (progressive) {
        this.apply({ type: items.length ? "PAGE" : "RESET", items: page });
        if (this.firstPageAt === null) this.firstPageAt = performance.now();
        this.status = "listing (" + (items.length + page.length) + (meta.remainingItemCount ? " of " + (items.length + page.length + meta.remainingItemCount) : "") + ")";
        this.host.changed();
      }
      for (const o of page) items.push(o);
      cont = this.listQuery ? "" : (meta.continue || "");
    } while (cont && !this.stopped);
    if (!progressive) this.apply({ type: "RESET", items });
    this.rv = rv;
    this.listedOnce = true;
    this.host.changed();
  }
  async watch() {
    // A list that ended after the tab was hidden does not open a watch: the loop pauses first.
    if (this.host.held()) return;
    this.abort = new AbortController();
    const url = this.path + "?watch=true&allowWatchBookmarks=true&timeoutSeconds=300&resourceVersion=" + encodeURIComponent(String(this.rv));
    const res = await call(url, { signal: this.abort.signal });
    ui.watchesOpen += 1;
    if (document.hidden) ui.watchesOpenedHidden += 1;
    try {
      this.status = "live";
      this.host.changed();
      const reader = /** @type {ReadableStream<Uint8Array>} */ (res.body).getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let nl;
        while ((nl = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, nl).trim();
          buffer = buffer.slice(nl + 1);
          if (line) this.event(JSON.parse(line));
        }
      }
    } finally {
      ui.watchesOpen -= 1;
    }
  }
  /** @param {WatchEvent} ev */
  event(ev) {
    if (ev.type === "ERROR") {
      const s = ev.object || {};
      throw new ApiError(s.code || 500, s.message || "watch error");
    }
    const rv = ((ev.object || {}).metadata || {}).resourceVersion;
    if (rv) this.rv = rv;
    if (ev.type !== "BOOKMARK") { this.apply(ev); this.host.changed(); }
  }
}
