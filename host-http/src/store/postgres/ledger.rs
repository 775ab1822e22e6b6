//! The `ledger` refund gateway on PostgreSQL: refunds recorded in the shared database's
//! `ledger_refunds` table, once per refund id whichever instance sends it.

use std::sync::Arc;

use super::PgStore;
use futures_util::future::BoxFuture;

use crate::processors::{GatewayOutcome, RefundGateway, RefundRequest};
use crate::store::StoreError;
use crate::store::sqlite::ledger::LedgerEntry;

/// [`RefundGateway`] recording refunds in PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgLedger {
    store: Arc<PgStore>,
}

impl PgLedger {
    /// The ledger on the store's pool.
    pub fn new(store: Arc<PgStore>) -> PgLedger {
        PgLedger { store }
    }

    /// Records `refund` unless its id is already recorded, and returns the entry as stored
    /// (the first one, when the id was already there).
    pub async fn record(&self, refund: &RefundRequest) -> Result<LedgerEntry, StoreError> {
        let client = self.store.client().await?;
        let recorded_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        // One statement: the insert, or the row another instance inserted first.
        let row = client
            .query_opt(
                "WITH inserted AS (INSERT INTO ledger_refunds (refund_id, transaction_id, \
                 amount, currency, recorded_at) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (refund_id) DO NOTHING RETURNING refund_id, transaction_id, \
                 amount, currency, recorded_at) \
                 SELECT * FROM inserted UNION ALL SELECT refund_id, transaction_id, amount, \
                 currency, recorded_at FROM ledger_refunds WHERE refund_id = $1 \
                 AND NOT EXISTS (SELECT 1 FROM inserted)",
                &[
                    &refund.refund_id,
                    &refund.transaction_id,
                    &refund.amount.to_string(),
                    &refund.currency,
                    &recorded_at,
                ],
            )
            .await?;
        let row = match row {
            Some(row) => row,
            // Another instance sent the same refund at the same moment (a recovery task that
            // took over the lease): the insert waited for its commit and did nothing, and the
            // statement's snapshot, taken before that commit, does not see its row. A new
            // statement does.
            None => {
                client
                    .query_one(
                        "SELECT refund_id, transaction_id, amount, currency, recorded_at \
                         FROM ledger_refunds WHERE refund_id = $1",
                        &[&refund.refund_id],
                    )
                    .await?
            }
        };
        Ok(LedgerEntry {
            refund_id: row.try_get(0)?,
            transaction_id: row.try_get(1)?,
            amount: row.try_get(2)?,
            currency: row.try_get(3)?,
            recorded_at: row.try_get(4)?,
        })
    }
}

impl RefundGateway for PgLedger {
    fn name(&self) -> &'static str {
        "ledger"
    }

    fn send<'a>(&'a self, refund: &'a RefundRequest) -> BoxFuture<'a, GatewayOutcome> {
        Box::pin(async move {
            match self.record(refund).await {
                Ok(stored) => crate::store::sqlite::ledger::outcome_of(&stored, refund),
                Err(error) => GatewayOutcome::Unknown {
                    detail: error.to_string(),
                },
            }
        })
    }
}
