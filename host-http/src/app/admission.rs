//! Admission of authenticated requests: each provider has at most a fixed number of requests in
//! flight, so that one provider's stalled or slow requests (a body that never arrives) never
//! take the capacity that other providers' requests need. A request over the limit is shed at
//! once ([`Error::Overloaded`], 503 with `Retry-After`) instead of waiting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::Error;

/// Default number of requests one provider may have in flight at a time.
pub const DEFAULT_MAX_IN_FLIGHT_PER_PROVIDER: usize = 64;

/// The in-flight counters of every provider.
#[derive(Debug, Clone)]
pub struct InFlightLimits {
    max_per_provider: usize,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

/// One admitted request: its provider's counter goes down when the last clone is dropped.
#[derive(Debug)]
pub struct InFlightSlot {
    provider_id: String,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

impl InFlightLimits {
    /// At most `max_per_provider` requests per provider at a time (at least 1).
    pub fn new(max_per_provider: usize) -> InFlightLimits {
        InFlightLimits {
            max_per_provider: max_per_provider.max(1),
            counts: Arc::default(),
        }
    }

    /// Admits one more request of `provider_id`, or refuses it when the provider already has
    /// the maximum in flight.
    pub fn admit(&self, provider_id: &str) -> Result<InFlightSlot, Error> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(provider_id.to_owned()).or_insert(0);
        if *count >= self.max_per_provider {
            return Err(Error::Overloaded);
        }
        *count += 1;
        Ok(InFlightSlot {
            provider_id: provider_id.to_owned(),
            counts: Arc::clone(&self.counts),
        })
    }

    /// How many requests of `provider_id` are in flight now.
    pub fn in_flight(&self, provider_id: &str) -> usize {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.get(provider_id).copied().unwrap_or(0)
    }
}

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.provider_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.provider_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_over_its_limit_is_refused_and_others_are_not() {
        let limits = InFlightLimits::new(2);
        let first = limits.admit("a").unwrap();
        let _second = limits.admit("a").unwrap();
        assert!(matches!(limits.admit("a"), Err(Error::Overloaded)));
        let _other = limits.admit("b").unwrap();
        drop(first);
        assert_eq!(limits.in_flight("a"), 1);
        let _third = limits.admit("a").unwrap();
        assert_eq!(limits.in_flight("a"), 2);
    }
}
