//! The official `azure_data_cosmos` SDK against the emulator, over real HTTP on loopback.

mod common;

use std::collections::BTreeSet;

use azure_data_cosmos::clients::ContainerClient;
use azure_data_cosmos::models::{ContainerProperties, ThroughputProperties};
use azure_data_cosmos::options::CreateContainerOptions;
use azure_data_cosmos::{CosmosClient, FeedScope, Query};
use common::{config, Emulator};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Utilization {
    id: String,
    drone_id: String,
    owner_id: String,
    year: i32,
    month: i32,
    traveled_miles: f64,
    assigned_hours: f64,
}

fn record(owner: usize, drone: usize, month: i32) -> Utilization {
    Utilization {
        id: format!("d{drone:03}-o{owner:04}-2026-{month:02}"),
        drone_id: format!("d{drone:03}"),
        owner_id: format!("o{owner:04}"),
        year: 2026,
        month,
        traveled_miles: (owner * 10 + drone) as f64 + 0.5,
        assigned_hours: month as f64,
    }
}

async fn create_container(
    client: &CosmosClient,
    database: &str,
    container: &str,
    key_path: &'static str,
    ru: u64,
) -> ContainerClient {
    if client.create_database(database, None).await.is_err() {
        // Already created by an earlier step of the same test.
    }
    let db = client.database_client(database);
    db.create_container(
        ContainerProperties::new(container.to_owned(), key_path.into()),
        Some(CreateContainerOptions::default().with_throughput(ThroughputProperties::manual(ru))),
    )
    .await
    .expect("container is created");
    db.container_client(container, None)
        .await
        .expect("container client loads")
}

async fn query_ids(container: &ContainerClient, query: Query, scope: FeedScope) -> Vec<String> {
    let mut items = container
        .query_items::<Utilization>(query, scope, None)
        .await
        .expect("query starts");
    let mut ids = Vec::new();
    while let Some(item) = items.try_next().await.expect("query page") {
        ids.push(item.id);
    }
    ids.sort();
    ids
}

fn study_query(owner: &str, month: i32) -> Query {
    Query::from(
        "SELECT * FROM c WHERE c.ownerId = @ownerId AND c.year = @year AND c.month = @month",
    )
    .with_parameter("@ownerId", owner)
    .and_then(|q| q.with_parameter("@year", 2026))
    .and_then(|q| q.with_parameter("@month", month))
    .expect("parameters")
}

async fn seed(container: &ContainerClient, owners: usize, drones: usize) -> Vec<Utilization> {
    let mut all = Vec::new();
    for owner in 0..owners {
        for drone in 0..drones {
            for month in [3, 4] {
                let r = record(owner, drone, month);
                container
                    .create_item(r.owner_id.clone(), &r.id, &r, None)
                    .await
                    .expect("create");
                all.push(r);
            }
        }
    }
    all
}

#[tokio::test]
async fn container_with_throughput_loads_and_has_n_feed_ranges() {
    let emulator = Emulator::start(config(5)).await;
    let client = emulator.client().await;
    let container = create_container(&client, "db", "items", "/ownerId", 1000).await;
    let ranges = container.read_feed_ranges(None).await.expect("feed ranges");
    assert_eq!(ranges.len(), 5);
    let throughput = container
        .read_throughput(None)
        .await
        .expect("read throughput")
        .expect("has an offer");
    assert_eq!(throughput.throughput(), Some(1000));
    let stats = emulator.stats().await;
    let c = &stats.databases[0].containers[0];
    assert_eq!(c.partitions.len(), 5);
    assert_eq!(c.provisioned_ru_per_partition, Some(200.0));
    emulator.stop().await;
}

#[tokio::test]
async fn crud_and_upsert_work_and_a_small_point_read_costs_one_ru() {
    let emulator = Emulator::start(config(3)).await;
    let client = emulator.client().await;
    let container = create_container(&client, "db", "items", "/ownerId", 10_000).await;
    let mut item = record(1, 1, 3);

    let created = container
        .create_item(item.owner_id.clone(), &item.id, &item, None)
        .await
        .expect("create");
    let create_charge = created
        .headers()
        .request_charge()
        .map(|c| c.value())
        .unwrap_or(0.0);
    assert!(
        (5.0..=7.0).contains(&create_charge),
        "create charged {create_charge}"
    );

    let duplicate = container
        .create_item(item.owner_id.clone(), &item.id, &item, None)
        .await
        .expect_err("second create conflicts");
    assert_eq!(u16::from(duplicate.status().status_code()), 409);

    let read = container
        .read_item(item.owner_id.clone(), &item.id, None)
        .await
        .expect("read");
    assert_eq!(
        read.headers().request_charge().map(|c| c.value()),
        Some(1.0)
    );
    assert_eq!(read.into_model::<Utilization>().expect("model"), item);

    item.traveled_miles = 99.0;
    container
        .replace_item(item.owner_id.clone(), &item.id, &item, None)
        .await
        .expect("replace");
    item.assigned_hours = 7.0;
    container
        .upsert_item(item.owner_id.clone(), &item.id, &item, None)
        .await
        .expect("upsert existing");
    let read: Utilization = container
        .read_item(item.owner_id.clone(), &item.id, None)
        .await
        .expect("read after upsert")
        .into_model()
        .expect("model");
    assert_eq!((read.traveled_miles, read.assigned_hours), (99.0, 7.0));

    let fresh = record(2, 2, 4);
    container
        .upsert_item(fresh.owner_id.clone(), &fresh.id, &fresh, None)
        .await
        .expect("upsert new");
    container
        .delete_item(item.owner_id.clone(), &item.id, None)
        .await
        .expect("delete");
    let gone = container
        .read_item(item.owner_id.clone(), &item.id, None)
        .await
        .expect_err("deleted item is gone");
    assert_eq!(u16::from(gone.status().status_code()), 404);
    let wrong_partition = container
        .read_item("o9999", &fresh.id, None)
        .await
        .expect_err("an item is only found under its own partition key");
    assert_eq!(u16::from(wrong_partition.status().status_code()), 404);
    emulator.stop().await;
}

#[tokio::test]
async fn queries_with_and_without_the_key_agree_and_touch_one_or_all_partitions() {
    let emulator = Emulator::start(config(4)).await;
    let client = emulator.client().await;
    let by_owner = create_container(&client, "db", "by-owner", "/ownerId", 100_000).await;
    let by_drone = create_container(&client, "db", "by-drone", "/droneId", 100_000).await;
    let docs = seed(&by_owner, 12, 3).await;
    for d in &docs {
        by_drone
            .create_item(d.drone_id.clone(), &d.id, d, None)
            .await
            .expect("create by drone");
    }
    let owner = "o0007";
    let expected: Vec<String> = {
        let mut ids: Vec<String> = docs
            .iter()
            .filter(|d| d.owner_id == owner && d.month == 3)
            .map(|d| d.id.clone())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(expected.len(), 3);

    emulator.reset_stats().await;
    let with_key = query_ids(
        &by_owner,
        study_query(owner, 3),
        FeedScope::partition(owner),
    )
    .await;
    assert_eq!(
        with_key, expected,
        "the SDK's hash and the emulator's routing agree"
    );
    let stats = emulator.stats().await;
    let container = stats.databases[0]
        .containers
        .iter()
        .find(|c| c.id == "by-owner")
        .expect("stats");
    let touched = container
        .partitions
        .iter()
        .filter(|p| p.counters.requests > 0)
        .count();
    assert_eq!(
        touched, 1,
        "a query with the partition key runs in one partition"
    );
    let ru_with_key = container.ru_total;

    emulator.reset_stats().await;
    let cross = query_ids(
        &by_drone,
        study_query(owner, 3),
        FeedScope::full_container(),
    )
    .await;
    assert_eq!(cross, expected);
    let stats = emulator.stats().await;
    let container = stats.databases[0]
        .containers
        .iter()
        .find(|c| c.id == "by-drone")
        .expect("stats");
    let touched = container
        .partitions
        .iter()
        .filter(|p| p.counters.requests > 0)
        .count();
    assert_eq!(
        touched, 4,
        "a cross-partition query fans out to every partition"
    );
    assert!(
        container.ru_total > 3.0 * ru_with_key,
        "fan-out costs RU in every partition: {} vs {ru_with_key}",
        container.ru_total
    );

    // Querying each feed range separately returns the same union.
    let mut union = BTreeSet::new();
    for range in by_drone.read_feed_ranges(None).await.expect("ranges") {
        union.extend(query_ids(&by_drone, study_query(owner, 3), FeedScope::range(range)).await);
    }
    assert_eq!(union.into_iter().collect::<Vec<_>>(), expected);

    // Paging: all 72 documents come back across small pages without duplicates.
    let options = azure_data_cosmos::options::QueryOptions::default().with_max_item_count(
        azure_data_cosmos::options::MaxItemCountHint::Limit(
            std::num::NonZeroU32::new(5).expect("non-zero"),
        ),
    );
    let mut items = by_drone
        .query_items::<Utilization>(
            "SELECT * FROM c",
            FeedScope::full_container(),
            Some(options),
        )
        .await
        .expect("query");
    let mut seen = BTreeSet::new();
    while let Some(item) = items.try_next().await.expect("page") {
        assert!(seen.insert(item.id), "no duplicates across pages");
    }
    assert_eq!(seen.len(), docs.len());
    emulator.stop().await;
}

#[tokio::test]
async fn aggregates_and_projections_within_a_partition() {
    let emulator = Emulator::start(config(3)).await;
    let client = emulator.client().await;
    let container = create_container(&client, "db", "items", "/ownerId", 100_000).await;
    let docs = seed(&container, 4, 3).await;
    let owner = "o0002";
    let expected_miles: f64 = docs
        .iter()
        .filter(|d| d.owner_id == owner && d.month == 4)
        .map(|d| d.traveled_miles)
        .sum();
    let query = Query::from(
        "SELECT VALUE SUM(c.traveledMiles) FROM c WHERE c.ownerId = @o AND c.month = 4",
    )
    .with_parameter("@o", owner)
    .expect("param");
    let mut items = container
        .query_items::<f64>(query, FeedScope::partition(owner), None)
        .await
        .expect("aggregate query");
    let sum = items.try_next().await.expect("page").expect("one row");
    assert!(
        (sum - expected_miles).abs() < 1e-9,
        "{sum} vs {expected_miles}"
    );

    #[derive(Deserialize)]
    struct Row {
        id: String,
        miles: f64,
    }
    let query = Query::from(
        "SELECT c.id, c.traveledMiles AS miles FROM c WHERE c.droneId IN ('d001', 'd002')",
    );
    let mut items = container
        .query_items::<Row>(query, FeedScope::partition(owner), None)
        .await
        .expect("projection query");
    let mut count = 0;
    while let Some(row) = items.try_next().await.expect("page") {
        assert!(row.id.contains("o0002"));
        assert!(row.miles > 20.0);
        count += 1;
    }
    assert_eq!(count, 4);
    emulator.stop().await;
}

#[tokio::test]
async fn a_sorted_query_runs_whole_in_one_partition() {
    let emulator = Emulator::start(config(3)).await;
    let client = emulator.client().await;
    let container = create_container(&client, "db", "items", "/ownerId", 100_000).await;
    let docs = seed(&container, 4, 3).await;
    let owner = "o0001";
    let mut expected: Vec<f64> = docs
        .iter()
        .filter(|d| d.owner_id == owner)
        .map(|d| d.traveled_miles)
        .collect();
    expected.sort_by(|a, b| b.total_cmp(a));
    let sorted = "SELECT VALUE c.traveledMiles FROM c ORDER BY c.traveledMiles DESC";
    let mut items = container
        .query_items::<f64>(Query::from(sorted), FeedScope::partition(owner), None)
        .await
        .expect("sorted query");
    let mut miles = Vec::new();
    while let Some(m) = items.try_next().await.expect("page") {
        miles.push(m);
    }
    assert_eq!(miles, expected);
    emulator.stop().await;
}

#[tokio::test]
async fn replacing_throughput_changes_the_partition_budgets() {
    let emulator = Emulator::start(config(9)).await;
    let client = emulator.client().await;
    let container = create_container(&client, "db", "items", "/droneId", 900).await;
    let c = emulator.stats().await.databases[0].containers[0].provisioned_ru_per_partition;
    assert_eq!(c, Some(100.0));
    container
        .begin_replace_throughput(ThroughputProperties::manual(2500), None)
        .await
        .expect("replace starts")
        .await
        .expect("replace completes");
    let stats = emulator.stats().await;
    let c = &stats.databases[0].containers[0];
    assert_eq!(c.provisioned_ru_per_second, Some(2500.0));
    assert!((c.provisioned_ru_per_partition.unwrap_or(0.0) - 2500.0 / 9.0).abs() < 0.01);
    let read = container
        .read_throughput(None)
        .await
        .expect("read")
        .expect("offer");
    assert_eq!(read.throughput(), Some(2500));
    emulator.stop().await;
}

#[tokio::test]
async fn over_budget_the_sdk_sees_429s_and_retries_them() {
    let emulator = Emulator::start(config(1)).await;
    let client = emulator.client().await;
    // 20 RU/s: each ~5.7 RU write drains the bucket fast.
    let container = create_container(&client, "db", "items", "/ownerId", 20).await;
    let mut saw_retry = false;
    for i in 0..8 {
        let r = record(i, 0, 3);
        let response = container
            .create_item(r.owner_id.clone(), &r.id, &r, None)
            .await
            .expect("the SDK retries 429s until the write succeeds");
        let attempts = response.diagnostics().requests();
        let statuses: Vec<u16> = attempts
            .iter()
            .map(|a| u16::from(a.status().status_code()))
            .collect();
        if statuses.contains(&429) {
            assert_eq!(
                statuses.last(),
                Some(&201),
                "retried until success: {statuses:?}"
            );
            let throttled = attempts
                .iter()
                .find(|a| u16::from(a.status().status_code()) == 429)
                .expect("a throttled attempt");
            assert_eq!(
                throttled.status().sub_status().map(|s| s.value()),
                Some(3200)
            );
            saw_retry = true;
        }
    }
    assert!(
        saw_retry,
        "writes beyond the budget were throttled and retried"
    );
    let stats = emulator.stats().await;
    assert!(stats.databases[0].containers[0].throttled_requests > 0);

    let strict = emulator.client_without_retries().await;
    let strict_container = strict
        .database_client("db")
        .container_client("items", None)
        .await
        .expect("container client");
    let mut surfaced = None;
    for i in 100..120 {
        let r = record(i, 0, 3);
        if let Err(e) = strict_container
            .create_item(r.owner_id.clone(), &r.id, &r, None)
            .await
        {
            surfaced = Some(e);
            break;
        }
    }
    let error = surfaced.expect("without retries a 429 reaches the caller");
    assert_eq!(u16::from(error.status().status_code()), 429);
    assert_eq!(error.status().sub_status().map(|s| s.value()), Some(3200));
    emulator.stop().await;
}

#[tokio::test]
async fn a_wrong_key_gets_401() {
    let emulator = Emulator::start(config(1)).await;
    let wrong = "dGhpcyBpcyBub3QgdGhlIGtleSB0aGUgZW11bGF0b3IgdXNlcyEhISEhISEhISE=";
    let endpoint: azure_data_cosmos::AccountEndpoint =
        emulator.endpoint().parse().expect("endpoint");
    let account = azure_data_cosmos::AccountReference::with_authentication_key(
        endpoint,
        azure_core::credentials::Secret::from(wrong.to_owned()),
    );
    let outcome = async {
        let client = CosmosClient::builder()
            .build(
                account,
                azure_data_cosmos::RoutingStrategy::ProximityTo("South Central US".into()),
            )
            .await?;
        client.create_database("db", None).await.map(|_| ())
    }
    .await;
    let error = outcome.expect_err("a client with the wrong key is refused");
    assert_eq!(u16::from(error.status().status_code()), 401, "{error}");
    emulator.stop().await;
}

#[tokio::test]
async fn malformed_sql_gets_400_with_a_reason() {
    let emulator = Emulator::start(config(2)).await;
    let client = emulator.client().await;
    let container = create_container(&client, "db", "items", "/ownerId", 10_000).await;
    let query = Query::from("SELECT * FROM c WHERE c.ownerId = ");
    let result = async {
        let mut items = container
            .query_items::<serde_json::Value>(query, FeedScope::partition("o1"), None)
            .await?;
        items.try_next().await
    }
    .await;
    let error = result.expect_err("malformed SQL is rejected");
    assert_eq!(u16::from(error.status().status_code()), 400, "{error}");
    emulator.stop().await;
}
