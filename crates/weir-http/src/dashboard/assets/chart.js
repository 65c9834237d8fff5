// weir dashboard: a time-series line chart drawn as SVG. Each series is a
// list of [time in ms, value or null]; a null breaks the line. The y axis
// starts at 0 unless a value is below it, with round ticks; the x axis is
// the last `span` ms up to the newest sample, labelled in seconds ago.
// The legend shows every series with its newest value, and each line and
// legend entry carries its series' name (data-series), so that a test, or
// a person with the inspector, can tell what is drawn.

import { h, s } from "./dom.js";

const W = 560;
const H = 190;
const M = { left: 56, right: 10, top: 10, bottom: 22 };

/** Colours by series index: the same DIP keeps its colour in every chart. */
export const PALETTE = [
  "#2f6fdf", "#e0662b", "#2a9d55", "#c23b6c", "#7a55c7",
  "#b58a00", "#1597a5", "#6b6b6b", "#d9453d", "#4a8c2a",
];

export function color(i) {
  return PALETTE[i % PALETTE.length];
}

/** A legend's colour box. Set through the CSSOM: the page's policy refuses
 * inline style attributes. */
function swatch(c) {
  const el = h("span", { class: "swatch" });
  el.style.backgroundColor = c;
  return el;
}

/** Round steps (1, 2, 5 x 10^k) covering lo..hi in about `n` ticks; no
 * step under 1 for integers. */
function ticks(lo, hi, n, integer) {
  const raw = integer ? Math.max(1, (hi - lo) / n) : (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((st) => st >= raw) ?? 10 * mag;
  const first = Math.floor(lo / step) * step;
  const out = [];
  for (let v = first; v <= hi + step * 1e-9 && out.length < 20; v += step) out.push(v);
  if (out[out.length - 1] < hi) out.push(out[out.length - 1] + step);
  return out;
}

/** The path of one series: segments between gaps; steps hold a value until the next. */
function path(points, x, y, step) {
  let d = "";
  let prev = null;
  for (const [t, v] of points) {
    if (v === null) {
      prev = null;
      continue;
    }
    const px = x(t).toFixed(1);
    const py = y(v).toFixed(1);
    if (prev === null) d += `M${px} ${py}`;
    else if (step) d += `H${px}V${py}`;
    else d += `L${px} ${py}`;
    prev = v;
  }
  return d;
}

/**
 * The chart as a <figure>:
 *   key    what the chart shows (data-chart), for tools reading the page
 *   title  its caption; note: a line under it
 *   series [{name, color, points}]
 *   now, span  the newest sample's time and the width of the x axis (ms)
 *   format  a value's text (ticks and legend)
 *   step   draw values as steps (weights, versions)
 *   integer  values are integers: no ticks between them
 *   fromZero  false: the y axis spans the values only (versions), not 0 too
 *   yMax   a fixed top (1 for fractions)
 *   empty  what to say when no series has a value
 */
export function timeChart(o) {
  const fig = h(
    "figure",
    { class: "chart", "data-chart": o.key },
    h("figcaption", {}, o.title, o.note ? h("small", {}, o.note) : null),
  );
  const all = o.series.flatMap((se) => se.points.map((p) => p[1]).filter((v) => v !== null));
  const legend = h(
    "ul",
    { class: "legend" },
    o.series.map((se) => {
      const last = [...se.points].reverse().find((p) => p[1] !== null);
      const v = last ? last[1] : null;
      return h(
        "li",
        { "data-series": se.name, "data-last": v ?? "" },
        swatch(se.color),
        h("span", { class: "name" }, se.name),
        h("span", { class: "last" }, v === null ? "–" : o.format(v)),
      );
    }),
  );
  if (all.length === 0) {
    fig.append(h("p", { class: "empty" }, o.empty ?? "no data yet"), legend);
    return fig;
  }
  const lo = o.fromZero === false ? Math.min(...all) : Math.min(0, ...all);
  let hi = Math.max(o.yMax ?? lo, ...all);
  if (hi <= lo) hi = lo + 1;
  const yt = ticks(lo, hi, 4, o.integer);
  const [y0, y1] = [yt[0], yt[yt.length - 1]];
  const t1 = o.now;
  const t0 = t1 - o.span;
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const x = (t) => M.left + (Math.max(t0, Math.min(t1, t)) - t0) / (t1 - t0) * pw;
  const y = (v) => M.top + ph - (v - y0) / (y1 - y0) * ph;

  const g = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": o.title });
  for (const v of yt) {
    g.append(
      s("line", { class: "grid", x1: M.left, x2: W - M.right, y1: y(v), y2: y(v) }),
      s("text", { class: "tick", x: M.left - 6, y: y(v) + 4, "text-anchor": "end" }, o.format(v)),
    );
  }
  // A label every 10, 30 or 60 s, "now" at the right.
  const every = o.span > 180000 ? 60000 : o.span > 60000 ? 30000 : 10000;
  for (let ago = 0; ago <= o.span; ago += every) {
    const px = x(t1 - ago);
    g.append(
      s("line", { class: "grid", x1: px, x2: px, y1: M.top, y2: M.top + ph }),
      s(
        "text",
        { class: "tick", x: px, y: H - 6, "text-anchor": ago === 0 ? "end" : "middle" },
        ago === 0 ? "now" : `-${ago / 1000}s`,
      ),
    );
  }
  g.append(s("rect", { class: "frame", x: M.left, y: M.top, width: pw, height: ph }));
  o.series.forEach((se) => {
    const pts = se.points.filter((p) => p[0] >= t0 - 1);
    const shown = pts.filter((p) => p[1] !== null);
    const attrs = { "data-series": se.name, "data-points": shown.length, stroke: se.color };
    if (shown.length === 1) {
      const [t, v] = shown[0];
      g.append(s("circle", { ...attrs, class: "dot", cx: x(t), cy: y(v), r: 2.5, fill: se.color }));
    } else if (shown.length > 1) {
      g.append(s("path", { ...attrs, class: "line", d: path(pts, x, y, o.step), fill: "none" }));
    }
  });
  fig.append(g, legend);
  return fig;
}
