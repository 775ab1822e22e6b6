//! Admission of authenticated requests: each provider has at most a fixed number of requests in
//! flight, so that one provider's stalled or slow requests (a body that never arrives) never
//! take the capacity that other providers' requests need. A request over the limit is shed at
//! once ([`Error::Overloaded`], 503 with `Retry-After`) instead of waiting.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::Error;

/// Default number of requests one provider may have in flight at a time.
pub const DEFAULT_MAX_IN_FLIGHT_PER_PROVIDER: usize = 64;

/// The in-flight counters of every provider.
///
/// Each provider has one counter, made the first time one of its requests is admitted and
/// kept for the life of the process (one entry per provider that ever authenticated: providers
/// are made by their operators, never by a request). A credential kept in memory keeps its
/// provider's counter beside it ([`InFlightLimits::counter`]), so that admitting a request is
/// one atomic update of that counter: no lock shared by every provider's requests, no lookup
/// by name.
#[derive(Debug, Clone)]
pub struct InFlightLimits {
    max_per_provider: usize,
    counters: Arc<Mutex<HashMap<String, ProviderCounter>>>,
}

/// The number of one provider's requests in flight.
#[derive(Debug, Clone, Default)]
pub struct ProviderCounter(Arc<AtomicUsize>);

/// One admitted request: its provider's counter goes down when it is dropped.
#[derive(Debug)]
pub struct InFlightSlot {
    counter: ProviderCounter,
}

impl InFlightLimits {
    /// At most `max_per_provider` requests per provider at a time (at least 1).
    pub fn new(max_per_provider: usize) -> InFlightLimits {
        InFlightLimits {
            max_per_provider: max_per_provider.max(1),
            counters: Arc::default(),
        }
    }

    /// The counter of `provider_id`'s requests in flight: the same one for every call.
    pub fn counter(&self, provider_id: &str) -> ProviderCounter {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(counter) = counters.get(provider_id) {
            return counter.clone();
        }
        let counter = ProviderCounter::default();
        counters.insert(provider_id.to_owned(), counter.clone());
        counter
    }

    /// Admits one more request of `provider_id`, or refuses it when the provider already has
    /// the maximum in flight.
    pub fn admit(&self, provider_id: &str) -> Result<InFlightSlot, Error> {
        self.admit_on(&self.counter(provider_id))
    }

    /// [`InFlightLimits::admit`] on a counter taken from [`InFlightLimits::counter`].
    pub fn admit_on(&self, counter: &ProviderCounter) -> Result<InFlightSlot, Error> {
        counter
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
                (count < self.max_per_provider).then_some(count + 1)
            })
            .map_err(|_| Error::Overloaded)?;
        Ok(InFlightSlot {
            counter: counter.clone(),
        })
    }

    /// How many requests of `provider_id` are in flight now.
    pub fn in_flight(&self, provider_id: &str) -> usize {
        let counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters
            .get(provider_id)
            .map_or(0, |counter| counter.0.load(Ordering::Acquire))
    }
}

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        self.counter.0.fetch_sub(1, Ordering::AcqRel);
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
        assert_eq!(limits.in_flight("c"), 0);
    }

    #[test]
    fn a_kept_counter_is_the_providers_counter() {
        let limits = InFlightLimits::new(2);
        let kept = limits.counter("a");
        let first = limits.admit_on(&kept).unwrap();
        let _second = limits.admit("a").unwrap();
        assert!(matches!(limits.admit_on(&kept), Err(Error::Overloaded)));
        assert!(matches!(
            limits.admit_on(&limits.counter("a")),
            Err(Error::Overloaded)
        ));
        drop(first);
        assert_eq!(limits.in_flight("a"), 1);
        let _third = limits.admit_on(&kept).unwrap();
        assert_eq!(limits.in_flight("a"), 2);
    }

    #[test]
    fn admissions_from_many_threads_never_pass_the_limit() {
        let limits = InFlightLimits::new(3);
        let counter = limits.counter("a");
        let most = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..10_000 {
                        if let Ok(slot) = limits.admit_on(&counter) {
                            most.fetch_max(limits.in_flight("a"), Ordering::Relaxed);
                            drop(slot);
                        }
                    }
                });
            }
        });
        assert!((1..=3).contains(&most.load(Ordering::Relaxed)));
        assert_eq!(limits.in_flight("a"), 0);
    }
}
