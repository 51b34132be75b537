// Helpers every page of the trace viewer uses. No framework and no network beyond this
// server: everything here is served by the binary.
"use strict";

// Script errors are written on the page (body[data-page-errors]) as well as the console,
// so the browser test, which reads the DOM, sees every one.
function recordPageError(message) {
  const errors = document.body.dataset.pageErrors ? JSON.parse(document.body.dataset.pageErrors) : [];
  errors.push(String(message));
  document.body.dataset.pageErrors = JSON.stringify(errors);
}
window.addEventListener("error", (e) => recordPageError(e.message));
window.addEventListener("unhandledrejection", (e) => recordPageError(e.reason && e.reason.message ? e.reason.message : e.reason));

const COLORS = ["#2e90fa", "#12b76a", "#7a5af8", "#ee46bc", "#0ba5ec", "#66c61c", "#875bf7", "#15b79e"];
const serviceColors = new Map();
const colorOf = (service) => {
  if (!serviceColors.has(service)) serviceColors.set(service, COLORS[serviceColors.size % COLORS.length]);
  return serviceColors.get(service);
};

const $ = (id) => document.getElementById(id);
const SVG_NS = "http://www.w3.org/2000/svg";
function build(node, attrs, children) {
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.setAttribute("class", v);
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}
const el = (tag, attrs = {}, ...children) => build(document.createElement(tag), attrs, children);
const svg = (tag, attrs = {}, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);

async function api(path) {
  const response = await fetch(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || (body.errors && body.errors[0].msg) || response.statusText);
  return body;
}

const ms = (us) => (us >= 1e6 ? (us / 1e6).toFixed(2) + " s" : (us / 1e3).toFixed(1) + " ms");
const pct = (share) => (100 * share).toFixed(1) + " %";
const tag = (span, key) => {
  const t = span.tags.find((t) => t.key === key);
  return t ? t.value : undefined;
};
// NAMES (the span attribute names) comes from /assets/names.js, which the server writes
// from the same constants the services use.
const isError = (span) => tag(span, NAMES.ERROR) === true || String(tag(span, NAMES.DB_RESPONSE_STATUS_CODE)) === "429";
const serviceOf = (trace, span) => trace.processes[span.processID].serviceName;

function parentOf(span, ids) {
  const ref = span.references.find((r) => r.refType === "CHILD_OF" && ids.has(r.spanID));
  return ref ? ref.spanID : null;
}

function rootOf(trace) {
  const ids = new Set(trace.spans.map((s) => s.spanID));
  const roots = trace.spans.filter((s) => parentOf(s, ids) === null);
  return roots.sort((a, b) => a.startTime - b.startTime)[0] || trace.spans[0];
}

function traceBounds(trace) {
  const start = Math.min(...trace.spans.map((s) => s.startTime));
  const end = Math.max(...trace.spans.map((s) => s.startTime + s.duration));
  return { start, end, duration: end - start };
}

// A table from a header list and rows of cells; `rowClass` names each row.
function table(className, headers, rows, rowClass = () => "") {
  return el("table", { class: `grid ${className}` },
    el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map((cells, i) => el("tr", { class: rowClass(i) }, ...cells.map((c) => el("td", {}, c))))));
}

function showOnly(id) {
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== id;
}

function fail(where, error) {
  $(where).replaceChildren(el("p", { class: "error-text", role: "alert" }, error.message));
}
