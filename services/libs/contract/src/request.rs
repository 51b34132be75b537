//! The request every dronelab endpoint answers: an owner's month. Values can only be
//! built valid; parsing reports the offending parameter by name.

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
    pub fn from_query(raw: Option<&str>) -> Result<Self, InvalidParams> {
        let mut values: [Option<String>; 3] = [None, None, None];
        let mut invalid = Extra::default();
        for (name, value) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            match PARAMETERS.iter().position(|p| *p == name) {
                Some(i) if values[i].is_some() => invalid.add(&name, "is given more than once"),
                Some(i) => values[i] = Some(value.into_owned()),
                None => invalid.add(&name, "is not a known parameter"),
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

    /// The query string form, for calling a backend.
    pub fn to_query(&self) -> String {
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("ownerId", self.owner_id.as_str())
            .append_pair("year", &self.year.get().to_string())
            .append_pair("month", &self.month.get().to_string())
            .finish()
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
        OwnerMonth::from_query(Some(raw))
            .expect_err(raw)
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
        assert_eq!(
            OwnerMonth::from_query(Some(&q.to_query())).expect("round trip"),
            q
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
