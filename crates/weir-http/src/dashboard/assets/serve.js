// weir dashboard: the view of a load balancer (weir serve's
// /api/v1/status): an overview, then per VIP its DIPs over time (share of
// new connections, new connections/s, capacity, load, weight and class in
// force, table version) and in a table (health, weights, counts, the
// controller's estimates), and for a QUIC VIP how its packets were routed
// (by connection ID, fallback, unknown server ID; per VIP and DIP); the
// table versions as they change; the software tier's workers; the data
// plane's counters.

import { h, count, num, pct, rate, clock, table, cell, stat, rates, values } from "./dom.js";
import { timeChart, color } from "./chart.js";

export const kind = "serve";

export function fits(data) {
  return Array.isArray(data?.vips) && typeof data?.counters === "object";
}

/** What the footer says about changing the balancer. */
export function writes() {
  return ["change weights with ", h("code", {}, "weir dip"), " or the API."];
}

export function title(data) {
  const n = data.vips.length;
  return `${n} VIP${n === 1 ? "" : "s"}`;
}

/** Table version changes seen since the page opened, newest first. */
let changes = [];
const KEEP_CHANGES = 50;

export function reset() {
  changes = [];
}

const dipIds = (v) => (v?.dips ?? []).map((d) => d.id);

/** What changed between two samples of a VIP, in words. */
function diff(a, b) {
  const was = new Map((a.dips ?? []).map((d) => [d.id, d]));
  const out = [];
  for (const d of b.dips ?? []) {
    const o = was.get(d.id);
    if (!o) out.push(`+${d.id}`);
    else if (o.weight !== d.weight) out.push(`${d.id} weight ${o.weight ?? "–"}→${d.weight ?? "–"}`);
    was.delete(d.id);
  }
  for (const id of was.keys()) out.push(`−${id}`);
  return out;
}

export function observe(prev, cur) {
  const before = new Map(prev.data.vips.map((v) => [v.name, v]));
  for (const v of cur.data.vips) {
    const o = before.get(v.name);
    if (!o || o.table_version === v.table_version) continue;
    changes.unshift({ t: cur.t, vip: v.name, from: o.table_version, to: v.table_version, what: diff(o, v) });
  }
  changes.length = Math.min(changes.length, KEEP_CHANGES);
}

const vipOf = (data, name) => data.vips.find((v) => v.name === name);
const dipOf = (data, vip, id) => vipOf(data, vip)?.dips?.find((d) => d.id === id);

function overview(hist) {
  const d = hist[hist.length - 1].data;
  const c = d.controller;
  const conns = d.connections ?? {};
  const newConns = rates(hist, (x) => x.counters?.conn_new).pop()?.[1];
  const rx = rates(hist, (x) => x.counters?.rx).pop()?.[1];
  return h(
    "section",
    { class: "overview" },
    stat("established", "connections", conns.established, count(conns.established)),
    stat("half_open", "half-open", conns.half_open, count(conns.half_open)),
    stat("conn_new_rate", "new connections", newConns, rate(newConns)),
    stat("rx_rate", "packets in", rx, rate(rx)),
    c
      ? [
          stat("policy", "controller", c.policy, `${c.policy}, m = ${c.m}, every ${c.update_interval_ms} ms`),
          stat("tables_published", "tables published", c.tables_published, count(c.tables_published)),
        ]
      : stat("policy", "controller", "", "none (configured weights)"),
    d.workers ? stat("workers", "software tier", d.workers.length, `${d.workers.length} worker(s)`) : null,
  );
}

/**
 * Share of the VIP's new connections per DIP: the controller's (over its
 * last second) where it has one, otherwise this DIP's part of the VIP's
 * new connections between two samples.
 */
function shares(hist, vip, id) {
  const own = values(hist, (x) => dipOf(x, vip, id)?.share);
  if (own.some((p) => p[1] !== null)) return own;
  const d = rates(hist, (x) => dipOf(x, vip, id)?.new_conns);
  const all = rates(hist, (x) => vipOf(x, vip)?.new_conns);
  return d.map(([t, v], i) => [t, v !== null && all[i][1] > 0 ? v / all[i][1] : null]);
}

function vipCharts(hist, v, span) {
  const now = hist[hist.length - 1].t;
  const ids = dipIds(v);
  const hasController = hist[hist.length - 1].data.controller != null;
  const per = (key, title, get, opts = {}) =>
    timeChart({
      key,
      title,
      now,
      span,
      format: num,
      series: ids.map((id, i) => ({ name: id, color: color(i), points: get(id) })),
      ...opts,
    });
  const estimate = hasController
    ? "no estimate yet: the controller needs telemetry (an agent, or passive) and finished requests"
    : "no controller runs: add [controller] for estimates";
  return h(
    "div",
    { class: "charts" },
    per("share", "share of new connections", (id) => shares(hist, v.name, id), {
      format: pct,
      yMax: 1,
      note: hasController ? "the controller's, over 1 s" : "from the new-connection counters",
    }),
    per("new_conns", "new connections", (id) => rates(hist, (x) => dipOf(x, v.name, id)?.new_conns), {
      format: num,
      note: "per second",
    }),
    per("capacity", "capacity C", (id) => values(hist, (x) => dipOf(x, v.name, id)?.capacity), {
      note: "requests/s, estimated",
      empty: estimate,
    }),
    per("load", "load R", (id) => values(hist, (x) => dipOf(x, v.name, id)?.load), {
      note: "requests/s",
      empty: estimate,
    }),
    per("weight", "weight in force (AWFD class)", (id) => values(hist, (x) => dipOf(x, v.name, id)?.weight), {
      step: true,
      integer: true,
      note: `classes now: ${v.classes?.length ? v.classes.join(", ") : "none"}`,
    }),
    timeChart({
      key: "table_version",
      title: "table version",
      now,
      span,
      step: true,
      integer: true,
      fromZero: false,
      format: count,
      note: "every change publishes one",
      series: [{ name: v.name, color: color(0), points: values(hist, (x) => vipOf(x, v.name)?.table_version) }],
    }),
  );
}

function health(d) {
  if (d.healthy === true) return h("span", { class: "badge ok" }, "healthy");
  if (d.healthy === false) return h("span", { class: "badge bad" }, "failing");
  return h("span", { class: "badge" }, "unchecked");
}

function agent(d) {
  if (!d.agent) return "–";
  const errs = Object.entries(d.agent_errors ?? {}).map(([k, n]) => `${k} ${n}`);
  return [d.agent_silent ? "silent" : "ok", errs.length ? ` (${errs.join(", ")})` : ""].join("");
}

function dipTable(hist, v) {
  const newRate = (id) => rates(hist, (x) => dipOf(x, v.name, id)?.new_conns).pop()?.[1];
  return table(
    "dips",
    ["DIP", "health", "weight (file)", "weight", "class", "share", "new conns", "new/s", "packets",
      "capacity", "load", "available", "agent", "last error"],
    (v.dips ?? []).map((d) =>
      h(
        "tr",
        { "data-dip": d.id, class: d.config_weight === 0 ? "drained" : null },
        h("td", { class: "id" }, d.id),
        h("td", { "data-field": "healthy", "data-value": d.healthy ?? "" }, health(d)),
        cell("config_weight", d.config_weight, count(d.config_weight)),
        cell("weight", d.weight, count(d.weight)),
        cell("class", d.class, count(d.class)),
        cell("share", d.share, pct(d.share)),
        cell("new_conns", d.new_conns, count(d.new_conns)),
        cell("new_conns_rate", newRate(d.id), rate(newRate(d.id))),
        cell("packets", d.packets, count(d.packets)),
        cell("capacity", d.capacity, num(d.capacity)),
        cell("load", d.load, num(d.load)),
        cell("available", d.available, num(d.available)),
        cell("agent", d.agent ?? "", agent(d)),
        cell("last_error", d.last_error ?? "", d.last_error ?? ""),
      ),
    ),
  );
}

const QUIC_COUNTERS = ["cid_routed", "cid_fallback", "cid_unknown", "reused_tuple"];

/** A QUIC VIP's routing counters: the VIP's, then each DIP's with its server ID. */
function quicTable(v) {
  if (!v.quic) return null;
  const counters = (q) => QUIC_COUNTERS.map((k) => cell(k, q?.[k], count(q?.[k])));
  return h(
    "div",
    { class: "quic" },
    h("h3", {}, `QUIC: server_id_len ${v.quic.server_id_len}, config_id ${v.quic.config_id}`),
    table(
      "quic",
      ["", "server ID", "CID-routed", "fallback", "unknown ID", "reused tuple"],
      [
        h("tr", { "data-quic": "vip" }, h("td", { class: "id" }, "VIP"), h("td", {}, ""), ...counters(v.quic)),
        ...(v.dips ?? []).map((d) =>
          h(
            "tr",
            { "data-quic": d.id },
            h("td", { class: "id" }, d.id),
            cell("server_id", d.quic?.server_id, d.quic?.server_id ?? "–"),
            ...counters(d.quic),
          ),
        ),
      ],
    ),
  );
}

function vipSection(hist, v, span) {
  return h(
    "section",
    { class: "vip", "data-vip": v.name },
    h(
      "h2",
      {},
      v.name,
      h("small", {}, ` ${v.address}:${v.port} ${v.protocol} ${v.mode}`),
      h("span", { class: "version", "data-field": "table_version", "data-value": v.table_version ?? "" },
        `table v${v.table_version ?? "–"}`),
    ),
    h(
      "p",
      { class: "facts" },
      `${count(v.new_conns)} new connections, ${count(v.packets)} packets, ${num(v.bytes)} bytes; `,
      v.health_checks ? "health-checked" : "no health checks",
    ),
    vipCharts(hist, v, span),
    dipTable(hist, v),
    quicTable(v),
  );
}

function changeLog() {
  return h(
    "section",
    { class: "changes" },
    h("h2", {}, "Table version changes"),
    changes.length === 0
      ? h("p", { class: "empty" }, "none since this page opened")
      : h(
          "ol",
          { class: "log" },
          changes.map((c) =>
            h(
              "li",
              { "data-vip": c.vip, "data-version": c.to ?? "" },
              h("time", {}, clock(c.t)),
              ` ${c.vip}: v${c.from ?? "–"} → v${c.to ?? "–"}`,
              c.what.length ? h("small", {}, ` ${c.what.join(", ")}`) : null,
            ),
          ),
        ),
  );
}

/** HNLB's utilization (eq. 2/3): the busy fraction of cycles times the
 * busiest queue's mean burst over the largest burst. */
function utilization(u) {
  if (!u || !(u.cycles > 0) || !(u.max_burst > 0)) return null;
  const q = u.busiest_queue?.bursts > 0 ? u.busiest_queue : u;
  const fill = q.bursts > 0 ? q.packets / q.bursts / u.max_burst : 0;
  return (u.busy_cycles / u.cycles) * fill;
}

const busy = (u) => (u && u.cycles > 0 ? u.busy_cycles / u.cycles : null);
const sum = (list, k) => (list ?? []).reduce((a, x) => a + (x[k] ?? 0), 0);

function workersSection(hist, span) {
  const now = hist[hist.length - 1].t;
  const ws = hist[hist.length - 1].data.workers;
  const cpus = ws.map((w) => w.cpu);
  const worker = (x, cpu) => x.workers?.find((w) => w.cpu === cpu);
  const chart = (key, t, f) =>
    timeChart({
      key,
      title: t,
      now,
      span,
      format: pct,
      yMax: 1,
      series: cpus.map((cpu, i) => ({
        name: `cpu ${cpu}`,
        color: color(i),
        points: values(hist, (x) => f(worker(x, cpu)?.utilization)),
      })),
    });
  return h(
    "section",
    { class: "workers" },
    h("h2", {}, "Software tier: workers"),
    h("div", { class: "charts" },
      chart("utilization", "utilization (HNLB eq. 2/3)", utilization),
      chart("busy", "busy polls (share of cycles)", busy)),
    table(
      "workers",
      ["worker", "utilization", "busy", "packets", "bursts", "connections", "half-open", "rx", "tx",
        "rx ring full", "fill ring empty", "tx ring full", "fast table", "error"],
      ws.map((w) => {
        const u = w.utilization;
        const f = w.offload;
        return h(
          "tr",
          { "data-worker": w.cpu },
          h("td", { class: "id" }, `cpu ${w.cpu}`),
          cell("utilization", utilization(u), pct(utilization(u))),
          cell("busy", busy(u), pct(busy(u))),
          cell("packets", u?.packets, count(u?.packets)),
          cell("bursts", u?.bursts, count(u?.bursts)),
          cell("connections", w.connections, count(w.connections)),
          cell("half_open", w.half_open, count(w.half_open)),
          cell("rx", sum(w.sockets, "rx_packets"), count(sum(w.sockets, "rx_packets"))),
          cell("tx", sum(w.sockets, "tx_packets"), count(sum(w.sockets, "tx_packets"))),
          cell("rx_ring_full", sum(w.sockets, "rx_ring_full"), count(sum(w.sockets, "rx_ring_full"))),
          cell("fill_ring_empty", sum(w.sockets, "fill_ring_empty"), count(sum(w.sockets, "fill_ring_empty"))),
          cell("tx_ring_full", sum(w.sockets, "tx_ring_full"), count(sum(w.sockets, "tx_ring_full"))),
          cell("fast_table", f?.occupancy ?? "", f ? `${f.occupancy}/${f.capacity}, +${f.promoted} −${
            (f.demoted_idle ?? 0) + (f.demoted_closed ?? 0) + (f.demoted_light ?? 0)}` : "–"),
          cell("error", w.error ?? "", w.error ?? ""),
        );
      }),
    ),
  );
}

function countersSection(hist, span) {
  const d = hist[hist.length - 1].data;
  const now = hist[hist.length - 1].t;
  const names = Object.keys(d.counters).sort();
  const shown = names.filter((n) => d.counters[n] > 0);
  const flows = ["rx", "tx", "redirect", "to_software", "conn_new"];
  return h(
    "section",
    { class: "counters" },
    h("h2", {}, "Data-plane counters"),
    h("div", { class: "charts" }, timeChart({
      key: "packets",
      title: "packets and connections",
      note: "per second",
      now,
      span,
      format: num,
      series: flows.filter((n) => n in d.counters).map((n, i) => ({
        name: n,
        color: color(i),
        points: rates(hist, (x) => x.counters?.[n]),
      })),
    })),
    table(
      "counters",
      ["counter", "total", "per second"],
      shown.map((n) => {
        const r = rates(hist, (x) => x.counters?.[n]).pop()?.[1];
        return h("tr", { "data-counter": n }, h("td", { class: "id" }, n),
          cell("value", d.counters[n], count(d.counters[n])), cell("rate", r, rate(r)));
      }),
    ),
    h("p", { class: "note" }, `${names.length - shown.length} counters at 0 are not listed.`),
  );
}

export function render(hist, span) {
  const d = hist[hist.length - 1].data;
  return [
    overview(hist),
    ...d.vips.map((v) => vipSection(hist, v, span)),
    changeLog(),
    d.workers ? workersSection(hist, span) : null,
    countersSection(hist, span),
  ].filter(Boolean);
}
