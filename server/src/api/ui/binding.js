// @ts-check
// One binding, opened from its name in the matrix: the chain from the template through its
// policy and the binding to its Works; explain (every cluster selected or filtered, and until
// when); the NoExecute taints of its clusters and when each one's toleration runs out; the
// application-failover countdown; its eviction tasks with their deadlines; and its failover
// history (history.js).

import { ago, countdown, esc, isoOf, ms } from "./format.js";
import { historyView } from "./history.js";
import { placement, tasksOf } from "./state.js";

/** @typedef {import("./state.js").State} State */

/**
 * @param {State} s
 * @param {number} now Date.now()
 * @returns {string | null} the open binding's markup, null when none is open
 */
export function bindingView(s, now) {
  const key = s.open;
  if (!key) return null;
  const b = s.bindings.get(key);
  if (!b) return '<span class="muted">' + esc(key) + " is gone.</span>";
  const x = s.openExtra || { explain: null, works: [], error: null };
  const ann = b.metadata.annotations || {};
  const res = (b.spec || {}).resource || {};
  const policy = ann["propagationpolicy.karmada.io/name"] ? "PropagationPolicy " + (ann["propagationpolicy.karmada.io/namespace"] || "") + "/" + ann["propagationpolicy.karmada.io/name"]
    : ann["clusterpropagationpolicy.karmada.io/name"] ? "ClusterPropagationPolicy " + ann["clusterpropagationpolicy.karmada.io/name"] : "no policy";
  const works = (x.works || []).map((w) => {
    const cluster = String(w.metadata.namespace).replace(/^karmada-es-/, "");
    return '<span data-work="' + esc(cluster) + '">' + esc("Work " + cluster + "/" + w.metadata.name + (w.metadata.deletionTimestamp ? " (being deleted)" : "")) + "</span>";
  });
  const out = [];
  out.push('<div class="chain"><span>' + esc(res.kind + " " + (res.namespace ? res.namespace + "/" : "") + res.name) + '</span><span class="arrow">→</span><span>' +
    esc(policy) + '</span><span class="arrow">→</span><span>ResourceBinding ' + esc(key) + '</span><span class="arrow">→</span>' +
    (works.length ? works.join("") : '<span class="muted">no Works</span>') + "</div>");
  if (x.error) out.push('<div class="banner">' + esc(x.error) + "</div>");
  // Why it is placed where it is.
  const e = x.explain;
  if (e) {
    const r = e.result || {};
    out.push("<p><b>Scheduler:</b> " + esc(r.status) + " " + esc(r.reason || "") + (r.message ? " — " + esc(r.message) : "") + "</p>");
    // How long a filter lasts: a cluster the application left stays blocked until a time; a
    // cluster with an eviction task is filtered while the task lasts (until its deadline).
    const blocked = ((e.failover || {}).blocked || []);
    const rows = (e.clusters || []).map((c) => {
      const block = blocked.find((bl) => bl.cluster === c.name);
      const task = c.selected ? null : tasksOf(b).find((t) => t.fromCluster === c.name);
      let until = "";
      if (block) until = " until " + esc(block.until) + " (" + esc(countdown(ms(block.until), now)) + ")";
      else if (task) {
        const created = ms(task.creationTimestamp);
        until = task.gracePeriodSeconds !== undefined && created !== null
          ? " until " + esc(isoOf(created + task.gracePeriodSeconds * 1000)) + " (" + esc(countdown(created + task.gracePeriodSeconds * 1000, now)) + ")"
          : " while its eviction task lasts";
      }
      return '<tr data-explain="' + esc(c.name) + '"><td>' + esc(c.name) + "</td><td>" + (c.selected ? "selected" : "filtered" + (c.filter ? ": " + esc(c.filter) : "")) +
        until + '</td><td class="muted">' + esc(c.reason || c.summary || "") + "</td></tr>";
    });
    out.push("<table><tr><th>cluster</th><th>explain</th><th>why</th></tr>" + rows.join("") + "</table>");
  }
  // Taints on its clusters and how long each is tolerated.
  const tolerations = (((b.spec || {}).placement || {}).clusterTolerations) || [];
  const tol = [];
  for (const name of placement(b).keys()) {
    const c = s.clusters.get(name);
    for (const t of ((c && c.spec.taints) || []).filter((t) => t.effect === "NoExecute")) {
      const m = tolerations.find((o) => (o.key === t.key || (!o.key && o.operator === "Exists")) && (!o.effect || o.effect === t.effect));
      const added = ms(t.timeAdded);
      tol.push("<li>" + esc(name) + ": " + esc(t.key) + ":NoExecute since " + esc(t.timeAdded || "?") + " — " +
        (m && m.tolerationSeconds !== undefined && added !== null ? "tolerated until " + esc(isoOf(added + m.tolerationSeconds * 1000)) + " (" + esc(countdown(added + m.tolerationSeconds * 1000, now)) + ")"
          : m ? "tolerated without a limit" : "not tolerated by its placement: evicted unless a server default toleration applies") + "</li>");
    }
  }
  if (tol.length) out.push("<p><b>Taints on its clusters</b></p><ul>" + tol.join("") + "</ul>");
  // Application failover: per cluster where the workload reads Unhealthy, when it moves.
  const f = (e || {}).failover || {};
  const app = ((b.spec || {}).failover || {}).application;
  for (const [cluster, since] of Object.entries(f.unhealthySince || {})) {
    const start = ms(since);
    if (app && start !== null) {
      const secs = ((app.decisionConditions || {}).tolerationSeconds) ?? 300;
      const due = start + secs * 1000;
      out.push('<p data-app-failover="' + esc(cluster) + '"><b>Unhealthy on ' + esc(cluster) + "</b> since " + esc(since) +
        ": application failover at " + esc(isoOf(due)) + " (" + esc(countdown(due, now)) + ")</p>");
    } else {
      out.push('<p data-app-failover="' + esc(cluster) + '"><b>Unhealthy on ' + esc(cluster) + "</b> since " + esc(since) +
        " (its policy has no application failover)</p>");
    }
  }
  // Eviction tasks with their deadlines.
  const tasks = tasksOf(b);
  if (tasks.length) {
    out.push("<p><b>Eviction tasks</b></p><table><tr><th>from</th><th>reason</th><th>purge</th><th>created</th><th>deadline</th></tr>" + tasks.map((t) => {
      const created = ms(t.creationTimestamp);
      const deadline = t.gracePeriodSeconds !== undefined && created !== null ? created + t.gracePeriodSeconds * 1000 : null;
      return '<tr data-eviction-task="' + esc(t.fromCluster) + '"><td>' + esc(t.fromCluster) + "</td><td>" + esc(t.reason) + " <span class=muted>" + esc(t.producer || "") +
        "</span></td><td>" + esc(t.purgeMode || "unset") + "</td><td>" + esc(ago(t.creationTimestamp, now)) + "</td><td>" +
        (deadline !== null ? esc(isoOf(deadline)) + " (" + esc(countdown(deadline, now)) + ")" : "the server's graceful eviction timeout") + "</td></tr>";
    }).join("") + "</table>");
  }
  out.push(historyView(((b.status || {}).failoverHistory) || []));
  return out.join("");
}
