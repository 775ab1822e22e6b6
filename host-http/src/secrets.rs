//! Processor secrets at rest: sealed with AES-256-GCM under the operator's secrets key
//! (`--secrets-key-file`, `CHECKOUT_SECRETS_KEY_FILE`), so that a database dump alone reveals no
//! key. Each sealed value is bound to where it is stored (its provider and field) by the
//! associated data, so a sealed value copied to another provider's row does not open.
//!
//! The key file holds 32 random bytes as base64 (44 characters) or hex (64 characters), e.g.
//! `head -c 32 /dev/urandom | base64 > secrets.key`. A sealed value is
//! `v1:` + base64(12-byte random nonce ‖ ciphertext ‖ 16-byte tag).

use std::fmt;
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Prefix of the one sealing scheme.
const SCHEME: &str = "v1:";

/// The operator's secrets key. Its `Debug` shows only a fingerprint.
#[derive(Clone)]
pub struct SecretsKey {
    key: [u8; 32],
}

impl fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretsKey")
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

/// A secret opened for use. Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret from its text.
    pub fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its last four characters, as listings show it.
    pub fn last4(&self) -> String {
        last4(&self.0)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(…{})", self.last4())
    }
}

/// The last four characters of a key, as listings show it (`…` and nothing for shorter ones).
pub fn last4(text: &str) -> String {
    let count = text.chars().count();
    if count < 8 {
        return String::new();
    }
    text.chars().skip(count - 4).collect()
}

/// Why a key or a sealed value cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// The key file cannot be read.
    #[error("cannot read the secrets key file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The key file does not hold 32 bytes as base64 or hex.
    #[error(
        "the secrets key must be 32 bytes as base64 (44 characters) or hex (64 characters); \
         make one with: head -c 32 /dev/urandom | base64"
    )]
    BadKey,
    /// The sealed value is not of this scheme.
    #[error("a stored secret is not sealed in a known format")]
    BadFormat,
    /// Authentication failed: another key, or a changed or moved value.
    #[error(
        "a stored secret does not open under this secrets key (another key, or a changed value)"
    )]
    WrongKey,
}

impl SecretsKey {
    /// A key from its 32 bytes.
    pub fn from_bytes(key: [u8; 32]) -> Self {
        SecretsKey { key }
    }

    /// A key from its text: 32 bytes as base64 or hex, surrounding whitespace ignored.
    pub fn parse(text: &str) -> Result<Self, SecretsError> {
        let text = text.trim();
        let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..32)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|_| SecretsError::BadKey)?
        } else {
            STANDARD.decode(text).map_err(|_| SecretsError::BadKey)?
        };
        let key: [u8; 32] = bytes.try_into().map_err(|_| SecretsError::BadKey)?;
        Ok(SecretsKey { key })
    }

    /// Reads a key file.
    pub fn from_file(path: &Path) -> Result<Self, SecretsError> {
        let text = std::fs::read_to_string(path).map_err(|source| SecretsError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// A new random key, as a key file holds it (base64).
    pub fn generate() -> String {
        STANDARD.encode(rand::random::<[u8; 32]>())
    }

    /// A short fingerprint of the key (not a secret): the first 8 hex digits of its SHA-256.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(self.key)
            .iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&self.key))
    }

    /// Seals `secret` for the place `context` names (e.g. `provider:<id>:stripe_secret_key`).
    pub fn seal(&self, secret: &Secret, context: &str) -> String {
        let nonce: [u8; 12] = rand::random();
        let sealed = self
            .cipher()
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: secret.expose().as_bytes(),
                    aad: context.as_bytes(),
                },
            )
            .expect("AES-GCM seals any message of a secret's size");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        format!("{SCHEME}{}", STANDARD.encode(bytes))
    }

    /// Opens a value sealed for `context`.
    pub fn open(&self, sealed: &str, context: &str) -> Result<Secret, SecretsError> {
        let encoded = sealed.strip_prefix(SCHEME).ok_or(SecretsError::BadFormat)?;
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|_| SecretsError::BadFormat)?;
        if bytes.len() < 12 + 16 {
            return Err(SecretsError::BadFormat);
        }
        let (nonce, ciphertext) = bytes.split_at(12);
        let plain = self
            .cipher()
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| SecretsError::WrongKey)?;
        String::from_utf8(plain)
            .map(Secret)
            .map_err(|_| SecretsError::BadFormat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SecretsKey {
        SecretsKey::from_bytes([byte; 32])
    }

    #[test]
    fn a_sealed_secret_opens_under_its_key_and_context_only() {
        let secret = Secret::new("sk_test_51abcdefghijklmnop");
        let sealed = key(1).seal(&secret, "provider:p1:secret_key");
        assert!(sealed.starts_with("v1:"));
        assert!(!sealed.contains("sk_test"), "{sealed}");
        assert_eq!(
            key(1).open(&sealed, "provider:p1:secret_key").unwrap(),
            secret
        );
        assert!(matches!(
            key(2).open(&sealed, "provider:p1:secret_key"),
            Err(SecretsError::WrongKey)
        ));
        // Moved to another provider's row or another field: refused.
        assert!(matches!(
            key(1).open(&sealed, "provider:p2:secret_key"),
            Err(SecretsError::WrongKey)
        ));
        assert!(matches!(
            key(1).open("sk_test_plain", "provider:p1:secret_key"),
            Err(SecretsError::BadFormat)
        ));
    }

    #[test]
    fn two_seals_of_one_secret_differ() {
        let secret = Secret::new("whsec_abc");
        assert_ne!(key(1).seal(&secret, "c"), key(1).seal(&secret, "c"));
    }

    #[test]
    fn keys_parse_from_base64_or_hex() {
        let generated = SecretsKey::generate();
        assert_eq!(generated.len(), 44);
        SecretsKey::parse(&format!("{generated}\n")).unwrap();
        let hex = "00".repeat(31) + "ff";
        assert_eq!(SecretsKey::parse(&hex).unwrap().key[31], 0xff);
        for bad in ["", "c2hvcnQ=", &"0".repeat(63), "not base64!"] {
            assert!(matches!(SecretsKey::parse(bad), Err(SecretsError::BadKey)));
        }
    }

    #[test]
    fn neither_key_nor_secret_is_shown() {
        let shown = format!("{:?}", key(7));
        assert!(shown.starts_with("SecretsKey { fingerprint: "), "{shown}");
        let secret = Secret::new("sk_live_0123456789abcd");
        assert_eq!(format!("{secret:?}"), "Secret(…abcd)");
        assert_eq!(last4("pk_test_1234"), "1234");
        assert_eq!(last4("short"), "");
    }
}
