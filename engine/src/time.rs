//! Time: zones, local wall-clock readings and calendar steps (R-6).
//!
//! Every function here is pure: instants come in as arguments, the clock is never read (R-6.6).
//! The one rule that turns a local wall-clock reading into an instant is [`resolve_local`]
//! (R-6.2); period starts, calendar steps and DatePenalty midnights all go through it.

use chrono::{
    DateTime, Duration, FixedOffset, LocalResult, Months, NaiveDate, NaiveDateTime, NaiveTime,
    Offset, SecondsFormat, TimeZone, Utc,
};
use chrono_tz::Tz;

use crate::error::EngineError;

/// Parses an IANA zone name of the compiled-in database (R-6.1, R-6.7).
///
/// ```
/// let berlin = checkout_engine::time::parse_zone("Europe/Berlin").unwrap();
/// assert_eq!(berlin, chrono_tz::Europe::Berlin);
/// assert!(checkout_engine::time::parse_zone("Mars/Olympus").is_err());
/// ```
pub fn parse_zone(name: &str) -> Result<Tz, EngineError> {
    name.parse::<Tz>()
        .map_err(|_| EngineError::UnknownTimeZone(name.to_owned()))
}

/// Longest daylight-saving gap searched backwards for the offset in force before it; real gaps
/// are at most a day (Pacific/Apia skipped 2011-12-30 entirely).
const GAP_SEARCH_STEPS: i64 = 4 * 49;
const GAP_SEARCH_STEP_MINUTES: i64 = 15;

/// Reads a local wall-clock date-time in `zone` as an instant (R-6.2): inside a gap it takes the
/// offset in force just before the gap (02:30 in a 02:00→03:00 gap becomes 03:30 after it); in a
/// fold (clocks set back) it takes the earlier instant.
///
/// ```
/// use chrono::NaiveDate;
/// let local = NaiveDate::from_ymd_opt(2026, 3, 29).unwrap().and_hms_opt(2, 30, 0).unwrap();
/// let instant = checkout_engine::time::resolve_local(chrono_tz::Europe::Berlin, local).unwrap();
/// assert_eq!(instant.to_rfc3339(), "2026-03-29T01:30:00+00:00"); // 03:30 CEST
/// ```
pub fn resolve_local(zone: Tz, local: NaiveDateTime) -> Result<DateTime<Utc>, EngineError> {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(instant) => Ok(instant.with_timezone(&Utc)),
        LocalResult::Ambiguous(earlier, _) => Ok(earlier.with_timezone(&Utc)),
        LocalResult::None => {
            let before = offset_before_gap(zone, local)?;
            let utc = local
                .checked_sub_signed(Duration::seconds(i64::from(before.local_minus_utc())))
                .ok_or(EngineError::TimeOutOfRange)?;
            Ok(Utc.from_utc_datetime(&utc))
        }
    }
}

/// The offset in force just before the gap that swallows `local`: walk back in small steps to
/// the last valid wall-clock reading before the gap and take its offset.
fn offset_before_gap(zone: Tz, local: NaiveDateTime) -> Result<FixedOffset, EngineError> {
    for step in 1..=GAP_SEARCH_STEPS {
        let earlier = local
            .checked_sub_signed(Duration::minutes(step * GAP_SEARCH_STEP_MINUTES))
            .ok_or(EngineError::TimeOutOfRange)?;
        match zone.from_local_datetime(&earlier) {
            LocalResult::Single(instant) => return Ok(instant.offset().fix()),
            // A fold right before a gap: the later reading is the one nearest the gap.
            LocalResult::Ambiguous(_, later) => return Ok(later.offset().fix()),
            LocalResult::None => {}
        }
    }
    Err(EngineError::TimeOutOfRange)
}

/// The wall-clock reading of an instant in a zone.
pub fn wall_clock(zone: Tz, instant: DateTime<Utc>) -> NaiveDateTime {
    instant.with_timezone(&zone).naive_local()
}

/// Parses `period.start` (or any date-time of R-6.1): RFC 3339 with an offset fixes the instant
/// by itself; a local date-time without offset (`2026-12-01T15:00:00`, seconds optional) is read
/// in `zone` by [`resolve_local`].
///
/// ```
/// use chrono_tz::America::New_York;
/// let fixed = checkout_engine::time::parse_date_time("2026-12-01T15:00:00+01:00", New_York).unwrap();
/// assert_eq!(fixed.to_rfc3339(), "2026-12-01T14:00:00+00:00");
/// // 01:30 on 1 November 2026 happens twice in New York; the earlier (EDT) instant is taken.
/// let folded = checkout_engine::time::parse_date_time("2026-11-01T01:30:00", New_York).unwrap();
/// assert_eq!(folded.to_rfc3339(), "2026-11-01T05:30:00+00:00");
/// ```
pub fn parse_date_time(text: &str, zone: Tz) -> Result<DateTime<Utc>, EngineError> {
    // Without an offset the RFC 3339 parse below fails; chrono's format parse then reads
    // exactly what this does.
    if let Some(local) = plain_date_time(text) {
        return resolve_local(zone, local);
    }
    if let Ok(instant) = DateTime::parse_from_rfc3339(text) {
        return Ok(instant.with_timezone(&Utc));
    }
    let local = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M"))
        .or_else(|_| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d").map(|d| d.and_time(NaiveTime::MIN))
        })
        .map_err(|_| EngineError::InvalidDateTime(text.to_owned()))?;
    resolve_local(zone, local)
}

/// Parses an RFC 3339 instant with an offset (`paidAt`, `at`).
pub fn parse_instant(text: &str) -> Result<DateTime<Utc>, EngineError> {
    DateTime::parse_from_rfc3339(text)
        .map(|instant| instant.with_timezone(&Utc))
        .map_err(|_| EngineError::InvalidDateTime(text.to_owned()))
}

/// Parses a `YYYY-MM-DD` date (`until`).
pub fn parse_date(text: &str) -> Result<NaiveDate, EngineError> {
    if let Some(date) = plain_date(text.as_bytes()) {
        return Ok(date);
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map_err(|_| EngineError::InvalidDate(text.to_owned()))
}

/// Two ASCII digits as a number.
fn two_digits(bytes: &[u8]) -> Option<u32> {
    match *bytes {
        [tens @ b'0'..=b'9', ones @ b'0'..=b'9'] => {
            Some(u32::from(tens - b'0') * 10 + u32::from(ones - b'0'))
        }
        _ => None,
    }
}

/// A date written as exactly `dddd-dd-dd` (ASCII digits), read without chrono's format parser:
/// what `NaiveDate::parse_from_str(text, "%Y-%m-%d")` reads from such a text (its `%Y` takes up
/// to four digits without a sign, `%m` and `%d` up to two). `None` for any other text and for a
/// day the calendar lacks; callers then ask chrono, which decides.
pub(crate) fn plain_date(bytes: &[u8]) -> Option<NaiveDate> {
    let [y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1] = *bytes else {
        return None;
    };
    let year = i32::try_from(two_digits(&[y0, y1])? * 100 + two_digits(&[y2, y3])?).ok()?;
    NaiveDate::from_ymd_opt(year, two_digits(&[m0, m1])?, two_digits(&[d0, d1])?)
}

/// A local date-time written as exactly `dddd-dd-ddTdd:dd:dd` (ASCII digits), read without
/// chrono's format parser: what both `text.parse::<NaiveDateTime>()` and
/// `NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")` read from such a text. `None`
/// for any other text, for an hour, minute or day out of range and for a 60th second (which
/// chrono reads as a leap second); callers then ask chrono, which decides.
pub(crate) fn plain_date_time(text: &str) -> Option<NaiveDateTime> {
    let bytes = text.as_bytes();
    let [date @ .., b'T', h0, h1, b':', i0, i1, b':', s0, s1] = bytes else {
        return None;
    };
    let time = NaiveTime::from_hms_opt(
        two_digits(&[*h0, *h1])?,
        two_digits(&[*i0, *i1])?,
        two_digits(&[*s0, *s1])?,
    )?;
    Some(plain_date(date)?.and_time(time))
}

/// A whole number of calendar days or months on a wall-clock date-time (R-5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalendarStep {
    /// Calendar days: the same wall-clock time `n` days later or earlier.
    Days(u32),
    /// Calendar months, clamped to the month's last day (31 March − 1 month = 28/29 February).
    Months(u32),
}

/// Moves a wall-clock date-time forward (`forward`) or back by a calendar step; `None` when the
/// result leaves chrono's range.
pub fn step_local(
    local: NaiveDateTime,
    step: CalendarStep,
    forward: bool,
) -> Option<NaiveDateTime> {
    match (step, forward) {
        (CalendarStep::Days(n), true) => local.checked_add_signed(Duration::days(i64::from(n))),
        (CalendarStep::Days(n), false) => local.checked_sub_signed(Duration::days(i64::from(n))),
        (CalendarStep::Months(n), true) => local.checked_add_months(Months::new(n)),
        (CalendarStep::Months(n), false) => local.checked_sub_months(Months::new(n)),
    }
}

/// Writes an instant as RFC 3339 in UTC with `Z`, fractional seconds only when present
/// (`2026-03-29T01:30:00Z`).
pub fn format_utc(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(y: i32, m: u32, d: u32, h: u32, min: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, m, d)
            .and_then(|date| date.and_hms_opt(h, min, 0))
            .expect("valid test date")
    }

    #[test]
    fn gap_takes_offset_before_it_r_6_2() {
        let berlin = resolve_local(chrono_tz::Europe::Berlin, local(2026, 3, 29, 2, 30)).unwrap();
        assert_eq!(format_utc(berlin), "2026-03-29T01:30:00Z");
        // Lord Howe moves 30 minutes: 02:00 → 02:30 on 2026-10-04; 02:15 is read with +10:30.
        let howe =
            resolve_local(chrono_tz::Australia::Lord_Howe, local(2026, 10, 4, 2, 15)).unwrap();
        assert_eq!(format_utc(howe), "2026-10-03T15:45:00Z");
    }

    #[test]
    fn fold_takes_earlier_instant_r_6_2() {
        let ny = resolve_local(chrono_tz::America::New_York, local(2026, 11, 1, 1, 30)).unwrap();
        assert_eq!(format_utc(ny), "2026-11-01T05:30:00Z");
    }

    #[test]
    fn months_clamp_to_month_end_r_5_5() {
        let back = step_local(local(2026, 3, 31, 10, 0), CalendarStep::Months(1), false).unwrap();
        assert_eq!(back, local(2026, 2, 28, 10, 0));
        let leap = step_local(local(2028, 3, 31, 10, 0), CalendarStep::Months(1), false).unwrap();
        assert_eq!(leap, local(2028, 2, 29, 10, 0));
    }

    /// Texts one edit away from plain dates and date-times, read here and by chrono.
    fn near(seeds: &[&str]) -> Vec<String> {
        let alphabet = [
            '0', '1', '2', '3', '5', '6', '9', '-', ':', 'T', 't', ' ', '+', '.', 'Z',
        ];
        let mut out: Vec<String> = seeds.iter().map(|s| (*s).to_owned()).collect();
        for seed in seeds {
            for i in 0..=seed.len() {
                for c in alphabet {
                    out.push(format!("{}{c}{}", &seed[..i], &seed[i..]));
                    if i < seed.len() {
                        out.push(format!("{}{c}{}", &seed[..i], &seed[i + 1..]));
                    }
                }
                if i < seed.len() {
                    out.push(format!("{}{}", &seed[..i], &seed[i + 1..]));
                }
            }
        }
        out
    }

    #[test]
    fn plain_dates_are_read_as_chrono_reads_them() {
        let seeds = [
            "2026-11-01",
            "2024-02-29",
            "2026-02-29",
            "0000-01-01",
            "9999-12-31",
            "2026-13-01",
            "2026-00-10",
            "2026-04-31",
            "2026-04-00",
            "1900-02-29",
            "2000-02-29",
        ];
        let mut read = 0;
        for text in near(&seeds) {
            let chrono = NaiveDate::parse_from_str(&text, "%Y-%m-%d").ok();
            if let Some(date) = plain_date(text.as_bytes()) {
                assert_eq!(Some(date), chrono, "{text:?}");
                read += 1;
            }
            assert_eq!(parse_date(&text).ok(), chrono, "{text:?}");
        }
        assert!(read > 100, "{read}");
    }

    #[test]
    fn plain_date_times_are_read_as_chrono_reads_them() {
        let seeds = [
            "2026-12-01T15:00:00",
            "2024-02-29T23:59:59",
            "2026-02-29T10:00:00",
            "2026-03-29T02:30:00",
            "2026-12-01T24:00:00",
            "2026-12-01T23:60:00",
            "2026-12-01T23:59:60",
            "2026-12-01T15:00:00.5",
            "2026-12-01T15:00",
        ];
        let mut read = 0;
        for text in near(&seeds) {
            let from_str = text.parse::<NaiveDateTime>().ok();
            let format = NaiveDateTime::parse_from_str(&text, "%Y-%m-%dT%H:%M:%S%.f").ok();
            if let Some(local) = plain_date_time(&text) {
                assert_eq!(Some(local), from_str, "{text:?}");
                assert_eq!(Some(local), format, "{text:?}");
                read += 1;
            }
            for zone in [Tz::UTC, chrono_tz::Europe::Berlin] {
                let slow = DateTime::parse_from_rfc3339(&text)
                    .map(|instant| instant.with_timezone(&Utc))
                    .ok()
                    .or_else(|| format.and_then(|local| resolve_local(zone, local).ok()));
                if plain_date_time(&text).is_some() {
                    assert_eq!(parse_date_time(&text, zone).ok(), slow, "{text:?}");
                }
            }
        }
        assert!(read > 100, "{read}");
    }

    #[test]
    fn unknown_zone_and_bad_texts_are_errors() {
        assert!(parse_zone("Europe/Nowhere").is_err());
        assert!(parse_date_time("yesterday", Tz::UTC).is_err());
        assert!(parse_date("2026-02-30").is_err());
        assert!(parse_instant("2026-02-01T10:00:00").is_err());
    }
}
