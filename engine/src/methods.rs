//! `restrictedMethods` of a checkout: the payment methods and card brands the provider
//! deactivated for it, as a comma-separated list of the names below (any case, blanks around a
//! name ignored; an empty or blank text restricts nothing), e.g. `amex,diners`. `card`
//! deactivates every card.

/// The names a `restrictedMethods` list may hold, lower case, sorted: payment methods
/// (`card`, `invoice`, …) and card brands as card processors name them (`amex`, `visa`, …).
pub const PAYMENT_METHOD_NAMES: [&str; 18] = [
    "amex",
    "apple_pay",
    "bank_transfer",
    "card",
    "cartes_bancaires",
    "diners",
    "discover",
    "eftpos_au",
    "google_pay",
    "interac",
    "invoice",
    "jcb",
    "klarna",
    "mastercard",
    "paypal",
    "sepa_debit",
    "unionpay",
    "visa",
];

/// The names of a `restrictedMethods` text, lower case, in order; `None` when a name is empty
/// or unknown.
pub fn parse_restricted_methods(text: &str) -> Option<Vec<String>> {
    if text.trim().is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|name| {
            let name = name.trim().to_ascii_lowercase();
            PAYMENT_METHOD_NAMES
                .binary_search(&name.as_str())
                .is_ok()
                .then_some(name)
        })
        .collect()
}

/// Whether a `restrictedMethods` text is a list of known names.
pub fn restricted_methods_valid(text: &str) -> bool {
    parse_restricted_methods(text).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_are_sorted_lower_case() {
        let mut sorted = PAYMENT_METHOD_NAMES;
        sorted.sort_unstable();
        assert_eq!(sorted, PAYMENT_METHOD_NAMES);
        assert!(
            PAYMENT_METHOD_NAMES
                .iter()
                .all(|n| n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        );
    }

    #[test]
    fn lists_of_known_names_in_any_case_are_valid() {
        assert_eq!(
            parse_restricted_methods(" Amex, diners "),
            Some(vec!["amex".to_owned(), "diners".to_owned()])
        );
        assert_eq!(
            parse_restricted_methods("INVOICE"),
            Some(vec!["invoice".to_owned()])
        );
        assert_eq!(parse_restricted_methods(""), Some(Vec::new()));
        assert_eq!(parse_restricted_methods("  "), Some(Vec::new()));
        for bad in [
            "amex,,diners",
            "bitcoin",
            "amex;diners",
            "visa,",
            "free text",
        ] {
            assert_eq!(parse_restricted_methods(bad), None, "{bad}");
        }
    }
}
