//! Credentials: generation of widget IDs and backend secrets, their hashing, Basic
//! authentication in constant time, and scopes.
//!
//! Secrets are 256 random bits, so a plain SHA-256 is enough to store them: a slow password
//! KDF (argon2, bcrypt) exists to slow down guessing of low-entropy human passwords, and no
//! amount of guessing finds a 256-bit random value, whereas a slow KDF on every request would
//! cost milliseconds of CPU each and invite denial of service.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A permission a credential may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// `GET /status/{id}`.
    TransactionsRead,
    /// `POST /initialize`, `POST /transactions`, `PUT /{id}` (and the sandbox pay route).
    TransactionsWrite,
    /// The `PATCH /cancel` routes.
    RefundsWrite,
}

impl Scope {
    /// Every scope; a new credential gets all of them unless told otherwise.
    pub const ALL: [Scope; 3] = [
        Scope::TransactionsRead,
        Scope::TransactionsWrite,
        Scope::RefundsWrite,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::TransactionsRead => "transactions:read",
            Scope::TransactionsWrite => "transactions:write",
            Scope::RefundsWrite => "refunds:write",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// A set of scopes, written comma-separated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes {
    read: bool,
    write: bool,
    refunds: bool,
}

/// A scope list named an unknown scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope {0:?}; known scopes: transactions:read, transactions:write, refunds:write")]
pub struct UnknownScope(pub String);

impl Scopes {
    /// Every scope.
    pub fn all() -> Scopes {
        Scopes {
            read: true,
            write: true,
            refunds: true,
        }
    }

    /// Parses `transactions:read,refunds:write` (spaces and empty entries ignored).
    pub fn parse(list: &str) -> Result<Scopes, UnknownScope> {
        let mut scopes = Scopes::default();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match Scope::parse(name) {
                Some(scope) => scopes.insert(scope),
                None => return Err(UnknownScope(name.to_owned())),
            }
        }
        Ok(scopes)
    }

    /// Adds a scope.
    pub fn insert(&mut self, scope: Scope) {
        match scope {
            Scope::TransactionsRead => self.read = true,
            Scope::TransactionsWrite => self.write = true,
            Scope::RefundsWrite => self.refunds = true,
        }
    }

    /// Whether the set holds `scope`.
    pub fn contains(self, scope: Scope) -> bool {
        match scope {
            Scope::TransactionsRead => self.read,
            Scope::TransactionsWrite => self.write,
            Scope::RefundsWrite => self.refunds,
        }
    }
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Scope::ALL
            .into_iter()
            .filter(|s| self.contains(*s))
            .map(Scope::as_str)
            .collect();
        f.write_str(&names.join(","))
    }
}

/// A freshly made credential; the secret exists in clear only here, to be shown once.
#[derive(Clone, PartialEq, Eq)]
pub struct NewCredential {
    /// Public widget ID.
    pub widget_id: String,
    /// Backend secret: 256 random bits, URL-safe base64.
    pub secret: String,
    /// SHA-256 of the secret, the only form stored.
    pub secret_hash: [u8; 32],
}

impl fmt::Debug for NewCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret, even in a debug dump.
        f.debug_struct("NewCredential")
            .field("widget_id", &self.widget_id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Makes a new widget ID (`wid_` + 128 random bits) and backend secret (256 random bits).
pub fn new_credential() -> NewCredential {
    let mut rng = rand::rng();
    let mut widget = [0u8; 16];
    rng.fill_bytes(&mut widget);
    let mut secret = [0u8; 32];
    rng.fill_bytes(&mut secret);
    let secret = URL_SAFE_NO_PAD.encode(secret);
    NewCredential {
        widget_id: format!("wid_{}", URL_SAFE_NO_PAD.encode(widget)),
        secret_hash: hash_secret(&secret),
        secret,
    }
}

/// SHA-256 of a secret's text.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The widget ID and secret of a Basic `Authorization` header: the decoded text, kept in one
/// allocation and split at its first colon.
#[derive(PartialEq, Eq)]
pub struct BasicCredentials {
    /// `widget:secret`, as decoded from the header.
    text: String,
    /// The byte index of the first `:` in `text`.
    colon: usize,
}

impl BasicCredentials {
    /// User name: the widget ID (never empty).
    pub fn widget_id(&self) -> &str {
        &self.text[..self.colon]
    }

    /// Password: the backend secret (what follows the first colon; it may hold more).
    pub fn secret(&self) -> &str {
        &self.text[self.colon + 1..]
    }
}

impl fmt::Debug for BasicCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicCredentials")
            .field("widget_id", &self.widget_id())
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Parses `Basic base64(widget:secret)`; `None` when missing or malformed.
pub fn parse_basic(header: Option<&[u8]>) -> Option<BasicCredentials> {
    let value = std::str::from_utf8(header?).ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let text = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let colon = text.find(':')?;
    if colon == 0 {
        return None;
    }
    Some(BasicCredentials { text, colon })
}

/// Hash compared against when the widget is unknown, so that an unknown widget costs the same
/// hashing and comparison as a wrong secret. No secret hashes to all zeros in practice.
const DUMMY_HASH: [u8; 32] = [0u8; 32];

/// Whether a presented secret hashes to `expected`, compared in constant time; with no
/// expected hash (an unknown widget id) the secret is hashed and compared all the same, and
/// the answer is `false`.
pub fn secret_matches(presented_secret: &str, expected: Option<&[u8; 32]>) -> bool {
    let presented = hash_secret(presented_secret);
    let matches: bool = presented.ct_eq(expected.unwrap_or(&DUMMY_HASH)).into();
    matches && expected.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_carry_at_least_128_random_bits_r_7_1() {
        let a = new_credential();
        let b = new_credential();
        assert_ne!(a.secret, b.secret);
        assert_ne!(a.widget_id, b.widget_id);
        assert_eq!(URL_SAFE_NO_PAD.decode(&a.secret).unwrap().len(), 32);
        assert_eq!(a.secret_hash, hash_secret(&a.secret));
        assert!(!format!("{a:?}").contains(&a.secret));
    }

    #[test]
    fn basic_header_parsing_r_7_2() {
        let header = format!("Basic {}", STANDARD.encode("wid_x:s3cr:et"));
        let parsed = parse_basic(Some(header.as_bytes())).unwrap();
        assert_eq!(parsed.widget_id(), "wid_x");
        assert_eq!(parsed.secret(), "s3cr:et");
        assert!(!format!("{parsed:?}").contains("s3cr"));
        let empty_secret = format!("basic  {} ", STANDARD.encode("wid_y:"));
        let parsed = parse_basic(Some(empty_secret.as_bytes())).unwrap();
        assert_eq!((parsed.widget_id(), parsed.secret()), ("wid_y", ""));
        let no_widget = format!("Basic {}", STANDARD.encode(":secret"));
        assert!(parse_basic(Some(no_widget.as_bytes())).is_none());
        assert!(parse_basic(None).is_none());
        assert!(parse_basic(Some(b"Bearer abc")).is_none());
        assert!(parse_basic(Some(b"Basic !!!")).is_none());
        let no_colon = format!("Basic {}", STANDARD.encode("nocolon"));
        assert!(parse_basic(Some(no_colon.as_bytes())).is_none());
    }

    #[test]
    fn verify_accepts_only_the_right_secret() {
        let credential = new_credential();
        assert!(secret_matches(
            &credential.secret,
            Some(&credential.secret_hash)
        ));
        assert!(!secret_matches("wrong", Some(&credential.secret_hash)));
        assert!(!secret_matches(&credential.secret, None));
    }

    #[test]
    fn scopes_round_trip_r_7_3() {
        let scopes = Scopes::parse("transactions:read, refunds:write").unwrap();
        assert!(scopes.contains(Scope::TransactionsRead));
        assert!(!scopes.contains(Scope::TransactionsWrite));
        assert_eq!(scopes.to_string(), "transactions:read,refunds:write");
        assert!(Scopes::parse("transactions:delete").is_err());
    }
}
