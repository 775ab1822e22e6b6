//! Who may do what: authentication of presented credentials, scopes,
//! and the ownership of transactions.

use std::sync::Arc;

use checkout_engine::api::ProviderSettings;

use super::{Error, Principal, Resource, Services, Versioned};
use crate::auth::{self, BasicCredentials, Scope, Scopes};
use crate::store::{CredentialRow, TransactionRecord};

/// Most credentials (and, apart, provider settings) kept in memory; past it the map starts
/// over, so a flood of distinct widget ids costs database reads, never memory.
const MAX_CACHED: usize = 10_000;

/// Credentials and provider settings as last read from the store, each with the access epoch
/// it was read under ([`crate::store::Store::access_epoch`]). An entry is used only while the
/// store still reports that epoch: any change of a credential or a provider's settings, by this
/// instance, another one or a `provider` command, changes the epoch in the same commit, so the
/// first request after it reads the database again. Only what the database holds is kept (the
/// secret's SHA-256, never the secret), and only credentials that exist.
#[derive(Debug)]
pub struct AccessCache {
    credentials: Versioned<String, Arc<KnownCredential>>,
    providers: Versioned<String, Arc<ProviderSettings>>,
}

impl Default for AccessCache {
    fn default() -> Self {
        AccessCache {
            credentials: Versioned::new(MAX_CACHED),
            providers: Versioned::new(MAX_CACHED),
        }
    }
}

/// A stored credential with its scopes parsed once.
#[derive(Debug)]
struct KnownCredential {
    row: CredentialRow,
    scopes: Scopes,
    /// Its provider's count of requests in flight ([`super::admission::InFlightLimits`]).
    in_flight: super::admission::ProviderCounter,
    /// The minute (Unix seconds / 60) of the last use this instance recorded.
    use_noted: std::sync::atomic::AtomicI64,
}

/// A credential's use is recorded at most once a minute per instance: the dashboard shows
/// "last used" to the minute, and a request pays one atomic read for it.
const USE_RESOLUTION_SECONDS: i64 = 60;

impl Services {
    /// Checks presented Basic credentials. The stored credential comes from the
    /// [`AccessCache`] while the access epoch is unchanged, else from the store; either way the
    /// presented secret is hashed and compared in constant time, and a credential revoked on
    /// the database is refused from the first request after the revoking commit.
    pub async fn authenticate(
        &self,
        presented: Option<BasicCredentials>,
    ) -> Result<Principal, Error> {
        let presented = presented.ok_or(Error::Unauthenticated)?;
        // The epoch is read before the credential: a change committed in between moves the
        // epoch, so what is read now is never kept beyond that change.
        let epoch = self.store.access_epoch().await?;
        self.authenticate_under(presented, epoch).await
    }

    /// [`Services::authenticate`] of a status read: the access epoch and the transaction's
    /// owner and version come from one read ([`crate::store::Store::access_epoch_and_version`];
    /// one round trip on PostgreSQL). `id` is the transaction asked for, if it is well formed;
    /// the owner and version go to [`Services::status_json_at`].
    pub async fn authenticate_for_status(
        &self,
        presented: Option<BasicCredentials>,
        id: Option<&str>,
    ) -> Result<(Principal, Option<(String, u64)>), Error> {
        let presented = presented.ok_or(Error::Unauthenticated)?;
        let (epoch, version) = match id {
            Some(id) => self.store.access_epoch_and_version(id.to_owned()).await?,
            None => (self.store.access_epoch().await?, None),
        };
        Ok((self.authenticate_under(presented, epoch).await?, version))
    }

    /// Checks presented credentials against the credential kept under `epoch`, read from the
    /// store (and kept) if there is none.
    async fn authenticate_under(
        &self,
        presented: BasicCredentials,
        epoch: u64,
    ) -> Result<Principal, Error> {
        let cached = self
            .access_cache
            .credentials
            .get(presented.widget_id(), epoch);
        let known = match cached {
            Some(known) => Some(known),
            // No credential holds a NUL (widget ids are generated; PostgreSQL text cannot even
            // store one), so such a widget id is unknown without asking the store, on both
            // stores: 401 as for any unknown credential, never a store error.
            None if presented.widget_id().contains('\0') => None,
            None => {
                let row = self
                    .store
                    .credential(presented.widget_id().to_owned())
                    .await?;
                row.map(|row| {
                    // Scopes were checked when stored; an unreadable list grants nothing.
                    let scopes = Scopes::parse(&row.scopes).unwrap_or_default();
                    let known = Arc::new(KnownCredential {
                        in_flight: self.in_flight.counter(&row.provider_id),
                        row,
                        scopes,
                        use_noted: std::sync::atomic::AtomicI64::new(0),
                    });
                    self.access_cache.credentials.put(
                        presented.widget_id().to_owned(),
                        epoch,
                        known.clone(),
                    );
                    known
                })
            }
        };
        let expected = known.as_ref().map(|known| &known.row.secret_hash);
        if !auth::secret_matches(presented.secret(), expected) {
            return Err(Error::Unauthenticated);
        }
        let known = known.ok_or(Error::Unauthenticated)?;
        let in_flight = Arc::new(self.in_flight.admit_on(&known.in_flight)?);
        self.note_use(&known, presented.widget_id());
        Ok(Principal {
            provider_id: known.row.provider_id.clone(),
            scopes: known.scopes,
            in_flight,
            access_epoch: epoch,
        })
    }

    /// Records the credential's use off the request's path, at most once a minute per
    /// instance; a failure only leaves "last used" older.
    fn note_use(&self, known: &KnownCredential, widget_id: &str) {
        use std::sync::atomic::Ordering;
        let now = chrono::Utc::now();
        let minute = now.timestamp() / USE_RESOLUTION_SECONDS;
        let noted = known.use_noted.load(Ordering::Relaxed);
        if noted >= minute
            || known
                .use_noted
                .compare_exchange(noted, minute, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let dashboard = Arc::clone(&self.dashboard);
        let widget_id = widget_id.to_owned();
        tokio::spawn(async move {
            if let Err(error) = dashboard.record_credential_use(widget_id, now).await {
                tracing::debug!(%error, "a credential's use was not recorded");
            }
        });
    }

    /// another provider's transaction → [`Error::OtherProvider`], an unknown one →
    /// [`Error::NotFound`].
    pub async fn check_owner(&self, principal: &Principal, id: &str) -> Result<(), Error> {
        match self.store.transaction_owner(id.to_owned()).await? {
            None => Err(Error::NotFound(Resource::Contract)),
            Some(owner) if owner == principal.provider_id => Ok(()),
            Some(_) => Err(Error::OtherProvider(Resource::Contract)),
        }
    }

    /// A transaction of the principal's provider, with its items and cancellations.
    pub(crate) async fn owned_transaction(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<TransactionRecord, Error> {
        let record = self
            .store
            .transaction(id.to_owned())
            .await?
            .ok_or(Error::NotFound(Resource::Contract))?;
        if record.provider_id == principal.provider_id {
            Ok(record)
        } else {
            Err(Error::OtherProvider(Resource::Contract))
        }
    }

    /// The configuration of the principal's provider.
    /// Kept in the [`AccessCache`] like credentials, under the epoch the principal was
    /// authenticated with.
    pub(crate) async fn provider_settings(
        &self,
        principal: &Principal,
    ) -> Result<ProviderSettings, Error> {
        let epoch = principal.access_epoch;
        if let Some(settings) = self
            .access_cache
            .providers
            .get(&principal.provider_id, epoch)
        {
            return Ok(ProviderSettings::clone(&settings));
        }
        let provider = self
            .store
            .provider(principal.provider_id.clone())
            .await?
            .ok_or_else(|| Error::Internal("credential names a missing provider".to_owned()))?;
        let settings = provider.settings();
        self.access_cache.providers.put(
            principal.provider_id.clone(),
            epoch,
            Arc::new(settings.clone()),
        );
        Ok(settings)
    }
}

impl Principal {
    /// a credential without the scope → [`Error::Forbidden`].
    pub fn require(&self, scope: Scope) -> Result<(), Error> {
        if self.scopes.contains(scope) {
            Ok(())
        } else {
            Err(Error::Forbidden(scope.as_str()))
        }
    }

    /// Either of two scopes suffices; the first is named when both are missing.
    pub fn require_any(&self, first: Scope, second: Scope) -> Result<(), Error> {
        if self.scopes.contains(first) || self.scopes.contains(second) {
            Ok(())
        } else {
            Err(Error::Forbidden(first.as_str()))
        }
    }
}
