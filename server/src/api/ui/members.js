// @ts-check
// The members table: one row per Cluster, the ones with something wrong first (Ready,
// Unknown or False with how long it has been so), its mode, region, last lease renewal (pull)
// or probe (push), taints with their age, its region's brake, and a "what if it fails?"
// button. MEMBER_ROWS rows a page.

import { ago, condition, esc } from "./format.js";
import { brakeOf, memberRows, MEMBER_ROWS } from "./state.js";

/** @typedef {import("./state.js").State} State */

/**
 * @typedef {object} MembersView
 * @property {string} summary "N members, M not Ready"
 * @property {number} page the page shown (the one asked for, within the pages there are)
 * @property {number} pages how many pages there are
 * @property {string} table the table's markup
 * @property {Array<{ name: string, ready: string, taints: number }>} drawn the members drawn,
 *   with their Ready state and taint count as drawn
 */

/**
 * @param {State} s
 * @param {number} now Date.now()
 * @returns {MembersView}
 */
export function membersView(s, now) {
  const rows = memberRows(s);
  const notReady = rows.filter((c) => { const r = condition(c, "Ready"); return !r || r.status !== "True"; }).length;
  const pages = Math.ceil(rows.length / MEMBER_ROWS);
  const current = Math.min(s.membersPage, Math.max(0, pages - 1));
  const page = rows.slice(current * MEMBER_ROWS, (current + 1) * MEMBER_ROWS);
  const out = ["<tr><th>member</th><th>Ready</th><th>mode</th><th>region</th><th>last lease / probe</th><th>taints</th><th>region's brake</th><th></th></tr>"];
  /** @type {MembersView["drawn"]} */
  const drawn = [];
  for (const c of page) {
    const name = String(c.metadata.name);
    const r = condition(c, "Ready");
    const ready = !r ? "Unknown" : r.status === "True" ? "Ready" : r.status === "False" ? "False" : "Unknown";
    const since = r ? ago(r.lastTransitionTime, now) : "";
    const lease = s.leases.get(name);
    const beat = (c.spec.syncMode || "Push") === "Pull"
      ? (lease ? "lease " + ago(lease.spec.renewTime, now) : "no lease")
      : (r && r.lastHeartbeatTime ? "probe " + ago(r.lastHeartbeatTime, now) : (r ? "probe result " + ago(r.lastTransitionTime, now) : ""));
    const taints = (c.spec.taints || []).map((t) => '<span class="taint ' + esc(t.effect) + '" title="added ' + esc(t.timeAdded || "") + '">' +
      esc(t.key) + ":" + esc(t.effect) + (t.timeAdded ? " · " + esc(ago(t.timeAdded, now)) : "") + "</span>").join("");
    const brake = brakeOf(s, c.spec.region);
    const bs = brake ? (brake.status || {}) : null;
    out.push('<tr data-cluster="' + esc(name) + '"><td>' + esc(name) + '</td><td><span data-field="ready" class="' + ready + '">' + ready +
      '</span> <span class="muted">' + esc(since) + '</span></td><td data-field="mode">' + esc(c.spec.syncMode || "Push") +
      "</td><td>" + esc(c.spec.region || "") + '</td><td class="muted">' + esc(beat) + '</td><td data-field="taints">' + taints +
      "</td><td>" + (bs ? esc(bs.state) + ' <span class="muted">' + esc(bs.rate) + "</span>" : "") +
      '</td><td><button data-whatif="' + esc(name) + '">what if it fails?</button></td></tr>');
    drawn.push({ name, ready, taints: (c.spec.taints || []).length });
  }
  return { summary: rows.length + " members, " + notReady + " not Ready", page: current, pages, table: out.join(""), drawn };
}
