// One trace: the per-trace Cosmos summary, the waterfall with its critical path (from
// /api/traces/{id}/critical-path, computed as Jaeger UI does), subtrees that collapse,
// keyboard navigation, the statistics table (count, total, self time) and the span table.
"use strict";

// Depth-first order, children by start time, with each span's depth and parent.
function ordered(trace) {
  const ids = new Set(trace.spans.map((s) => s.spanID));
  const children = new Map();
  const roots = [];
  for (const s of trace.spans) {
    const parent = parentOf(s, ids);
    if (parent) {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(s);
    } else roots.push(s);
  }
  const out = [];
  const visit = (span, depth, parent) => {
    const kids = (children.get(span.spanID) || []).sort((a, b) => a.startTime - b.startTime);
    out.push({ span, depth, parent, hasChildren: kids.length > 0 });
    for (const c of kids) visit(c, depth + 1, span.spanID);
  };
  for (const r of roots.sort((a, b) => a.startTime - b.startTime)) visit(r, 0, null);
  return out;
}

function stat(label, value, bad) {
  return el("div", { class: bad ? "stat bad" : "stat" }, el("b", {}, String(value)), label);
}

function showSummary(summary, path) {
  const util = summary.services.filter((s) => s.cosmosAttempts > 0);
  $("summary").replaceChildren(
    stat("duration", ms(summary.durationUs)),
    stat("spans", summary.spans),
    stat("spans on the critical path", new Set(path.criticalPath.map((s) => s.spanID)).size),
    stat("Cosmos calls", summary.cosmosAttempts),
    stat("429 throttled", summary.cosmosThrottled, summary.cosmosThrottled > 0),
    stat("request units", summary.requestUnits.toFixed(1)),
    stat("max concurrent Cosmos attempts, all services", summary.maxConcurrentAttempts),
    stat("lost to 429 retries", ms(summary.services.reduce((a, s) => a + s.retryWaitUs, 0)), summary.cosmosThrottled > 0),
    ...util.map((s) => stat(`${s.service}: calls · ranges · max in flight`,
      `${s.cosmosAttempts} · ${s.partitionRanges} · ${s.maxConcurrentAttempts}`)));
}

async function showTrace(traceId) {
  showOnly("trace");
  $("trace-title").textContent = `Trace ${traceId}`;
  let trace, summary, path;
  try {
    [trace, summary, path] = await Promise.all([api(`/api/traces/${traceId}`),
      api(`/api/traces/${traceId}/summary`), api(`/api/traces/${traceId}/critical-path`)]);
  } catch (e) {
    fail("waterfall", e);
    return;
  }
  trace = trace.data[0];
  summary = summary.data;
  path = path.data;
  const root = rootOf(trace);
  $("trace-title").textContent = `${serviceOf(trace, root)}: ${root.operationName} · ${traceId}`;
  $("compare-with").onsubmit = (e) => {
    e.preventDefault();
    const other = $("compare-id").value.trim();
    if (other) location.href = `/compare?a=${traceId}&b=${encodeURIComponent(other)}`;
  };
  showWarnings(trace);
  showSummary(summary, path);
  drawWaterfall(trace, summary, path);
  showStatistics(path.statistics);
  showSpanTable(trace, path);
}

// Warnings the viewer put on spans (a trace cut at the per-trace limit), as Jaeger UI
// shows them: above the trace, not hidden in one span's details.
function showWarnings(trace) {
  const warnings = trace.spans.flatMap((s) => (s.warnings || []).map((w) => `${s.operationName}: ${w}`));
  $("trace-warnings").replaceChildren(...warnings.map((w) => el("li", { class: "trace-warning" }, w)));
  $("trace-warnings").hidden = warnings.length === 0;
}

function drawWaterfall(trace, summary, path) {
  const { start, duration } = traceBounds(trace);
  const total = Math.max(duration, 1);
  const at = (t) => (100 * (t - start)) / total;
  const waits = new Map(summary.retryWaits.map((w) => [w.throttledSpanID, w]));
  const sections = new Map();
  for (const s of path.criticalPath) {
    if (!sections.has(s.spanID)) sections.set(s.spanID, []);
    sections.get(s.spanID).push(s);
  }
  const services = [...new Set(trace.spans.map((s) => serviceOf(trace, s)))];
  $("legend").replaceChildren(...services.map((s) => el("span", { class: "badge" }, el("span", { class: "chip", style: `background:${colorOf(s)}` }), s)),
    el("span", { class: "badge err" }, "error / 429"),
    el("span", { class: "badge", style: "background:#fef0c7" }, "retry wait"),
    el("span", { class: "badge" }, el("span", { class: "chip critical-chip" }), "critical path"),
    el("span", { class: "muted" }, " · keys: ↑ ↓ move, ← → collapse / expand, Enter details"));
  const axis = el("div", { class: "axis" }, el("div", { class: "label" }, "service · operation"),
    el("div", { class: "timeline" }, ...[0, 0.25, 0.5, 0.75, 1].map((f) => el("span", { class: "tick", style: `left:${f * 100}%` }, ms(f * total)))));
  const rows = ordered(trace).map((entry) => spanRow(trace, entry, { at, total, waits, sections }));
  $("waterfall").replaceChildren(axis, ...rows);
  $("details").hidden = true;
}

function spanRow(trace, { span, depth, parent, hasChildren }, { at, total, waits, sections }) {
  const service = serviceOf(trace, span);
  const left = at(span.startTime);
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
  for (const s of sections.get(span.spanID) || []) {
    timeline.append(el("div", { class: "critical", style: `left:${at(s.start)}%;width:${Math.max((100 * (s.end - s.start)) / total, 0.1)}%`,
      title: `critical path ${ms(s.end - s.start)}` }));
  }
  let textEnd = left + width;
  if (waited) {
    const wl = at(wait.startTime);
    const ww = (100 * wait.duration) / total;
    timeline.append(el("div", { class: "wait", style: `left:${wl}%;width:${ww}%`, title: "waiting to retry after 429" }));
    textEnd = Math.max(textEnd, wl + ww);
  }
  // The note goes right of the bar, else left of it, else inside it.
  const place = textEnd < 70 ? `left:calc(${textEnd}% + 4px)` : left > 30 ? `right:calc(${100 - left}% + 4px)` : `left:calc(${left}% + 4px);color:#fff`;
  timeline.append(el("span", { class: waited ? "bar-text wait-text" : "bar-text", style: place }, note));
  const classes = ["span-row", isError(span) ? "error" : "", sections.has(span.spanID) ? "on-critical-path" : ""].filter(Boolean).join(" ");
  const toggle = hasChildren
    ? el("button", { class: "toggle", "aria-label": "collapse", tabindex: "-1", onclick: (e) => { e.stopPropagation(); setCollapsed(e.currentTarget.closest(".span-row"), null); } }, "▾")
    : el("span", { class: "toggle-space" });
  return el("div", { class: classes, role: "row", tabindex: "0", "data-span-id": span.spanID, "data-parent-id": parent || "",
      "data-service": service, onclick: (e) => selectSpan(e.currentTarget, trace, span),
      onkeydown: (e) => onRowKey(e, trace, span) },
    el("div", { class: "label", style: `padding-left:${4 + depth * 14}px`, title: `${service} ${span.operationName}` },
      toggle, el("span", { class: "chip", style: `background:${colorOf(service)}` }), el("span", { class: "name" }, span.operationName),
      el("span", { class: "muted" }, ` ${service}`)),
    timeline);
}

// Collapses (or expands) a row's subtree; `collapse` null toggles.
function setCollapsed(row, collapse) {
  const toggle = row.querySelector(".toggle");
  if (!toggle) return;
  const collapsed = collapse === null ? !row.classList.contains("collapsed") : collapse;
  row.classList.toggle("collapsed", collapsed);
  toggle.textContent = collapsed ? "▸" : "▾";
  toggle.setAttribute("aria-label", collapsed ? "expand" : "collapse");
  const rows = [...document.querySelectorAll("#waterfall .span-row")];
  const hiddenParents = new Set();
  for (const r of rows) {
    const parent = r.dataset.parentId;
    const hidden = parent !== "" && hiddenParents.has(parent);
    r.hidden = hidden;
    if (hidden || r.classList.contains("collapsed")) hiddenParents.add(r.dataset.spanId);
  }
}

function onRowKey(event, trace, span) {
  const row = event.currentTarget;
  const visible = [...document.querySelectorAll("#waterfall .span-row")].filter((r) => !r.hidden);
  const i = visible.indexOf(row);
  const moves = { ArrowDown: visible[i + 1], ArrowUp: visible[i - 1] };
  if (event.key in moves) {
    if (moves[event.key]) moves[event.key].focus();
  } else if (event.key === "ArrowLeft") setCollapsed(row, true);
  else if (event.key === "ArrowRight") setCollapsed(row, false);
  else if (event.key === "Enter") selectSpan(row, trace, span);
  else return;
  event.preventDefault();
}

function selectSpan(row, trace, span) {
  for (const r of document.querySelectorAll(".span-row.selected")) r.classList.remove("selected");
  row.classList.add("selected");
  const process = trace.processes[span.processID];
  const line = (k, v) => el("tr", {}, el("td", {}, k), el("td", {}, typeof v === "string" ? v : JSON.stringify(v)));
  const details = $("details");
  details.replaceChildren(
    el("h2", {}, `${process.serviceName}: ${span.operationName}`),
    el("table", {},
      line("spanID", span.spanID),
      line("start", new Date(span.startTime / 1000).toISOString()),
      line("duration", ms(span.duration)),
      ...span.tags.map((t) => line(t.key, t.value)),
      ...process.tags.map((t) => line(`process.${t.key}`, t.value)),
      ...span.logs.map((l) => line(`log @${ms(l.timestamp - span.startTime)}`, Object.fromEntries(l.fields.map((f) => [f.key, f.value]))))));
  details.hidden = false;
}

function showStatistics(rows) {
  const sorted = [...rows].sort((a, b) => b.selfUs - a.selfUs);
  const allSelf = Math.max(sorted.reduce((sum, r) => sum + r.selfUs, 0), 1);
  $("statistics").replaceChildren(table("statistics",
    ["Service", "Operation", "Count", "Total", "Self", "Self share", "Overlap"],
    sorted.map((r) => [r.service, r.operation, String(r.count), ms(r.totalUs), ms(r.selfUs),
      pct(r.selfUs / allSelf),
      pct(r.totalUs ? 1 - r.wallUs / r.totalUs : 0)]),
    () => "stats-row"));
}

function showSpanTable(trace, path) {
  const { start } = traceBounds(trace);
  const onPath = new Set(path.criticalPath.map((s) => s.spanID));
  const spans = [...trace.spans].sort((a, b) => a.startTime - b.startTime);
  $("span-table").replaceChildren(table("spans",
    ["Service", "Operation", "Start", "Duration", "Status", "Critical path"],
    spans.map((s) => [serviceOf(trace, s), s.operationName, "+" + ms(s.startTime - start), ms(s.duration),
      String(tag(s, NAMES.DB_RESPONSE_STATUS_CODE) ?? (isError(s) ? "error" : "")), onPath.has(s.spanID) ? "yes" : ""]),
    (i) => (onPath.has(spans[i].spanID) ? "span-table-row on-critical-path" : "span-table-row")));
}
