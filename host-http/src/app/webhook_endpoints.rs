//! The rules of a provider's webhook endpoint: which addresses it may have (applied when the
//! endpoint is set and again at every delivery, where a host name is resolved and each address
//! it resolves to is checked), and its signing secret and the rotation's overlap (Standard
//! Webhooks `whsec_` secrets).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::secrets::{Secret, SecretsKey};

/// Prefix of a webhook secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// How long the previous secret still signs after a rotation.
pub const ROTATION_OVERLAP: chrono::Duration = chrono::Duration::hours(24);

/// A fresh secret: `whsec_` and 32 random bytes in base64.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// The associated data a webhook secret is sealed under (`crate::secrets`): its endpoint, whose
/// id is unique, so that a sealed secret copied to another endpoint's row does not open. The
/// current and the previous secret share it, since a rotation moves one to the other.
fn sealing_context(endpoint_id: &str) -> String {
    format!("webhook:{endpoint_id}:secret")
}

/// A secret as it is stored: sealed under the secrets key when the server has one
/// (`--secrets-key-file`), so that a database dump alone signs nothing; as issued otherwise
/// (`DECISIONS-events.md`).
pub fn stored_secret(key: Option<&SecretsKey>, endpoint_id: &str, secret: &str) -> String {
    match key {
        Some(key) => key.seal(&Secret::new(secret), &sealing_context(endpoint_id)),
        None => secret.to_owned(),
    }
}

/// Whether a stored secret is kept as issued (not sealed).
pub fn is_plain(stored: &str) -> bool {
    stored.starts_with(SECRET_PREFIX)
}

/// A stored secret opened for signing: one kept as issued is used as it is; a sealed one needs
/// the key it was sealed under. The error says why it cannot sign.
pub fn open_secret(
    key: Option<&SecretsKey>,
    endpoint_id: &str,
    stored: &str,
) -> Result<String, String> {
    if is_plain(stored) {
        return Ok(stored.to_owned());
    }
    let key = key.ok_or_else(|| {
        format!(
            "the signing secret of {endpoint_id} is sealed and this server has no secrets key \
             (--secrets-key-file)"
        )
    })?;
    key.open(stored, &sealing_context(endpoint_id))
        .map(|secret| secret.expose().to_owned())
        .map_err(|e| format!("the signing secret of {endpoint_id} does not open: {e}"))
}

/// A stored secret sealed under `new`: opened with `old` first when sealed (an error when it
/// does not open), sealed as it is when kept as issued.
pub fn reseal_secret(
    old: Option<&SecretsKey>,
    new: &SecretsKey,
    endpoint_id: &str,
    stored: &str,
) -> Result<String, String> {
    let secret = open_secret(old, endpoint_id, stored)?;
    Ok(stored_secret(Some(new), endpoint_id, &secret))
}

/// The IPv4 address an IPv6 address carries, where the IPv6 form stands for it: IPv4-mapped
/// `::ffff:a.b.c.d` (RFC 4291), IPv4-compatible `::a.b.c.d` (deprecated, RFC 4291; `::` and `::1`
/// excepted, they are IPv6's own unspecified and loopback addresses), IPv4-translated
/// `::ffff:0:a.b.c.d` (SIIT, RFC 7915) and the well-known NAT64 prefix `64:ff9b::/96` (RFC 6052).
/// A connection to such an address reaches the IPv4 host (through the dual stack or a
/// translator), so it is judged as that host.
fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let [a, b, c, d, e, f, g, h] = v6.segments();
    let carried = Ipv4Addr::from((u32::from(g) << 16) | u32::from(h));
    match [a, b, c, d, e, f] {
        [0, 0, 0, 0, 0, 0xffff] | [0, 0, 0, 0, 0xffff, 0] | [0x64, 0xff9b, 0, 0, 0, 0] => {
            Some(carried)
        }
        [0, 0, 0, 0, 0, 0] if !v6.is_loopback() && !v6.is_unspecified() => Some(carried),
        _ => None,
    }
}

/// The local-use NAT64 prefix `64:ff9b:1::/48` (RFC 8215). Where the IPv4 address sits in it
/// depends on the prefix length the local translator uses (/48 to /96, RFC 6052 §2.2), which
/// is not known here, so its addresses are judged as internal whatever they carry.
fn is_local_nat64(v6: Ipv6Addr) -> bool {
    let [a, b, c, ..] = v6.segments();
    [a, b, c] == [0x64, 0xff9b, 1]
}

/// Whether an address is internal: loopback, private, link-local, shared (CGNAT),
/// unspecified, multicast, documentation or unique-local. An IPv6 address that carries an IPv4
/// one (`embedded_ipv4`) is internal when that IPv4 address is; the local-use NAT64 prefix
/// always is.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || (a == 100 && (64..128).contains(&b))
                || a == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_ipv4(v6) {
                return is_internal(IpAddr::V4(v4));
            }
            let [first, second, ..] = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first, second) == (0x2001, 0x0db8)
                || is_local_nat64(v6)
        }
    }
}

/// Whether an address is a loopback or private one, the only kind an `http://` endpoint may
/// have (with `--allow-private-webhooks`): loopback, the private ranges of RFC 1918, the shared
/// range of RFC 6598 (CGNAT, used by private overlays) and IPv6 unique-local addresses. Not
/// link-local (cloud metadata services live there), multicast, broadcast, documentation or
/// unspecified addresses: those are internal but no private host. An IPv6 address that carries
/// an IPv4 one (`embedded_ipv4`) is judged as that address; one of the local-use NAT64
/// prefix, whose IPv4 address is not known here, is no private host.
pub fn is_private_host(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback() || v4.is_private() || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_ipv4(v6) {
                return is_private_host(IpAddr::V4(v4));
            }
            v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00
        }
    }
}

/// The check of `WebhookClient::check_url` (the delivery worker's) with `allow_private` as `--allow-private-webhooks`
/// says: the scheme, and the address when the host is an IP literal. A host name passes here;
/// its addresses are checked when it is resolved, at each connection.
pub fn check_url(url: &str, allow_private: bool) -> Result<(hyper::Uri, Reach), String> {
    let uri: hyper::Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
    let host = uri.host().ok_or("URL without a host")?;
    let reach = match uri.scheme_str() {
        Some("https") if allow_private => Reach::Any,
        Some("https") => Reach::Public,
        Some("http") if allow_private => Reach::PrivateOnly,
        Some("http") => {
            return Err("http:// endpoints need --allow-private-webhooks".to_owned());
        }
        _ => return Err("URL scheme must be https".to_owned()),
    };
    if let Some(ip) = ip_literal(host) {
        if !reach.allows(ip) {
            return Err(match reach {
                Reach::PrivateOnly => {
                    format!("{ip} is not a loopback or private address: http:// endpoints must be")
                }
                _ => format!("{ip} is an internal address"),
            });
        }
    }
    Ok((uri, reach))
}

/// The address a URL's host names literally (`127.0.0.1`, `[::1]`), if it is one.
pub fn ip_literal(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok()
}

/// Which addresses a delivery may connect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Public addresses only (`https://` without `--allow-private-webhooks`).
    Public,
    /// Any address (`https://` with `--allow-private-webhooks`).
    Any,
    /// Loopback and private addresses only ([`is_private_host`]; `http://` with
    /// `--allow-private-webhooks`): plain HTTP never leaves the private network.
    PrivateOnly,
}

impl Reach {
    /// Whether an address may be connected to.
    pub fn allows(self, ip: IpAddr) -> bool {
        match self {
            Reach::Public => !is_internal(ip),
            Reach::Any => true,
            Reach::PrivateOnly => is_private_host(ip),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret is stored sealed when the server has a secrets key, bound to its endpoint; kept
    /// as issued otherwise; and opens for signing only under its key and endpoint.
    #[test]
    fn secrets_are_sealed_under_the_key_bound_to_their_endpoint() {
        let key = SecretsKey::from_bytes([4; 32]);
        let other = SecretsKey::from_bytes([5; 32]);
        let secret = new_secret();
        let sealed = stored_secret(Some(&key), "ep_1", &secret);
        assert!(sealed.starts_with("v1:"), "{sealed}");
        assert!(!sealed.contains(&secret[SECRET_PREFIX.len()..]));
        assert!(!is_plain(&sealed));
        assert_eq!(open_secret(Some(&key), "ep_1", &sealed), Ok(secret.clone()));
        for refused in [
            open_secret(None, "ep_1", &sealed),
            open_secret(Some(&other), "ep_1", &sealed),
            open_secret(Some(&key), "ep_2", &sealed),
        ] {
            assert!(refused.unwrap_err().contains("ep_"));
        }
        // Without a key it is kept as issued, and used as it is with or without one.
        let plain = stored_secret(None, "ep_1", &secret);
        assert_eq!(plain, secret);
        assert!(is_plain(&plain));
        assert_eq!(open_secret(None, "ep_1", &plain), Ok(secret.clone()));
        assert_eq!(open_secret(Some(&key), "ep_1", &plain), Ok(secret.clone()));
        // Resealing under a new key: from sealed, and from kept as issued.
        for stored in [&sealed, &plain] {
            let resealed = reseal_secret(Some(&key), &other, "ep_1", stored).unwrap();
            assert_eq!(
                open_secret(Some(&other), "ep_1", &resealed),
                Ok(secret.clone())
            );
            assert!(open_secret(Some(&key), "ep_1", &resealed).is_err());
        }
        assert!(reseal_secret(Some(&other), &key, "ep_1", &sealed).is_err());
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }

    /// IPv6 forms that carry an IPv4 address are judged as the IPv4 address: mapped
    /// (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`), SIIT (`::ffff:0:a.b.c.d`) and NAT64
    /// (`64:ff9b::/96`); the local-use NAT64 prefix `64:ff9b:1::/48` is always internal. Only
    /// the classifier is asked: no connection is made.
    #[test]
    fn ipv6_forms_that_carry_an_ipv4_address_are_judged_as_it() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        for (v6, v4) in [
            ("::ffff:10.0.0.1", "10.0.0.1"),
            ("::ffff:8.8.8.8", "8.8.8.8"),
            ("::10.0.0.1", "10.0.0.1"),
            ("::127.0.0.1", "127.0.0.1"),
            ("::169.254.169.254", "169.254.169.254"),
            ("::8.8.8.8", "8.8.8.8"),
            ("::ffff:0:10.0.0.1", "10.0.0.1"),
            ("::ffff:0:127.0.0.1", "127.0.0.1"),
            ("::ffff:0:8.8.8.8", "8.8.8.8"),
            ("64:ff9b::a00:1", "10.0.0.1"),
            ("64:ff9b::7f00:1", "127.0.0.1"),
            ("64:ff9b::169.254.169.254", "169.254.169.254"),
            ("64:ff9b::192.168.1.1", "192.168.1.1"),
            ("64:ff9b::100.64.0.1", "100.64.0.1"),
            ("64:ff9b::8.8.8.8", "8.8.8.8"),
            ("64:ff9b::93.184.216.34", "93.184.216.34"),
        ] {
            assert_eq!(is_internal(ip(v6)), is_internal(ip(v4)), "{v6} is {v4}");
            assert_eq!(
                is_private_host(ip(v6)),
                is_private_host(ip(v4)),
                "{v6} is {v4}"
            );
        }
        // The cases of the report, spelled out.
        assert!(!is_internal(ip("::ffff:0:8.8.8.8")));
        assert!(is_internal(ip("64:ff9b::a00:1")));
        assert!(is_private_host(ip("64:ff9b::a00:1")));
        assert!(is_internal(ip("::10.0.0.1")));
        assert!(!Reach::Public.allows(ip("::ffff:0:127.0.0.1")));
        assert!(!Reach::Public.allows(ip("64:ff9b::169.254.169.254")));
        assert!(!Reach::PrivateOnly.allows(ip("64:ff9b::169.254.169.254")));
        // `::` and `::1` stay IPv6's unspecified and loopback addresses.
        assert!(is_internal(ip("::")) && !is_private_host(ip("::")));
        assert!(is_internal(ip("::1")) && is_private_host(ip("::1")));
        // The local-use NAT64 prefix: internal whatever it carries, and no private host.
        for local in [
            "64:ff9b:1::808:808",
            "64:ff9b:1:808:8:800::",
            "64:ff9b:1::a00:1",
        ] {
            assert!(is_internal(ip(local)), "{local}");
            assert!(!is_private_host(ip(local)), "{local}");
        }
        // Neighbours of the prefixes carry nothing.
        for other in ["64:ff9b:0:0:0:1::808", "::1:0:808:808", "1::808:808"] {
            assert!(!is_internal(ip(other)), "{other}");
        }
        assert!(is_internal(ip("2001:db8::1")), "documentation");
    }

    #[test]
    fn private_hosts_are_loopback_and_private_ranges_only() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "::ffff:192.168.0.1",
        ] {
            assert!(is_private_host(private.parse().unwrap()), "{private}");
        }
        for other in [
            "93.184.216.34",
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "fe80::1",
            "2606:4700::1111",
        ] {
            assert!(!is_private_host(other.parse().unwrap()), "{other}");
        }
    }

    #[test]
    fn urls_must_be_https_and_public_unless_private_ones_are_allowed() {
        let reach = |allow_private: &bool, url: &str| {
            check_url(url, *allow_private).map(|(_, reach)| reach)
        };
        let strict = false;
        assert_eq!(
            reach(&strict, "https://hooks.example.com/in"),
            Ok(Reach::Public)
        );
        assert!(check_url("http://hooks.example.com/in", false).is_err());
        assert!(check_url("http://127.0.0.1:9000/in", false).is_err());
        assert!(check_url("https://127.0.0.1/in", false).is_err());
        assert!(check_url("https://[::1]/in", false).is_err());
        assert!(check_url("https://10.0.0.1/in", false).is_err());
        assert!(check_url("ftp://example.com/", false).is_err());
        let open = true;
        // https: any address.
        assert_eq!(reach(&open, "https://hooks.example.com/in"), Ok(Reach::Any));
        assert_eq!(reach(&open, "https://127.0.0.1/in"), Ok(Reach::Any));
        // http: loopback and private addresses only; a name may resolve to nothing else.
        for private in [
            "http://127.0.0.1:9000/in",
            "http://10.0.0.5/in",
            "http://192.168.1.20:8080/in",
            "http://[::1]:9000/in",
            "http://[fd12::1]/in",
            "http://localhost:9000/in",
            "http://hooks.internal/in",
        ] {
            assert_eq!(reach(&open, private), Ok(Reach::PrivateOnly), "{private}");
        }
        for public in [
            "http://93.184.216.34/in",
            "http://8.8.8.8:80/in",
            "http://[2606:4700::1111]/in",
            "http://169.254.169.254/latest",
        ] {
            let refused = check_url(public, true).expect_err(public);
            assert!(refused.contains("loopback or private"), "{refused}");
        }
    }
}
