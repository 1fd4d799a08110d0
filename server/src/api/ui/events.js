// @ts-check
// Activity: the fleet's Events, newest first, filtered by any text of their object, reason or
// message; the newest SHOWN_EVENTS of them drawn.

import { esc } from "./format.js";
import { SHOWN_EVENTS } from "./state.js";

/** @typedef {import("./state.js").State} State */

/**
 * @typedef {object} EventsView
 * @property {string} summary "N events", and how many are shown
 * @property {string} table the table's markup
 */

/**
 * @param {State} s
 * @param {string} filter the filter's text, trimmed and lower case ("" for none)
 * @returns {EventsView}
 */
export function eventsView(s, filter) {
  const list = filter ? s.events.filter((e) => {
    const o = e.involvedObject || {};
    return [o.kind, o.namespace, o.name, e.reason, e.message].some((v) => String(v || "").toLowerCase().includes(filter));
  }) : s.events;
  const summary = list.length + " events" + (list.length > SHOWN_EVENTS ? ", newest " + SHOWN_EVENTS + " shown" : "");
  const rows = list.slice(0, SHOWN_EVENTS).map((e) => {
    const o = e.involvedObject || {};
    const t = e.lastTimestamp || e.eventTime || e.firstTimestamp;
    return '<tr data-event data-reason="' + esc(e.reason) + '"><td class="muted">' + esc(t) + '</td><td class="' + esc(e.type) + '">' + esc(e.type) + "</td><td>" + esc(e.reason) +
      "</td><td>" + esc(o.kind + " " + (o.namespace ? o.namespace + "/" : "") + o.name) + "</td><td>" + esc(e.message) + ((e.count || 0) > 1 ? " ×" + esc(e.count) : "") + "</td></tr>";
  });
  return { summary, table: "<table>" + rows.join("") + "</table>" };
}
