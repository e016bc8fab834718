//! The identifiers and times LibreFang's types demand, written by hand: UUIDs
//! (its `AgentId` and `MemoryId` are `uuid::Uuid`) and RFC 3339 UTC times
//! (its `DateTime<Utc>`).
//!
//! Owns formatting and checking only; it never decides what an id stands for
//! (that is `librefang.rs`). Derived UUIDs are stable: SHA-256 of a tagged
//! input, shaped as version 8 (custom), RFC 4122 variant.

use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// `text` as a lowercase hyphenated UUID when it is one (hyphenated, or 32
/// hex digits), else `None`.
pub fn parse_uuid(text: &str) -> Option<String> {
    let hex: String = match text.len() {
        36 => {
            let dashes = [8, 13, 18, 23];
            if !text.char_indices().all(|(i, c)| if dashes.contains(&i) { c == '-' } else { c.is_ascii_hexdigit() }) {
                return None;
            }
            text.chars().filter(|c| *c != '-').collect()
        }
        32 if text.chars().all(|c| c.is_ascii_hexdigit()) => text.to_owned(),
        _ => return None,
    };
    Some(hyphenate(&hex.to_ascii_lowercase()))
}

/// A stable UUID for `parts` under `tag`: SHA-256 over the tag and the parts,
/// each followed by a NUL, cut to 16 bytes and stamped version 8, variant 10.
pub fn derive_uuid(tag: &str, parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(tag.as_bytes());
    hasher.update([0]);
    for p in parts {
        hasher.update(p.as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    hyphenate(&hex::encode(bytes))
}

/// 32 lowercase hex digits as 8-4-4-4-12.
fn hyphenate(hex: &str) -> String {
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// `time` as RFC 3339 UTC with milliseconds (`2026-05-01T12:00:00.123Z`);
/// times before 1970 are written as the epoch.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// Year, month, day of the `days`-th day after 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// True when `text` is an RFC 3339 date-time LibreFang's `DateTime<Utc>` reads:
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, every field in range.
pub fn is_rfc3339(text: &str) -> bool {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<u32> {
        let s = b.get(from..from + len)?;
        s.iter().all(u8::is_ascii_digit).then(|| s.iter().fold(0, |n, c| n * 10 + u32::from(c - b'0')))
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) =
        (num(0, 4), num(5, 2), num(8, 2), num(11, 2), num(14, 2), num(17, 2))
    else {
        return false;
    };
    if !(at(4, b'-') && at(7, b'-') && (at(10, b'T') || at(10, b't')) && at(13, b':') && at(16, b':')) {
        return false;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    if day == 0 || day > month_days || hour > 23 || minute > 59 || second > 60 {
        return false;
    }
    let mut i = 19;
    if at(i, b'.') {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return false;
        }
        i += 1 + digits;
    }
    match b.get(i) {
        Some(b'Z' | b'z') => i + 1 == b.len(),
        Some(b'+' | b'-') => {
            i + 6 == b.len()
                && at(i + 3, b':')
                && num(i + 1, 2).is_some_and(|h| h < 24)
                && num(i + 4, 2).is_some_and(|m| m < 60)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    #[test]
    fn rfc3339_writes_utc_with_milliseconds() {
        assert_eq!(rfc3339(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(at(1_709_251_199, 999)), "2024-02-29T23:59:59.999Z");
        assert_eq!(rfc3339(at(4_102_444_800, 0)), "2100-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(at(1_777_636_800, 123)), "2026-05-01T12:00:00.123Z");
        assert_eq!(rfc3339(UNIX_EPOCH - Duration::from_secs(5)), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn what_rfc3339_writes_is_rfc3339() {
        for secs in [0, 951_782_400, 1_709_251_199, 4_102_444_800, 1_777_636_800] {
            let text = rfc3339(at(secs, 42));
            assert!(is_rfc3339(&text), "{text}");
        }
        assert!(is_rfc3339(&rfc3339(SystemTime::now())));
    }

    #[test]
    fn rfc3339_check_accepts_what_chrono_reads_and_refuses_the_rest() {
        for ok in [
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00.123456789Z",
            "2026-01-01t10:20:30+02:00",
            "2024-02-29T23:59:60-05:30",
        ] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "",
            "2026-01-01",
            "2026-01-01 00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+0200",
            "2026-01-01T00:00:00Zjunk",
            "1714000000",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
    }

    #[test]
    fn uuids_are_recognised_and_normalised() {
        assert_eq!(
            parse_uuid("6F9619FF-8B86-D011-B42D-00C04FC964FF").as_deref(),
            Some("6f9619ff-8b86-d011-b42d-00c04fc964ff")
        );
        assert_eq!(
            parse_uuid("6f9619ff8b86d011b42d00c04fc964ff").as_deref(),
            Some("6f9619ff-8b86-d011-b42d-00c04fc964ff")
        );
        assert_eq!(
            parse_uuid("00000000-0000-0000-0000-000000000000").as_deref(),
            Some("00000000-0000-0000-0000-000000000000")
        );
        for bad in [
            "agent-1",
            "6f9619ff-8b86-d011-b42d-00c04fc964f",
            "6f9619ff_8b86_d011_b42d_00c04fc964ff",
            "g".repeat(32).as_str(),
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
    }

    #[test]
    fn derived_uuids_are_stable_version_8_and_distinct() {
        let a = derive_uuid("agent", &["agent-1"]);
        assert_eq!(a, derive_uuid("agent", &["agent-1"]));
        assert_ne!(a, derive_uuid("agent", &["agent-2"]));
        assert_ne!(a, derive_uuid("memory", &["agent-1"]));
        // Parts are separated: ("ab","c") is not ("a","bc").
        assert_ne!(derive_uuid("m", &["ab", "c"]), derive_uuid("m", &["a", "bc"]));
        assert_eq!(parse_uuid(&a).as_deref(), Some(a.as_str()));
        let b = a.as_bytes();
        assert_eq!(b[14], b'8', "version nibble: {a}");
        assert!(matches!(b[19], b'8' | b'9' | b'a' | b'b'), "variant bits: {a}");
    }
}
