//! Durations as users write them.
//!
//! Configuration accepts a duration either as a string with a unit (`"250ms"`, `"5s"`, `"2m"`,
//! `"1h"`, `"7d"`) or as a whole number of milliseconds. [`parse_duration`] reads the string form,
//! [`IntoDuration`] accepts both forms in Rust code, and [`Dur`] accepts both forms in serialized
//! data.
//!
//! ```
//! use std::time::Duration;
//! use worlds_engine::duration::{parse_duration, Dur, IntoDuration};
//!
//! assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
//! assert_eq!("2m".into_duration().unwrap(), Duration::from_secs(120));
//! assert_eq!(1_500_u64.into_duration().unwrap(), Duration::from_millis(1_500));
//!
//! let d: Dur = serde_json::from_str(r#""5s""#).unwrap();
//! assert_eq!(d.as_millis(), 5_000);
//! assert_eq!(serde_json::to_string(&d).unwrap(), "5000");
//! ```

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a duration was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// The text is not a whole number followed by `ms`, `s`, `m`, `h` or `d`.
    #[error(
        "invalid duration {input:?}: expected a whole number followed by ms, s, m, h or d \
         (for example \"250ms\", \"5s\", \"2m\", \"1h\", \"7d\"), or a number of milliseconds"
    )]
    Invalid {
        /// The rejected text.
        input: String,
    },
    /// The duration is well formed but longer than `u64::MAX` milliseconds.
    #[error(
        "duration {input:?} is too large: the limit is {} milliseconds",
        u64::MAX
    )]
    Overflow {
        /// The rejected text.
        input: String,
    },
    /// A negative number of milliseconds.
    #[error("invalid duration {value}: a number of milliseconds cannot be negative")]
    Negative {
        /// The rejected number.
        value: i64,
    },
}

/// Parses `"<digits><unit>"` where the unit is `ms`, `s`, `m`, `h` or `d` (24 hours).
///
/// The text must match `^(\d+)(ms|s|m|h|d)$` exactly: no spaces, no sign, no fraction, lower-case
/// units. A bare number such as `"5"` is rejected, so that a missing unit is never guessed; pass
/// an integer to [`IntoDuration`] for milliseconds. Values above `u64::MAX` milliseconds are a
/// [`DurationError::Overflow`].
///
/// ```
/// use std::time::Duration;
/// use worlds_engine::duration::parse_duration;
///
/// assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3_600));
/// assert_eq!(parse_duration("7d").unwrap(), Duration::from_secs(7 * 86_400));
/// assert_eq!(parse_duration("0ms").unwrap(), Duration::ZERO);
/// assert!(parse_duration(" 5s").is_err());
/// assert!(parse_duration("1.5s").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid {
        input: s.to_owned(),
    };
    let overflow = || DurationError::Overflow {
        input: s.to_owned(),
    };
    // ASCII digits are one byte each, so this index is a char boundary.
    let digits_end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(invalid()),
    };
    if digits.is_empty() {
        return Err(invalid());
    }
    // Only ASCII digits remain, so the one way to fail is a number too large for u64.
    let count: u64 = digits.parse().map_err(|_| overflow())?;
    let millis = count.checked_mul(factor).ok_or_else(overflow)?;
    Ok(Duration::from_millis(millis))
}

/// Values that can be read as a duration: unit strings (see [`parse_duration`]), integers
/// (milliseconds), [`Duration`] and [`Dur`].
///
/// ```
/// use std::time::Duration;
/// use worlds_engine::duration::IntoDuration;
///
/// assert_eq!("5s".into_duration().unwrap(), Duration::from_secs(5));
/// assert_eq!(5_000_i64.into_duration().unwrap(), Duration::from_secs(5));
/// assert!((-1_i64).into_duration().is_err());
/// ```
pub trait IntoDuration {
    /// Converts `self`, or explains why it is not a valid duration.
    fn into_duration(self) -> Result<Duration, DurationError>;
}

impl IntoDuration for &str {
    fn into_duration(self) -> Result<Duration, DurationError> {
        parse_duration(self)
    }
}

impl IntoDuration for String {
    fn into_duration(self) -> Result<Duration, DurationError> {
        parse_duration(&self)
    }
}

impl IntoDuration for &String {
    fn into_duration(self) -> Result<Duration, DurationError> {
        parse_duration(self)
    }
}

impl IntoDuration for u64 {
    fn into_duration(self) -> Result<Duration, DurationError> {
        Ok(Duration::from_millis(self))
    }
}

impl IntoDuration for u32 {
    fn into_duration(self) -> Result<Duration, DurationError> {
        Ok(Duration::from_millis(u64::from(self)))
    }
}

impl IntoDuration for i64 {
    fn into_duration(self) -> Result<Duration, DurationError> {
        u64::try_from(self)
            .map(Duration::from_millis)
            .map_err(|_| DurationError::Negative { value: self })
    }
}

impl IntoDuration for i32 {
    fn into_duration(self) -> Result<Duration, DurationError> {
        i64::from(self).into_duration()
    }
}

impl IntoDuration for Duration {
    fn into_duration(self) -> Result<Duration, DurationError> {
        Ok(self)
    }
}

impl IntoDuration for Dur {
    fn into_duration(self) -> Result<Duration, DurationError> {
        Ok(self.0)
    }
}

/// A [`Duration`] that serializes as whole milliseconds and deserializes from either
/// milliseconds or a unit string.
///
/// Serializing drops anything below a millisecond and saturates at `u64::MAX` milliseconds.
/// Deserializing accepts a non-negative integer (`1500`) or a string accepted by
/// [`parse_duration`] (`"1500ms"`, `"5s"`); anything else is an error naming the expected forms.
/// Formats that are not self-describing (`is_human_readable() == false`) read an integer only.
///
/// [`Display`](fmt::Display) writes the whole milliseconds in the largest unit that represents
/// them exactly, in a form [`parse_duration`] reads back: `Dur::from_millis(120_000)` displays as
/// `2m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl Dur {
    /// Zero.
    pub const ZERO: Dur = Dur(Duration::ZERO);

    /// A duration of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Self {
        Dur(Duration::from_millis(millis))
    }

    /// Whole milliseconds, saturating at `u64::MAX`.
    pub fn as_millis(&self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }

    /// The wrapped [`Duration`].
    pub const fn get(&self) -> Duration {
        self.0
    }
}

impl From<Duration> for Dur {
    fn from(duration: Duration) -> Self {
        Dur(duration)
    }
}

impl From<Dur> for Duration {
    fn from(dur: Dur) -> Self {
        dur.0
    }
}

impl Deref for Dur {
    type Target = Duration;

    fn deref(&self) -> &Duration {
        &self.0
    }
}

impl FromStr for Dur {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(Dur)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.as_millis();
        let (count, unit) = match ms {
            0 => (0, "ms"),
            _ if ms.is_multiple_of(3_600_000) => (ms / 3_600_000, "h"),
            _ if ms.is_multiple_of(60_000) => (ms / 60_000, "m"),
            _ if ms.is_multiple_of(1_000) => (ms / 1_000, "s"),
            _ => (ms, "ms"),
        };
        write!(f, "{count}{unit}")
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.as_millis())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(DurVisitor)
        } else {
            deserializer.deserialize_u64(DurVisitor)
        }
    }
}

struct DurVisitor;

impl Visitor<'_> for DurVisitor {
    type Value = Dur;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a duration: a whole number of milliseconds, or a string such as \"250ms\", \"5s\", \
             \"2m\" or \"1h\"",
        )
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
        Ok(Dur::from_millis(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
        v.into_duration().map(Dur).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
        parse_duration(v).map(Dur).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const UNITS: [(&str, u64); 5] = [
        ("ms", 1),
        ("s", 1_000),
        ("m", 60_000),
        ("h", 3_600_000),
        ("d", 86_400_000),
    ];

    #[test]
    fn parses_each_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3_600)));
        assert_eq!(parse_duration("3d"), Ok(Duration::from_secs(3 * 86_400)));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("007s"), Ok(Duration::from_secs(7)));
    }

    #[test]
    fn rejects_bad_inputs() {
        let bad = [
            "", "5", "5 s", "-5s", "5S", "1.5s", "5sec", "ms", " 5s", "5s ", "+5s", "5ms5", "٣s",
        ];
        for input in bad {
            assert_eq!(
                parse_duration(input),
                Err(DurationError::Invalid {
                    input: input.to_owned()
                }),
                "{input:?}"
            );
        }
    }

    #[test]
    fn overflow_is_its_own_error() {
        for input in [
            "99999999999999999999h",
            "18446744073709551616ms",
            "18446744073709552s",
        ] {
            assert_eq!(
                parse_duration(input),
                Err(DurationError::Overflow {
                    input: input.to_owned()
                })
            );
        }
        assert_eq!(
            parse_duration("18446744073709551615ms"),
            Ok(Duration::from_millis(u64::MAX))
        );
    }

    #[test]
    fn error_messages_name_the_input_and_the_expected_forms() {
        let message = parse_duration("5x").unwrap_err().to_string();
        assert_eq!(
            message,
            "invalid duration \"5x\": expected a whole number followed by ms, s, m, h or d \
             (for example \"250ms\", \"5s\", \"2m\", \"1h\", \"7d\"), or a number of milliseconds"
        );
        let message = parse_duration("99999999999999999999h")
            .unwrap_err()
            .to_string();
        assert!(message.contains("\"99999999999999999999h\""), "{message}");
        assert!(message.contains("too large"), "{message}");
    }

    #[test]
    fn into_duration_for_every_input_type() {
        let five = Duration::from_secs(5);
        assert_eq!("5s".into_duration(), Ok(five));
        assert_eq!(String::from("5s").into_duration(), Ok(five));
        assert_eq!((&String::from("5s")).into_duration(), Ok(five));
        assert_eq!(5_000_u64.into_duration(), Ok(five));
        assert_eq!(5_000_u32.into_duration(), Ok(five));
        assert_eq!(5_000_i64.into_duration(), Ok(five));
        assert_eq!(5_000_i32.into_duration(), Ok(five));
        assert_eq!(five.into_duration(), Ok(five));
        assert_eq!(Dur(five).into_duration(), Ok(five));
        assert_eq!(
            (-5_i64).into_duration(),
            Err(DurationError::Negative { value: -5 })
        );
        assert_eq!(
            (-5_i32).into_duration(),
            Err(DurationError::Negative { value: -5 })
        );
        assert_eq!(
            i64::MAX.into_duration(),
            Ok(Duration::from_millis(i64::MAX as u64))
        );
    }

    #[test]
    fn dur_serde() {
        let d: Dur = serde_json::from_str("1500").unwrap();
        assert_eq!(d, Dur::from_millis(1_500));
        let d: Dur = serde_json::from_str(r#""2m""#).unwrap();
        assert_eq!(d.get(), Duration::from_secs(120));
        assert_eq!(serde_json::to_string(&d).unwrap(), "120000");
        assert_eq!(
            serde_json::to_string(&Dur(Duration::from_micros(1_999))).unwrap(),
            "1"
        );
        assert_eq!(
            serde_json::to_string(&Dur(Duration::MAX)).unwrap(),
            u64::MAX.to_string()
        );

        let err = serde_json::from_str::<Dur>(r#""5x""#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid duration \"5x\""), "{err}");
        let err = serde_json::from_str::<Dur>("-5").unwrap_err().to_string();
        assert!(err.contains("cannot be negative"), "{err}");
        for bad in ["1.5", "true", "null", "[1]", "{}"] {
            let err = serde_json::from_str::<Dur>(bad).unwrap_err().to_string();
            assert!(
                err.contains("a whole number of milliseconds"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn dur_accessors_and_display() {
        let d = Dur::from_millis(90_000);
        assert_eq!(d.as_millis(), 90_000);
        assert_eq!(d.as_secs(), 90); // through Deref
        assert_eq!(Duration::from(d), Duration::from_secs(90));
        assert_eq!(Dur::from(Duration::from_secs(90)), d);
        assert_eq!(Dur::default(), Dur::ZERO);
        assert_eq!(Dur(Duration::MAX).as_millis(), u64::MAX);
        let shown: Vec<String> = [0, 250, 5_000, 120_000, 3_600_000, 3_601_000]
            .into_iter()
            .map(|ms| Dur::from_millis(ms).to_string())
            .collect();
        assert_eq!(shown, ["0ms", "250ms", "5s", "2m", "1h", "3601s"]);
        assert_eq!("1h".parse::<Dur>(), Ok(Dur::from_millis(3_600_000)));
    }

    proptest! {
        #[test]
        fn every_u32_with_each_unit_round_trips(n: u32, unit in 0..4_usize) {
            let (suffix, factor) = UNITS[unit];
            let parsed = parse_duration(&format!("{n}{suffix}"));
            prop_assert_eq!(parsed, Ok(Duration::from_millis(u64::from(n) * factor)));
        }

        #[test]
        fn random_strings_never_panic(s in any::<String>()) {
            let _ = parse_duration(&s);
            let _ = serde_json::from_value::<Dur>(serde_json::Value::String(s));
        }

        #[test]
        fn near_miss_strings_never_panic(s in "[-+ 0-9.]{0,25}(ms|s|m|h|S|x|sec)?") {
            if let Ok(d) = parse_duration(&s) {
                prop_assert!(s.bytes().next().is_some_and(|b| b.is_ascii_digit()));
                prop_assert_eq!(Dur(d).to_string().parse::<Dur>(), Ok(Dur(d)));
            }
        }

        #[test]
        fn display_round_trips(ms: u64) {
            let d = Dur::from_millis(ms);
            prop_assert_eq!(d.to_string().parse::<Dur>(), Ok(d));
            let json = serde_json::to_string(&d).unwrap();
            prop_assert_eq!(serde_json::from_str::<Dur>(&json).unwrap(), d);
        }
    }
}
