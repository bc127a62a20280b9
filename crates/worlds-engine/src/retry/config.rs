//! Retry policy: how many attempts, and how long to wait between them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::{Dur, DurationError, IntoDuration};

/// How the wait between attempts grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// `initial_interval * multiplier^(attempt - 1)`, capped at `max_interval`.
    #[default]
    Exponential,
    /// `initial_interval * attempt`, capped at `max_interval`.
    Linear,
    /// Always `initial_interval`; `max_interval` is not applied.
    Constant,
}

/// How a failing step is retried.
///
/// Serialized with snake_case field names and intervals in milliseconds; when deserializing,
/// missing fields take their [`Default`] values, intervals may also be strings such as `"5s"`,
/// and the camelCase names (`maxAttempts`, `initialInterval`, `maxInterval`) are accepted too.
/// Any other key is refused with an error naming it.
///
/// ```
/// use std::time::Duration;
/// use worlds_engine::retry::{Backoff, RetryConfig};
///
/// let config: RetryConfig =
///     serde_json::from_str(r#"{"max_attempts": 5, "initial_interval": "500ms"}"#).unwrap();
/// assert_eq!(config.max_attempts, 5);
/// assert_eq!(config.backoff, Backoff::Exponential);
/// assert_eq!(config.base_delay(1), Duration::from_millis(500));
/// assert_eq!(config.base_delay(3), Duration::from_millis(2_000));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Total attempts, counting the first try: 1 means no retry. 0 behaves like 1.
    #[serde(alias = "maxAttempts")]
    pub max_attempts: u32,
    /// How the wait grows from one attempt to the next.
    pub backoff: Backoff,
    /// The wait after the first failed attempt.
    #[serde(alias = "initialInterval")]
    pub initial_interval: Dur,
    /// The longest wait for [`Backoff::Exponential`] and [`Backoff::Linear`].
    #[serde(alias = "maxInterval")]
    pub max_interval: Dur,
    /// Growth factor for [`Backoff::Exponential`]; ignored by the other strategies.
    pub multiplier: f64,
}

impl Default for RetryConfig {
    /// 3 attempts, exponential, 1 s doubling up to 30 s.
    fn default() -> Self {
        Self {
            max_attempts: 3,
            backoff: Backoff::Exponential,
            initial_interval: Dur::from_millis(1_000),
            max_interval: Dur::from_millis(30_000),
            multiplier: 2.0,
        }
    }
}

/// Largest `f64` below 1, the top of the jitter range.
const JITTER_MAX: f64 = 1.0 - f64::EPSILON / 2.0;

impl RetryConfig {
    /// The default policy; see [`Default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A single attempt: failures are not retried.
    pub fn none() -> Self {
        Self::default().max_attempts(1)
    }

    /// Sets the total number of attempts, counting the first try.
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets the backoff strategy.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the wait after the first failed attempt.
    pub fn initial_interval(mut self, interval: Duration) -> Self {
        self.initial_interval = Dur(interval);
        self
    }

    /// Sets the longest wait (exponential and linear backoff).
    pub fn max_interval(mut self, interval: Duration) -> Self {
        self.max_interval = Dur(interval);
        self
    }

    /// Sets the exponential growth factor.
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier;
        self
    }

    /// Sets both intervals from user input such as `"500ms"` or a number of milliseconds.
    ///
    /// ```
    /// use worlds_engine::retry::RetryConfig;
    /// let config = RetryConfig::new().intervals("500ms", "10s")?;
    /// assert_eq!(config.max_interval.as_millis(), 10_000);
    /// assert!(RetryConfig::new().intervals("500", "10s").is_err());
    /// # Ok::<(), worlds_engine::duration::DurationError>(())
    /// ```
    pub fn intervals(
        mut self,
        initial: impl IntoDuration,
        max: impl IntoDuration,
    ) -> Result<Self, DurationError> {
        self.initial_interval = Dur(initial.into_duration()?);
        self.max_interval = Dur(max.into_duration()?);
        Ok(self)
    }

    /// True if another attempt is allowed after attempt number `attempt_just_failed` (1-based).
    pub fn should_attempt(&self, attempt_just_failed: u32) -> bool {
        attempt_just_failed < self.max_attempts
    }

    /// The wait after failed attempt `attempt` (1-based), before jitter.
    ///
    /// Never panics: products that overflow saturate at `max_interval` (exponential, linear) or
    /// [`Duration::MAX`]. Attempt 0 is treated as 1. For exponential backoff a multiplier that is
    /// NaN or below 1 is treated as 1, so waits never shrink; [`RetryConfig::validate`] reports
    /// such a multiplier. Constant backoff ignores `max_interval`.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let attempt = attempt.max(1);
        let initial = self.initial_interval.get();
        let max = self.max_interval.get();
        match self.backoff {
            Backoff::Constant => initial,
            Backoff::Linear => initial.checked_mul(attempt).unwrap_or(max).min(max),
            Backoff::Exponential => {
                if initial.is_zero() || attempt == 1 {
                    return initial.min(max);
                }
                let multiplier = if self.multiplier >= 1.0 {
                    self.multiplier
                } else {
                    1.0
                };
                let exponent = attempt - 1;
                let factor = match i32::try_from(exponent) {
                    Ok(exponent) => multiplier.powi(exponent),
                    Err(_) => multiplier.powf(f64::from(exponent)),
                };
                let nanos = initial.as_nanos() as f64 * factor;
                if nanos.is_nan() || nanos >= max.as_nanos() as f64 {
                    max
                } else {
                    duration_from_nanos(nanos).min(max)
                }
            }
        }
    }

    /// [`base_delay`](Self::base_delay) plus `jitter * 10%` of it.
    ///
    /// `jitter` is clamped to `[0, 1)` (NaN counts as 0), so the result lies in
    /// `[base, base + base / 10]`.
    pub fn delay_with_jitter(&self, attempt: u32, jitter: f64) -> Duration {
        let jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, JITTER_MAX)
        };
        let base = self.base_delay(attempt);
        let extra = base.mul_f64(0.1 * jitter).min(base / 10);
        base.saturating_add(extra)
    }

    /// The wait after failed attempt `attempt` (1-based), with random jitter of up to 10%.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_with_jitter(attempt, rand::random::<f64>())
    }

    /// Checks that the policy makes sense; the error names every offending field.
    ///
    /// Requires `max_attempts >= 1`; for exponential backoff a finite `multiplier >= 1`; for
    /// exponential and linear backoff `initial_interval <= max_interval`.
    pub fn validate(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.max_attempts == 0 {
            problems.push(
                "max_attempts must be at least 1 (it counts the first try), got 0".to_owned(),
            );
        }
        if self.backoff == Backoff::Exponential
            && !(self.multiplier.is_finite() && self.multiplier >= 1.0)
        {
            problems.push(format!(
                "multiplier must be a finite number of at least 1 for exponential backoff, got {}",
                self.multiplier
            ));
        }
        if self.backoff != Backoff::Constant && self.initial_interval > self.max_interval {
            problems.push(format!(
                "initial_interval ({}) must not be greater than max_interval ({})",
                self.initial_interval, self.max_interval
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Rounds a non-negative number of nanoseconds to a [`Duration`], saturating at the ends.
fn duration_from_nanos(nanos: f64) -> Duration {
    if nanos.is_nan() || nanos <= 0.0 {
        return Duration::ZERO;
    }
    // `as` saturates for floats beyond u128, and Duration::MAX is far below u128::MAX.
    let nanos = nanos.round() as u128;
    let secs = nanos / 1_000_000_000;
    let subsec = (nanos % 1_000_000_000) as u32;
    u64::try_from(secs).map_or(Duration::MAX, |secs| Duration::new(secs, subsec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn delays(config: &RetryConfig, jitter: f64) -> Vec<Duration> {
        (1..=6)
            .map(|a| config.delay_with_jitter(a, jitter))
            .collect()
    }

    fn assert_within_ten_percent(config: &RetryConfig, expected: &[Duration]) {
        for (attempt, (got, base)) in (1..).zip(delays(config, 0.999).iter().zip(expected)) {
            assert!(
                *got >= *base && *got <= *base + *base / 10,
                "attempt {attempt}: {got:?} vs base {base:?}"
            );
            assert!(
                *got > *base || base.is_zero(),
                "jitter 0.999 adds something"
            );
        }
    }

    #[test]
    fn defaults() {
        let config = RetryConfig::default();
        assert_eq!(config.max_attempts, 3);
        assert_eq!(config.backoff, Backoff::Exponential);
        assert_eq!(config.initial_interval, Dur::from_millis(1_000));
        assert_eq!(config.max_interval, Dur::from_millis(30_000));
        assert_eq!(config.multiplier, 2.0);
        assert_eq!(RetryConfig::new(), config);
        assert_eq!(RetryConfig::none().max_attempts, 1);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn exponential_delays() {
        let config = RetryConfig::new().max_interval(ms(20_000));
        let expected = [1_000, 2_000, 4_000, 8_000, 16_000, 20_000].map(ms);
        assert_eq!(delays(&config, 0.0), expected);
        assert_within_ten_percent(&config, &expected);
    }

    #[test]
    fn exponential_with_fractional_start_and_multiplier() {
        let config = RetryConfig::new()
            .initial_interval(ms(100))
            .multiplier(1.5)
            .max_interval(ms(60_000));
        let bases: Vec<Duration> = (1..=6).map(|a| config.base_delay(a)).collect();
        assert_eq!(
            bases,
            [
                ms(100),
                ms(150),
                ms(225),
                Duration::from_micros(337_500),
                Duration::from_micros(506_250),
                Duration::from_nanos(759_375_000),
            ]
        );
    }

    #[test]
    fn linear_delays() {
        let config = RetryConfig::new()
            .backoff(Backoff::Linear)
            .max_interval(ms(5_000));
        let expected = [1_000, 2_000, 3_000, 4_000, 5_000, 5_000].map(ms);
        assert_eq!(delays(&config, 0.0), expected);
        assert_within_ten_percent(&config, &expected);
    }

    #[test]
    fn constant_delays_ignore_max_interval() {
        let config = RetryConfig::new()
            .backoff(Backoff::Constant)
            .initial_interval(ms(45_000))
            .max_interval(ms(30_000));
        let expected = [ms(45_000); 6];
        assert_eq!(delays(&config, 0.0), expected);
        assert_within_ten_percent(&config, &expected);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn jitter_is_clamped() {
        let config = RetryConfig::new();
        assert_eq!(config.delay_with_jitter(1, -3.0), ms(1_000));
        assert_eq!(config.delay_with_jitter(1, f64::NAN), ms(1_000));
        assert_eq!(config.delay_with_jitter(1, 0.5), ms(1_050));
        let top = config.delay_with_jitter(1, 7.0);
        assert!(top > ms(1_099) && top <= ms(1_100), "{top:?}");
    }

    #[test]
    fn extreme_inputs_saturate() {
        let config = RetryConfig::new().max_interval(Duration::MAX);
        assert_eq!(config.base_delay(u32::MAX), Duration::MAX);
        assert_eq!(config.delay_with_jitter(u32::MAX, 0.99), Duration::MAX);
        let config = RetryConfig::new().multiplier(f64::INFINITY);
        assert_eq!(config.base_delay(1), ms(1_000));
        assert_eq!(config.base_delay(2), ms(30_000));
        let config = RetryConfig::new()
            .multiplier(f64::INFINITY)
            .initial_interval(Duration::ZERO);
        assert_eq!(config.base_delay(9), Duration::ZERO);
        let config = RetryConfig::new()
            .backoff(Backoff::Linear)
            .initial_interval(Duration::MAX)
            .max_interval(Duration::MAX);
        assert_eq!(config.base_delay(u32::MAX), Duration::MAX);
        assert_eq!(config.base_delay(0), Duration::MAX);
    }

    #[test]
    fn low_or_nan_multiplier_means_no_growth() {
        for multiplier in [0.5, 0.0, -2.0, f64::NAN, f64::NEG_INFINITY] {
            let config = RetryConfig::new().multiplier(multiplier);
            assert_eq!(delays(&config, 0.0), [ms(1_000); 6], "{multiplier}");
            let error = config.validate().unwrap_err();
            assert!(error.starts_with("multiplier must be"), "{error}");
        }
        let linear = RetryConfig::new()
            .backoff(Backoff::Linear)
            .multiplier(f64::NAN);
        assert_eq!(linear.validate(), Ok(()));
    }

    #[test]
    fn attempt_zero_counts_as_one() {
        let config = RetryConfig::new();
        assert_eq!(config.base_delay(0), config.base_delay(1));
    }

    #[test]
    fn should_attempt_counts_the_first_try() {
        let config = RetryConfig::new().max_attempts(3);
        assert!(config.should_attempt(1));
        assert!(config.should_attempt(2));
        assert!(!config.should_attempt(3));
        assert!(!RetryConfig::none().should_attempt(1));
        assert!(!RetryConfig::new().max_attempts(0).should_attempt(1));
    }

    #[test]
    fn validate_names_fields() {
        let config = RetryConfig::new()
            .max_attempts(0)
            .initial_interval(ms(5_000))
            .max_interval(ms(1_000));
        let error = config.validate().unwrap_err();
        assert_eq!(
            error,
            "max_attempts must be at least 1 (it counts the first try), got 0; \
             initial_interval (5s) must not be greater than max_interval (1s)"
        );
    }

    #[test]
    fn serde_round_trip_and_partial_input() {
        let config = RetryConfig::new().backoff(Backoff::Linear);
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "max_attempts": 3,
                "backoff": "linear",
                "initial_interval": 1000,
                "max_interval": 30000,
                "multiplier": 2.0
            })
        );
        assert_eq!(serde_json::from_value::<RetryConfig>(json).unwrap(), config);
        let partial: RetryConfig =
            serde_json::from_str(r#"{"backoff": "constant", "maxInterval": "1m"}"#).unwrap();
        assert_eq!(partial.backoff, Backoff::Constant);
        assert_eq!(partial.max_interval, Dur::from_millis(60_000));
        assert_eq!(partial.max_attempts, 3);
        let err = serde_json::from_str::<RetryConfig>(r#"{"initial_interval": "soon"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid duration \"soon\""), "{err}");
        assert!(serde_json::from_str::<RetryConfig>(r#"{"backoff": "random"}"#).is_err());
    }

    #[test]
    fn intervals_parse_user_input() {
        let config = RetryConfig::new().intervals("250ms", 2_000_u64).unwrap();
        assert_eq!(config.initial_interval, Dur::from_millis(250));
        assert_eq!(config.max_interval, Dur::from_millis(2_000));
        assert!(RetryConfig::new().intervals("1s", -1_i64).is_err());
    }

    fn any_backoff() -> impl Strategy<Value = Backoff> {
        prop_oneof![
            Just(Backoff::Exponential),
            Just(Backoff::Linear),
            Just(Backoff::Constant)
        ]
    }

    fn any_interval() -> impl Strategy<Value = Duration> {
        prop_oneof![
            (0..100_000_000_u64).prop_map(Duration::from_millis),
            any::<u64>().prop_map(Duration::from_millis),
            (any::<u64>(), 0..1_000_000_000_u32).prop_map(|(s, n)| Duration::new(s, n)),
            Just(Duration::MAX),
        ]
    }

    proptest! {
        #[test]
        fn delay_is_within_ten_percent_of_base(
            backoff in any_backoff(),
            initial in any_interval(),
            max in any_interval(),
            multiplier in prop_oneof![any::<f64>(), 0.0..10.0_f64],
            attempt: u32,
            jitter in prop_oneof![any::<f64>(), 0.0..1.0_f64],
        ) {
            let config = RetryConfig::new()
                .backoff(backoff)
                .initial_interval(initial)
                .max_interval(max)
                .multiplier(multiplier);
            let base = config.base_delay(attempt);
            let delay = config.delay_with_jitter(attempt, jitter);
            prop_assert!(delay >= base);
            prop_assert!(delay <= base.saturating_add(base / 10));
            let random = config.delay(attempt);
            prop_assert!(random >= base && random <= base.saturating_add(base / 10));
            if backoff != Backoff::Constant {
                prop_assert!(base <= max);
            }
        }

        #[test]
        fn exponential_is_monotonic(
            initial in 0..10_000_u64,
            max in 0..10_000_000_u64,
            multiplier in 1.0..5.0_f64,
            attempt in 1..200_u32,
        ) {
            let config = RetryConfig::new()
                .initial_interval(Duration::from_millis(initial))
                .max_interval(Duration::from_millis(max))
                .multiplier(multiplier);
            prop_assert!(config.base_delay(attempt) <= config.base_delay(attempt + 1));
        }
    }
}
