// The trace viewer's pages, chosen by the path: search (/, /search), one trace
// (/trace/{id}), two traces (/compare?a&b), a stage (/stage?…) and services (/services).
"use strict";

async function showStats() {
  try {
    const s = await api("/api/stats");
    $("store-stats").textContent = `${s.traces} traces · ${s.spans} spans · ${(s.bytes / 1048576).toFixed(1)} of ${(s.maxBytes / 1048576).toFixed(0)} MiB stored`;
  } catch (_) { /* the header is informational */ }
}

async function start() {
  showStats();
  const params = new URLSearchParams(location.search);
  const path = location.pathname;
  const trace = path.match(/^\/trace\/([0-9a-fA-F]+)$/);
  await startSearch();
  if (trace) await showTrace(trace[1]);
  else if (path === "/compare") await showCompare(params);
  else if (path === "/stage") await showStage(params);
  else if (path === "/services") await showServices(params);
  else await search();
  document.body.dataset.ready = "true";
}

start();
