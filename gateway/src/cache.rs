//! The antipattern lab's fix of No Caching (`--invoice-cache closed-months`): the
//! complete invoices of closed months, kept in the gateway. A closed month's deliveries,
//! packages and utilization can no longer change, so an entry never goes stale and needs
//! no expiry or invalidation; partial invoices and the current month are never kept.
//!
//! Decisions: the cache is in the gateway, one per replica (the invoice is what repeats,
//! and the gateway is where it is assembled); it holds at most
//! [`INVOICE_CACHE_ENTRIES`] invoices and drops the oldest first (a popular invoice
//! evicted is simply computed again); it does not survive a rollout — a new replica
//! starts cold and warms with the first requests for each popular owner-month. A cache
//! shared by every replica and surviving rollouts (Redis, or Cosmos DB itself) is the
//! next step when a cold start costs too much.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use axum::body::Bytes;
use dronelab_contract::lab::INVOICE_CACHE_ENTRIES;
use dronelab_contract::OwnerMonth;

/// Serialized invoices by owner-month query.
#[derive(Default)]
pub struct InvoiceCache {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<String, Bytes>,
    oldest_first: VecDeque<String>,
}

impl InvoiceCache {
    pub fn get(&self, key: &str) -> Option<Bytes> {
        let entries = self.entries.lock().ok()?;
        entries.by_key.get(key).cloned()
    }

    pub fn put(&self, key: String, invoice: Bytes) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries.by_key.contains_key(&key) {
            return;
        }
        if entries.by_key.len() >= INVOICE_CACHE_ENTRIES {
            if let Some(oldest) = entries.oldest_first.pop_front() {
                entries.by_key.remove(&oldest);
            }
        }
        entries.oldest_first.push_back(key.clone());
        entries.by_key.insert(key, invoice);
    }
}

/// Whether the owner-month is before the current month (UTC): its invoice is final.
pub fn is_closed(request: &OwnerMonth, now: time::OffsetDateTime) -> bool {
    (request.year.get(), request.month.get()) < (now.year() as u16, u8::from(now.month()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn month(query: &str) -> OwnerMonth {
        OwnerMonth::from_query(Some(query)).expect("valid")
    }

    #[test]
    fn only_months_before_this_one_are_closed() {
        let now = time::macros::datetime!(2026-12-01 0:00 UTC);
        assert!(is_closed(&month("ownerId=o1&year=2026&month=11"), now));
        assert!(is_closed(&month("ownerId=o1&year=2025&month=12"), now));
        assert!(!is_closed(&month("ownerId=o1&year=2026&month=12"), now));
    }

    #[test]
    fn the_cache_keeps_what_it_was_given_and_drops_the_oldest_when_full() {
        let cache = InvoiceCache::default();
        assert!(cache.get("a").is_none());
        cache.put("a".into(), Bytes::from_static(b"{}"));
        assert_eq!(cache.get("a").as_deref(), Some(&b"{}"[..]));
        for i in 0..INVOICE_CACHE_ENTRIES {
            cache.put(format!("k{i}"), Bytes::from_static(b"1"));
        }
        assert!(cache.get("a").is_none(), "the oldest went first");
        assert!(cache.get("k1").is_some());
    }
}
