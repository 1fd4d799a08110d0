// @ts-check
// What the page did, for its browser test (tests/tests/fleet_page.rs) and its benchmark
// (tests/benches/ui.rs) to read as `window.__flotillaUi`.

/**
 * @typedef {object} MemberShown When a member's row was first drawn as it is now.
 * @property {string} ready Ready, False or Unknown
 * @property {number} taints how many taints it has
 * @property {number} at Date.now() when drawn so
 */

/**
 * @typedef {object} UiHooks
 * @property {number} renders redraws so far
 * @property {number | null} firstRenderAt performance.now() of the first render with every
 *   feed's first page drawn
 * @property {number | null} listedAt performance.now() of the first render with every list
 *   complete
 * @property {number | null} lastRenderAt performance.now() of the last render
 * @property {Record<string, MemberShown>} shown per member shown, when its Ready state or
 *   taint count was first drawn as it is now
 * @property {number} longestRenderMs the longest redraw
 * @property {number} relists how many lists a 410 started
 * @property {number} watchesOpen watch streams open now
 * @property {number} watchesOpenedHidden watch streams opened while the tab was hidden
 * @property {number | null} watchesOpenWhenShown watch streams open when the tab was last
 *   shown again, before anything resumed (a hidden tab holds none)
 * @property {number} hiddenCount how many times the tab was hidden
 */

/** @type {UiHooks} */
export const ui = {
  renders: 0, firstRenderAt: null, listedAt: null, lastRenderAt: null, shown: {}, longestRenderMs: 0, relists: 0,
  watchesOpen: 0, watchesOpenedHidden: 0, watchesOpenWhenShown: null, hiddenCount: 0,
};
/** @type {Window & { __flotillaUi?: UiHooks }} */ (window).__flotillaUi = ui;
