//! `loadtest merge`'s input: any text is a load record that passed its checks (or a log
//! ending in one) or an error, never a panic or a giant allocation; records that are read
//! merge or are refused, and what they report stays within the record limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadgen::record::{LoadRecord, MAX_INTERVALS};

fuzz_target!(|text: &str| {
    let Ok(record) = LoadRecord::from_log(text) else {
        return;
    };
    let summary = record.summary();
    assert!(
        summary.series.len() as u64 <= MAX_INTERVALS,
        "{} intervals",
        summary.series.len()
    );
    // The same shard twice is refused; a whole record merges with itself alone.
    let again = LoadRecord::from_log(text).expect("read once, read again");
    let _ = LoadRecord::merge(vec![record]);
    let _ = LoadRecord::merge(vec![again, LoadRecord::from_log(text).expect("and again")]);
});
