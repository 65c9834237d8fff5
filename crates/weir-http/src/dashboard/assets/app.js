// weir dashboard: polls /api/v1/status on the server that sent the page,
// once a second, keeps the last samples, and hands them to the view that
// fits the JSON: weir serve's (it has "vips") or weir kv's (it has "pool"
// and "stats"). A failed poll keeps the last picture and says why.
//
// For tools that read the page: <body> carries data-kind (serve | kv),
// data-state (ok | error), data-polls (answers drawn so far),
// data-sampled-at (the newest sample's time, ms since the epoch) and
// data-ready="true" from the first answer drawn on (until then the page
// only says it is asking). A one-shot `chromium --headless --screenshot`
// needs --virtual-time-budget=3000 to get there (docs/src/memcached.md).

import { h, clock } from "./dom.js";
import * as serve from "./serve.js";
import * as kv from "./kv.js";

const STATUS = "/api/v1/status";
const POLL_MS = 1000;
const TIMEOUT_MS = 4000;
/** Samples kept: the charts show the last SPAN_MS of them, and at least
 * MIN_SPAN_MS, so that a page just opened does not stretch a few samples. */
const KEEP = 200;
const SPAN_MS = 120000;
const MIN_SPAN_MS = 30000;

const views = [serve, kv];
let view = null;
let hist = [];
let polls = 0;

function setState(state, text) {
  document.body.dataset.state = state;
  const el = document.getElementById("state");
  el.className = `state ${state}`;
  el.textContent = text;
}

async function fetchStatus() {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  try {
    const r = await fetch(STATUS, {
      cache: "no-store",
      headers: { accept: "application/json" },
      signal: ctl.signal,
    });
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new Error(body?.error ?? `${STATUS} answered ${r.status}`);
    if (body === null) throw new Error(`${STATUS} did not answer JSON`);
    return body;
  } catch (e) {
    throw e.name === "AbortError" ? new Error(`no answer within ${TIMEOUT_MS / 1000} s`) : e;
  } finally {
    clearTimeout(timer);
  }
}

function draw(data) {
  const fits = views.find((v) => v.fits(data));
  if (!fits) throw new Error(`${STATUS} holds neither weir serve's nor weir kv's status`);
  if (fits !== view) {
    view = fits;
    hist = [];
    view.reset();
  }
  // The server's clock when it has one (weir serve): the spacing of its
  // reads, not of the browser's timers, is what counters changed over.
  const t = Number.isFinite(data.at_unix_ms) ? data.at_unix_ms : Date.now();
  if (hist.length > 0) view.observe(hist[hist.length - 1], { t, data });
  hist.push({ t, data });
  if (hist.length > KEEP) hist.shift();
  polls += 1;
  document.body.dataset.kind = view.kind;
  document.body.dataset.polls = String(polls);
  document.body.dataset.sampledAt = String(t);
  document.getElementById("kind").textContent = view.title(data);
  document.getElementById("writes").replaceChildren(...view.writes());
  document.title = `weir ${view.kind}: ${view.title(data)}`;
  const span = Math.min(SPAN_MS, Math.max(MIN_SPAN_MS, t - hist[0].t));
  document.getElementById("main").replaceChildren(...view.render(hist, span));
  setState("ok", `live, updated ${clock(t)}`);
  document.body.dataset.ready = "true";
}

async function poll() {
  const started = performance.now();
  try {
    draw(await fetchStatus());
  } catch (e) {
    const when = hist.length ? `; showing ${clock(hist[hist.length - 1].t)}` : "";
    setState("error", `${e.message}${when}`);
  }
  setTimeout(poll, Math.max(0, POLL_MS - (performance.now() - started)));
}

document.getElementById("main").replaceChildren(h("p", { class: "empty" }, `asking ${STATUS}…`));
poll();
