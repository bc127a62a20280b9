//! Calendar dates (UTC) of engine timestamps: which file an entry goes to, and how a console
//! line shows its time. A few lines of arithmetic, so that no date library is needed.

use crate::clock::Millis;

const MS_PER_DAY: Millis = 86_400_000;

/// The day (days since 1970-01-01, UTC) that contains `ms`.
pub(crate) fn day_of(ms: Millis) -> i64 {
    ms.div_euclid(MS_PER_DAY)
}

/// `(year, month, day)` of a day number (Howard Hinnant's `civil_from_days`).
pub(crate) fn civil(day: i64) -> (i64, u32, u32) {
    let z = day + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The day number of a date (`days_from_civil`), or `None` for an impossible date.
pub(crate) fn days_from_civil(year: i64, m: u32, d: u32) -> Option<i64> {
    if !(1..=12).contains(&m) || d == 0 || d > 31 {
        return None;
    }
    let y = if m <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let day = era * 146_097 + doe - 719_468;
    // Refuses 31 April and the like: the date must come back unchanged.
    (civil(day) == (year, m, d)).then_some(day)
}

/// The log file name of a day: `2026-01-31.log`.
pub(crate) fn file_name(day: i64) -> String {
    let (y, m, d) = civil(day);
    format!("{y:04}-{m:02}-{d:02}.log")
}

/// The day a log file name stands for, or `None` if it is not one.
pub(crate) fn parse_file_name(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(".log")?;
    let bytes = stem.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let y = stem[0..4].parse().ok()?;
    let m = stem[5..7].parse().ok()?;
    let d = stem[8..10].parse().ok()?;
    days_from_civil(y, m, d)
}

/// `ms` as an RFC 3339 UTC time with milliseconds: `2026-01-31T23:59:59.999Z`.
#[cfg(any(feature = "console-log", test))]
pub(crate) fn rfc3339(ms: Millis) -> String {
    let (y, m, d) = civil(day_of(ms));
    let in_day = ms.rem_euclid(MS_PER_DAY);
    let (h, min, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(file_name(0), "1970-01-01.log");
        // 2026-01-01T00:00:00Z
        let new_year = 1_767_225_600_000;
        assert_eq!(file_name(day_of(new_year)), "2026-01-01.log");
        assert_eq!(file_name(day_of(new_year - 1)), "2025-12-31.log");
        assert_eq!(rfc3339(new_year - 1), "2025-12-31T23:59:59.999Z");
        assert_eq!(file_name(day_of(951_782_400_000)), "2000-02-29.log");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn file_names_round_trip_and_impossible_dates_are_refused() {
        for day in [-800, 0, 59, 60, 11_016, 20_454, 40_000] {
            assert_eq!(parse_file_name(&file_name(day)), Some(day));
        }
        assert_eq!(day_of(1_767_225_600_123) * MS_PER_DAY, 1_767_225_600_000);
        for bad in [
            "2026-02-30.log",
            "2025-02-29.log",
            "2026-13-01.log",
            "2026-1-01.log",
            "notes.log",
            "2026-01-01.txt",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
        assert!(parse_file_name("2024-02-29.log").is_some());
    }
}
