//! The dashboard's optional second factor: one-time codes (TOTP, RFC 6238: six digits, 30
//! seconds, SHA-1, as every authenticator app reads them) with ten single-use recovery codes.
//!
//! - **Setting it up**: a user asks for a secret (160 random bits), scans it (a QR code of its
//!   `otpauth://` URL) or types it into an app, and confirms with a code; only then is the
//!   second factor on, and the recovery codes are shown, once.
//! - **Secrets** are kept only sealed with the operator's secrets key
//!   (`--secrets-key-file`, [`crate::secrets`]), bound to their user; a server without one
//!   does not offer a second factor. **Recovery codes** are kept only as SHA-256 hashes.
//! - **Signing in**: a right password opens a session whose second factor is due; it only
//!   lets the user give a code, for [`CODE_TTL`]. A code counts once (the step of the last code
//!   used is kept, so a code seen over a shoulder cannot be used again), one step of clock
//!   drift either way is allowed, and wrong codes count towards the sign-in throttling of the
//!   account and the address. A right code ends that session and opens a signed-in one, with
//!   a new token.
//! - **Turning it off** takes a current code or a recovery code.

use chrono::{DateTime, Utc};
use rand::RngCore as _;
use subtle::ConstantTimeEq as _;
use totp_rs::{Algorithm, TOTP};

use super::dashboard::{Session, SignedIn};
use super::{Error, Services};
use crate::auth::hash_secret;
use crate::secrets::{Secret, SecretsKey};
use crate::store::dashboard::UserRow;

/// How long a session whose second factor is due waits for the code.
pub const CODE_TTL: chrono::Duration = chrono::Duration::minutes(5);
/// Recovery codes made when the second factor is turned on.
pub const RECOVERY_CODES: usize = 10;
/// The name an authenticator app shows beside the account.
const ISSUER: &str = "Checkout dashboard";
/// Seconds per code.
const STEP_SECONDS: u64 = 30;
/// The letters of recovery codes: no 0/O, 1/I/L to confuse.
const RECOVERY_ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";

/// A second factor being set up: what the user's app needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TotpSetup {
    /// The secret in base32, to type in.
    pub secret_base32: String,
    /// The `otpauth://totp/…` URL, for a QR code.
    pub url: String,
}

/// The security page's state of a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityView {
    /// Whether this server can keep second-factor secrets (it has a secrets key).
    pub available: bool,
    /// Whether the user's second factor is on.
    pub enabled: bool,
    /// Unused recovery codes.
    pub recovery_codes_left: u64,
    /// A setup started and not confirmed yet.
    pub pending: Option<TotpSetup>,
}

/// The outcome of giving a code at sign-in.
#[derive(Debug, Clone)]
pub enum SecondFactor {
    /// Signed in.
    SignedIn(SignedIn),
    /// Wrong, used or expired code (which one is not said).
    Refused,
    /// Too many failures: refused unchecked for this many more minutes.
    Throttled {
        /// Whole minutes, rounded up.
        minutes: i64,
    },
}

/// The outcome of giving a code to turn the second factor off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnedOff {
    /// Turned off.
    Off,
    /// Wrong, used or expired code.
    Refused,
    /// Too many failures: refused unchecked for this many more minutes.
    Throttled {
        /// Whole minutes, rounded up.
        minutes: i64,
    },
}

/// Which code a user gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CodeKind {
    OneTime,
    Recovery,
}

/// What a user's second-factor secret is sealed for (the secrets key's context).
pub(super) fn sealing_context(user_id: &str) -> String {
    format!("dashboard_user:{user_id}:totp")
}

fn totp(secret: Vec<u8>, email: &str) -> TOTP {
    TOTP::new_unchecked(
        Algorithm::SHA1,
        6,
        1,
        STEP_SECONDS,
        secret,
        Some(ISSUER.to_owned()),
        email.to_owned(),
    )
}

/// The time step of `code` if it is the code of the step of `now` or of one step before or
/// after it (clock drift), compared in constant time.
fn matching_step(totp: &TOTP, code: &str, now: DateTime<Utc>) -> Option<i64> {
    let code: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    if code.len() != 6 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let now = u64::try_from(now.timestamp()).ok()?;
    [
        now.checked_sub(STEP_SECONDS),
        Some(now),
        now.checked_add(STEP_SECONDS),
    ]
    .into_iter()
    .flatten()
    .find(|&time| bool::from(totp.generate(time).as_bytes().ct_eq(code.as_bytes())))
    .and_then(|time| i64::try_from(time / STEP_SECONDS).ok())
}

/// A recovery code as typed, upper-cased without spaces and dashes, hashed.
fn recovery_hash(code: &str) -> Option<[u8; 32]> {
    let normal: String = code
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .map(|c| c.to_ascii_uppercase())
        .collect();
    (normal.len() == 12).then(|| hash_secret(&normal))
}

/// New recovery codes (`XXXX-XXXX-XXXX`, 60 random bits each) and their hashes.
fn new_recovery_codes() -> (Vec<String>, Vec<[u8; 32]>) {
    let mut rng = rand::rng();
    (0..RECOVERY_CODES)
        .map(|_| {
            let letters: String = (0..12)
                .map(|_| {
                    let i = usize::try_from(rng.next_u32()).unwrap_or(0) % RECOVERY_ALPHABET.len();
                    char::from(RECOVERY_ALPHABET[i])
                })
                .collect();
            let shown = format!("{}-{}-{}", &letters[..4], &letters[4..8], &letters[8..]);
            let hash = hash_secret(&letters);
            (shown, hash)
        })
        .unzip()
}

impl Services {
    fn secrets_key(&self) -> Option<&SecretsKey> {
        self.processors.secrets.as_ref()
    }

    /// A sealed secret of `user` opened, as the TOTP of its codes.
    fn open_totp(&self, user: &UserRow, sealed: &str) -> Result<TOTP, Error> {
        let key = self
            .secrets_key()
            .ok_or_else(|| Error::Internal("a second factor without a secrets key".to_owned()))?;
        let secret = key
            .open(sealed, &sealing_context(&user.id))
            .map_err(|e| Error::Internal(e.to_string()))?;
        let bytes =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, secret.expose())
                .map_err(|e| Error::Internal(e.to_string()))?;
        Ok(totp(bytes, &user.email))
    }

    async fn user_of(&self, session: &Session) -> Result<UserRow, Error> {
        self.dashboard
            .user_by_email(session.email.clone())
            .await?
            .filter(|user| user.id == session.user_id)
            .ok_or_else(|| Error::Internal(format!("no user {}", session.user_id)))
    }

    /// Whether `code` is a current one-time code of the user (used up now) or one of its unused
    /// recovery codes (used up now).
    async fn check_code(
        &self,
        user: &UserRow,
        code: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<CodeKind>, Error> {
        let Some(sealed) = &user.totp_secret else {
            return Ok(None);
        };
        let digits = code
            .chars()
            .filter(|c| !c.is_whitespace())
            .all(|c| c.is_ascii_digit());
        if digits {
            // A secret that no longer opens (the secrets key was changed) refuses its codes;
            // the recovery codes, which need no key, still work, to turn it off and on again.
            let totp = match self.open_totp(user, sealed) {
                Ok(totp) => totp,
                Err(error) => {
                    tracing::error!(user = %user.id, %error,
                        "a second-factor secret does not open with the secrets key");
                    return Ok(None);
                }
            };
            let Some(step) = matching_step(&totp, code, now) else {
                return Ok(None);
            };
            let fresh = self.dashboard.use_totp_step(user.id.clone(), step).await?;
            return Ok(fresh.then_some(CodeKind::OneTime));
        }
        let Some(hash) = recovery_hash(code) else {
            return Ok(None);
        };
        let used = self
            .dashboard
            .use_recovery_code(user.id.clone(), hash, now)
            .await?;
        Ok(used.then_some(CodeKind::Recovery))
    }

    /// The security page's state of the session's user.
    pub async fn security(&self, session: &Session) -> Result<SecurityView, Error> {
        let user = self.user_of(session).await?;
        let pending = match (&user.totp_pending, user.totp_secret.is_some()) {
            (Some(sealed), false) => {
                let totp = self.open_totp(&user, sealed)?;
                Some(TotpSetup {
                    secret_base32: totp.get_secret_base32(),
                    url: totp.get_url(),
                })
            }
            _ => None,
        };
        Ok(SecurityView {
            available: self.secrets_key().is_some(),
            enabled: user.totp_secret.is_some(),
            recovery_codes_left: self.dashboard.recovery_codes_left(user.id).await?,
            pending,
        })
    }

    /// Starts setting up a second factor for the session's user: a new secret, kept sealed
    /// until a code confirms it. `Error::Invalid` when the server has no secrets key or the
    /// second factor is on already.
    pub async fn start_totp(&self, session: &Session) -> Result<TotpSetup, Error> {
        let key = self.secrets_key().ok_or_else(|| {
            Error::Invalid(vec![
                "this server has no secrets key (--secrets-key-file), so it cannot keep a second factor"
                    .to_owned(),
            ])
        })?;
        let user = self.user_of(session).await?;
        if user.totp_secret.is_some() {
            return Err(Error::Invalid(vec![
                "the second factor is on already".to_owned(),
            ]));
        }
        let mut secret = [0u8; 20];
        rand::rng().fill_bytes(&mut secret);
        let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, secret);
        let sealed = key.seal(&Secret::new(encoded), &sealing_context(&user.id));
        self.dashboard
            .set_totp_pending(user.id.clone(), sealed)
            .await?;
        let totp = totp(secret.to_vec(), &user.email);
        Ok(TotpSetup {
            secret_base32: totp.get_secret_base32(),
            url: totp.get_url(),
        })
    }

    /// Turns the second factor being set up on when `code` is its current code: the recovery
    /// codes, to be shown once; `None` for a wrong code (or no setup under way).
    pub async fn confirm_totp(
        &self,
        session: &Session,
        code: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Vec<String>>, Error> {
        let user = self.user_of(session).await?;
        let (Some(sealed), None) = (&user.totp_pending, &user.totp_secret) else {
            return Ok(None);
        };
        let Some(step) = matching_step(&self.open_totp(&user, sealed)?, code, now) else {
            return Ok(None);
        };
        let (codes, hashes) = new_recovery_codes();
        let audit = session.audit(
            "user.second_factor",
            "turned on two-step sign-in".to_owned(),
            now,
        );
        if !self
            .dashboard
            .enable_totp(user.id.clone(), sealed.clone(), hashes, audit)
            .await?
        {
            return Ok(None);
        }
        // The confirming code counts as used.
        self.dashboard.use_totp_step(user.id, step).await?;
        Ok(Some(codes))
    }

    /// Turns the second factor off when `code` is a current code or a recovery code. The code
    /// is throttled as at sign-in, its failures counted with the sign-in's (the account's and
    /// `client`'s): a session alone (a cookie taken) cannot try the million codes.
    pub async fn disable_totp(
        &self,
        session: &Session,
        code: &str,
        client: &str,
        now: DateTime<Utc>,
    ) -> Result<TurnedOff, Error> {
        let account_key = super::dashboard::account_key(&session.email);
        let address_key = format!("address:{client}");
        if let Some(minutes) = self.hold_attempt(&account_key, &address_key, now).await? {
            return Ok(TurnedOff::Throttled { minutes });
        }
        let user = self.user_of(session).await?;
        if self.check_code(&user, code, now).await?.is_none() {
            // The attempt held is the failure recorded.
            return Ok(TurnedOff::Refused);
        }
        self.dashboard
            .forgive_sign_in_attempt(vec![account_key, address_key], now)
            .await?;
        let audit = session.audit(
            "user.second_factor",
            "turned off two-step sign-in".to_owned(),
            now,
        );
        self.dashboard.disable_totp(user.id, audit).await?;
        Ok(TurnedOff::Off)
    }

    /// The session of a cookie's token whose second factor is due, if it is live.
    pub async fn pending_session(
        &self,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Session>, Error> {
        self.live_session(token, now, true).await
    }

    /// Completes a sign-in with a one-time or recovery code from `client`: a new, signed-in
    /// session replaces the pending one.
    pub async fn second_factor(
        &self,
        pending: &Session,
        code: &str,
        client: &str,
        now: DateTime<Utc>,
    ) -> Result<SecondFactor, Error> {
        let account_key = super::dashboard::account_key(&pending.email);
        let address_key = format!("address:{client}");
        if let Some(minutes) = self.hold_attempt(&account_key, &address_key, now).await? {
            return Ok(SecondFactor::Throttled { minutes });
        }
        let user = self.user_of(pending).await?;
        let Some(kind) = self.check_code(&user, code, now).await? else {
            // The attempt held is the failure recorded.
            return Ok(SecondFactor::Refused);
        };
        self.signed_in_from(account_key, address_key, now).await?;
        let what = match kind {
            CodeKind::OneTime => "signed in with a one-time code",
            CodeKind::Recovery => "signed in with a recovery code",
        };
        let signed_in = self.open_session(&user, Some(what), now).await?;
        self.dashboard.delete_session(pending.token_hash).await?;
        Ok(SecondFactor::SignedIn(signed_in))
    }
}

/// A fresh one-time code of a base32 secret at `now`, as an authenticator app shows it (for
/// tests and for the command line's checks).
pub fn code_at(secret_base32: &str, email: &str, now: DateTime<Utc>) -> Option<String> {
    let bytes = totp_rs::Secret::Encoded(secret_base32.to_owned())
        .to_bytes()
        .ok()?;
    Some(totp(bytes, email).generate(u64::try_from(now.timestamp()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_matches_its_step_and_one_step_of_drift_only() {
        let secret = vec![7u8; 20];
        let totp = totp(secret, "ada@example.com");
        let now = DateTime::from_timestamp(1_800_000_015, 0).expect("instant");
        let at = |seconds: i64| {
            totp.generate(u64::try_from(now.timestamp() + seconds).expect("positive"))
        };
        let step = now.timestamp() / 30;
        assert_eq!(matching_step(&totp, &at(0), now), Some(step));
        assert_eq!(matching_step(&totp, &at(-30), now), Some(step - 1));
        assert_eq!(matching_step(&totp, &at(30), now), Some(step + 1));
        assert_eq!(matching_step(&totp, &at(-90), now), None);
        // Spaces as apps show them are fine; anything but six digits is not a code.
        let code = at(0);
        assert_eq!(
            matching_step(&totp, &format!("{} {}", &code[..3], &code[3..]), now),
            Some(step)
        );
        assert_eq!(matching_step(&totp, "12345", now), None);
        assert_eq!(matching_step(&totp, "abcdef", now), None);
    }

    #[test]
    fn recovery_codes_are_distinct_and_read_back_however_typed() {
        let (codes, hashes) = new_recovery_codes();
        assert_eq!(codes.len(), RECOVERY_CODES);
        let distinct: std::collections::BTreeSet<_> = hashes.iter().collect();
        assert_eq!(distinct.len(), RECOVERY_CODES);
        for (code, hash) in codes.iter().zip(&hashes) {
            assert_eq!(code.len(), 14, "{code}");
            assert_eq!(recovery_hash(code), Some(*hash));
            assert_eq!(
                recovery_hash(&code.to_lowercase().replace('-', " ")),
                Some(*hash)
            );
        }
        assert_eq!(recovery_hash("short"), None);
    }

    #[test]
    fn the_url_names_the_issuer_and_the_account() {
        let totp = totp(vec![1u8; 20], "ada@example.com");
        let url = totp.get_url();
        assert!(
            url.starts_with("otpauth://totp/Checkout%20dashboard:ada%40example.com?"),
            "{url}"
        );
        assert!(url.contains(&format!("secret={}", totp.get_secret_base32())));
        let now = DateTime::from_timestamp(1_800_000_000, 0).expect("instant");
        assert_eq!(
            code_at(&totp.get_secret_base32(), "ada@example.com", now),
            Some(totp.generate(1_800_000_000))
        );
    }
}
