// @ts-check
// Small pure helpers the views share: escaping, keys, times as people read them, conditions,
// and the pager's markup. Nothing here touches the page or the network; "now" is always given.

/** @typedef {import("./api.js").KubeObject} KubeObject */
/** @typedef {import("./api.js").Condition} Condition */

/**
 * Text made safe inside markup and attribute values.
 * @param {unknown} v
 * @returns {string}
 */
export function esc(v) {
  const map = /** @type {Record<string, string>} */ ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" });
  return String(v ?? "").replace(/[&<>"']/g, (c) => map[c]);
}

/**
 * An object's key: `namespace/name`, or `name` for a cluster-scoped object.
 * @param {KubeObject} o
 * @returns {string}
 */
export function keyOf(o) { const m = o.metadata || {}; return m.namespace ? m.namespace + "/" + m.name : /** @type {string} */ (m.name); }

/**
 * A timestamp in milliseconds, or null when `t` is not one.
 * @param {string | null | undefined} t
 * @returns {number | null}
 */
export function ms(t) { const v = Date.parse(String(t)); return Number.isNaN(v) ? null : v; }

/**
 * A duration as people read it: 45s, 3m20s, 2h5m, 1d4h.
 * @param {number} d milliseconds (its sign is ignored)
 * @returns {string}
 */
export function human(d) {
  const s = Math.round(Math.abs(d) / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60 ? (s % 60) + "s" : "");
  if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
}

/**
 * How long ago `t` was, "" when it is no time.
 * @param {string | null | undefined} t
 * @param {number} now Date.now()
 * @returns {string}
 */
export function ago(t, now) {
  const v = ms(t); if (v === null) return "";
  return human(now - v) + " ago";
}

/**
 * "in 1m5s" before a deadline, "20s ago" after it, "" without one.
 * @param {number | null} deadline
 * @param {number} now Date.now()
 * @returns {string}
 */
export function countdown(deadline, now) {
  if (deadline === null) return "";
  const d = deadline - now;
  return d > 0 ? "in " + human(d) : human(d) + " ago";
}

/**
 * A time in milliseconds as RFC 3339 (whole seconds without a fraction), "" for null.
 * @param {number | null} t
 * @returns {string}
 */
export function isoOf(t) { return t === null ? "" : new Date(t).toISOString().replace(".000Z", "Z"); }

/**
 * An object's status condition of `type`.
 * @param {KubeObject} obj
 * @param {string} type
 * @returns {Condition | undefined}
 */
export function condition(obj, type) { return ((obj.status || {}).conditions || []).find((c) => c.type === type); }

/**
 * A pager's markup: empty for a single page, else ‹ page N of M ›, its buttons marked
 * `data-page="prev"` and `data-page="next"`.
 * @param {number} pages
 * @param {number} current zero-based
 * @returns {string}
 */
export function pagerMarkup(pages, current) {
  if (pages <= 1) return "";
  return '<button data-page="prev">‹</button> page ' + (current + 1) + " of " + pages + ' <button data-page="next">›</button>';
}
