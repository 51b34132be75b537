// Two traces side by side: spans matched by service and operation, with counts, total
// time and overlap; rows added / missing / longer / shorter are marked
// (/api/analysis/compare decides which).
"use strict";

async function showCompare(params) {
  showOnly("compare");
  const a = params.get("a") || "", b = params.get("b") || "";
  $("compare-a").value = a;
  $("compare-b").value = b;
  if (!a || !b) {
    $("compare-table").replaceChildren(el("p", { class: "muted" }, "Give two trace IDs (a trace's page has a “compare with” box)."));
    return;
  }
  let answer;
  try {
    answer = (await api(`/api/analysis/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`)).data;
  } catch (e) {
    fail("compare-table", e);
    return;
  }
  const side = (s) => (s ? [String(s.count), ms(s.totalUs), pct(s.totalUs ? 1 - s.wallUs / s.totalUs : 0)] : ["–", "–", "–"]);
  $("compare-title").replaceChildren("A ", el("a", { href: `/trace/${answer.a}` }, answer.a), " · B ", el("a", { href: `/trace/${answer.b}` }, answer.b));
  $("compare-table").replaceChildren(table("compare",
    ["Service", "Operation", "A count", "A total", "A overlap", "B count", "B total", "B overlap", "B against A"],
    answer.rows.map((r) => [r.service, r.operation, ...side(r.a), ...side(r.b), r.verdict]),
    (i) => `compare-row ${answer.rows[i].verdict}`));
}
