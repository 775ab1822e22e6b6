//! The provider's events, to poll and replay (`GET /events`): the outbox read back, oldest
//! first, the same payloads webhooks deliver.

use checkout_engine::api::{Event, EventPage, EventPayload};

use super::{Error, Principal, Services};

/// Most events on one page.
pub const MAX_PAGE: u32 = 100;

impl Services {
    /// The provider's events after the event `after` (from the first when `None`), at most
    /// `limit` (1 to [`MAX_PAGE`]); another provider's event id, or an unknown one, is a 400.
    pub async fn events(
        &self,
        principal: &Principal,
        after: Option<String>,
        limit: u32,
    ) -> Result<EventPage, Error> {
        let limit = limit.clamp(1, MAX_PAGE);
        let unknown = || Error::invalid("after must be the id of one of your events");
        // A cursor that is not an event id (`evt_` and 32 hex digits, as the document's pattern
        // says) names none of the caller's events: refused before the store, so that a NUL or
        // another byte PostgreSQL text cannot hold is the same 400 on both stores.
        if after.as_deref().is_some_and(|after| !is_event_id(after)) {
            return Err(unknown());
        }
        let records = self
            .outbox
            .events_after(principal.provider_id.clone(), after, limit + 1)
            .await?
            .ok_or_else(unknown)?;
        let has_more = records.len() > limit as usize;
        let events = records
            .into_iter()
            .take(limit as usize)
            .map(|record| {
                let payload: EventPayload = serde_json::from_str(&record.payload)
                    .map_err(|e| Error::Internal(format!("stored event {}: {e}", record.id)))?;
                Ok(Event {
                    id: record.id,
                    event_type: payload.event_type,
                    timestamp: payload.timestamp,
                    data: payload.data,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(EventPage { events, has_more })
    }
}

/// Whether `text` has the form of an event id: `evt_` and 32 lower-case hex digits
/// ([`crate::store::outbox`] makes them, `Event.id` of the document carries the pattern).
fn is_event_id(text: &str) -> bool {
    text.strip_prefix("evt_").is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

#[cfg(test)]
mod tests {
    use super::is_event_id;

    #[test]
    fn only_the_form_of_an_event_id_is_looked_up() {
        assert!(is_event_id("evt_0190b6b07c3a7d2e9f0000000000abcd"));
        for text in [
            "",
            "evt_",
            "a\0b",
            "evt_0190b6b07c3a7d2e9f0000000000abc\0",
            "evt_0190B6B07C3A7D2E9F0000000000ABCD",
            "evt_0190b6b07c3a7d2e9f0000000000abcd0",
            "EVT_0190b6b07c3a7d2e9f0000000000abcd",
        ] {
            assert!(!is_event_id(text), "{text:?}");
        }
    }
}
