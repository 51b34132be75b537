// A stage: critical paths summed over a time window per service and operation (what
// share of the end-to-end time each is responsible for), beside a second window.
// The windows come from the URL (the report links here) or the stages the tuning run
// announced to the viewer.
"use strict";

async function showStage(params) {
  showOnly("stage");
  const stages = (await api("/api/stages").catch(() => ({ data: [] }))).data;
  for (const id of ["stage-a", "stage-b"]) {
    $(id).replaceChildren(el("option", { value: "" }, id === "stage-a" ? "window from the link" : "none"),
      ...stages.map((s) => el("option", { value: s.name }, s.name)));
  }
  const pick = (select, startName, endName) => {
    const stage = stages.find((s) => s.name === $(select).value);
    if (stage && select === "stage-b") params.delete("compare");
    if (stage) {
      params.set(startName, stage.start);
      params.set(endName, stage.end);
    } else if (select === "stage-b") {
      params.delete(startName);
      params.delete(endName);
      params.set("compare", "none");
    }
  };
  const named = (start, end) => (stages.find((s) => String(s.start) === params.get(start) && String(s.end) === params.get(end)) || {}).name || "";
  $("stage-a").value = named("start", "end");
  // A stage of the run opened alone (the report's link) is set beside the next stage.
  const next = stages[stages.findIndex((s) => s.name === $("stage-a").value) + 1];
  if ($("stage-a").value && next && !params.has("compareStart") && !params.has("compareEnd") && !params.has("compare")) {
    params.set("compareStart", next.start);
    params.set("compareEnd", next.end);
    history.replaceState(null, "", "/stage?" + params);
  }
  $("stage-b").value = named("compareStart", "compareEnd");
  $("stage-form").onsubmit = (e) => {
    e.preventDefault();
    pick("stage-a", "start", "end");
    pick("stage-b", "compareStart", "compareEnd");
    params.set("service", $("stage-service").value || "gateway");
    location.href = "/stage?" + params;
  };
  $("stage-service").value = params.get("service") || "gateway";
  if (!params.has("service")) params.set("service", "gateway");
  let answer;
  try {
    answer = (await api("/api/analysis/critical-path?" + params)).data;
  } catch (e) {
    fail("stage-table", e);
    return;
  }
  drawStage(answer);
}

function windowLine(label, w) {
  if (!w) return null;
  return el("div", { class: "stat" }, el("b", {}, pct(w.databaseShare)),
    `${label}: database share of the path · ${w.requests} requests · e2e p50 ${ms(w.endToEndUs.p50)}, p99 ${ms(w.endToEndUs.p99)}${w.truncated ? " · newest traces only" : ""}`);
}

function drawStage(answer) {
  const a = answer.window, b = answer.compare;
  $("stage-title").textContent = `${answer.service}${answer.operation ? ": " + answer.operation : ""} · critical path by operation`;
  $("stage-summary").replaceChildren(windowLine("A", a), windowLine("B", b));
  const key = (o) => `${o.service}\u0000${o.operation}`;
  const inB = new Map((b ? b.operations : []).map((o) => [key(o), o]));
  const keys = [...a.operations.map(key), ...(b ? b.operations.map(key).filter((k) => !a.operations.some((o) => key(o) === k)) : [])];
  const inA = new Map(a.operations.map((o) => [key(o), o]));
  // Sections per request: a serial fan-out of nine visits puts nine on each path.
  const cells = (o, w) => (o ? [pct(o.share), `${ms(o.perRequestUs.p50)} / ${ms(o.perRequestUs.p95)} / ${ms(o.perRequestUs.p99)}`,
    (o.sections / Math.max(w.requests, 1)).toFixed(1)] : ["–", "–", "–"]);
  const rows = keys.map((k) => {
    const x = inA.get(k), y = inB.get(k);
    const first = x || y;
    const shareBar = el("span", { class: "share-bar", style: `width:${Math.round(100 * (x ? x.share : 0))}px` });
    return [first.service, el("span", {}, shareBar, first.operation + (first.database ? " (database)" : "")), ...cells(x, a),
      ...(b ? [...cells(y, b), x && y ? `${((y.share - x.share) * 100).toFixed(1)} pts` : "–"] : [])];
  });
  const headers = ["Service", "Operation", "A share", "A per request p50 / p95 / p99", "A on path per request"];
  if (b) headers.push("B share", "B per request p50 / p95 / p99", "B on path per request", "B − A share");
  $("stage-table").replaceChildren(table("stage", headers, rows, () => "stage-row"));
}
