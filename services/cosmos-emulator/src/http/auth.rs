//! Master-key signature check (`authorization: type=master&ver=1.0&sig=…`).
//!
//! The client signs `verb\nresourceType\nresourceLink\ndate\n\n` (lower-cased verb, type
//! and date) with HMAC-SHA256 over the decoded key. The resource link is the request
//! path without its leading slash; for a feed (a path ending in a resource type such as
//! `…/docs`) it is the parent path. RID-addressed requests and offers sign the
//! lower-cased resource id instead: that form is accepted only for a request that is
//! RID-addressed (its database and container segments are resource ids), so a signature
//! for one resource is never accepted for another of the same name elsewhere.

use axum::http::{HeaderMap, Method};
use base64::Engine;
use hmac::{Hmac, Mac};
use percent_encoding::percent_decode_str;
use sha2::Sha256;

use super::error::ApiError;
use super::headers;
use crate::config::MasterKey;

const RESOURCE_TYPES: [&str; 9] = [
    "dbs", "colls", "docs", "pkranges", "offers", "sprocs", "triggers", "udfs", "users",
];

/// The resource type and candidate links a request may have been signed with.
fn signing_candidates(path: &str, rid_addressed: bool) -> (String, Vec<String>) {
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        return (String::new(), vec![String::new()]);
    }
    let segments: Vec<&str> = trimmed.split('/').collect();
    let is_feed = segments.len() % 2 == 1;
    let (resource_type, link_segments) = if is_feed {
        (
            segments[segments.len() - 1],
            &segments[..segments.len() - 1],
        )
    } else {
        (segments[segments.len() - 2], &segments[..])
    };
    let mut links = Vec::with_capacity(3);
    let joined = link_segments.join("/");
    let decoded = percent_decode_str(&joined).decode_utf8_lossy().into_owned();
    if resource_type == "offers" {
        links.push(
            link_segments
                .last()
                .map(|s| s.to_lowercase())
                .unwrap_or_default(),
        );
    }
    links.push(decoded.clone());
    if decoded != joined {
        links.push(joined);
    }
    if let Some(last_id) = link_segments.last().filter(|_| rid_addressed) {
        if !RESOURCE_TYPES.contains(last_id) {
            links.push(last_id.to_lowercase());
        }
    }
    (resource_type.to_owned(), links)
}

fn verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::POST => "post",
        Method::PUT => "put",
        Method::DELETE => "delete",
        Method::HEAD => "head",
        Method::PATCH => "patch",
        _ => "extension",
    }
}

/// Checks the request's signature (`rid_addressed`: whether `path` names its database and
/// container by resource id), and that its date is within `max_skew` of now;
/// `Unauthorized` names what is wrong (never the key).
pub fn verify(
    key: &MasterKey,
    max_skew: Option<std::time::Duration>,
    method: &Method,
    path: &str,
    rid_addressed: bool,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let unauthorized = |m: &str| ApiError::Unauthorized(m.to_owned());
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| unauthorized("Required header 'authorization' is missing."))?
        .to_str()
        .map_err(|_| unauthorized("The authorization header is not valid text."))?;
    let token = percent_decode_str(header).decode_utf8_lossy();
    let mut kind = None;
    let mut signature = None;
    for part in token.split('&') {
        match part.split_once('=') {
            Some(("type", v)) => kind = Some(v),
            Some(("sig", v)) => signature = Some(v),
            _ => {}
        }
    }
    if kind != Some("master") {
        return Err(unauthorized(
            "Only master-key authorization (type=master) is supported by this emulator.",
        ));
    }
    let signature = signature
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .ok_or_else(|| unauthorized("The authorization header carries no valid signature."))?;
    let date = headers
        .get(headers::DATE)
        .or_else(|| headers.get(axum::http::header::DATE))
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| unauthorized("Required header 'x-ms-date' is missing."))?
        .to_lowercase();
    if let Some(max_skew) = max_skew {
        check_date(&date, max_skew)?;
    }
    let (resource_type, links) = signing_candidates(path, rid_addressed);
    for link in &links {
        let payload = format!(
            "{}\n{}\n{}\n{}\n\n",
            verb(method),
            resource_type,
            link,
            date
        );
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key.bytes()) else {
            return Err(ApiError::Internal("invalid HMAC key length".into()));
        };
        mac.update(payload.as_bytes());
        if mac.verify_slice(&signature).is_ok() {
            return Ok(());
        }
    }
    Err(unauthorized(&format!(
        "The input authorization token can't serve the request. The wrong key is being used or the expected payload is not built as per the protocol. Server used the following payload to sign: '{}\\n{}\\n{}\\n{}\\n\\n'",
        verb(method),
        resource_type,
        links.first().map(String::as_str).unwrap_or(""),
        date
    )))
}

/// A signature dated too far from now is refused: a captured request cannot be
/// replayed later (Cosmos DB allows 15 minutes).
fn check_date(date: &str, max_skew: std::time::Duration) -> Result<(), ApiError> {
    // The signature covers the date in lower case; HTTP dates are case-sensitive.
    let canonical: Vec<String> = date
        .split(' ')
        .map(|word| {
            if word.eq_ignore_ascii_case("gmt") {
                "GMT".to_owned()
            } else {
                let mut chars = word.chars();
                chars.next().map_or(String::new(), |first| {
                    first.to_ascii_uppercase().to_string() + &chars.as_str().to_ascii_lowercase()
                })
            }
        })
        .collect();
    let at = httpdate::parse_http_date(&canonical.join(" ")).map_err(|_| {
        ApiError::Unauthorized(format!(
            "x-ms-date '{date}' is not an HTTP date (e.g. 'Tue, 01 Dec 2026 10:00:00 GMT')."
        ))
    })?;
    let now = std::time::SystemTime::now();
    let skew = now
        .duration_since(at)
        .or_else(|e| Ok::<_, ApiError>(e.duration()))?;
    if skew > max_skew {
        return Err(ApiError::Unauthorized(format!(
            "The authorization token is not valid at the current time: x-ms-date is {} s from the emulator's clock, more than {} s (start the emulator with --allow-clock-skew to accept it).",
            skew.as_secs(),
            max_skew.as_secs()
        )));
    }
    Ok(())
}

/// Whether `headers` carry the master key in `x-emulator-key` (base64, as configured):
/// what the admin routes that change the emulator require. Compared in constant time.
pub fn is_admin(key: &MasterKey, headers: &HeaderMap) -> bool {
    let Some(given) = headers
        .get(ADMIN_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            base64::engine::general_purpose::STANDARD
                .decode(v.trim())
                .ok()
        })
    else {
        return false;
    };
    let expected = key.bytes();
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// The header the admin routes read the master key from. A custom header also makes
/// every cross-origin call to them need a CORS preflight, which the emulator does not
/// grant: a web page cannot reach them.
pub const ADMIN_KEY_HEADER: &str = "x-emulator-key";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_follow_the_cosmos_rules() {
        assert_eq!(
            signing_candidates("/", false),
            (String::new(), vec![String::new()])
        );
        let (t, links) = signing_candidates("/dbs/db1/colls/c1/docs", false);
        assert_eq!(t, "docs");
        assert_eq!(
            links,
            ["dbs/db1/colls/c1"],
            "a name path signs the path only"
        );
        let (t, links) = signing_candidates("/dbs/db1/colls/c1/docs/a%20b", false);
        assert_eq!(t, "docs");
        assert_eq!(links[0], "dbs/db1/colls/c1/docs/a b");
        let (t, links) = signing_candidates("/offers/AbCd", false);
        assert_eq!(t, "offers");
        assert_eq!(links[0], "abcd");
        let (t, links) = signing_candidates("/dbs", false);
        assert_eq!((t.as_str(), links[0].as_str()), ("dbs", ""));
        let (_, links) = signing_candidates("/dbs/AbCdAA==/colls/AbCdAKl0=/pkranges", true);
        assert_eq!(links.last().map(String::as_str), Some("abcdakl0="));
    }

    #[test]
    fn dates_beyond_the_allowed_skew_are_refused() {
        let max = std::time::Duration::from_secs(15 * 60);
        let at = |offset_secs: i64| {
            let now = std::time::SystemTime::now();
            let t = if offset_secs >= 0 {
                now + std::time::Duration::from_secs(offset_secs as u64)
            } else {
                now - std::time::Duration::from_secs(offset_secs.unsigned_abs())
            };
            httpdate::fmt_http_date(t).to_lowercase()
        };
        assert!(check_date(&at(0), max).is_ok());
        assert!(check_date(&at(-14 * 60), max).is_ok());
        assert!(check_date(&at(14 * 60), max).is_ok());
        for far in [-16 * 60, 16 * 60, -86_400] {
            let refused = check_date(&at(far), max).expect_err("too far");
            assert!(
                refused.to_string().contains("--allow-clock-skew"),
                "{refused}"
            );
        }
        assert!(check_date("yesterday", max).is_err());
    }
}
