//! The provider's events, to poll and replay (`GET /events`): the outbox read back, oldest
//! first, the same payloads webhooks deliver.

use engine::api::{Event, EventPage, EventPayload};

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
        let records = self
            .outbox
            .events_after(principal.provider_id.clone(), after, limit + 1)
            .await?
            .ok_or_else(|| Error::invalid("after must be the id of one of your events"))?;
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
