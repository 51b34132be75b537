//! URLs on the command line that this build's HTTP client (reqwest) reaches: a trace API,
//! utilization-service's `/metrics`.

/// Parses `text`; `https://` only in a build with the feature `tls`, so a build without
/// it says which feature to add instead of failing on the first request.
pub fn client_url(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text).map_err(|e| e.to_string())?;
    cosmos_kit::refuse_https_without_tls(url.as_str())?;
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::client_url;

    #[test]
    fn client_urls_parse_and_https_follows_the_build() {
        assert!(client_url("http://127.0.0.1:16686/").is_ok());
        assert!(client_url("not a url").is_err());
        let https = client_url("https://jaeger.example/");
        assert_eq!(https.is_ok(), cfg!(feature = "tls"), "{https:?}");
    }
}
