// @ts-check
// The brake banner ("why nothing moves"): one banner per region whose eviction brake holds
// evictions (PartialDisruption, FullDisruption, the startup grace) or queues clusters.

import { esc } from "./format.js";

/** @typedef {import("./state.js").State} State */

/**
 * @param {State} s
 * @returns {string} the banners' markup, "" when no brake holds anything
 */
export function brakesView(s) {
  const parts = [];
  for (const b of s.brakes) {
    const st = b.status || {};
    const holding = st.state && st.state !== "Normal";
    const queued = (st.queuedClusters || []).length > 0 || (st.heldEvictions || 0) > 0;
    if (!holding && !queued) continue;
    parts.push('<div class="banner" data-brake="' + esc(st.region) + '"><b>Evictions held in region ' + esc(st.region) + ": " + esc(st.state) +
      "</b> (rate " + esc(st.rate) + "). " + esc(st.message) +
      ((st.queuedClusters || []).length ? " Waiting their turn: " + esc((st.queuedClusters || []).map((q) => typeof q === "string" ? q : q.cluster || q.name || q).join(", ")) + "." : "") +
      (st.heldEvictions ? " Held evictions: " + esc(st.heldEvictions) + "." : "") + "</div>");
  }
  return parts.join("");
}
