// @ts-check
// What if a member fails? The failover dry-run's answer for one member: which bindings would
// move where, when each eviction would happen and whether the brake would delay it, what would
// be held, and what could not be placed. The dry-run writes nothing.

import { esc } from "./format.js";

/** @typedef {import("./state.js").State} State */
/** @typedef {import("./api.js").TargetCluster} TargetCluster */

/**
 * @param {string} cluster
 * @returns {string} the markup while the server is asked
 */
export function whatIfAsking(cluster) {
  return '<span class="muted">asking the server what would happen if ' + esc(cluster) + " failed…</span>";
}

/**
 * @param {TargetCluster[] | undefined} list
 * @returns {string} e.g. `member1:1 member2:2`, "nowhere" for none
 */
function placementText(list) { return (list || []).map((t) => t.name + ":" + (t.replicas ?? "")).join(" ") || "nowhere"; }

/**
 * @param {State} s
 * @returns {string | null} the answer's markup, null before any question
 */
export function whatIfView(s) {
  const w = s.whatif;
  if (!w) return null;
  if (w.error || !w.answer) return '<div class="banner">' + esc(w.error) + "</div>";
  const st = w.answer.status || {};
  const sum = st.summary || {};
  const out = ["<p><b>If " + esc(w.cluster) + " failed now</b> (dry-run; nothing changes): " + esc(sum.affected ?? 0) + " of " + esc(sum.bindings ?? 0) +
    " bindings affected, " + esc(sum.evictions ?? 0) + " evictions, " + esc(sum.delayed ?? 0) + " delayed by the brake, " + esc(sum.held ?? 0) + " held, " +
    esc(sum.unplaceable ?? 0) + " unplaceable.</p>"];
  for (const t of ((st.timeline || {}).clusters || [])) {
    out.push("<p>" + esc(t.cluster) + " turns " + esc(t.ready) + " after " + esc(t.notReadyAfterSeconds) + " s" +
      (t.noExecuteAfterSeconds !== undefined && t.noExecuteAfterSeconds !== null ? ", NoExecute taint after " + esc(t.noExecuteAfterSeconds) + " s" : ", no NoExecute taint") + ".</p>");
  }
  const rows = (st.bindings || []).map((b) => {
    const k = (b.namespace ? b.namespace + "/" : "") + b.name;
    const ev = (b.evictions || []).map((e) => e.cluster + " after " + e.afterSeconds + " s" + (e.brake ? " (brake delay)" : "") + ", old copy " + ((e.oldCopy || {}).fate || "")).join("; ");
    const held = (b.held || []).map((h) => h.cluster + ": " + (h.reason || h.message || "held")).join("; ");
    return '<tr><td>' + esc(k) + '</td><td data-move="' + esc(k) + '">' + esc(placementText(b.clustersBefore)) + " → " + esc(placementText(b.clustersAfter)) +
      "</td><td>" + esc(ev) + "</td><td>" + esc(held) + "</td></tr>";
  });
  if (rows.length) out.push("<table><tr><th>binding</th><th>placement</th><th>evictions</th><th>held</th></tr>" + rows.join("") + "</table>");
  const unplaceable = (st.unplaceable || []).map((u) => '<li data-unplaceable="' + esc((u.namespace ? u.namespace + "/" : "") + u.name) + '">' +
    esc((u.namespace ? u.namespace + "/" : "") + u.name) + ": " + esc(u.reason) + " — " + esc(u.message) + " (keeps " + esc((u.keeps || []).join(", ")) + ")</li>").join("");
  if (unplaceable) out.push("<p><b>Unplaceable</b></p><ul>" + unplaceable + "</ul>");
  if ((st.brake || {}).message) out.push("<p>Brake: " + esc((st.brake || {}).message) + ".</p>");
  for (const r of ((st.brake || {}).regions || [])) {
    out.push("<p class=muted>Brake in region " + esc(r.region) + ": " + esc(r.state) + " at " + esc(r.rate) + "; " + esc(r.delayedEvictions ?? 0) + " evictions delayed.</p>");
  }
  return out.join("");
}
