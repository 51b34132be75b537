// Services: the dependency graph (calls and errors between services, from
// /api/dependencies) and per-operation rate, error share and latency percentiles
// (/api/analysis/operations; Jaeger's Monitor tab, from the stored spans).
"use strict";

async function showServices(params) {
  showOnly("services");
  const lookbackMs = Number(params.get("lookbackMs")) || 3600 * 1000;
  const end = Date.now();
  let deps, ops;
  try {
    [deps, ops] = await Promise.all([
      api(`/api/dependencies?endTs=${end}&lookback=${lookbackMs}`),
      api(`/api/analysis/operations?start=${(end - lookbackMs) * 1000}&end=${end * 1000}&spanKind=${params.get("spanKind") || "server"}`),
    ]);
  } catch (e) {
    fail("dependency-graph", e);
    return;
  }
  drawGraph(deps.data);
  $("operations-table").replaceChildren(table("operations",
    ["Service", "Operation", "Kind", "Spans", "Rate", "Errors", "p50", "p95", "p99"],
    ops.data.map((o) => [o.service, o.operation, o.spanKind, String(o.count), `${o.perSecond.toPrecision(2)}/s`, pct(o.errorShare),
      ms(o.durationUs.p50), ms(o.durationUs.p95), ms(o.durationUs.p99)]),
    (i) => (ops.data[i].errorShare > 0 ? "operation-row has-errors" : "operation-row")));
}

// Services in columns by depth from the callers, an arrow per edge with its calls.
function drawGraph(edges) {
  if (!edges.length) {
    $("dependency-graph").replaceChildren(el("p", { class: "muted" }, "No calls between services in the window."));
    return;
  }
  const services = [...new Set(edges.flatMap((e) => [e.parent, e.child]))].sort();
  const depth = new Map(services.map((s) => [s, 0]));
  for (let pass = 0; pass < services.length; pass++) {
    for (const e of edges) depth.set(e.child, Math.max(depth.get(e.child), Math.min(depth.get(e.parent) + 1, services.length)));
  }
  const columns = new Map();
  for (const s of services) {
    const d = depth.get(s);
    if (!columns.has(d)) columns.set(d, []);
    columns.get(d).push(s);
  }
  const width = 220, gap = 70, rowH = 60;
  const pos = new Map();
  for (const [d, list] of columns) list.forEach((s, i) => pos.set(s, { x: 10 + d * (width + gap), y: 10 + i * rowH }));
  const w = 20 + Math.max(...[...columns.keys()]) * (width + gap) + width;
  const h = 20 + Math.max(...[...columns.values()].map((l) => l.length)) * rowH;
  const links = edges.map((e) => {
    const p = pos.get(e.parent), c = pos.get(e.child);
    const x1 = p.x + width, y1 = p.y + 18, x2 = c.x, y2 = c.y + 18;
    return svg("g", { class: e.errorCount ? "edge has-errors" : "edge", "data-parent": e.parent, "data-child": e.child },
      svg("line", { x1, y1, x2, y2, "marker-end": "url(#arrow)" }),
      svg("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 4, "text-anchor": "middle" },
        `${e.callCount} calls${e.errorCount ? ` · ${pct(e.errorCount / e.callCount)} errors` : ""}`));
  });
  const nodes = services.map((s) => {
    const p = pos.get(s);
    return svg("g", { class: "node", "data-service": s },
      svg("rect", { x: p.x, y: p.y, width, height: 36, rx: 6, style: `stroke:${colorOf(s)}` }),
      svg("text", { x: p.x + 10, y: p.y + 23 }, s));
  });
  $("dependency-graph").replaceChildren(svg("svg", { viewBox: `0 0 ${w} ${h}`, class: "graph", role: "img", "aria-label": "service dependencies" },
    svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto" },
      svg("path", { d: "M0,0 L10,5 L0,10 z" }))),
    ...links, ...nodes));
}
