//! Creation body (`POST /initialize`, `POST /transactions`, `POST /quote`): raw bytes through
//! `checkout_engine::validate::checkout`, exactly as the host calls it, then, for an accepted body, the
//! quote the host stores. Properties: no panic; a refused body has at least one message; an
//! accepted body can always be quoted (every input amount is bounded so that every derived
//! amount fits, issue 12), and its quote serialises.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// Provider zones the body's local times are read in; chosen by the input's length so
/// that the corpus stays plain JSON: UTC, a DST zone, +14:00, a midnight gap and a 30-minute
/// DST shift.
const ZONES: [&str; 5] = [
    "UTC",
    "Europe/Berlin",
    "Pacific/Kiritimati",
    "America/Santiago",
    "Australia/Lord_Howe",
];

fuzz_target!(|data: &[u8]| {
    let zone = ZONES[data.len() % ZONES.len()];
    match checkout_engine::validate::checkout(data, zone) {
        Ok(checkout) => {
            let quote = checkout_engine::quote::quote(&checkout)
                .unwrap_or_else(|e| panic!("a valid checkout could not be quoted: {e}"));
            assert_eq!(quote.items.len(), checkout.items.len());
            serde_json::to_vec(&quote).expect("a quote serialises");
        }
        Err(errors) => {
            assert!(!errors.messages.is_empty(), "a refusal without a message");
            serde_json::to_vec(&errors.to_body()).expect("a 400 body serialises");
        }
    }
});
