//! Errors of the engine's computations: every failure is a value, never a panic.
//!
//! Validation of request bodies (`crate::validate`) reports what a client did wrong as 400
//! messages; the variants here are what the engine finds when it is handed a value it cannot
//! compute with (an unknown currency, an overflow, an inconsistent policy). A host that validated
//! its input first only ever sees [`EngineError::Overflow`]-like variants, which are internal
//! errors (500).

/// Why a quote, a policy or a penalty could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The currency is not an upper-case ISO 4217 alphabetic code.
    #[error("currency must be a valid ISO 4217 currency code")]
    UnknownCurrency(String),
    /// Two amounts of different currencies were combined.
    #[error("currency mismatch: {expected} and {found}")]
    CurrencyMismatch {
        /// Currency of the left operand.
        expected: String,
        /// Currency of the right operand.
        found: String,
    },
    /// An arithmetic result does not fit a `Decimal`.
    #[error("amount out of range in {0}")]
    Overflow(&'static str),
    /// A time-zone name that the compiled-in database does not know.
    #[error("{0} must be a valid IANA time zone")]
    UnknownTimeZone(String),
    /// A date-time that is neither RFC 3339 with an offset nor a local date-time.
    #[error("{0} must be a valid ISO 8601 date string")]
    InvalidDateTime(String),
    /// A date that is not `YYYY-MM-DD`.
    #[error("{0} must be a valid ISO 8601 date (YYYY-MM-DD)")]
    InvalidDate(String),
    /// A calendar step or a local time that leaves the range of representable instants.
    #[error("date-time out of range")]
    TimeOutOfRange,
    /// A START_PERIOD policy on an item without a period.
    #[error("cancellationPolicy.reference START_PERIOD requires period")]
    StartPeriodWithoutPeriod,
    /// A policy without penalties.
    #[error("cancellationPolicy.penalties should not be empty")]
    NoPenalties,
    /// A policy mixing DATE_PENALTY and OFFSET_PENALTY.
    #[error("cancellationPolicy.penalties must not mix DATE_PENALTY and OFFSET_PENALTY")]
    MixedPenalties,
    /// A penalty lacking the field its type needs (`until` or `offset`).
    #[error("cancellationPolicy.penalties.{index}.{field} should not be empty")]
    MissingPenaltyField {
        /// Position of the penalty in the policy.
        index: usize,
        /// `until` or `offset`.
        field: &'static str,
    },
    /// A penalty value outside its range.
    #[error("cancellationPolicy.penalties.{index}.value.amount {reason}")]
    PenaltyValueOutOfRange {
        /// Position of the penalty in the policy.
        index: usize,
        /// Which bound is broken.
        reason: &'static str,
    },
    /// An amount with more decimals than the currency's minor unit.
    #[error("{field} must not have more than {scale} decimal places")]
    TooManyDecimals {
        /// Path of the amount.
        field: String,
        /// Minor-unit decimals of the currency.
        scale: u32,
    },
    /// A negative amount where only amounts ≥ 0 make sense.
    #[error("{0} must not be less than 0")]
    Negative(String),
    /// An invariant of the refund arithmetic does not hold (penalty + refundable = total,
    /// 0 ≤ penalty ≤ total). Reaching this is a bug, reported as a value rather than a panic.
    #[error("invariant violated: {0}")]
    Invariant(&'static str),
}
