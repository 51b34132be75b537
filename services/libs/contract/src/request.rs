//! The request every dronelab endpoint answers: an owner's month. Values can only be
//! built valid; parsing reports the offending parameter by name.

use std::borrow::Cow;
use std::fmt;

/// Parameters a query got wrong: `(name, reason)` in the order the parameters are
/// documented, then unknown or repeated ones. The services answer it as a 400
/// problem+json (`service_kit::Problem` converts it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidParams(pub Vec<(String, String)>);

impl fmt::Display for InvalidParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, reason) in &self.0 {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{name} {reason}")?;
        }
        Ok(())
    }
}

impl std::error::Error for InvalidParams {}

/// Unknown and repeated parameters, reported without echoing a hostile query back: each
/// name once, cut to [`Extra::MAX_NAME`] characters, at most [`Extra::MAX_REPORTED`] of
/// them and then how many more.
#[derive(Default)]
struct Extra {
    reported: Vec<(String, String)>,
    more: usize,
}

impl Extra {
    const MAX_REPORTED: usize = 10;
    const MAX_NAME: usize = 64;

    fn add(&mut self, name: &str, reason: &str) {
        let name: String = if name.chars().count() > Self::MAX_NAME {
            name.chars().take(Self::MAX_NAME).chain(['…']).collect()
        } else {
            name.to_owned()
        };
        if self.reported.iter().any(|(n, r)| *n == name && r == reason) {
            return;
        }
        if self.reported.len() < Self::MAX_REPORTED {
            self.reported.push((name, reason.to_owned()));
        } else {
            self.more += 1;
        }
    }

    fn into_list(mut self) -> Vec<(String, String)> {
        if self.more > 0 {
            self.reported.push((
                "(others)".to_owned(),
                format!("{} more unknown or repeated parameters", self.more),
            ));
        }
        self.reported
    }
}

/// A drone-delivery owner id: 1–64 characters of `A-Z a-z 0-9 _ -`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(String);

impl OwnerId {
    pub const MAX_LEN: usize = 64;

    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            return Err("must not be empty".into());
        }
        if raw.len() > Self::MAX_LEN {
            return Err(format!("must be at most {} characters", Self::MAX_LEN));
        }
        if !raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err("may only contain letters, digits, '_' and '-'".into());
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A calendar year the lab has data for: 2000–2100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Year(u16);

impl Year {
    pub const MIN: u16 = 2000;
    pub const MAX: u16 = 2100;

    pub fn new(year: u16) -> Result<Self, String> {
        if (Self::MIN..=Self::MAX).contains(&year) {
            Ok(Self(year))
        } else {
            Err(format!("must be between {} and {}", Self::MIN, Self::MAX))
        }
    }

    pub fn get(self) -> u16 {
        self.0
    }
}

/// A month: 1–12.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Month(u8);

impl Month {
    pub fn new(month: u8) -> Result<Self, String> {
        if (1..=12).contains(&month) {
            Ok(Self(month))
        } else {
            Err("must be between 1 and 12".into())
        }
    }

    pub fn get(self) -> u8 {
        self.0
    }
}

/// `?ownerId=…&year=…&month=…`, the parameters of every invoice-path endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerMonth {
    pub owner_id: OwnerId,
    pub year: Year,
    pub month: Month,
}

/// The query parameters, in the order the OpenAPI document lists them.
pub const PARAMETERS: [&str; 3] = ["ownerId", "year", "month"];

fn number<T: std::str::FromStr>(raw: &str) -> Result<T, String> {
    if raw.is_empty() {
        return Err("must not be empty".into());
    }
    if !raw.bytes().all(|b| b.is_ascii_digit()) || raw.len() > 6 {
        return Err(format!("must be a whole number, got {raw:?}"));
    }
    raw.parse()
        .map_err(|_| format!("must be a whole number, got {raw:?}"))
}

impl OwnerMonth {
    /// Parses a raw query string. Missing, empty, malformed, out-of-range, repeated and
    /// unknown parameters are all rejected with a problem naming each one.
    pub fn from_query<'a>(raw: Option<&'a str>) -> Result<Self, InvalidParams> {
        let mut values: [Option<Cow<str>>; 3] = [None, None, None];
        let mut invalid = Extra::default();
        let mut take =
            |name: &str, value: Cow<'a, str>| match PARAMETERS.iter().position(|p| *p == name) {
                Some(i) if values[i].is_some() => invalid.add(name, "is given more than once"),
                Some(i) => values[i] = Some(value),
                None => invalid.add(name, "is not a known parameter"),
            };
        let raw = raw.unwrap_or("");
        if raw.contains(['%', '+']) {
            for (name, value) in url::form_urlencoded::parse(raw.as_bytes()) {
                take(&name, value);
            }
        } else {
            // Nothing to decode: the pairs `form_urlencoded::parse` would give, as slices
            // of the query (its copies cost the gateway ~1.5k instructions an invoice).
            for pair in raw.split('&').filter(|pair| !pair.is_empty()) {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                take(name, Cow::Borrowed(value));
            }
        }
        let invalid = invalid.into_list();
        let [owner, year, month] = values;
        let owner = match owner {
            None => Err("is required".to_owned()),
            Some(v) => OwnerId::parse(&v),
        };
        let year = match year {
            None => Err("is required".to_owned()),
            Some(v) => number::<u16>(&v).and_then(Year::new),
        };
        let month = match month {
            None => Err("is required".to_owned()),
            Some(v) => number::<u8>(&v).and_then(Month::new),
        };
        match (owner, year, month) {
            (Ok(owner_id), Ok(year), Ok(month)) if invalid.is_empty() => Ok(Self {
                owner_id,
                year,
                month,
            }),
            (owner, year, month) => {
                let mut errors: Vec<(String, String)> = Vec::new();
                for (name, outcome) in [
                    ("ownerId", owner.err()),
                    ("year", year.err()),
                    ("month", month.err()),
                ] {
                    if let Some(reason) = outcome {
                        errors.push((name.to_owned(), reason));
                    }
                }
                errors.extend(invalid);
                Err(InvalidParams(errors))
            }
        }
    }

    /// The query string form, for calling a backend. Written out directly: an
    /// [`OwnerId`] holds only letters, digits, `_` and `-`, which form encoding leaves as
    /// they are, and the numbers are digits (the encoder and `to_string` cost the gateway
    /// ~1.5k instructions per invoice, this ~0.2k).
    pub fn to_query(&self) -> String {
        let mut year = itoa::Buffer::new();
        let mut month = itoa::Buffer::new();
        let parts = [
            "ownerId=",
            self.owner_id.as_str(),
            "&year=",
            year.format(self.year.get()),
            "&month=",
            month.format(self.month.get()),
        ];
        let mut query = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        for part in parts {
            query.push_str(part);
        }
        query
    }

    /// `YYYY-MM`, the month asked for (the gateway's server span carries it).
    pub fn year_month(&self) -> String {
        // Month is 1–12 by construction: two digits, without the formatting machinery.
        let month = self.month.get();
        let mut year = itoa::Buffer::new();
        let mut text = String::with_capacity(7);
        text.push_str(year.format(self.year.get()));
        text.push('-');
        text.push(char::from(b'0' + month / 10));
        text.push(char::from(b'0' + month % 10));
        text
    }

    /// Id of the owner's monthly summary document (containers `deliveries`, `packages`).
    pub fn summary_id(&self) -> String {
        crate::cosmos::summary_id(self.owner_id.as_str(), self.year.get(), self.month.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(raw: &str) -> Vec<String> {
        names_of(OwnerMonth::from_query(Some(raw)))
    }

    fn names_of(parsed: Result<OwnerMonth, InvalidParams>) -> Vec<String> {
        parsed
            .expect_err("invalid")
            .0
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    #[test]
    fn valid_queries_parse() {
        let q = OwnerMonth::from_query(Some("ownerId=o00042&year=2026&month=3")).expect("valid");
        assert_eq!(q.owner_id.as_str(), "o00042");
        assert_eq!((q.year.get(), q.month.get()), (2026, 3));
        assert_eq!(q.summary_id(), "o00042-2026-03");
        assert_eq!(q.year_month(), "2026-03");
        let december = OwnerMonth::from_query(Some("ownerId=o1&year=2000&month=12"));
        assert_eq!(december.expect("valid").year_month(), "2000-12");
        assert_eq!(
            OwnerMonth::from_query(Some(&q.to_query())).expect("round trip"),
            q
        );
    }

    #[test]
    fn the_query_is_what_form_encoding_writes() {
        for (owner, year, month) in [("o00042", 2026, 3), ("Owner_9-x", 2000, 12)] {
            let query = OwnerMonth {
                owner_id: OwnerId::parse(owner).expect("valid id"),
                year: Year::new(year).expect("valid year"),
                month: Month::new(month).expect("valid month"),
            }
            .to_query();
            let encoded = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("ownerId", owner)
                .append_pair("year", &year.to_string())
                .append_pair("month", &month.to_string())
                .finish();
            assert_eq!(query, encoded);
        }
    }

    /// A query without `%` or `+` is split without the decoder; written with one escape
    /// (which takes the decoder), it must parse the same.
    #[test]
    fn a_query_parses_the_same_with_and_without_escapes() {
        for query in [
            "ownerId=o1&year=2026&month=3",
            "ownerId=o1&&year=2026&month=3&",
            "&ownerId=o1&year=2026&month=3",
            "ownerId&year=2026&month=3",
            "ownerId=&year=2026&month=3",
            "ownerId=o1=2&year=2026&month=3",
            "=o1&year=2026&month=3",
            "ownerId=o1&year=2026&year=2027&month=3",
            "ownerId=o1&year=2026&month=3&extra",
            "ownerId=o1&year=20x6&month=13",
        ] {
            let escaped = query.replacen("year", "y%65ar", 1);
            assert!(escaped.contains('%'), "{query}");
            assert_eq!(
                OwnerMonth::from_query(Some(query)),
                OwnerMonth::from_query(Some(&escaped)),
                "{query}"
            );
        }
        let plus = OwnerMonth::from_query(Some("ownerId=o+1&year=2026&month=3"));
        assert_eq!(
            names_of(plus),
            ["ownerId"],
            "'+' is a space, not allowed in an id"
        );
    }

    #[test]
    fn a_flood_of_unknown_parameters_is_reported_briefly() {
        // 40 KB of parameters: 2,000 long unknown names, each twice.
        let long = "x".repeat(200);
        let query: String = (0..2_000)
            .map(|i| format!("{}{long}=1&{}{long}=1&", i % 1_000, i % 1_000))
            .collect::<String>()
            + "ownerId=o1&year=2026&month=3";
        let invalid = OwnerMonth::from_query(Some(&query))
            .expect_err("unknown parameters")
            .0;
        assert_eq!(invalid.len(), Extra::MAX_REPORTED + 1, "{invalid:?}");
        assert!(invalid
            .iter()
            .all(|(name, _)| name.chars().count() <= Extra::MAX_NAME + 1));
        assert_eq!(invalid[Extra::MAX_REPORTED].0, "(others)");
        assert!(
            invalid
                .iter()
                .map(|(n, r)| n.len() + r.len())
                .sum::<usize>()
                < 2_000
        );
        // The same unknown name twice is reported once.
        assert_eq!(names("ownerId=o1&year=2026&month=3&a=1&a=2"), ["a"]);
    }

    #[test]
    fn every_kind_of_bad_input_names_its_parameter() {
        assert_eq!(names(""), ["ownerId", "year", "month"]);
        assert_eq!(names("ownerId=&year=2026&month=3"), ["ownerId"]);
        assert_eq!(
            names(&format!("ownerId={}&year=2026&month=3", "a".repeat(65))),
            ["ownerId"]
        );
        assert_eq!(names("ownerId=o%2F1&year=2026&month=3"), ["ownerId"]);
        assert_eq!(names("ownerId=o1&year=abc&month=3"), ["year"]);
        assert_eq!(names("ownerId=o1&year=2026x&month=3"), ["year"]);
        assert_eq!(names("ownerId=o1&year=-5&month=3"), ["year"]);
        assert_eq!(names("ownerId=o1&year=1999&month=3"), ["year"]);
        assert_eq!(names("ownerId=o1&year=99999999999&month=3"), ["year"]);
        assert_eq!(names("ownerId=o1&year=2026&month=13"), ["month"]);
        assert_eq!(names("ownerId=o1&year=2026&month=0"), ["month"]);
        assert_eq!(names("ownerId=o1&year=2026&month=3&extra=1"), ["extra"]);
        assert_eq!(names("ownerId=o1&year=2026&month=3&month=4"), ["month"]);
    }
}
