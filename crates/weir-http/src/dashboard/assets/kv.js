// weir dashboard: the view of a memcached switch (weir kv's
// /api/v1/status): for each pool it runs, the pool, its hit ratios over time
// (gets through the TCP proxy; the XDP cache's GETs with the UDP path),
// requests per server over time and in a table with each server's role
// (ring or failover server), state and the ejected servers it serves for,
// the hot keys, errors and the XDP counters.

import { h, count, num, pct, rate, table, cell, stat, rates, clock } from "./dom.js";
import { timeChart, color } from "./chart.js";

export const kind = "kv";

export function fits(data) {
  return (
    Array.isArray(data?.pools) &&
    data.pools.length > 0 &&
    data.pools.every((p) => typeof p?.pool === "string" && typeof p?.stats === "object")
  );
}

export function title(data) {
  const names = data.pools.map((p) => p.pool);
  return names.length === 1 ? `pool ${names[0]}` : `pools ${names.join(", ")}`;
}

/** What the footer says about changing the pool: weir kv has no write API. */
export function writes() {
  return ["add or remove pools in the configuration file of ", h("code", {}, "weir kv"), ", then run ", h("code", {}, "weir kv reload"), "; change a running pool's servers with a restart."];
}

export function reset() {}

export function observe() {}

/** `hits / lookups` between two samples, for each pair of the history. */
function ratios(hist, hits, lookups) {
  const dh = rates(hist, hits);
  const dl = rates(hist, lookups);
  return dh.map(([t, v], i) => [t, v !== null && dl[i][1] > 0 ? Math.min(1, v / dl[i][1]) : null]);
}

const ratio = (hits, lookups) => (lookups > 0 ? hits / lookups : null);
const cacheLookups = (u) => (u ? u.cache_hits + u.cache_misses : undefined);

function overview(hist) {
  const d = hist[hist.length - 1].data;
  const st = d.stats;
  const u = d.udp;
  const reqs = rates(hist, (x) => x.stats?.requests).pop()?.[1];
  const getRatio = ratio(st.get_hits, st.get_keys);
  const cacheRatio = u ? ratio(u.cache_hits, cacheLookups(u)) : null;
  return h(
    "section",
    { class: "overview" },
    stat("pool", "pool", d.pool, `${d.pool} on ${d.listen}`),
    stat("hash", "routing", d.hash, `${d.hash} / ${d.distribution}`),
    stat("requests", "requests (TCP)", st.requests, count(st.requests)),
    stat("requests_rate", "requests", reqs, rate(reqs)),
    stat("client_connections", "clients", st.client_connections, count(st.client_connections)),
    stat("hit_ratio", "get hit ratio (TCP)", getRatio, pct(getRatio)),
    u
      ? [
          stat("cache_hit_ratio", "XDP cache hit ratio", cacheRatio, u.cache_enabled ? pct(cacheRatio) : "cache off"),
          stat("cached_keys", "cached keys", u.cached_keys, count(u.cached_keys)),
        ]
      : stat("udp", "UDP path", "", "off (TCP only)"),
  );
}

function charts(hist, span) {
  const d = hist[hist.length - 1].data;
  const now = hist[hist.length - 1].t;
  const hits = [
    {
      name: "gets (TCP)",
      color: color(0),
      points: ratios(hist, (x) => x.stats?.get_hits, (x) => x.stats?.get_keys),
    },
  ];
  if (d.udp) {
    hits.push({
      name: "XDP cache (UDP)",
      color: color(1),
      points: ratios(hist, (x) => x.udp?.cache_hits, (x) => cacheLookups(x.udp)),
    });
  }
  const perServer = d.servers.map((srv, i) => ({
    name: srv.name,
    color: color(i),
    points: rates(hist, (x) =>
      (x.stats?.server_requests?.[i] ?? 0) + (x.udp?.server_requests?.[i] ?? 0)),
  }));
  return h(
    "div",
    { class: "charts" },
    timeChart({
      key: "hit_ratio",
      title: "hit ratio",
      note: "between samples",
      now,
      span,
      format: pct,
      yMax: 1,
      series: hits,
      empty: "no gets yet",
    }),
    timeChart({
      key: "server_requests",
      title: "requests per server",
      note: d.udp ? "per second, TCP + UDP" : "per second",
      now,
      span,
      format: num,
      series: perServer,
    }),
  );
}

function servers(hist) {
  const d = hist[hist.length - 1].data;
  const tcp = d.stats.server_requests ?? [];
  const udp = d.udp?.server_requests;
  const total = (i) => (tcp[i] ?? 0) + (udp?.[i] ?? 0);
  const all = d.servers.reduce((a, _, i) => a + total(i), 0);
  const now = hist[hist.length - 1].t;
  return table(
    "servers",
    ["server", "address", "role", "state", "serving for", "last error", "requests (TCP)", "requests (UDP, XDP)", "share", "per second"],
    d.servers.map((srv, i) => {
      const r = rates(hist, (x) =>
        (x.stats?.server_requests?.[i] ?? 0) + (x.udp?.server_requests?.[i] ?? 0)).pop()?.[1];
      const since = srv.since_unix_ms ? ` for ${age(now - srv.since_unix_ms)}` : "";
      const error = srv.last_error ? `${srv.last_error} at ${clock(srv.last_error_unix_ms)}` : "–";
      return h(
        "tr",
        { "data-server": srv.name, "data-state": srv.state },
        h("td", { class: "id" }, srv.name),
        h("td", { class: "address" }, srv.address),
        cell("role", srv.role ?? "ring", srv.role === "failover" ? "failover server" : "ring"),
        cell("state", srv.state, `${srv.state}${since}`),
        cell("serving_for", (srv.serving_for ?? []).join(","), srv.serving_for?.length ? srv.serving_for.join(", ") : "–"),
        cell("last_error", srv.last_error ?? "", error),
        cell("requests", tcp[i] ?? 0, count(tcp[i] ?? 0)),
        cell("udp_requests", udp?.[i] ?? "", udp ? count(udp[i] ?? 0) : "–"),
        cell("share", all > 0 ? total(i) / all : "", all > 0 ? pct(total(i) / all) : "–"),
        cell("rate", r, rate(r)),
      );
    }),
  );
}

/** `12 s`, `5 min`, `2 h`: a duration in ms, roughly. */
function age(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

function hotKeys(d) {
  return h(
    "section",
    { class: "hot" },
    h("h2", {}, "Hot keys"),
    d.hot_keys.length === 0
      ? h("p", { class: "empty" }, d.udp ? "none yet (the XDP path samples UDP GETs)" : "the UDP path is off: no hot keys")
      : h("ol", { class: "hot-keys" }, d.hot_keys.map((k) => h("li", { "data-key": k }, k))),
  );
}

function counters(d) {
  const st = d.stats;
  const rows = [
    ["client connections (total)", st.client_connections_total],
    ["get keys", st.get_keys],
    ["get hits", st.get_hits],
    ["get misses", st.get_misses],
    ["writes", st.writes],
    ["client errors", st.client_errors],
    ["server errors", st.server_errors],
    ["timeouts", st.timeouts],
    ["invalidations", st.invalidations],
    ["invalidation failures", st.invalidation_failures],
    ["binary refused", st.binary_refused],
  ];
  const u = d.udp;
  if (u) {
    rows.push(
      ["XDP cache hits", u.cache_hits],
      ["XDP cache misses", u.cache_misses],
      ["cache installs", u.installs],
      ["install races", u.install_races],
      ["evictions", u.evictions],
      ["fetch errors", u.fetch_errors],
      ...Object.entries(u.xdp ?? {}).filter(([, v]) => v > 0).map(([k, v]) => [`xdp ${k}`, v]),
    );
  }
  return h(
    "section",
    { class: "counters" },
    h("h2", {}, "Counters"),
    u ? h("p", { class: "facts" }, `UDP path: XDP program ${u.prog_id} on ${u.interfaces.join(", ")} port ${u.port}, ${u.forward}; ` +
      (u.bpf_run_cnt > 0 ? `${num(u.bpf_run_time_ns / u.bpf_run_cnt)} ns per run` : "run time not measured (kernel.bpf_stats_enabled=0)")) : null,
    table("counters", ["counter", "total"], rows.map(([k, v]) =>
      h("tr", { "data-counter": k }, h("td", { class: "id" }, k), cell("value", v, count(v))))),
  );
}

/** The history of the pool named `name`: the samples that have it. */
function poolHistory(hist, name) {
  return hist
    .map((x) => ({ t: x.t, data: x.data.pools?.find((p) => p.pool === name) }))
    .filter((x) => x.data);
}

export function render(hist, span) {
  const pools = hist[hist.length - 1].data.pools;
  return pools.flatMap((p) => renderPool(poolHistory(hist, p.pool), span));
}

function renderPool(hist, span) {
  const d = hist[hist.length - 1].data;
  return [
    overview(hist),
    h("section", { class: "pool", "data-pool": d.pool }, h("h2", {}, `Pool ${d.pool}`), charts(hist, span), servers(hist)),
    hotKeys(d),
    counters(d),
  ];
}
