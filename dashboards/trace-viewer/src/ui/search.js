// The search page: Jaeger's search form, a duration-over-time scatter of the results
// (a dot opens its trace), sorting, and a filter by the tuning run's stages.
"use strict";

// Stages the tuning run announced (POST /api/stages), by name.
let knownStages = [];

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
  for (const name of ["operation", "lookback", "minDuration", "maxDuration", "limit", "sort"]) {
    if (params.has(name)) $(name).value = params.get(name);
  }
  if (params.has("tags")) $("tags").value = tagsToText(params.get("tags"));
  await loadStages(params.get("stage"));
}

async function loadOperations() {
  const select = $("operation");
  select.replaceChildren(el("option", { value: "" }, "all"));
  const service = $("service").value;
  if (!service) return;
  const ops = (await api(`/api/services/${encodeURIComponent(service)}/operations`)).data;
  for (const o of ops) select.append(el("option", { value: o }, o));
}

async function loadStages(selected) {
  knownStages = (await api("/api/stages")).data;
  const select = $("stage");
  select.replaceChildren(el("option", { value: "" }, knownStages.length ? "any time" : "none announced"),
    ...knownStages.map((s) => el("option", { value: s.name }, s.name)));
  if (selected) select.value = selected;
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

let lastResults = [];

async function search(event) {
  if (event) event.preventDefault();
  $("search-error").textContent = "";
  const shown = new URLSearchParams();
  for (const name of ["service", "operation", "lookback", "minDuration", "maxDuration", "limit", "stage", "sort"]) {
    const v = $(name).value.trim();
    if (v) shown.set(name, v);
  }
  try {
    const tags = textToTags($("tags").value);
    if (Object.keys(tags).length) shown.set("tags", JSON.stringify(tags));
    history.replaceState(null, "", "/search?" + shown);
    const query = new URLSearchParams(shown);
    query.delete("stage");
    query.delete("sort");
    const stage = knownStages.find((s) => s.name === shown.get("stage"));
    if (stage) {
      query.set("start", stage.start);
      query.set("end", stage.end);
      query.delete("lookback");
    }
    lastResults = (await api("/api/traces?" + query)).data.map(describe);
    showResults();
  } catch (e) {
    $("search-error").textContent = e.message;
  }
}

// What the results list and the scatter show of a trace.
function describe(trace) {
  const root = rootOf(trace);
  const { start, duration } = traceBounds(trace);
  return {
    id: trace.traceID,
    title: `${serviceOf(trace, root)}: ${root.operationName}`,
    start,
    duration,
    spans: trace.spans.length,
    errors: trace.spans.filter(isError).length,
    services: [...new Set(trace.spans.map((s) => serviceOf(trace, s)))],
  };
}

const ORDERS = {
  recent: (a, b) => b.start - a.start,
  longest: (a, b) => b.duration - a.duration,
  spans: (a, b) => b.spans - a.spans,
  errors: (a, b) => b.errors - a.errors || b.start - a.start,
};

function showResults() {
  showOnly("results");
  const results = $("results-list");
  if (!lastResults.length) {
    $("scatter").replaceChildren();
    results.replaceChildren(el("p", { class: "muted" }, "No traces match."));
    return;
  }
  const sorted = [...lastResults].sort(ORDERS[$("sort").value] || ORDERS.recent);
  drawScatter(sorted);
  const rows = sorted.map((t) =>
    el("tr", { class: "result-row", "data-trace-id": t.id },
      el("td", {}, el("a", { href: `/trace/${t.id}` }, t.title)),
      el("td", {}, ms(t.duration)),
      el("td", {}, String(t.spans), t.errors ? el("span", { class: "badge err" }, `${t.errors} errors`) : null),
      el("td", {}, ...t.services.map((s) => el("span", { class: "badge" }, el("span", { class: "chip", style: `background:${colorOf(s)}` }), s))),
      el("td", { class: "muted" }, new Date(t.start / 1000).toLocaleTimeString())));
  results.replaceChildren(el("table", { class: "results" },
    el("thead", {}, el("tr", {}, ...["Trace", "Duration", "Spans", "Services", "Started"].map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows)));
}

// Duration over start time, one dot per result; red when the trace has errors.
function drawScatter(traces) {
  // Drawn at the element's own width: a stretched viewBox would squash the dots.
  const width = Math.max($("scatter").clientWidth, 400), height = 160, pad = 36;
  const t0 = Math.min(...traces.map((t) => t.start));
  const t1 = Math.max(...traces.map((t) => t.start));
  const dMax = Math.max(...traces.map((t) => t.duration), 1);
  const x = (t) => pad + ((t - t0) / Math.max(t1 - t0, 1)) * (width - 2 * pad);
  const y = (d) => height - pad / 2 - (d / dMax) * (height - pad);
  const dots = traces.map((t) =>
    svg("circle", { class: t.errors ? "dot error" : "dot", cx: x(t.start).toFixed(1), cy: y(t.duration).toFixed(1), r: 4,
        "data-trace-id": t.id, onclick: () => { location.href = `/trace/${t.id}`; } },
      svg("title", {}, `${t.title} · ${ms(t.duration)}`)));
  $("scatter").replaceChildren(svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "scatter", role: "img", "aria-label": "duration over time" },
    svg("line", { x1: pad, y1: height - pad / 2, x2: width - pad, y2: height - pad / 2, class: "axis-line" }),
    svg("text", { x: 2, y: 12, class: "axis-text" }, ms(dMax)),
    svg("text", { x: 2, y: height - pad / 2, class: "axis-text" }, "0"),
    svg("text", { x: pad, y: height - 2, class: "axis-text" }, new Date(t0 / 1000).toLocaleTimeString()),
    svg("text", { x: width - pad, y: height - 2, class: "axis-text", "text-anchor": "end" }, new Date(t1 / 1000).toLocaleTimeString()),
    ...dots));
}

function startSearch() {
  $("tags").placeholder = `${NAMES.DB_RESPONSE_STATUS_CODE}=429 ${NAMES.ERROR}=true`;
  $("search").addEventListener("submit", search);
  $("sort").addEventListener("change", () => {
    const params = new URLSearchParams(location.search);
    params.set("sort", $("sort").value);
    history.replaceState(null, "", location.pathname + "?" + params);
    showResults();
  });
  $("service").addEventListener("change", () => loadOperations().catch((e) => ($("search-error").textContent = e.message)));
  return loadServices().catch((e) => ($("search-error").textContent = e.message));
}
