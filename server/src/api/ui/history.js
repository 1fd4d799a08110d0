// @ts-check
// A binding's failover history as a timeline: one row per entry, a mark per step at its time
// (failed and evicted, rescheduled, Healthy, old copy gone, failed back), then the entries as
// a list.

import { esc, isoOf, ms } from "./format.js";

/** @typedef {import("./api.js").FailoverHistoryEntry} FailoverHistoryEntry */

/**
 * The steps of an entry: its field, label and colour.
 * @type {Array<[keyof FailoverHistoryEntry, string, string]>}
 */
const STEPS = [
  ["failoverTime", "evicted", "#cf222e"],
  ["rescheduledTime", "rescheduled", "#9a6700"],
  ["healthyTime", "Healthy", "#1a7f37"],
  ["oldCopyGoneTime", "old copy gone", "#57606a"],
  ["failedBackTime", "failed back", "#0969da"],
];

/**
 * @param {FailoverHistoryEntry} en
 * @param {keyof FailoverHistoryEntry} field
 * @returns {string | undefined}
 */
function timeOf(en, field) { const v = en[field]; return typeof v === "string" ? v : undefined; }

/**
 * @param {FailoverHistoryEntry[]} entries a binding's `status.failoverHistory`
 * @returns {string} the timeline's markup
 */
export function historyView(entries) {
  if (!entries.length) return "<p class=muted>No failover history.</p>";
  /** @type {number[]} */
  const times = [];
  for (const en of entries) for (const [f] of STEPS) { const t = ms(timeOf(en, f)); if (t !== null) times.push(t); }
  const t0 = Math.min(...times), t1 = Math.max(...times, t0 + 1000);
  const W = 900, left = 60, right = 60, rowH = 100;
  /** @param {number} t */
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (W - left - right);
  const rows = entries.map((en, i) => {
    const y = 30 + i * rowH;
    /** @type {string[]} */
    const marks = [];
    /** @type {number[]} */
    const placed = [];
    /** @type {number | null} */
    let prev = null;
    STEPS.forEach(([f, label, color]) => {
      const t = ms(timeOf(en, f));
      if (t === null) return;
      const cx = x(t);
      if (prev !== null) marks.push('<line x1="' + prev + '" y1="' + y + '" x2="' + cx + '" y2="' + y + '" stroke="#8c959f"/>');
      prev = cx;
      // Labels go under the line; steps close together stack theirs instead of overlapping.
      const stack = placed.filter((px) => Math.abs(px - cx) < 110).length;
      placed.push(cx);
      marks.push('<circle cx="' + cx + '" cy="' + y + '" r="5" fill="' + color + '"><title>' + esc(label + " at " + timeOf(en, f)) + "</title></circle>" +
        '<text x="' + cx + '" y="' + (y + 18 + stack * 13) + '" text-anchor="middle" fill="' + color + '">' + esc(label + " +" + ((t - t0) / 1000).toFixed(1) + "s") + "</text>");
    });
    const why = en.reason + " from " + en.fromCluster + (en.evictionReason ? " (" + en.evictionReason + ")" : "");
    return '<g data-history-entry data-from-cluster="' + esc(en.fromCluster) + '" data-reason="' + esc(en.reason) + '"><text x="4" y="' + (y - 14) + '" font-weight="600">' +
      esc(why) + "</text>" + marks.join("") + "</g>";
  });
  const list = entries.map((en) => "<li>" + esc(en.failoverTime) + " " + esc(en.reason) + " from " + esc(en.fromCluster) + " → " +
    esc((en.targetCluster || []).join(", ")) + ": " + esc(en.message || "") + (en.oldCopyGoneReason ? " · old copy: " + esc(en.oldCopyGoneReason) : "") + "</li>").join("");
  return "<p><b>Failover history</b> <span class=muted>(since " + esc(isoOf(t0)) + ")</span></p><svg width=\"" + W + "\" height=\"" + (entries.length * rowH + 16) +
    '" role="img" aria-label="failover history">' + rows.join("") + "</svg><ul>" + list + "</ul>";
}
