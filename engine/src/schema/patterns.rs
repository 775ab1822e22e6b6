//! The regular expressions of the request schemas: dates and date-times on the calendar,
//! coordinates, URLs, e-mail addresses and plain text. Validation recognises a failed pattern by
//! its constant and words the message for it (R-8.9).

/// One calendar day `YYYY-MM-DD` of the years 1000–8999, as a regex fragment: 31, 30 or 28
/// days by month, and 29 February in leap years only (divisible by 4; centuries only when
/// divisible by 400), so that a date the calendar lacks (`2026-02-30`, `2100-02-29`) is refused
/// by the schema itself and a client validating with it reaches the service's verdict.
macro_rules! calendar_day {
    () => {
        concat!(
            "(?:[1-8][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])",
            "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))",
            "|(?:[1-8][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[1357][26])00)-02-29)"
        )
    };
}

/// `THH:MM:SS` with up to nine fraction digits, as a regex fragment.
macro_rules! clock_time {
    () => {
        r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
    };
}

/// `Z` or a `±HH:MM` offset, as a regex fragment.
macro_rules! utc_offset {
    () => {
        r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
    };
}

/// A local date-time or an RFC 3339 date-time with offset (R-6.1): `2026-12-01T15:00:00` or
/// `2026-12-01T15:00:00+01:00`, on a calendar day of the years 1000–8999 (so that every penalty
/// threshold, ten years of offset away at most, is a date of years 0001–9999).
pub const DATE_TIME_PATTERN: &str =
    concat!("^", calendar_day!(), clock_time!(), utc_offset!(), "?$");
/// An RFC 3339 instant: a date-time with `Z` or an offset (R-3.6 `paidAt`), years 1000–8999.
pub const INSTANT_PATTERN: &str = concat!("^", calendar_day!(), clock_time!(), utc_offset!(), "$");
/// A calendar date `YYYY-MM-DD` (DatePenalty `until`, R-5.4), years 1000–8999.
pub const DATE_PATTERN: &str = concat!("^", calendar_day!(), "$");
/// A decimal latitude string in [-90, 90] (R-8.7).
pub const LAT_PATTERN: &str = r"^-?(90(\.0+)?|[1-8]?[0-9](\.[0-9]+)?)$";
/// A decimal longitude string in [-180, 180] (R-8.7).
pub const LNG_PATTERN: &str = r"^-?(180(\.0+)?|(1[0-7][0-9]|[1-9]?[0-9])(\.[0-9]+)?)$";
/// An absolute http(s) URL with a host (R-8.8).
pub const URL_PATTERN: &str = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#@]+([/?#][^\s]*)?$";
/// Text without control characters (R-8.10): the pattern of [`crate::text`], written from its
/// character set, here beside the other patterns of request strings.
pub use crate::text::TEXT_PATTERN;
/// The shape of an e-mail address; `format: email` is asserted beside it (R-8.4).
pub const EMAIL_PATTERN: &str = r"^[^\s@]+@[^\s@]+\.[^\s@]+$";
