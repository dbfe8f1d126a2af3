//! Sizes as people write them (`64MiB`, `1 GB`, `1.5GiB`, `4096`), one parser
//! for the flags, the configuration file and search's `size>` field. Our own rather than `bytesize`'s:
//! that one took `20000PiB` as 16 EiB without a word and answered a number too
//! big for 64 bits with `couldn't parse "" into a known SI unit`.

/// How a size is written, for messages.
pub const SIZE_FORM: &str = "expected a size such as 64MiB, 1GiB, 500kB or a number of bytes";

/// The units, case-insensitive, as `bytesize` read them before: decimal
/// (`kB`, `MB`..., or a bare letter) and binary (`KiB`, `MiB`..., or `Ki`).
const UNITS: [(&str, u128); 22] = [
    ("", 1),
    ("b", 1),
    ("k", 1_000),
    ("kb", 1_000),
    ("m", 1_000_000),
    ("mb", 1_000_000),
    ("g", 1_000_000_000),
    ("gb", 1_000_000_000),
    ("t", 1_000_000_000_000),
    ("tb", 1_000_000_000_000),
    ("p", 1_000_000_000_000_000),
    ("pb", 1_000_000_000_000_000),
    ("ki", 1 << 10),
    ("kib", 1 << 10),
    ("mi", 1 << 20),
    ("mib", 1 << 20),
    ("gi", 1 << 30),
    ("gib", 1 << 30),
    ("ti", 1 << 40),
    ("tib", 1 << 40),
    ("pi", 1 << 50),
    ("pib", 1 << 50),
];

/// A size in bytes, more than 0 and at most `u64::MAX`. The error is a reason
/// only (the caller names the flag or key and the value), and says what is
/// wrong: not a size, an unknown unit, too large, or 0.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = (&text[..split], text[split..].trim());
    if number.is_empty() || number.matches('.').count() > 1 || number == "." {
        return Err(SIZE_FORM.into());
    }
    let Some(&(_, unit_bytes)) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) else {
        return Err(format!(
            "unknown unit {unit:?}; {SIZE_FORM} (units: B, kB, KiB, MB, MiB, GB, GiB, TB, TiB, PB, PiB)"
        ));
    };
    let bytes = scaled(number, unit_bytes).ok_or_else(too_large)?;
    match u64::try_from(bytes) {
        Ok(0) => Err("must be more than 0 bytes".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(too_large()),
    }
}

fn too_large() -> String {
    "too large: a size must be less than 16 EiB (2^64 bytes)".into()
}

/// `number` (digits, perhaps one `.`) times `unit_bytes`, rounded down and
/// exact; `None` when it does not fit in 128 bits (far past any size).
fn scaled(number: &str, unit_bytes: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{whole}{fraction}");
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let divisor = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
    Some(mantissa.checked_mul(unit_bytes)? / divisor)
}

/// `bytes` as a size that [`parse_size`] reads back exactly, in the largest
/// binary unit that divides it (`512MiB`, `6GiB`, `1000001`).
// The configuration's (feature `http`) and the command line's.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub fn format_size(bytes: u64) -> String {
    const BINARY: [(&str, u64); 5] = [
        ("PiB", 1 << 50),
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in BINARY {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        for (text, bytes) in [
            ("64MiB", 64 << 20),
            ("64 MiB", 64 << 20),
            ("64mib", 64 << 20),
            ("1 GB", 1_000_000_000),
            ("500kB", 500_000),
            ("1.5GiB", 3 << 29),
            ("0.5KiB", 512),
            ("4096", 4096),
            ("4096B", 4096),
            ("18446744073709551615", u64::MAX),
            ("16383PiB", 16383 << 50),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn a_bad_size_says_what_is_wrong() {
        let reason = |text: &str| parse_size(text).unwrap_err();
        for huge in [
            "99999999999999999999999",
            "18446744073709551616",
            "16384PiB",
            "20000PiB",
        ] {
            assert!(reason(huge).starts_with("too large"), "{huge}: {}", reason(huge));
        }
        let digits = "9".repeat(60);
        assert!(reason(&digits).starts_with("too large"));
        assert!(reason("3EiB").contains("unknown unit \"EiB\""));
        assert!(reason("64 parsecs").contains("unknown unit"));
        for bad in ["", "abc", "-1", ".", "1.2.3", "MiB"] {
            assert_eq!(reason(bad), SIZE_FORM, "{bad:?}");
        }
        assert_eq!(reason("0"), "must be more than 0 bytes");
        assert_eq!(reason("0.1B"), "must be more than 0 bytes");
    }

    #[test]
    fn formatted_sizes_read_back_exactly() {
        for (bytes, text) in [
            (512 << 20, "512MiB"),
            (6 << 30, "6GiB"),
            (3 << 10, "3KiB"),
            (1536, "1536"),
            (1_000_001, "1000001"),
        ] {
            assert_eq!(format_size(bytes), text);
            assert_eq!(parse_size(text), Ok(bytes));
        }
    }
}
