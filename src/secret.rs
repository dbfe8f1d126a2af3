//! A password that cannot be printed by accident (DESIGN §7: secrets are never
//! logged or shown). `Debug` and `Display` show a placeholder; the value is
//! reachable only through [`Secret::expose`], which the HTTP code calls when it
//! builds the `Authorization` header and nowhere else.

/// A secret string.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a password; from here on it prints only as a placeholder.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself. Only for building credentials on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_never_shows_the_value() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?} {s} {:?}", Some(&s)).contains("hunter2"));
        assert_eq!(s.expose(), "hunter2");
    }
}
