//! Cron expressions: parsed by croner, evaluated in UTC or an IANA time zone (jiff).
//!
//! The format has five fields, `minute hour day-of-month month day-of-week`, each `*`, a value,
//! a range `a-b`, a list `a,b` or a step `*/n` / `a-b/n`. Day-of-week runs 0–6 from Sunday
//! (7 is Sunday too). When both day fields are restricted, a day matching either one matches; a
//! day field counts as restricted unless it is a bare `*`, so a step over the whole range
//! (`*/2`) restricts it too (croner's rule, which croniter shares; Vixie cron treats a field
//! starting with `*` as unrestricted). A list may not have empty elements (`1,,15`, `1,`, `,5`).
//! croner's extensions are accepted as well: month and weekday names (`JAN`, `MON`), `L`, `W`,
//! `#`, and the nicknames `@daily`, `@hourly` and so on.
//!
//! **Daylight saving time**, in a zone that has it, follows croner:
//!
//! * In the hour the clock skips (spring forward), a time that names a fixed minute and hour
//!   (`30 2 * * *`) fires at the first instant after the gap (03:00); a time reached by a
//!   wildcard or a step (`*/15 * * * *`) that falls in the gap does not exist and is skipped.
//! * In the hour the clock repeats (fall back), a fixed time fires once, on the first pass;
//!   wildcard and step times fire on both passes, since each is a distinct instant.

use std::fmt;

use croner::errors::CronError as CronerError;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

use crate::clock::Millis;
use crate::error::WorldError;

/// One of the five fields of a cron expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CronField {
    /// Minute of the hour, 0–59.
    Minute,
    /// Hour of the day, 0–23.
    Hour,
    /// Day of the month, 1–31.
    DayOfMonth,
    /// Month, 1–12 or `JAN`–`DEC`.
    Month,
    /// Day of the week, 0–6 from Sunday (7 is Sunday too) or `SUN`–`SAT`.
    DayOfWeek,
}

impl CronField {
    /// The fields in the order they are written.
    pub const ALL: [CronField; 5] = [
        CronField::Minute,
        CronField::Hour,
        CronField::DayOfMonth,
        CronField::Month,
        CronField::DayOfWeek,
    ];

    /// The allowed values, as a user would write them.
    fn range(self) -> &'static str {
        match self {
            CronField::Minute => "0-59",
            CronField::Hour => "0-23",
            CronField::DayOfMonth => "1-31",
            CronField::Month => "1-12 or JAN-DEC",
            CronField::DayOfWeek => "0-7 (0 and 7 are Sunday) or SUN-SAT",
        }
    }
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
        })
    }
}

/// Why a cron expression or time zone was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    /// The expression does not have five fields.
    #[error("cron expression \"{expression}\" has {found} fields; write five: minute hour day-of-month month day-of-week (e.g. \"0 9 * * *\")")]
    FieldCount {
        /// The expression as given.
        expression: String,
        /// How many fields it has.
        found: usize,
    },
    /// One field is malformed or out of range.
    #[error("cron expression \"{expression}\": the {field} field \"{value}\" is invalid ({reason}); it takes {allowed}, with *, ranges a-b, lists a,b and steps */n")]
    Field {
        /// The expression as given.
        expression: String,
        /// The field at fault.
        field: CronField,
        /// The field's text.
        value: String,
        /// What croner said about it.
        reason: String,
        /// The values the field allows.
        allowed: &'static str,
    },
    /// The expression is malformed in a way no single field explains.
    #[error("cron expression \"{expression}\" is invalid: {reason}")]
    Pattern {
        /// The expression as given.
        expression: String,
        /// What croner said about it.
        reason: String,
    },
    /// The expression names no date that exists (`0 0 31 2 *`: February has no 31st).
    #[error("cron expression \"{expression}\" matches no date that exists after {after}: check that the day-of-month occurs in the months given (February has 29 days at most; April, June, September and November have 30)")]
    NoFutureTime {
        /// The expression as given.
        expression: String,
        /// The instant the search started from (RFC 3339).
        after: String,
    },
    /// The time zone is not a known IANA name.
    #[error("unknown time zone \"{name}\" ({reason}); use an IANA name such as \"Europe/Paris\" or \"America/New_York\", or none for UTC")]
    UnknownTimeZone {
        /// The name as given.
        name: String,
        /// What the time zone database said.
        reason: String,
    },
}

impl From<CronError> for WorldError {
    fn from(error: CronError) -> Self {
        let field = match error {
            CronError::UnknownTimeZone { .. } => "time_zone",
            _ => "cron",
        };
        WorldError::invalid(field, error.to_string())
    }
}

/// A parsed cron expression and the zone its times are read in.
///
/// ```
/// use worlds_engine::schedule::CronExpr;
/// let daily = CronExpr::parse("0 9 * * *", None)?;
/// // 2026-01-01T00:00:00Z → 09:00 the same day.
/// assert_eq!(daily.next_after(1_767_225_600_000)?, 1_767_258_000_000);
/// # Ok::<(), worlds_engine::schedule::CronError>(())
/// ```
#[derive(Debug, Clone)]
pub struct CronExpr {
    expression: String,
    cron: Cron,
    zone: TimeZone,
    zone_name: Option<String>,
}

impl CronExpr {
    /// Parses a five-field expression, read in the IANA zone `time_zone` (UTC if `None`).
    ///
    /// Errors name the field at fault, or the time zone. An expression that parses but names
    /// no real date (`0 0 30 2 *`) is refused too, with [`CronError::NoFutureTime`].
    pub fn parse(expression: &str, time_zone: Option<&str>) -> Result<CronExpr, CronError> {
        let zone = match time_zone {
            None => TimeZone::UTC,
            Some(name) => TimeZone::get(name).map_err(|e| CronError::UnknownTimeZone {
                name: name.to_owned(),
                reason: e.to_string(),
            })?,
        };
        let trimmed = expression.trim();
        let found = trimmed.split_whitespace().count();
        if !trimmed.starts_with('@') && found != 5 {
            return Err(CronError::FieldCount {
                expression: expression.to_owned(),
                found,
            });
        }
        check_lists(trimmed)?;
        let cron = parser().parse(trimmed).map_err(|e| explain(trimmed, &e))?;
        let parsed = CronExpr {
            expression: trimmed.to_owned(),
            cron,
            zone,
            zone_name: time_zone.map(str::to_owned),
        };
        // An impossible date only shows when searching for one: search once now, so that such
        // an expression is refused when the schedule is made, not when it would next fire.
        parsed.next_after(0)?;
        Ok(parsed)
    }

    /// The expression, trimmed.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The IANA zone name, `None` for UTC.
    pub fn time_zone(&self) -> Option<&str> {
        self.zone_name.as_deref()
    }

    /// The first time the expression matches strictly after `after` (ms since the Unix epoch).
    /// An instant beyond the dates a calendar can name (past the year 9999) has none.
    pub fn next_after(&self, after: Millis) -> Result<Millis, CronError> {
        let Some(start) = self.zoned(after) else {
            return Err(CronError::NoFutureTime {
                expression: self.expression.clone(),
                after: format!("{after} ms since the Unix epoch (beyond the calendar's range)"),
            });
        };
        self.cron
            .find_next_occurrence(&start, false)
            .map(|at| at.timestamp().as_millisecond())
            .map_err(|_| self.no_future_time(&start))
    }

    /// The last time the expression matches at or before `at`, if it ever does.
    pub fn latest_at_or_before(&self, at: Millis) -> Option<Millis> {
        self.cron
            .find_previous_occurrence(&self.zoned(at)?, true)
            .ok()
            .map(|found| found.timestamp().as_millisecond())
    }

    /// `at`, cut to its whole second (cron times are whole seconds), in this zone; `None`
    /// beyond the calendar's range.
    fn zoned(&self, at: Millis) -> Option<Zoned> {
        let second = at.div_euclid(1000);
        Timestamp::from_second(second)
            .ok()
            .map(|t| t.to_zoned(self.zone.clone()))
    }

    fn no_future_time(&self, start: &Zoned) -> CronError {
        CronError::NoFutureTime {
            expression: self.expression.clone(),
            after: start.timestamp().to_string(),
        }
    }
}

/// Refuses a list with an empty element (`1,,15`, `1,`, `,5`), which croner lets through.
fn check_lists(expression: &str) -> Result<(), CronError> {
    if expression.starts_with('@') {
        return Ok(());
    }
    for (field, value) in CronField::ALL
        .into_iter()
        .zip(expression.split_whitespace())
    {
        if value.split(',').any(str::is_empty) {
            return Err(CronError::Field {
                expression: expression.to_owned(),
                field,
                value: value.to_owned(),
                reason: "a list has an empty element".to_owned(),
                allowed: field.range(),
            });
        }
    }
    Ok(())
}

/// croner, set to the five-field format: no seconds field, no year field.
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

/// Turns croner's error into one that names the field at fault: each field is parsed again on
/// its own, with `*` in the others, and the first one croner refuses is the culprit.
fn explain(expression: &str, error: &CronerError) -> CronError {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    if fields.len() == 5 {
        for (i, field) in CronField::ALL.into_iter().enumerate() {
            let mut alone = ["*"; 5];
            alone[i] = fields[i];
            if let Err(e) = parser().parse(&alone.join(" ")) {
                return CronError::Field {
                    expression: expression.to_owned(),
                    field,
                    value: fields[i].to_owned(),
                    reason: e.to_string(),
                    allowed: field.range(),
                };
            }
        }
    }
    CronError::Pattern {
        expression: expression.to_owned(),
        reason: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Expressions built from the characters cron fields use parse or are refused with a
        /// reason; one that parses finds a next time after, and a previous time at or before,
        /// any instant.
        #[test]
        fn near_miss_expressions_parse_or_are_refused(
            fields in proptest::collection::vec("[0-9*/,\\-LW#?A-Z]{1,6}", 1..7),
            at in -10_000_000_000_000i64..300_000_000_000_000,
        ) {
            let expression = fields.join(" ");
            if let Ok(cron) = CronExpr::parse(&expression, None) {
                if let Ok(next) = cron.next_after(at) {
                    proptest::prop_assert!(next > at);
                }
                if let Some(latest) = cron.latest_at_or_before(at) {
                    proptest::prop_assert!(latest <= at);
                }
            }
        }
    }

    /// Found by fuzzing: an instant past the calendar's range was read as the Unix epoch, so
    /// the "next" time came out in 1970.
    #[test]
    fn instants_beyond_the_calendar_have_no_next_time() {
        let cron = CronExpr::parse("0 2 * * *", Some("America/New_York")).unwrap();
        let far = 253_402_300_799_000;
        match cron.next_after(far) {
            Ok(next) => assert!(next > far, "next {next} is not after {far}"),
            Err(e) => assert!(matches!(e, CronError::NoFutureTime { .. }), "{e}"),
        }
        assert!(cron.latest_at_or_before(far).is_none_or(|at| at <= far));
        assert!(cron.next_after(i64::MAX).is_err());
    }

    /// `YYYY-MM-DDTHH:MM:SSZ` → ms.
    fn ms(text: &str) -> Millis {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    /// ms → `YYYY-MM-DDTHH:MM:SSZ`.
    fn utc(at: Millis) -> String {
        Timestamp::from_millisecond(at).unwrap().to_string()
    }

    fn next(expression: &str, zone: Option<&str>, after: &str) -> String {
        let cron = CronExpr::parse(expression, zone).unwrap();
        utc(cron.next_after(ms(after)).unwrap())
    }

    #[test]
    fn next_fire_times_match_known_answers() {
        // (expression, after, expected next), all UTC. 2026-01-01 is a Thursday.
        let table = [
            ("0 9 * * *", "2026-01-01T00:00:00Z", "2026-01-01T09:00:00Z"),
            ("0 9 * * *", "2026-01-01T09:00:00Z", "2026-01-02T09:00:00Z"),
            ("* * * * *", "2026-01-01T00:00:30Z", "2026-01-01T00:01:00Z"),
            (
                "*/15 * * * *",
                "2026-01-01T00:16:00Z",
                "2026-01-01T00:30:00Z",
            ),
            (
                "5-10/2 * * * *",
                "2026-01-01T00:07:00Z",
                "2026-01-01T00:09:00Z",
            ),
            (
                "0 8-17/3 * * *",
                "2026-01-01T12:00:00Z",
                "2026-01-01T14:00:00Z",
            ),
            (
                "0,30 * * * *",
                "2026-01-01T00:10:00Z",
                "2026-01-01T00:30:00Z",
            ),
            (
                "0 0 1,15 * *",
                "2026-01-02T00:00:00Z",
                "2026-01-15T00:00:00Z",
            ),
            // Monday to Friday: from Friday evening to Monday morning.
            (
                "0 9 * * 1-5",
                "2026-01-02T10:00:00Z",
                "2026-01-05T09:00:00Z",
            ),
            // Sunday as 0 and as 7.
            ("0 0 * * 0", "2026-01-01T00:00:00Z", "2026-01-04T00:00:00Z"),
            ("0 0 * * 7", "2026-01-01T00:00:00Z", "2026-01-04T00:00:00Z"),
            (
                "0 0 * * SAT",
                "2026-01-01T00:00:00Z",
                "2026-01-03T00:00:00Z",
            ),
            // Both day fields restricted: either one matches (the 13th, or any Friday).
            ("0 0 13 * 5", "2026-01-03T00:00:00Z", "2026-01-09T00:00:00Z"),
            // Month edges: the 31st skips months without one; year rollover.
            ("0 0 31 * *", "2026-01-31T00:00:00Z", "2026-03-31T00:00:00Z"),
            (
                "59 23 31 12 *",
                "2026-06-01T00:00:00Z",
                "2026-12-31T23:59:00Z",
            ),
            ("0 0 1 1 *", "2026-12-31T23:59:59Z", "2027-01-01T00:00:00Z"),
            ("0 0 * 2 *", "2026-02-28T00:00:00Z", "2027-02-01T00:00:00Z"),
            // Leap day: the next 29 February is in 2028.
            ("0 0 29 2 *", "2026-01-01T00:00:00Z", "2028-02-29T00:00:00Z"),
            (
                "0 12 29 2 *",
                "2028-02-29T12:00:00Z",
                "2032-02-29T12:00:00Z",
            ),
            // Last day of the month (croner's L).
            ("0 0 L 2 *", "2028-01-01T00:00:00Z", "2028-02-29T00:00:00Z"),
            ("@daily", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"),
        ];
        for (expression, after, expected) in table {
            assert_eq!(
                next(expression, None, after),
                expected,
                "{expression} after {after}"
            );
        }
    }

    #[test]
    fn milliseconds_within_a_second_do_not_skip_or_repeat_a_time() {
        let cron = CronExpr::parse("* * * * *", None).unwrap();
        let at = ms("2026-01-01T00:01:00Z");
        assert_eq!(cron.next_after(at - 1), Ok(at));
        assert_eq!(cron.next_after(at), Ok(at + 60_000));
        assert_eq!(cron.next_after(at + 999), Ok(at + 60_000));
        assert_eq!(cron.latest_at_or_before(at + 59_999), Some(at));
        assert_eq!(cron.latest_at_or_before(at), Some(at));
    }

    #[test]
    fn a_bad_field_is_named() {
        let cases = [
            ("60 * * * *", CronField::Minute, "60"),
            ("* 24 * * *", CronField::Hour, "24"),
            ("0 9 32 * *", CronField::DayOfMonth, "32"),
            ("0 9 0 * *", CronField::DayOfMonth, "0"),
            ("0 9 * 13 *", CronField::Month, "13"),
            ("0 9 * * 8", CronField::DayOfWeek, "8"),
            ("0 9 * * MON-XYZ", CronField::DayOfWeek, "MON-XYZ"),
            ("*/0 * * * *", CronField::Minute, "*/0"),
            ("5-1x * * * *", CronField::Minute, "5-1x"),
            ("0 0 1,,15 * *", CronField::DayOfMonth, "1,,15"),
            ("1, * * * *", CronField::Minute, "1,"),
            (",5 * * * *", CronField::Minute, ",5"),
            ("0 9 * JAN, *", CronField::Month, "JAN,"),
        ];
        for (expression, field, value) in cases {
            match CronExpr::parse(expression, None) {
                Err(CronError::Field {
                    field: f, value: v, ..
                }) => {
                    assert_eq!((f, v.as_str()), (field, value), "{expression}");
                }
                other => panic!("{expression}: expected a field error, got {other:?}"),
            }
        }
        let message = CronExpr::parse("0 9 32 * *", None).unwrap_err().to_string();
        assert!(message.contains("day-of-month field \"32\""), "{message}");
        assert!(message.contains("1-31"), "{message}");
    }

    #[test]
    fn a_stepped_star_restricts_its_day_field() {
        // Day 13, or a Sunday: `*/7` is a restriction (Sundays only), so the two day fields
        // are OR'd. 2026-01-01 is a Thursday; the first Sunday is the 4th.
        assert_eq!(
            next("0 0 13 * */7", None, "2026-01-01T00:00:00Z"),
            "2026-01-04T00:00:00Z"
        );
        // A bare `*` leaves it unrestricted: the 13th only.
        assert_eq!(
            next("0 0 13 * *", None, "2026-01-01T00:00:00Z"),
            "2026-01-13T00:00:00Z"
        );
    }

    #[test]
    fn the_field_count_is_checked() {
        for (expression, found) in [("0 9 * *", 4), ("0 0 9 * * *", 6), ("", 0)] {
            assert_eq!(
                CronExpr::parse(expression, None).unwrap_err(),
                CronError::FieldCount {
                    expression: expression.to_owned(),
                    found
                }
            );
        }
    }

    #[test]
    fn an_impossible_date_is_refused_with_a_clear_error() {
        for expression in ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
            let err = CronExpr::parse(expression, None).unwrap_err();
            assert!(
                matches!(err, CronError::NoFutureTime { .. }),
                "{expression}: {err:?}"
            );
            assert!(err.to_string().contains("no date that exists"), "{err}");
            let world: WorldError = err.into();
            assert_eq!(world.http_status(), 400);
        }
    }

    #[test]
    fn unknown_time_zones_are_refused() {
        let err = CronExpr::parse("0 9 * * *", Some("Mars/Olympus")).unwrap_err();
        assert!(matches!(err, CronError::UnknownTimeZone { .. }), "{err:?}");
        let world: WorldError = err.into();
        assert!(
            world.to_string().starts_with("invalid time_zone"),
            "{world}"
        );
    }

    #[test]
    fn a_time_zone_moves_the_fire_time_with_its_offset() {
        // 09:00 in Paris is 08:00 UTC in winter, 07:00 UTC in summer.
        let paris = Some("Europe/Paris");
        assert_eq!(
            next("0 9 * * *", paris, "2026-01-01T00:00:00Z"),
            "2026-01-01T08:00:00Z"
        );
        assert_eq!(
            next("0 9 * * *", paris, "2026-07-01T00:00:00Z"),
            "2026-07-01T07:00:00Z"
        );
    }

    #[test]
    fn daylight_saving_gaps_and_repeats_follow_croner() {
        // New York springs forward on 2026-03-08 (02:00 EST → 03:00 EDT) and falls back on
        // 2026-11-01 (02:00 EDT → 01:00 EST).
        let ny = Some("America/New_York");
        // A fixed 02:30 in the skipped hour fires at the first instant after the gap, 03:00 EDT.
        assert_eq!(
            next("30 2 * * *", ny, "2026-03-08T05:00:00Z"),
            "2026-03-08T07:00:00Z"
        );
        // The next day it is 02:30 EDT again.
        assert_eq!(
            next("30 2 * * *", ny, "2026-03-08T07:00:00Z"),
            "2026-03-09T06:30:00Z"
        );
        // Every 30 minutes: 01:30 EST, then 03:00 EDT; the skipped 02:00 and 02:30 never exist.
        assert_eq!(
            next("*/30 * * * *", ny, "2026-03-08T06:30:00Z"),
            "2026-03-08T07:00:00Z"
        );
        // A fixed 01:30 in the repeated hour fires once, on the first pass (EDT).
        assert_eq!(
            next("30 1 * * *", ny, "2026-11-01T04:00:00Z"),
            "2026-11-01T05:30:00Z"
        );
        assert_eq!(
            next("30 1 * * *", ny, "2026-11-01T05:30:00Z"),
            "2026-11-02T06:30:00Z"
        );
        // Every 30 minutes fires on both passes of the repeated hour.
        let cron = CronExpr::parse("*/30 * * * *", ny).unwrap();
        let mut at = ms("2026-11-01T04:45:00Z");
        let mut seen = Vec::new();
        for _ in 0..5 {
            at = cron.next_after(at).unwrap();
            seen.push(utc(at));
        }
        assert_eq!(
            seen,
            [
                "2026-11-01T05:00:00Z", // 01:00 EDT
                "2026-11-01T05:30:00Z", // 01:30 EDT
                "2026-11-01T06:00:00Z", // 01:00 EST
                "2026-11-01T06:30:00Z", // 01:30 EST
                "2026-11-01T07:00:00Z", // 02:00 EST
            ]
        );
    }
}
