//! The capability tokens of payment pages and their forms: a page's link names its transaction
//! under a MAC of the database's link key, and each rendered form carries an anti-forgery token
//! that expires.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

/// The name under which the link key is kept in the database (one per database, shared by every
/// instance).
pub const LINK_KEY_NAME: &str = "payment_link";

/// How long the anti-forgery token of a rendered payment form stays valid.
pub const FORM_TOKEN_TTL_SECS: i64 = 2 * 3600;

/// The key the payment-page tokens are derived from (256 random bits, made once per database).
#[derive(Clone)]
pub struct LinkKey([u8; 32]);

impl fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LinkKey(…)")
    }
}

impl LinkKey {
    /// A key from its 32 bytes.
    pub fn new(bytes: [u8; 32]) -> LinkKey {
        LinkKey(bytes)
    }

    /// 32 fresh random bytes, the candidate stored when a database has no key yet.
    pub fn random_bytes() -> [u8; 32] {
        rand::random()
    }

    fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        for part in parts {
            mac.update(part);
            // A separator that cannot occur inside a part keeps the parts apart.
            mac.update(&[0]);
        }
        mac.finalize().into_bytes().into()
    }

    /// The capability token of a transaction's payment page: 32 bytes written base64url (43
    /// characters) — the transaction id's 16 bytes, then the first 16 bytes (128 bits) of
    /// HMAC-SHA256 of the id under the link key. Nothing of it is stored: the page finds its
    /// transaction by the id the token carries, and [`LinkKey::page_transaction`] checks the
    /// MAC; the token is derived again when the page's URL is shown.
    pub fn page_token(&self, transaction_id: Uuid) -> String {
        let mut token = [0u8; PAGE_TOKEN_BYTES];
        token[..16].copy_from_slice(transaction_id.as_bytes());
        token[16..].copy_from_slice(&self.page_mac(transaction_id));
        URL_SAFE_NO_PAD.encode(token)
    }

    /// The transaction a page token of [`LinkKey::page_token`] names, if its MAC is this key's
    /// (compared in constant time); `None` for anything else, tokens of the first form
    /// ([`LinkKey::legacy_page_token`]) included.
    pub fn page_transaction(&self, token: &str) -> Option<Uuid> {
        let mut bytes = [0u8; PAGE_TOKEN_BYTES];
        match URL_SAFE_NO_PAD.decode_slice(token, &mut bytes) {
            Ok(PAGE_TOKEN_BYTES) => {}
            _ => return None,
        }
        let (id, mac) = bytes.split_at(16);
        let id = Uuid::from_slice(id).ok()?;
        bool::from(self.page_mac(id).ct_eq(mac)).then_some(id)
    }

    /// What a page token is, decided without the store: a token of today's form whose MAC is
    /// this key's names its transaction; a token that may be of the first form
    /// ([`LinkKey::legacy_page_token`], found only by its stored hash) is for the store to look
    /// up; anything else — every token of today's form whose MAC fails among them — names
    /// nothing, and no store is asked about it.
    ///
    /// The two forms are both 32 bytes in base64url; only their first 16 bytes tell them
    /// apart. Today's form starts with a transaction id, which the service makes as a UUID
    /// version 7: version 7, the RFC 9562 variant, and a creation time in milliseconds
    /// that is neither before [`V7_IDS_SINCE_MS`] nor after a day past `now_ms`. The first form
    /// is 32 bytes of HMAC output, which looks so only by chance: 1 in 64 for version and
    /// variant, times the window's share of the 48-bit range of milliseconds (1 in 8,900 per
    /// year), so about one first-form link in 300,000 while they last (at most 366 days after
    /// their transaction's creation); such a link stops working, as it could only be told
    /// from a forgery by asking the store.
    pub fn read_page_token(&self, token: &str, now_ms: i64) -> PageToken {
        let mut bytes = [0u8; PAGE_TOKEN_BYTES];
        // 43 base64url characters, nothing else (`decode_slice` also takes padding).
        if token.len() != PAGE_TOKEN_CHARS
            || !token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            || URL_SAFE_NO_PAD.decode_slice(token, &mut bytes).ok() != Some(PAGE_TOKEN_BYTES)
        {
            return PageToken::Nothing;
        }
        if let Some(id) = self.page_transaction(token) {
            // Checked first: a transaction of any id (also one made before ids were v7) keeps
            // its page.
            return PageToken::Names(id);
        }
        match Uuid::from_slice(&bytes[..16]) {
            Ok(id) if is_service_v7_id(id, now_ms) => PageToken::Nothing,
            _ => PageToken::MaybeFirstForm,
        }
    }

    fn page_mac(&self, transaction_id: Uuid) -> [u8; 16] {
        let id = transaction_id.hyphenated().to_string();
        let mac = self.mac(&[b"payment-page-v2", id.as_bytes()]);
        let mut truncated = [0u8; 16];
        truncated.copy_from_slice(&mac[..16]);
        truncated
    }

    /// The token of the first form, made for transactions created before tokens carried their
    /// id: 256 bits, HMAC-SHA256 of the transaction id. Those transactions have its SHA-256
    /// stored ([`token_hash`]), and the links already sent keep working through it.
    pub fn legacy_page_token(&self, transaction_id: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(&[b"payment-page", transaction_id.as_bytes()]))
    }

    /// The anti-forgery token of a form rendered at `issued_at` (Unix seconds) for one
    /// transaction's page: `issued.mac`.
    pub fn form_token(&self, transaction_id: &str, issued_at: i64) -> String {
        let issued = issued_at.to_string();
        let mac = self.mac(&[
            b"payment-form",
            transaction_id.as_bytes(),
            issued.as_bytes(),
        ]);
        format!("{issued}.{}", URL_SAFE_NO_PAD.encode(mac))
    }

    /// Whether `token` was made by [`LinkKey::form_token`] for this transaction, no more than
    /// [`FORM_TOKEN_TTL_SECS`] before `now` (and not after it). Compared in constant time.
    pub fn check_form_token(&self, transaction_id: &str, token: &str, now: i64) -> bool {
        let Some((issued, _)) = token.split_once('.') else {
            return false;
        };
        let Ok(issued_at) = issued.parse::<i64>() else {
            return false;
        };
        if issued_at > now || now - issued_at > FORM_TOKEN_TTL_SECS {
            return false;
        }
        let expected = self.form_token(transaction_id, issued_at);
        expected.as_bytes().ct_eq(token.as_bytes()).into()
    }
}

/// Bytes of a page token: a transaction id (16) and a truncated MAC (16).
const PAGE_TOKEN_BYTES: usize = 32;
/// Characters of a page token (32 bytes in base64url without padding), of either form.
const PAGE_TOKEN_CHARS: usize = 43;

/// No transaction id of this service is older than this (Unix milliseconds, 2026-01-01T00:00Z):
/// the service was written after it.
pub const V7_IDS_SINCE_MS: i64 = 1_767_225_600_000;

/// What [`LinkKey::read_page_token`] makes of a page token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageToken {
    /// A token of today's form with a valid MAC: the page of this transaction.
    Names(Uuid),
    /// Not of today's form, but possibly of the first form: only the store can tell.
    MaybeFirstForm,
    /// Names no page; the store is not asked.
    Nothing,
}

/// Whether `id` is a UUID the service could have made for a transaction: version 7, the RFC
/// 9562 variant, and a creation time from [`V7_IDS_SINCE_MS`] to one day after `now_ms` (the
/// clocks of several instances may differ a little).
fn is_service_v7_id(id: Uuid, now_ms: i64) -> bool {
    const DAY_MS: i64 = 24 * 3600 * 1000;
    if id.get_version_num() != 7 || id.get_variant() != uuid::Variant::RFC4122 {
        return false;
    }
    let bytes = id.as_bytes();
    let millis = bytes[..6]
        .iter()
        .fold(0i64, |millis, b| (millis << 8) | i64::from(*b));
    (V7_IDS_SINCE_MS..=now_ms.saturating_add(DAY_MS)).contains(&millis)
}

/// SHA-256 of a page token of the first form, as stored and looked up.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_token_altered_anywhere_names_nothing() {
        let key = LinkKey::new([7; 32]);
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let token = key.page_token(a);
        for at in 0..token.len() {
            for replacement in ['A', 'g', '0', '-', '_'] {
                let mut altered = token.clone();
                altered.replace_range(at..=at, &replacement.to_string());
                if altered != token {
                    assert_eq!(key.page_transaction(&altered), None, "{altered}");
                }
            }
        }
        // Another transaction's id in front of this one's MAC.
        let (own, other) = (key.page_token(a), key.page_token(b));
        let mut spliced = URL_SAFE_NO_PAD.decode(&own).unwrap();
        spliced[..16].copy_from_slice(&URL_SAFE_NO_PAD.decode(&other).unwrap()[..16]);
        assert_eq!(key.page_transaction(&URL_SAFE_NO_PAD.encode(spliced)), None);
        for bad in ["", "short", &format!("{token}A"), &token[..42]] {
            assert_eq!(key.page_transaction(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_bad_mac_of_todays_form_names_nothing_without_asking_the_store() {
        let key = LinkKey::new([7; 32]);
        let now = chrono::Utc::now().timestamp_millis();
        let id = Uuid::now_v7();
        let token = key.page_token(id);
        assert_eq!(key.read_page_token(&token, now), PageToken::Names(id));
        // Characters 22.. carry only MAC bits: any change there is a forgery of today's form.
        for at in 22..token.len() {
            for replacement in ['A', 'g', '0', '-', '_'] {
                let mut altered = token.clone();
                altered.replace_range(at..=at, &replacement.to_string());
                if altered != token && key.page_transaction(&altered).is_none() {
                    assert_eq!(
                        key.read_page_token(&altered, now),
                        PageToken::Nothing,
                        "{altered}"
                    );
                }
            }
        }
        // A plausible id with a MAC of random bytes, and another key's token.
        for _ in 0..1000 {
            let mut forged = [0u8; PAGE_TOKEN_BYTES];
            forged[..16].copy_from_slice(Uuid::now_v7().as_bytes());
            forged[16..].copy_from_slice(&rand::random::<[u8; 16]>());
            let forged = URL_SAFE_NO_PAD.encode(forged);
            assert_eq!(key.read_page_token(&forged, now), PageToken::Nothing);
        }
        let other = LinkKey::new([8; 32]).page_token(id);
        assert_eq!(key.read_page_token(&other, now), PageToken::Nothing);
        // Not 43 base64url characters: nothing, whatever the form.
        for bad in [
            "",
            "short",
            &token[..42],
            &format!("{token}A"),
            &format!("{}=", &token[..42]),
            &format!("{}+", &token[..42]),
        ] {
            assert_eq!(key.read_page_token(bad, now), PageToken::Nothing, "{bad}");
        }
    }

    #[test]
    fn first_form_tokens_and_old_ids_are_still_read() {
        let key = LinkKey::new([7; 32]);
        let now = chrono::Utc::now().timestamp_millis();
        // First-form tokens of fixed ids (deterministic): HMAC output, for the store to find.
        for n in 0..200u128 {
            let id = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + n);
            let legacy = key.legacy_page_token(&id.hyphenated().to_string());
            assert_eq!(
                key.read_page_token(&legacy, now),
                PageToken::MaybeFirstForm,
                "{legacy}"
            );
        }
        // Today's form for an id that is not a v7 of this service (a v4, a v7 from before
        // 2026): the MAC decides.
        for id in [
            Uuid::new_v4(),
            Uuid::from_u128(0x0180_0000_0000_7000_8000_0000_0000_0001),
        ] {
            assert_eq!(
                key.read_page_token(&key.page_token(id), now),
                PageToken::Names(id)
            );
        }
        // A v7 id made a day ahead of this instance's clock is still plausible; a week is not.
        let ahead = |ms: i64| {
            let mut bytes = *Uuid::now_v7().as_bytes();
            bytes[..6].copy_from_slice(&(now + ms).to_be_bytes()[2..]);
            Uuid::from_bytes(bytes)
        };
        assert!(is_service_v7_id(ahead(23 * 3600 * 1000), now));
        assert!(!is_service_v7_id(ahead(7 * 24 * 3600 * 1000), now));
        assert!(!is_service_v7_id(Uuid::new_v4(), now));
    }

    #[test]
    fn tokens_are_per_transaction_and_forms_expire() {
        let key = LinkKey::new([7; 32]);
        let other = LinkKey::new([8; 32]);
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        assert_ne!(key.page_token(a), key.page_token(b));
        assert_ne!(key.page_token(a), other.page_token(a));
        // 256 bits in base64url: the id and 128 bits of MAC.
        assert_eq!(key.page_token(a).len(), 43);
        assert_eq!(key.page_transaction(&key.page_token(a)), Some(a));
        assert_eq!(key.page_transaction(&key.page_token(b)), Some(b));
        // Another key's token, or a first-form token, names nothing.
        assert_eq!(key.page_transaction(&other.page_token(a)), None);
        let legacy = key.legacy_page_token(&a.hyphenated().to_string());
        assert_eq!(legacy.len(), 43);
        assert_eq!(key.page_transaction(&legacy), None);
        let form = key.form_token("a", 1000);
        assert!(key.check_form_token("a", &form, 1000 + FORM_TOKEN_TTL_SECS));
        assert!(!key.check_form_token("a", &form, 1001 + FORM_TOKEN_TTL_SECS));
        assert!(!key.check_form_token("a", &form, 999));
        assert!(!key.check_form_token("b", &form, 1000));
        assert!(!other.check_form_token("a", &form, 1000));
        assert!(!key.check_form_token("a", "1000.forged", 1000));
    }
}
