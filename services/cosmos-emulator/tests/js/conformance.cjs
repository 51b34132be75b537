// Runs Microsoft's JavaScript SDK (@azure/cosmos) against the emulator, with the SDK's
// default options, as a new user would.
//
// Started by tests/js_sdk.rs with COSMOS_ENDPOINT, COSMOS_KEY, SDK_DIR (where npm
// installed the SDK) and EXPECTED_PARTITIONS set. Every expected answer is computed here
// from the documents the script writes; the container has several physical partitions,
// so cross-partition queries go through the SDK's own query pipeline and the change feed
// is read range by range. Exits non-zero on the first wrong answer.
"use strict";

const path = require("node:path");
const { isDeepStrictEqual, inspect } = require("node:util");

const {
  CosmosClient,
  ChangeFeedStartFrom,
  StatusCodes,
} = require(path.join(process.env.SDK_DIR, "node_modules", "@azure", "cosmos"));

const PARTITIONS = Number(process.env.EXPECTED_PARTITIONS);
const client = new CosmosClient({
  endpoint: process.env.COSMOS_ENDPOINT,
  key: process.env.COSMOS_KEY,
});

let checks = 0;
function check(name, got, want) {
  checks += 1;
  if (!isDeepStrictEqual(got, want)) {
    console.log(`FAIL ${name}\n  got:  ${inspect(got, { depth: 5 })}\n  want: ${inspect(want, { depth: 5 })}`);
    process.exit(1);
  }
  console.log(`ok   ${name}`);
}

const CITIES = ["Oslo", "Bergen", "Tromsø", undefined];
function documents() {
  const docs = [];
  for (let i = 0; i < 48; i++) {
    const doc = { id: `d${String(i).padStart(2, "0")}`, pk: `p${i % 8}`, n: (i * 7) % 23, g: i % 5 };
    const city = CITIES[Math.floor(i / 8) % 4];
    if (city !== undefined) doc.city = city;
    docs.push(doc);
  }
  return docs;
}

const byId = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
const ids = (items) => items.map((d) => d.id);

/// Reads a change feed iterator until it says nothing is new (304), at most `pages`.
async function drain(iterator, pages = 100) {
  const seen = [];
  for (let page = 0; page < pages && iterator.hasMoreResults; page++) {
    const response = await iterator.readNext();
    if (response.statusCode === StatusCodes.NotModified) return seen;
    seen.push(...response.result);
  }
  throw new Error(`the change feed still had news after ${pages} pages`);
}

async function main() {
  const { database } = await client.databases.createIfNotExists({ id: "js-sdk" });
  const { container } = await database.containers.createIfNotExists(
    { id: "items", partitionKey: { paths: ["/pk"] } },
    { offerThroughput: 100000 },
  );
  const docs = documents();
  for (const doc of docs) await container.items.upsert(doc);
  const query = async (text, options) => (await container.items.query(text, options).fetchAll()).resources;

  check("the container spans several physical partitions", (await container.getFeedRanges()).length, PARTITIONS);

  const { resource: read } = await container.item("d05", "p5").read();
  check("read an item", read.n, docs[5].n);
  check(
    "query within one partition key, with a parameter",
    ids(await query({ query: "SELECT * FROM c WHERE c.pk = @pk", parameters: [{ name: "@pk", value: "p3" }] })),
    ids(docs.filter((d) => d.pk === "p3")),
  );

  // Aggregates across partitions, with the SDK's defaults: the emulator's 400 carries
  // the query plan as Cosmos DB's does, so the SDK switches to its pipeline by itself.
  const ns = docs.map((d) => d.n);
  const cities = docs.filter((d) => d.city !== undefined).map((d) => d.city);
  check("SELECT VALUE COUNT(1)", await query("SELECT VALUE COUNT(1) FROM c"), [docs.length]);
  check(
    "SELECT VALUE SUM with a filter",
    await query({ query: "SELECT VALUE SUM(c.n) FROM c WHERE c.g = @g", parameters: [{ name: "@g", value: 2 }] }),
    [docs.filter((d) => d.g === 2).reduce((s, d) => s + d.n, 0)],
  );
  check("SELECT VALUE AVG", await query("SELECT VALUE AVG(c.n) FROM c"), [ns.reduce((s, n) => s + n, 0) / ns.length]);
  check("SELECT VALUE MIN", await query("SELECT VALUE MIN(c.n) FROM c"), [Math.min(...ns)]);
  check("SELECT VALUE MAX of a number", await query("SELECT VALUE MAX(c.n) FROM c"), [Math.max(...ns)]);
  check("SELECT VALUE MAX of a string missing in some documents", await query("SELECT VALUE MAX(c.city) FROM c"), [
    [...cities].sort(byId).at(-1),
  ]);

  // ORDER BY: the SDK merges each partition's sorted stream; small pages make every
  // partition answer through continuations.
  const byN = [...docs].sort((a, b) => b.n - a.n || byId(a.id, b.id));
  check(
    "ORDER BY two keys, paged",
    ids(await query("SELECT c.id FROM c ORDER BY c.n DESC, c.id ASC", { maxItemCount: 3 })),
    ids(byN),
  );
  check("TOP with ORDER BY", await query("SELECT TOP 5 VALUE c.id FROM c ORDER BY c.n DESC, c.id"), ids(byN.slice(0, 5)));
  check(
    "OFFSET LIMIT with ORDER BY",
    await query("SELECT VALUE c.id FROM c ORDER BY c.id OFFSET 10 LIMIT 6"),
    ids(docs).sort(byId).slice(10, 16),
  );
  check("OFFSET LIMIT without ORDER BY returns that many", (await query("SELECT * FROM c OFFSET 40 LIMIT 20")).length, 8);

  check(
    "DISTINCT VALUE (unordered)",
    (await query("SELECT DISTINCT VALUE c.city FROM c WHERE IS_DEFINED(c.city)")).sort(byId),
    [...new Set(cities)].sort(byId),
  );
  // (Strings: this SDK's ordered DISTINCT drops falsy values such as 0 by itself.)
  check(
    "DISTINCT with ORDER BY",
    await query("SELECT DISTINCT VALUE c.city FROM c WHERE IS_DEFINED(c.city) ORDER BY c.city DESC"),
    [...new Set(cities)].sort(byId).reverse(),
  );

  // GROUP BY across partitions: the SDK merges the groups, MIN and MAX included.
  const groups = new Map();
  for (const d of docs) {
    const g = groups.get(d.g) ?? { g: d.g, members: 0, total: 0, low: Infinity, high: -Infinity };
    g.members += 1;
    g.total += d.n;
    g.low = Math.min(g.low, d.n);
    g.high = Math.max(g.high, d.n);
    groups.set(d.g, g);
  }
  const grouped = await query(
    "SELECT c.g, COUNT(1) AS members, SUM(c.n) AS total, MIN(c.n) AS low, MAX(c.n) AS high FROM c GROUP BY c.g",
  );
  check(
    "GROUP BY across partitions with COUNT, SUM, MIN and MAX",
    grouped.sort((a, b) => a.g - b.g),
    [...groups.values()].sort((a, b) => a.g - b.g),
  );

  // The change feed, latest-version mode: every document once, then only what changed.
  const everything = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() });
  check("the change feed from the beginning has every document once", ids(await drain(everything)).sort(byId), ids(docs).sort(byId));
  check("then nothing is new", await drain(everything), []);
  const fromNow = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now() });
  check("a change feed from now starts empty", await drain(fromNow), []);
  const ofP3 = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning("p3") });
  check("the change feed of one partition key", ids(await drain(ofP3)).sort(byId), ids(docs.filter((d) => d.pk === "p3")).sort(byId));
  await container.items.upsert({ ...docs[3], n: 100 });
  await container.items.create({ id: "new-1", pk: "p3", n: 1, g: 0 });
  await container.items.create({ id: "new-2", pk: "p6", n: 2, g: 0 });
  const changed = await drain(everything);
  check("after writes, the change feed has exactly what changed", ids(changed).sort(byId), ["d03", "new-1", "new-2"]);
  check("in its latest version", changed.find((d) => d.id === "d03").n, 100);
  check("a change feed from now sees the writes after it began", ids(await drain(fromNow)).sort(byId), ["d03", "new-1", "new-2"]);
  check("and the partition key's feed only its own", ids(await drain(ofP3)).sort(byId), ["d03", "new-1"]);

  // Transactional batch is not served: refused clearly, nothing applied.
  try {
    await container.items.batch([{ operationType: "Create", resourceBody: { id: "batch-1", pk: "p1" } }], "p1");
    check("a transactional batch is refused", "answered", "refused");
  } catch (error) {
    // The SDK rethrows it as a plain Error carrying the emulator's message.
    check("a transactional batch is refused, saying so", /batch .*not supported by this emulator/.test(error.message), true);
  }
  check("and nothing of it was written", await query("SELECT VALUE COUNT(1) FROM c WHERE c.id = 'batch-1'"), [0]);

  console.log(`${checks} checks passed`);
}

main().catch((error) => {
  console.log(`FAIL with an error: ${error.code ?? ""} ${error.message}\n${error.stack}`);
  process.exit(1);
});
