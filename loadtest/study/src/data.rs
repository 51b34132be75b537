//! The lab's data set, generated deterministically from a seed number: owners, their
//! drones, and per month one utilization record per drone plus a delivery and a package
//! summary. The same seed always yields the same documents, so seeding is idempotent
//! (upserts) and expected values can be recomputed anywhere. [`OwnerMonths`] are the
//! requests the load sends: random owner-months of the set.

use dronelab_contract::cosmos::{summary_id, utilization_id};
use dronelab_contract::Container;
use loadgen::Uri;
use rand::Rng;
use serde_json::{json, Value};
use std::fmt::Write;

/// The most recent month of data; earlier months count back from it.
const LAST_YEAR: u32 = 2026;
const LAST_MONTH: u32 = 12;

/// The largest data set a command takes: more owners than a lab needs (the study had
/// 127,272), months back to 2002 (the invoice API takes years from 2000), a hundred
/// drones per owner.
pub const MAX_OWNERS: usize = 1_000_000;
pub const MAX_MONTHS: usize = 300;
pub const MAX_DRONES_PER_OWNER: usize = 100;

fn count_within(text: &str, what: &str, max: usize) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{what} must be a whole number from 1 to {max}")),
    }
}

/// `--owners`.
pub fn owners(text: &str) -> Result<usize, String> {
    count_within(text, "owners", MAX_OWNERS)
}

/// `--months`.
pub fn months(text: &str) -> Result<usize, String> {
    count_within(text, "months", MAX_MONTHS)
}

/// `--drones-per-owner`.
pub fn drones(text: &str) -> Result<usize, String> {
    count_within(text, "drones per owner", MAX_DRONES_PER_OWNER)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataSet {
    pub seed: u64,
    pub owners: usize,
    pub months: usize,
    pub drones_per_owner: usize,
}

/// SplitMix64: a tiny, well-mixed deterministic hash for generating values.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Owner number `n`'s id, `o00042`: an `o` and at least five digits.
struct OwnerId(usize);

impl OwnerId {
    /// Writes the id without `fmt`'s padding machinery (the load generator writes one
    /// per request into a `String`, where this cannot fail).
    fn write_into(&self, out: &mut impl Write) -> std::fmt::Result {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(self.0);
        out.write_char('o')?;
        for _ in digits.len()..5 {
            out.write_char('0')?;
        }
        out.write_str(digits)
    }
}

impl std::fmt::Display for OwnerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write_into(f)
    }
}

impl DataSet {
    fn hash(&self, parts: &[u64]) -> u64 {
        parts.iter().fold(mix(self.seed), |h, p| mix(h ^ p))
    }

    pub fn owner_id(owner: usize) -> String {
        OwnerId(owner).to_string()
    }

    pub fn drone_id(owner: usize, drone: usize) -> String {
        format!("d{owner:05}-{drone}")
    }

    /// `(year, month)` of month index `i`, counting back from the last month.
    pub fn month(i: usize) -> (u16, u8) {
        let total = LAST_YEAR * 12 + (LAST_MONTH - 1) - i as u32;
        ((total / 12) as u16, (total % 12 + 1) as u8)
    }

    pub fn utilization_doc(&self, owner: usize, month_index: usize, drone: usize) -> Value {
        let (year, month) = Self::month(month_index);
        let h = self.hash(&[1, owner as u64, month_index as u64, drone as u64]);
        json!({
            "id": utilization_id(&Self::drone_id(owner, drone), year, month),
            "droneId": Self::drone_id(owner, drone),
            "ownerId": Self::owner_id(owner),
            "year": year,
            "month": month,
            "traveledMiles": (h % 50_000) as f64 / 100.0,
            "assignedHours": ((h >> 20) % 2_000) as f64 / 10.0,
        })
    }

    fn summary_id(owner: usize, month_index: usize) -> String {
        let (year, month) = Self::month(month_index);
        summary_id(&Self::owner_id(owner), year, month)
    }

    pub fn delivery_doc(&self, owner: usize, month_index: usize) -> Value {
        let count = 1 + self.hash(&[2, owner as u64, month_index as u64]) % 40;
        json!({"id": Self::summary_id(owner, month_index), "ownerId": Self::owner_id(owner), "count": count})
    }

    pub fn package_doc(&self, owner: usize, month_index: usize) -> Value {
        let h = self.hash(&[3, owner as u64, month_index as u64]);
        let count = 1 + h % 60;
        json!({
            "id": Self::summary_id(owner, month_index),
            "ownerId": Self::owner_id(owner),
            "count": count,
            "totalWeightKg": (count * (5 + (h >> 16) % 40)) as f64 / 10.0,
        })
    }

    /// Documents per container, in the order of `Container::ALL`.
    pub fn document_counts(&self) -> [usize; 4] {
        let records = self.owners * self.months * self.drones_per_owner;
        let summaries = self.owners * self.months;
        [records, records, summaries, summaries]
    }

    /// Every document with its container and partition key value.
    pub fn documents(&self) -> impl Iterator<Item = (Container, String, Value)> + '_ {
        (0..self.owners).flat_map(move |owner| {
            (0..self.months).flat_map(move |m| {
                let records = (0..self.drones_per_owner).flat_map(move |d| {
                    let doc = self.utilization_doc(owner, m, d);
                    [
                        (
                            Container::Utilization,
                            Self::drone_id(owner, d),
                            doc.clone(),
                        ),
                        (Container::UtilizationByOwner, Self::owner_id(owner), doc),
                    ]
                });
                records.chain([
                    (
                        Container::Deliveries,
                        Self::owner_id(owner),
                        self.delivery_doc(owner, m),
                    ),
                    (
                        Container::Packages,
                        Self::owner_id(owner),
                        self.package_doc(owner, m),
                    ),
                ])
            })
        })
    }
}

/// How often each owner-month of the set is asked for.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Popularity {
    /// Every owner-month equally likely (the study's load).
    #[default]
    Uniform,
    /// Skewed the way real traffic repeats itself: the owner-month of popularity rank
    /// `k` is asked for in proportion to `1/k` (Zipf's law, exponent 1). Which
    /// owner-month holds which rank is fixed by the data set's seed.
    Zipf,
}

impl Popularity {
    /// Its name on the command line and in stage files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::Zipf => "zipf",
        }
    }
}

/// The most owner-months a Zipf load draws from (its table takes 8 bytes each).
pub const MAX_ZIPF_KEYS: usize = 1 << 22;

/// Requests for `path` (an invoice-path route) with a random owner-month of `data`:
/// `path?ownerId=…&year=…&month=…`, as popular as `popularity` says.
#[derive(Debug, Clone)]
pub struct OwnerMonths {
    path: String,
    data: DataSet,
    /// Zipf: the cumulative weights of ranks 1..=N.
    cumulative: Option<std::sync::Arc<[f64]>>,
}

impl OwnerMonths {
    pub fn new(path: String, data: DataSet, popularity: Popularity) -> Result<Self, String> {
        let keys = data.owners.max(1) * data.months.max(1);
        let cumulative = match popularity {
            Popularity::Uniform => None,
            Popularity::Zipf if keys > MAX_ZIPF_KEYS => {
                return Err(format!(
                    "a Zipf load draws from at most {MAX_ZIPF_KEYS} owner-months; this data set has {keys}"
                ))
            }
            Popularity::Zipf => Some(
                (1..=keys)
                    .scan(0.0, |sum, rank| {
                        *sum += 1.0 / rank as f64;
                        Some(*sum)
                    })
                    .collect(),
            ),
        };
        let requests = Self {
            path,
            data,
            cumulative,
        };
        // A path that makes no URI is refused here, not at the first request.
        requests.uri(0, 0)?;
        Ok(requests)
    }

    /// `path?ownerId=…&year=…&month=…` for one owner-month, parsed. Parsed once each up
    /// front instead (2.4 MB for the study's 12,000; 1.7 MB with their text in one
    /// buffer), the URIs cut the load generator's instructions per request by 5 % but
    /// not its time: picking one from the table missed the cache about as often as
    /// parsing cost, and the smaller table made it 4 % slower.
    fn uri(&self, owner: usize, month_index: usize) -> Result<Uri, String> {
        let (year, month) = DataSet::month(month_index);
        // One allocation, and no `fmt`: the parts are written in place.
        let mut path = String::with_capacity(self.path.len() + 40);
        path.push_str(&self.path);
        path.push_str("?ownerId=");
        let _ = OwnerId(owner).write_into(&mut path);
        path.push_str("&year=");
        path.push_str(itoa::Buffer::new().format(year));
        path.push_str("&month=");
        path.push_str(itoa::Buffer::new().format(month));
        // Owned, the text becomes the URI's buffer without a copy.
        Uri::try_from(path).map_err(|e| format!("{}: not a path and query: {e}", self.path))
    }

    /// The owner and month index of popularity rank `rank` (from 0): a fixed
    /// permutation of the keys, `rank × step + offset mod N` with `step` coprime to N,
    /// so the popular ones are spread over owners and months.
    fn key_of_rank(&self, rank: usize) -> (usize, usize) {
        let months = self.data.months.max(1);
        let keys = self.data.owners.max(1) * months;
        let mut step = (self.data.seed as usize % keys) | 1;
        while gcd(step, keys) != 1 {
            step += 2;
        }
        let key = (rank * step + self.data.seed as usize) % keys;
        (key / months, key % months)
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl loadgen::Requests for OwnerMonths {
    fn next_uri(&self) -> Result<Uri, String> {
        let mut rng = rand::rng();
        let (owner, month_index) = match &self.cumulative {
            None => (
                rng.random_range(0..self.data.owners.max(1)),
                rng.random_range(0..self.data.months.max(1)),
            ),
            Some(cumulative) => {
                let total = cumulative.last().copied().unwrap_or(1.0);
                let drawn = rng.random_range(0.0..total);
                self.key_of_rank(cumulative.partition_point(|c| *c <= drawn))
            }
        };
        self.uri(owner, month_index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_counts_match() {
        let set = DataSet {
            seed: 7,
            owners: 3,
            months: 14,
            drones_per_owner: 2,
        };
        let a: Vec<_> = set.documents().collect();
        let b: Vec<_> = set.documents().collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), set.document_counts().iter().sum::<usize>());
        let other = DataSet { seed: 8, ..set };
        assert_ne!(a, other.documents().collect::<Vec<_>>());
    }

    #[test]
    fn requests_ask_for_owner_months_of_the_set() {
        use loadgen::Requests as _;
        let requests = OwnerMonths::new(
            "/api/invoices".into(),
            DataSet {
                seed: 1,
                owners: 3,
                months: 2,
                drones_per_owner: 1,
            },
            Popularity::Uniform,
        )
        .expect("uniform");
        for _ in 0..50 {
            let path = requests.next_uri().expect("a URI").to_string();
            let query = path.strip_prefix("/api/invoices?").expect(&path);
            let request = dronelab_contract::OwnerMonth::from_query(Some(query)).expect(&path);
            assert!(["o00000", "o00001", "o00002"].contains(&request.owner_id.as_str()));
            assert_eq!(request.year.get(), 2026);
            assert!([11, 12].contains(&request.month.get()), "{path}");
        }
    }

    #[test]
    fn a_path_that_makes_no_uri_is_refused_when_the_requests_are_made() {
        let set = DataSet {
            seed: 1,
            owners: 3,
            months: 1,
            drones_per_owner: 1,
        };
        let made = |path: &str| OwnerMonths::new(path.into(), set, Popularity::Uniform);
        assert!(made("/i").is_ok());
        let bad = made("/a b").map(|_| ());
        assert!(bad.is_err_and(|e| e.starts_with("/a b: not a path and query")));
    }

    #[test]
    fn owner_ids_have_an_o_and_at_least_five_digits() {
        let ids: Vec<String> = [0, 7, 42, 99_999, 100_000, 1_234_567]
            .map(DataSet::owner_id)
            .into();
        assert_eq!(
            ids,
            ["o00000", "o00007", "o00042", "o99999", "o100000", "o1234567"]
        );
    }

    #[test]
    fn months_count_back_across_years() {
        assert_eq!(DataSet::month(0), (2026, 12));
        assert_eq!(DataSet::month(11), (2026, 1));
        assert_eq!(DataSet::month(12), (2025, 12));
    }

    #[test]
    fn a_zipf_load_repeats_its_popular_owner_months_and_covers_the_set() {
        use loadgen::Requests as _;
        let set = DataSet {
            seed: 42,
            owners: 300,
            months: 12,
            drones_per_owner: 2,
        };
        let count = |popularity| {
            let requests = OwnerMonths::new("/i".into(), set, popularity).expect("requests");
            let mut seen = std::collections::HashMap::<String, usize>::new();
            for _ in 0..3000 {
                *seen
                    .entry(requests.next_uri().expect("a URI").to_string())
                    .or_default() += 1;
            }
            let mut counts: Vec<usize> = seen.into_values().collect();
            counts.sort_unstable_by(|a, b| b.cmp(a));
            counts
        };
        let zipf = count(Popularity::Zipf);
        let uniform = count(Popularity::Uniform);
        // Rank 1 is asked for about 1/H(3600) = 11 % of the time; uniformly, 1/3600.
        assert!(zipf[0] > 200 && zipf[0] < 500, "{:?}", &zipf[..5]);
        assert!(uniform[0] < 10, "{:?}", &uniform[..5]);
        // Repeats: most Zipf requests ask for an owner-month asked for before.
        let repeats = |c: &[usize]| c.iter().map(|n| n - 1).sum::<usize>();
        assert!(repeats(&zipf) > 1500 && repeats(&uniform) < 1500);
        let too_big = DataSet {
            owners: 1_000_000,
            months: 300,
            ..set
        };
        assert!(OwnerMonths::new("/i".into(), too_big, Popularity::Zipf).is_err());
    }
}
