"""Runs Microsoft's Python SDK (azure-cosmos) against the emulator.

Started by tests/python_sdk.rs with COSMOS_ENDPOINT and COSMOS_KEY set. Every expected
answer is computed here from the documents the script writes, and the container has
several physical partitions, so cross-partition queries go through the SDK's own query
pipeline: it asks for the query plan, runs the rewritten query in each partition and
merges the results. Exits non-zero on the first wrong answer.
"""

import os
import sys

from azure.cosmos import CosmosClient, PartitionKey, exceptions

ENDPOINT = os.environ["COSMOS_ENDPOINT"]
KEY = os.environ["COSMOS_KEY"]
PARTITIONS = int(os.environ["EXPECTED_PARTITIONS"])

client = CosmosClient(ENDPOINT, KEY)
database = client.create_database_if_not_exists("python-sdk")
container = database.create_container_if_not_exists(
    "items", PartitionKey("/pk"), offer_throughput=100_000
)

CITIES = ["Oslo", "Bergen", "Tromsø", None]
docs = []
for i in range(48):
    doc = {"id": f"d{i:02}", "pk": f"p{i % 8}", "n": (i * 7) % 23, "g": i % 5}
    city = CITIES[(i // 8) % 4]
    if city is not None:
        doc["city"] = city
    docs.append(doc)
for doc in docs:
    container.upsert_item(doc)

checks = 0


def check(name, got, want):
    global checks
    checks += 1
    if got != want:
        print(f"FAIL {name}\n  got:  {got!r}\n  want: {want!r}")
        sys.exit(1)
    print(f"ok   {name}")


def query(text, parameters=None, **options):
    return list(
        container.query_items(
            text, parameters=parameters, enable_cross_partition_query=True, **options
        )
    )


check("the container spans several physical partitions",
      len(list(container.read_feed_ranges())), PARTITIONS)

# Point reads, parameters, a single logical partition.
check("read_item", container.read_item("d05", partition_key="p5")["n"], docs[5]["n"])
in_p3 = [d["id"] for d in docs if d["pk"] == "p3"]
check("query within one partition key",
      [r["id"] for r in query("SELECT * FROM c WHERE c.pk = @pk",
                              [{"name": "@pk", "value": "p3"}])],
      in_p3)

# Aggregates across partitions: each partition answers, the SDK combines.
ns = [d["n"] for d in docs]
check("SELECT VALUE COUNT(1)", query("SELECT VALUE COUNT(1) FROM c"), [len(docs)])
check("SELECT VALUE SUM with a filter",
      query("SELECT VALUE SUM(c.n) FROM c WHERE c.g = @g", [{"name": "@g", "value": 2}]),
      [sum(d["n"] for d in docs if d["g"] == 2)])
check("SELECT VALUE AVG", query("SELECT VALUE AVG(c.n) FROM c"), [sum(ns) / len(ns)])
check("SELECT VALUE MIN / MAX",
      query("SELECT VALUE MIN(c.n) FROM c") + query("SELECT VALUE MAX(c.city) FROM c"),
      [min(ns), max(d["city"] for d in docs if "city" in d)])

# ORDER BY: the SDK merges each partition's sorted stream. Small pages make every
# partition answer through continuations.
by_n = sorted(docs, key=lambda d: (-d["n"], d["id"]))
check("ORDER BY two keys, paged",
      [r["id"] for r in query("SELECT c.id FROM c ORDER BY c.n DESC, c.id ASC",
                              max_item_count=3)],
      [d["id"] for d in by_n])
check("TOP with ORDER BY",
      query("SELECT TOP 5 VALUE c.id FROM c ORDER BY c.n DESC, c.id"),
      [d["id"] for d in by_n[:5]])
check("OFFSET LIMIT with ORDER BY",
      query("SELECT VALUE c.id FROM c ORDER BY c.id OFFSET 10 LIMIT 6"),
      sorted(d["id"] for d in docs)[10:16])
check("OFFSET LIMIT without ORDER BY returns that many",
      len(query("SELECT * FROM c OFFSET 40 LIMIT 20")), 8)
# Within one partition the emulator sorts: undefined first, then by type and value.
# (Across partitions this SDK refuses to merge values of different types.)
p2 = [d for d in docs if d["pk"] == "p2"]
check("ORDER BY puts a missing property first",
      query("SELECT VALUE c.id FROM c ORDER BY c.city, c.id", partition_key="p2"),
      [d["id"] for d in sorted(p2, key=lambda d: ("city" in d, d.get("city", ""), d["id"]))])

# DISTINCT, ordered and not.
cities = {d["city"] for d in docs if "city" in d}
check("DISTINCT VALUE (unordered)",
      sorted(query("SELECT DISTINCT VALUE c.city FROM c WHERE IS_DEFINED(c.city)")),
      sorted(cities))
check("DISTINCT with ORDER BY",
      query("SELECT DISTINCT VALUE c.g FROM c ORDER BY c.g DESC"),
      sorted({d["g"] for d in docs}, reverse=True))

# Object and array constructors.
check("SELECT VALUE {…}",
      query("SELECT VALUE {\"id\": c.id, \"pair\": [c.g, c.n * 2]} FROM c WHERE c.id = 'd07'"),
      [{"id": "d07", "pair": [docs[7]["g"], docs[7]["n"] * 2]}])

# GROUP BY runs whole inside one partition (partition key given) …
want = {}
for d in p2:
    want[d["g"]] = want.get(d["g"], 0) + 1
got = query("SELECT c.g, COUNT(1) AS n FROM c GROUP BY c.g", partition_key="p2")
check("GROUP BY within a partition", {r["g"]: r["n"] for r in got}, want)
check("ORDER BY within a partition",
      query("SELECT VALUE c.n FROM c ORDER BY c.n", partition_key="p2"),
      sorted(d["n"] for d in p2))

# … and across partitions it is refused as real Cosmos DB refuses this SDK, which does
# not declare the GroupBy feature.
try:
    query("SELECT c.g, COUNT(1) AS n FROM c GROUP BY c.g")
    check("cross-partition GROUP BY is refused", "answered", "refused")
except exceptions.CosmosHttpResponseError as error:
    check("cross-partition GROUP BY is refused naming the feature",
          (error.status_code, "GroupBy" in str(error)), (400, True))

database.delete_container("items")
print(f"{checks} checks passed")
