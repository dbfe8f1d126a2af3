//! A request's query string, as name and value pairs.

/// The `name=value` pairs of a query string, decoded (`+` is a space).
/// A pair whose bytes are not UTF-8 once decoded is left out.
pub fn query_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).filter_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        Some((decode(k)?, decode(v)?))
    })
}

fn decode(part: &str) -> Option<String> {
    let spaced = part.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_are_decoded() {
        let pairs: Vec<_> = query_pairs("q=tide+tables&folder=%2Fhome%2Fu&x&bad=%FF&type=").collect();
        assert_eq!(
            pairs,
            [
                ("q".into(), "tide tables".into()),
                ("folder".into(), "/home/u".into()),
                ("x".into(), String::new()),
                ("type".into(), String::new()),
            ]
        );
    }
}
