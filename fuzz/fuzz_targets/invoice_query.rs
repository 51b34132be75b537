//! The gateway's and backends' query parsing: any query string is an owner-month or a
//! list of named problems, never a panic; a valid one round-trips.
#![no_main]

use dronelab_contract::OwnerMonth;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|raw: &str| {
    match OwnerMonth::from_query(Some(raw)) {
        Ok(request) => {
            let again = OwnerMonth::from_query(Some(&request.to_query()));
            assert_eq!(again.as_ref().ok(), Some(&request));
        }
        Err(invalid) => {
            assert!(!invalid.0.is_empty());
            assert!(invalid.0.len() <= 14, "a short report: {}", invalid.0.len());
        }
    }
});
