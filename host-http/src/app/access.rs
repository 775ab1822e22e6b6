//! Who may do what: authentication of presented credentials, scopes,
//! and the ownership of transactions.

use std::sync::Arc;

use engine::api::ProviderSettings;

use super::{Error, Principal, Resource, Services};
use crate::auth::{self, BasicCredentials, Scope, Scopes};
use crate::store::TransactionRecord;

impl Services {
    /// Checks presented Basic credentials against the store. The credential is read on every
    /// request, so that credentials added or revoked on the same database apply at once.
    pub async fn authenticate(
        &self,
        presented: Option<BasicCredentials>,
    ) -> Result<Principal, Error> {
        let presented = presented.ok_or(Error::Unauthenticated)?;
        let stored = self.store.credential(presented.widget_id.clone()).await?;
        let credential = auth::verify(&presented.secret, stored).ok_or(Error::Unauthenticated)?;
        // Scopes were checked when stored; an unreadable list grants nothing.
        let scopes = Scopes::parse(&credential.scopes).unwrap_or_default();
        let in_flight = Arc::new(self.in_flight.admit(&credential.provider_id)?);
        Ok(Principal {
            provider_id: credential.provider_id,
            scopes,
            in_flight,
        })
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
    pub(crate) async fn provider_settings(
        &self,
        principal: &Principal,
    ) -> Result<ProviderSettings, Error> {
        let provider = self
            .store
            .provider(principal.provider_id.clone())
            .await?
            .ok_or_else(|| Error::Internal("credential names a missing provider".to_owned()))?;
        Ok(provider.settings())
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
