// dronelab trace viewer UI: search (Jaeger query API) and a waterfall per trace.
// No framework and no network beyond this server: everything here is served by the binary.
"use strict";

const COLORS = ["#2e90fa", "#12b76a", "#7a5af8", "#ee46bc", "#0ba5ec", "#66c61c", "#875bf7", "#15b79e"];
const serviceColors = new Map();
const colorOf = (service) => {
  if (!serviceColors.has(service)) serviceColors.set(service, COLORS[serviceColors.size % COLORS.length]);
  return serviceColors.get(service);
};

const $ = (id) => document.getElementById(id);
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

async function api(path) {
  const response = await fetch(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || (body.errors && body.errors[0].msg) || response.statusText);
  return body;
}

const ms = (us) => (us >= 1e6 ? (us / 1e6).toFixed(2) + " s" : (us / 1e3).toFixed(1) + " ms");
const tag = (span, key) => {
  const t = span.tags.find((t) => t.key === key);
  return t ? t.value : undefined;
};
// NAMES (the span attribute names) comes from /assets/names.js, which the server writes
// from the same constants the services use.
const isError = (span) => tag(span, NAMES.ERROR) === true || String(tag(span, NAMES.DB_RESPONSE_STATUS_CODE)) === "429";

// ---- search -------------------------------------------------------------------------

async function loadServices() {
  const services = (await api("/api/services")).data;
  services.forEach(colorOf); // sorted: the same service keeps its colour on every page
  const select = $("service");
  // A search names its service, as Jaeger's API requires (no "all").
  select.replaceChildren(...services.map((s) => el("option", { value: s }, s)));
  if (!services.length) select.append(el("option", { value: "" }, "no spans received yet"));
  const params = new URLSearchParams(location.search);
  if (params.get("service")) select.value = params.get("service");
  else if (services.includes("gateway")) select.value = "gateway";
  await loadOperations();
  for (const name of ["operation", "lookback", "minDuration", "maxDuration", "limit"]) {
    if (params.has(name)) $(name).value = params.get(name);
  }
  if (params.has("tags")) $("tags").value = tagsToText(params.get("tags"));
}

async function loadOperations() {
  const select = $("operation");
  select.replaceChildren(el("option", { value: "" }, "all"));
  const service = $("service").value;
  if (!service) return;
  const ops = (await api(`/api/services/${encodeURIComponent(service)}/operations`)).data;
  for (const o of ops) select.append(el("option", { value: o }, o));
}

// "k=v k2=v2" (as typed) <-> the JSON object the API takes.
function textToTags(text) {
  const tags = {};
  for (const part of text.trim().split(/\s+/).filter(Boolean)) {
    const i = part.indexOf("=");
    if (i <= 0) throw new Error(`tag "${part}" is not key=value`);
    tags[part.slice(0, i)] = part.slice(i + 1);
  }
  return tags;
}
function tagsToText(json) {
  try {
    return Object.entries(JSON.parse(json)).map(([k, v]) => `${k}=${v}`).join(" ");
  } catch (_) {
    return "";
  }
}

async function search(event) {
  if (event) event.preventDefault();
  $("search-error").textContent = "";
  const params = new URLSearchParams();
  for (const name of ["service", "operation", "lookback", "minDuration", "maxDuration", "limit"]) {
    const v = $(name).value.trim();
    if (v) params.set(name, v);
  }
  try {
    const tags = textToTags($("tags").value);
    if (Object.keys(tags).length) params.set("tags", JSON.stringify(tags));
    history.replaceState(null, "", "/search?" + params);
    const traces = (await api("/api/traces?" + params)).data;
    showResults(traces);
  } catch (e) {
    $("search-error").textContent = e.message;
  }
}

function showResults(traces) {
  $("trace").hidden = true;
  const results = $("results");
  results.hidden = false;
  if (!traces.length) {
    results.replaceChildren(el("p", { class: "muted" }, "No traces match."));
    return;
  }
  const rows = traces.map((t) => {
    const root = rootOf(t);
    const start = Math.min(...t.spans.map((s) => s.startTime));
    const end = Math.max(...t.spans.map((s) => s.startTime + s.duration));
    const errors = t.spans.filter(isError).length;
    const services = [...new Set(t.spans.map((s) => t.processes[s.processID].serviceName))];
    return el("tr", { class: "result-row", "data-trace-id": t.traceID },
      el("td", {}, el("a", { href: `/trace/${t.traceID}` }, `${t.processes[root.processID].serviceName}: ${root.operationName}`)),
      el("td", {}, ms(end - start)),
      el("td", {}, String(t.spans.length), errors ? el("span", { class: "badge err" }, `${errors} errors`) : null),
      el("td", {}, ...services.map((s) => el("span", { class: "badge" }, el("span", { class: "chip", style: `background:${colorOf(s)}` }), s))),
      el("td", { class: "muted" }, new Date(start / 1000).toLocaleTimeString()));
  });
  results.replaceChildren(el("table", { class: "results" },
    el("thead", {}, el("tr", {}, ...["Trace", "Duration", "Spans", "Services", "Started"].map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows)));
}

// ---- one trace -----------------------------------------------------------------------

function rootOf(trace) {
  const ids = new Set(trace.spans.map((s) => s.spanID));
  const roots = trace.spans.filter((s) => !s.references.some((r) => r.refType === "CHILD_OF" && ids.has(r.spanID)));
  return roots.sort((a, b) => a.startTime - b.startTime)[0] || trace.spans[0];
}

// Depth-first order, children by start time, with each span's depth.
function ordered(trace) {
  const ids = new Set(trace.spans.map((s) => s.spanID));
  const children = new Map();
  const roots = [];
  for (const s of trace.spans) {
    const parent = s.references.find((r) => r.refType === "CHILD_OF" && ids.has(r.spanID));
    if (parent) {
      if (!children.has(parent.spanID)) children.set(parent.spanID, []);
      children.get(parent.spanID).push(s);
    } else roots.push(s);
  }
  const out = [];
  const visit = (span, depth) => {
    out.push({ span, depth });
    for (const c of (children.get(span.spanID) || []).sort((a, b) => a.startTime - b.startTime)) visit(c, depth + 1);
  };
  for (const r of roots.sort((a, b) => a.startTime - b.startTime)) visit(r, 0);
  return out;
}

function stat(label, value, bad) {
  return el("div", { class: bad ? "stat bad" : "stat" }, el("b", {}, String(value)), label);
}

function showSummary(summary) {
  const util = summary.services.filter((s) => s.cosmosAttempts > 0);
  $("summary").replaceChildren(
    stat("duration", ms(summary.durationUs)),
    stat("spans", summary.spans),
    stat("Cosmos calls", summary.cosmosAttempts),
    stat("429 throttled", summary.cosmosThrottled, summary.cosmosThrottled > 0),
    stat("request units", summary.requestUnits.toFixed(1)),
    stat("max concurrent Cosmos attempts, all services", summary.maxConcurrentAttempts),
    stat("lost to 429 retries", ms(summary.services.reduce((a, s) => a + s.retryWaitUs, 0)), summary.cosmosThrottled > 0),
    ...util.map((s) => stat(`${s.service}: calls · ranges · max in flight`,
      `${s.cosmosAttempts} · ${s.partitionRanges} · ${s.maxConcurrentAttempts}`)));
}

async function showTrace(traceId) {
  $("results").hidden = true;
  $("trace").hidden = false;
  $("trace-title").textContent = `Trace ${traceId}`;
  let trace, summary;
  try {
    [trace, summary] = await Promise.all([api(`/api/traces/${traceId}`), api(`/api/traces/${traceId}/summary`)]);
  } catch (e) {
    $("waterfall").replaceChildren(el("p", { class: "error-text" }, e.message));
    return;
  }
  trace = trace.data[0];
  summary = summary.data;
  const root = rootOf(trace);
  $("trace-title").textContent = `${trace.processes[root.processID].serviceName}: ${root.operationName} · ${traceId}`;
  showWarnings(trace);
  showSummary(summary);
  drawWaterfall(trace, summary);
}

// Warnings the viewer put on spans (a trace cut at the per-trace limit), as Jaeger UI
// shows them: above the trace, not hidden in one span's details.
function showWarnings(trace) {
  const warnings = trace.spans.flatMap((s) => (s.warnings || []).map((w) => `${s.operationName}: ${w}`));
  $("trace-warnings").replaceChildren(...warnings.map((w) => el("li", { class: "trace-warning" }, w)));
  $("trace-warnings").hidden = warnings.length === 0;
}

function drawWaterfall(trace, summary) {
  const start = Math.min(...trace.spans.map((s) => s.startTime));
  const end = Math.max(...trace.spans.map((s) => s.startTime + s.duration));
  const total = Math.max(end - start, 1);
  const pct = (t) => (100 * (t - start)) / total;
  const waits = new Map(summary.retryWaits.map((w) => [w.throttledSpanID, w]));
  const services = [...new Set(trace.spans.map((s) => trace.processes[s.processID].serviceName))];
  $("legend").replaceChildren(...services.map((s) => el("span", { class: "badge" }, el("span", { class: "chip", style: `background:${colorOf(s)}` }), s)),
    el("span", { class: "badge err" }, "error / 429"),
    el("span", { class: "badge", style: "background:#fef0c7" }, "retry wait"));
  const axis = el("div", { class: "axis" }, el("div", { class: "label" }, "service · operation"),
    el("div", { class: "timeline" }, ...[0, 0.25, 0.5, 0.75, 1].map((f) => el("span", { class: "tick", style: `left:${f * 100}%` }, ms(f * total)))));
  const rows = ordered(trace).map(({ span, depth }) => {
    const service = trace.processes[span.processID].serviceName;
    const left = pct(span.startTime);
    const width = Math.max((100 * span.duration) / total, 0.15);
    const status = tag(span, NAMES.DB_RESPONSE_STATUS_CODE);
    const charge = tag(span, NAMES.COSMOS_REQUEST_CHARGE);
    const range = tag(span, NAMES.COSMOS_PARTITION_KEY_RANGE_ID);
    const wait = waits.get(span.spanID);
    const waited = wait && wait.duration > 0;
    const note = [ms(span.duration), status !== undefined ? `HTTP ${status}` : null,
      charge !== undefined ? `${Number(charge).toFixed(1)} RU` : null, range !== undefined ? `range ${range}` : null,
      waited ? `retry wait ${ms(wait.duration)}` : null]
      .filter(Boolean).join(" · ");
    const timeline = el("div", { class: "timeline" },
      el("div", { class: "bar", style: `left:${left}%;width:${width}%;background:${colorOf(service)}` }));
    let textEnd = left + width;
    if (waited) {
      const wl = pct(wait.startTime);
      const ww = (100 * wait.duration) / total;
      timeline.append(el("div", { class: "wait", style: `left:${wl}%;width:${ww}%`, title: "waiting to retry after 429" }));
      textEnd = Math.max(textEnd, wl + ww);
    }
    // The note goes right of the bar, else left of it, else inside it.
    const place = textEnd < 70 ? `left:calc(${textEnd}% + 4px)` : left > 30 ? `right:calc(${100 - left}% + 4px)` : `left:calc(${left}% + 4px);color:#fff`;
    timeline.append(el("span", { class: waited ? "bar-text wait-text" : "bar-text", style: place }, note));
    return el("div", { class: isError(span) ? "span-row error" : "span-row", role: "row", "data-span-id": span.spanID, "data-service": service,
        onclick: (e) => selectSpan(e.currentTarget, trace, span) },
      el("div", { class: "label", style: `padding-left:${6 + depth * 14}px`, title: `${service} ${span.operationName}` },
        el("span", { class: "chip", style: `background:${colorOf(service)}` }), el("span", { class: "name" }, span.operationName),
        el("span", { class: "muted" }, ` ${service}`)),
      timeline);
  });
  $("waterfall").replaceChildren(axis, ...rows);
  $("details").hidden = true;
}

function selectSpan(row, trace, span) {
  for (const r of document.querySelectorAll(".span-row.selected")) r.classList.remove("selected");
  row.classList.add("selected");
  const process = trace.processes[span.processID];
  const line = (k, v) => el("tr", {}, el("td", {}, k), el("td", {}, typeof v === "string" ? v : JSON.stringify(v)));
  const details = $("details");
  details.replaceChildren(
    el("h1", {}, `${process.serviceName}: ${span.operationName}`),
    el("table", {},
      line("spanID", span.spanID),
      line("start", new Date(span.startTime / 1000).toISOString()),
      line("duration", ms(span.duration)),
      ...span.tags.map((t) => line(t.key, t.value)),
      ...process.tags.map((t) => line(`process.${t.key}`, t.value)),
      ...span.logs.map((l) => line(`log @${ms(l.timestamp - span.startTime)}`, Object.fromEntries(l.fields.map((f) => [f.key, f.value]))))));
  details.hidden = false;
}

// ---- start ---------------------------------------------------------------------------

async function showStats() {
  try {
    const s = await api("/api/stats");
    $("store-stats").textContent = `${s.traces} traces · ${s.spans} spans · ${(s.bytes / 1048576).toFixed(1)} of ${(s.maxBytes / 1048576).toFixed(0)} MiB stored`;
  } catch (_) { /* the header is informational */ }
}

async function start() {
  $("tags").placeholder = `${NAMES.DB_RESPONSE_STATUS_CODE}=429 ${NAMES.ERROR}=true`;
  $("search").addEventListener("submit", search);
  $("service").addEventListener("change", () => loadOperations().catch((e) => ($("search-error").textContent = e.message)));
  showStats();
  await loadServices().catch((e) => ($("search-error").textContent = e.message));
  const match = location.pathname.match(/^\/trace\/([0-9a-fA-F]+)$/);
  if (match) await showTrace(match[1]);
  else await search();
}

start();
