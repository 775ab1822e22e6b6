//! Fault-injection points of the refund process, for the crash-safety tests: with the
//! `fault-injection` feature, `CHECKOUT_FAULT=<point>` makes the process abort at that point (no
//! unwinding, no flushing, no graceful shutdown — as a SIGKILL would). Without the feature every
//! point compiles to nothing, so a release build cannot be made to abort.

/// Right after a cancellation claimed its `Idempotency-Key`, before its refund is recorded
/// the claim is left running with nothing carrying it.
pub const AFTER_CLAIM: &str = "after_claim";
/// Right before the refund is sent to the gateway (the refund is recorded PENDING).
pub const BEFORE_GATEWAY: &str = "before_gateway";
/// Right after the gateway answered, before the answer is committed.
pub const AFTER_GATEWAY: &str = "after_gateway";
/// Right after the settlement was committed, before the response is written.
pub const AFTER_COMMIT: &str = "after_commit";
/// Environment variable naming the point to abort at.
pub const FAULT_ENV: &str = "CHECKOUT_FAULT";
/// Right after a creation claimed its `Idempotency-Key`, before the transaction is stored: a
/// point to pause at ([`PAUSE_ENV`]), so that a test's client can go away in between.
pub const AFTER_CREATION_CLAIM: &str = "after_creation_claim";
/// Right after the processor approved a card payment on the payment page, before the payment
/// is recorded: a point to pause at, so that a test can pay the transaction another way first.
pub const AFTER_CHARGE: &str = "after_charge";
/// Right before a cancellation records its refund PENDING: a point to pause at, so that a test
/// can make a request reach its reservation as late as a slow invoice upload would.
pub const BEFORE_RESERVE: &str = "before_reserve";
/// Environment variable naming a point to pause at and for how long: `<point>:<milliseconds>`.
pub const PAUSE_ENV: &str = "CHECKOUT_FAULT_PAUSE";

/// Aborts the process when `CHECKOUT_FAULT` names `point`.
#[cfg(feature = "fault-injection")]
pub fn point(point: &str) {
    if std::env::var(FAULT_ENV).is_ok_and(|wanted| wanted == point) {
        eprintln!("fault injection: aborting at {point}");
        std::process::abort();
    }
}

/// Without the `fault-injection` feature a point does nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point(_point: &str) {}

/// Waits at `point` for as long as `CHECKOUT_FAULT_PAUSE=<point>:<milliseconds>` says.
#[cfg(feature = "fault-injection")]
pub async fn pause(point: &str) {
    let wanted = std::env::var(PAUSE_ENV).unwrap_or_default();
    if let Some((name, millis)) = wanted.split_once(':')
        && name == point
        && let Ok(millis) = millis.parse()
    {
        tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
    }
}

/// Without the `fault-injection` feature a pause does nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub async fn pause(_point: &str) {}
