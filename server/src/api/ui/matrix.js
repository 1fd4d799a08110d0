// @ts-check
// What runs where: a binding × cluster matrix. Each cell shows the replicas the binding has on
// that cluster, coloured by the health the member reports, and an hourglass with a dashed
// outline while an eviction task for that cluster is open. PAGE_ROWS bindings a page, filtered
// by name or cluster and, on request, to the ones with something to look at; the columns are
// the clusters that page's bindings use, at most MAX_COLUMNS.

import { esc, keyOf } from "./format.js";
import { healthOf, MAX_COLUMNS, PAGE_ROWS, placement, sortedBindings, tasksOf, troubled } from "./state.js";

/** @typedef {import("./state.js").State} State */
/** @typedef {import("./api.js").Binding} Binding */

/**
 * @typedef {object} MatrixQuery
 * @property {string} filter the filter's text, trimmed and lower case ("" for none)
 * @property {boolean} problems only bindings with something to look at
 */
/**
 * @typedef {object} MatrixView
 * @property {string} summary "N of M bindings", and how many clusters are not shown
 * @property {number} page the page shown (the one asked for, within the pages there are)
 * @property {number} pages how many pages there are
 * @property {string} table the table's markup
 */

// An open eviction task: an hourglass, drawn (a headless or minimal system may have no emoji).
const EVICTING_ICON = '<svg width="10" height="12" viewBox="0 0 10 12" aria-label="eviction task"><path d="M1 1h8M1 11h8M2 1c0 3 6 3 6 5s-6 2-6 5M8 1c0 3-6 3-6 5s6 2 6 5" stroke="#cf222e" fill="none"/></svg>';

/**
 * @param {State} s
 * @param {MatrixQuery} query
 * @returns {MatrixView}
 */
export function matrixView(s, query) {
  const { filter, problems } = query;
  let keys = sortedBindings();
  if (filter || problems) {
    keys = keys.filter((k) => {
      const b = s.bindings.get(k);
      if (!b) return false;
      if (problems && !troubled(s, b)) return false;
      if (!filter) return true;
      return k.toLowerCase().includes(filter) || [...placement(b).keys()].some((c) => c.toLowerCase().includes(filter));
    });
  }
  const pages = Math.ceil(keys.length / PAGE_ROWS);
  const current = Math.min(s.matrixPage, Math.max(0, pages - 1));
  /** @type {Binding[]} */
  const page = [];
  for (const k of keys.slice(current * PAGE_ROWS, (current + 1) * PAGE_ROWS)) { const b = s.bindings.get(k); if (b) page.push(b); }
  // Columns: the clusters this page's bindings use (placement, health, eviction tasks), or
  // every member when the fleet is small.
  /** @type {Set<string>} */
  const used = new Set();
  for (const b of page) {
    for (const c of placement(b).keys()) used.add(c);
    for (const c of healthOf(b).keys()) used.add(c);
    for (const t of tasksOf(b)) used.add(t.fromCluster);
  }
  if (s.clusters.size <= 12) for (const c of s.clusters.keys()) used.add(c);
  const all = [...used].sort();
  const columns = all.slice(0, MAX_COLUMNS);
  const summary = keys.length + " of " + s.bindings.size + " bindings" +
    (all.length > columns.length ? "; " + (all.length - columns.length) + " more clusters not shown (filter to narrow)" : "");
  const out = ["<tr><th>binding</th><th>replicas</th>" + columns.map((c) => "<th>" + esc(c) + "</th>").join("") + "</tr>"];
  for (const b of page) {
    const k = keyOf(b);
    const p = placement(b), h = healthOf(b), tasks = tasksOf(b);
    const cells = columns.map((c) => {
      const replicas = p.get(c);
      const health = h.get(c) || "";
      const task = tasks.find((t) => t.fromCluster === c);
      const text = esc(replicas !== undefined ? replicas : "") + (task ? " " + EVICTING_ICON : "");
      const title = [health && "health " + health, task && "eviction task: " + task.reason + ", purge " + (task.purgeMode || "unset")].filter(Boolean).join("; ");
      return '<td class="cell ' + esc(replicas !== undefined ? health : "") + (task ? " evicting" : "") + '" data-binding="' + esc(k) +
        '" data-cluster="' + esc(c) + '"' + (replicas !== undefined ? ' data-replicas="' + esc(replicas) + '"' : "") +
        (health ? ' data-health="' + esc(health) + '"' : "") + (task ? ' data-eviction="' + esc(task.purgeMode || "unset") + '"' : "") +
        ' title="' + esc(title) + '">' + text + "</td>";
    }).join("");
    out.push('<tr><td><button class="link" data-open-binding="' + esc(k) + '">' + esc(k) + "</button></td><td>" + esc((b.spec || {}).replicas ?? "") + "</td>" + cells + "</tr>");
  }
  return { summary, page: current, pages, table: out.join("") };
}
