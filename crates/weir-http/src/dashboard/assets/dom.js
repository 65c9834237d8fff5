// weir dashboard: building DOM nodes and formatting numbers. Text always
// goes in as text nodes, never as HTML, so names from a configuration file
// cannot inject markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v !== undefined && v !== null && v !== false) el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** An HTML element: h("td", {"data-field": "load"}, "12"). */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

const finite = (v) => typeof v === "number" && Number.isFinite(v);

/** A count as it is, digits only, so that it reads like the API's. */
export function count(v) {
  return finite(v) ? String(Math.round(v)) : "–";
}

/** A short number: 3 significant digits, k/M/G above 10 000. */
export function num(v) {
  if (!finite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toPrecision(3) + "G";
  if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
  if (a >= 1e4) return (v / 1e3).toPrecision(3) + "k";
  if (a === 0 || a >= 100) return String(Math.round(v));
  return String(Number(v.toPrecision(3)));
}

/** A fraction as a percentage. */
export function pct(v) {
  return finite(v) ? (100 * v).toFixed(1) + "%" : "–";
}

/** A rate per second. */
export function rate(v) {
  return finite(v) ? num(v) + "/s" : "–";
}

/** Wall-clock time of a sample. */
export function clock(t) {
  return new Date(t).toLocaleTimeString([], { hour12: false });
}

/** A table: head cells, then rows of cells (nodes or text). */
export function table(cls, head, rows) {
  return h(
    "table",
    { class: cls },
    h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows),
  );
}

/** One cell that keeps its raw value for tools that read the page. */
export function cell(field, value, text) {
  return h("td", { "data-field": field, "data-value": value ?? "" }, text);
}

/** A labelled figure in the overview. */
export function stat(field, label, value, text) {
  return h(
    "div",
    { class: "stat", "data-field": field, "data-value": value ?? "" },
    h("span", { class: "label" }, label),
    h("span", { class: "value" }, text),
  );
}

/**
 * Per-second rates of a cumulative counter over the history: `get(data)`
 * reads the counter from one sample; a counter that went backwards (a
 * restart) or is missing gives a gap.
 */
export function rates(hist, get) {
  const out = [];
  for (let i = 1; i < hist.length; i++) {
    const a = get(hist[i - 1].data);
    const b = get(hist[i].data);
    const dt = (hist[i].t - hist[i - 1].t) / 1000;
    out.push([hist[i].t, finite(a) && finite(b) && b >= a && dt > 0 ? (b - a) / dt : null]);
  }
  return out;
}

/** The value `get(data)` in every sample of the history. */
export function values(hist, get) {
  return hist.map((x) => {
    const v = get(x.data);
    return [x.t, finite(v) ? v : null];
  });
}
