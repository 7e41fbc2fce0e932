/* Keyboard access to the book's plotly sliders, and to the figures and formulas that scroll sideways.
 *
 * Plotly draws a slider as SVG (g.slider-group), which Tab cannot reach. Each slider of each figure
 * is made focusable, named and described as an ARIA slider; the arrow keys, Home, End, Page Up and
 * Page Down move it one step (or to an end) by running the step's own Plotly command, exactly as a
 * click on that step does. The focus ring is drawn by course.css.
 */
(function () {
  "use strict";
  const KEYS = {ArrowRight: 1, ArrowUp: 1, ArrowLeft: -1, ArrowDown: -1, PageUp: 5, PageDown: -5};

  function label(slider, index) {
    const prefix = ((slider.currentvalue || {}).prefix || "").replace(/[\s=:]+$/, "").trim();
    return prefix || slider.name || `slider ${index + 1}`;
  }

  function move(gd, index, target) {
    const slider = gd.layout.sliders[index];
    const to = Math.max(0, Math.min(slider.steps.length - 1, target));
    if (to === (slider.active || 0)) return Promise.resolve();
    const step = slider.steps[to];
    const active = {[`sliders[${index}].active`]: to};
    const args = step.args || [];
    switch (step.method) {
      case "update": return Plotly.update(gd, args[0] || {}, Object.assign({}, args[1] || {}, active));
      case "restyle": return Plotly.restyle(gd, args[0] || {}, args[1]).then(() => Plotly.relayout(gd, active));
      case "relayout": return Plotly.relayout(gd, Object.assign({}, args[0] || {}, active));
      case "animate": return Plotly.animate(gd, args[0], args[1]).then(() => Plotly.relayout(gd, active));
      default: return Plotly.relayout(gd, active);
    }
  }

  function decorate(gd) {
    const sliders = (gd.layout && gd.layout.sliders) || [];
    gd.querySelectorAll("g.slider-group").forEach((group, index) => {
      const slider = sliders[index];
      if (!slider || !slider.steps || !slider.steps.length) return;
      const active = slider.active || 0;
      const name = label(slider, index);
      group.setAttribute("tabindex", "0");
      group.setAttribute("role", "slider");
      group.setAttribute("aria-label", name);
      group.setAttribute("aria-valuemin", "0");
      group.setAttribute("aria-valuemax", String(slider.steps.length - 1));
      group.setAttribute("aria-valuenow", String(active));
      group.setAttribute("aria-valuetext", `${name} = ${slider.steps[active].label}`);
      group.setAttribute("aria-orientation", "horizontal");
      if (group.dataset.keys) return;
      group.dataset.keys = "1";
      group.addEventListener("keydown", event => {
        const current = gd.layout.sliders[index].active || 0;
        const last = gd.layout.sliders[index].steps.length - 1;
        let target = null;
        if (event.key in KEYS) target = current + KEYS[event.key];
        else if (event.key === "Home") target = 0;
        else if (event.key === "End") target = last;
        if (target === null) return;
        event.preventDefault();
        move(gd, index, target).then(() => {
          const again = gd.querySelectorAll("g.slider-group")[index];  // Plotly may draw the slider anew
          if (again && document.activeElement !== again) again.focus();
        });
      });
    });
  }

  /* The narrowest a figure can be and still be read: its axes (all its subplots together) at least 240 px wide per
   * column of subplots, the rest of the figure (margins, a legend or a colour bar at the side) as drawn. A figure
   * whose axes are narrower takes that much more width (course.css lets it scroll in its box); it only grows. */
  const PER_COLUMN = 240;

  function readableWidth(gd) {
    const full = gd._fullLayout;
    if (!full || !full._size || !full.width) return 0;
    const columns = new Set();
    Object.keys(full).filter(key => /^xaxis\d*$/.test(key) && full[key].domain)
      .forEach(key => columns.add(Math.round(100 * full[key].domain[0])));
    return Math.ceil(full.width + Math.max(0, PER_COLUMN * Math.max(1, columns.size) - full._size.w));
  }

  function keepReadable(gd) {
    const width = readableWidth(gd);
    if (!width || width <= (Number(gd.dataset.minWidth) || 0) || width <= gd.clientWidth + 1) return;
    gd.dataset.minWidth = String(width);
    gd.style.minWidth = `${width}px`;
    Plotly.Plots.resize(gd);
  }

  function attach(gd) {
    if (gd.dataset.sliderKeys) return;
    gd.dataset.sliderKeys = "1";
    if (typeof gd.on === "function") gd.on("plotly_afterplot", () => { decorate(gd); keepReadable(gd); });
    decorate(gd);
    keepReadable(gd);
  }

  function start() {
    document.querySelectorAll(".plotly-graph-div").forEach(attach);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();

  /* A figure or a formula wider than the column scrolls sideways in its own box (course.css): such a box takes
   * the keyboard focus, so that the arrow keys scroll it, only while it is wider than the screen lets it be. */
  const SCROLLING = "div.cell_output figure.sal-figure, div.math, span.math";

  function markScrolling() {
    document.querySelectorAll(SCROLLING).forEach(box => {
      if (box.scrollWidth > box.clientWidth + 1) {
        if (!box.hasAttribute("tabindex")) {
          box.setAttribute("tabindex", "0");
          box.dataset.scrolls = "1";
        }
      } else if (box.dataset.scrolls) {
        box.removeAttribute("tabindex");
        delete box.dataset.scrolls;
      }
    });
  }

  let pending = null;
  function soon() {
    clearTimeout(pending);
    pending = setTimeout(markScrolling, 200);
  }
  window.addEventListener("load", () => {
    soon();
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(soon);
  });
  window.addEventListener("resize", soon);
})();
