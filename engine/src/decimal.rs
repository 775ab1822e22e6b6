//! Exact JSON-number (de)serialisation of `Decimal` amounts (R-1.1, R-1.4).
//!
//! With serde_json's `arbitrary_precision` feature a JSON number keeps the text it was written
//! with, so an amount goes from the request bytes to `rust_decimal` without ever passing through
//! `f64`: `0.1` stays `0.1`, `1e2` becomes `100`, `123456789012345678.91` keeps every digit.
//! Serialisation writes the decimal's own text as a JSON number, so its scale is kept
//! (`120.00` stays `120.00`).

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serializer};

/// Most significant digits an amount may carry (R-1.1).
pub const MAX_SIGNIFICANT_DIGITS: usize = 28;

/// Why the text of a JSON number is not an acceptable amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalTextError {
    /// More than [`MAX_SIGNIFICANT_DIGITS`] significant digits, or out of `Decimal`'s range.
    #[error("number has more than 28 significant digits or is out of range")]
    TooPrecise,
    /// Not the text of a number at all.
    #[error("not a number")]
    NotANumber,
}

/// Counts the significant digits of a number's mantissa: leading zeros do not count, trailing
/// ones do (they carry the scale the provider wrote).
fn significant_digits(text: &str) -> usize {
    let mantissa = text.split(['e', 'E']).next().unwrap_or("");
    mantissa
        .chars()
        .filter(char::is_ascii_digit)
        .skip_while(|c| *c == '0')
        .count()
}

/// Largest scale `Decimal` holds exactly; beyond it `rust_decimal` would round silently.
const MAX_SCALE: u32 = 28;

/// The scale the text asks for: fraction digits minus the exponent.
fn scale_of(text: &str) -> i64 {
    let mut parts = text.split(['e', 'E']);
    let mantissa = parts.next().unwrap_or("");
    let exponent: i64 = parts.next().and_then(|e| e.parse().ok()).unwrap_or(0);
    let fraction_digits = mantissa.split_once('.').map_or(0, |(_, f)| f.len());
    i64::try_from(fraction_digits)
        .unwrap_or(i64::MAX)
        .saturating_sub(exponent)
}

/// Parses the text of a JSON number into a `Decimal` exactly, or says why it cannot (R-1.1).
///
/// ```
/// use checkout_engine::decimal::parse_json_number;
/// assert_eq!(parse_json_number("0.1").unwrap().to_string(), "0.1");
/// assert_eq!(parse_json_number("1e2").unwrap().to_string(), "100");
/// assert!(parse_json_number("1.2345678901234567890123456789").is_err());
/// ```
pub fn parse_json_number(text: &str) -> Result<Decimal, DecimalTextError> {
    if !text.chars().any(|c| c.is_ascii_digit()) {
        return Err(DecimalTextError::NotANumber);
    }
    if significant_digits(text) > MAX_SIGNIFICANT_DIGITS || scale_of(text) > i64::from(MAX_SCALE) {
        return Err(DecimalTextError::TooPrecise);
    }
    let parsed = if text.contains(['e', 'E']) {
        Decimal::from_scientific(text)
    } else {
        Decimal::from_str(text)
    };
    parsed.map_err(|_| DecimalTextError::TooPrecise)
}

/// Turns a decimal into a JSON number with exactly its text (scale kept).
pub fn to_json_number(value: &Decimal) -> serde_json::Number {
    // A Decimal's `Display` is always a valid JSON number (no exponent, no leading '+'), so this
    // parse cannot fail; the fallback keeps the function total without a panic path.
    serde_json::Number::from_str(&value.to_string()).unwrap_or_else(|_| serde_json::Number::from(0))
}

/// Serialises a decimal as a JSON number with its scale.
///
/// It serialises what [`to_json_number`]'s `Number` would (under `arbitrary_precision` a
/// number is serde_json's private one-field struct holding its text), with the text written by
/// [`write_text`] instead of formatted, parsed into a `Number` and copied out again: a create
/// serialises a dozen amounts (policies, events, status records).
pub fn serialize<S: Serializer>(value: &Decimal, serializer: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut text = Vec::with_capacity(32);
    write_text(value, &mut text);
    // Digits, '-' and '.': ASCII, so this never fails.
    let text = std::str::from_utf8(&text).map_err(serde::ser::Error::custom)?;
    let mut number = serializer.serialize_struct(NUMBER_TOKEN, 1)?;
    number.serialize_field(NUMBER_TOKEN, text)?;
    number.end()
}

/// Writes a decimal's text — exactly what its `Display` writes (`to_string`), the text
/// [`to_json_number`] and [`serialize`] give it — to `out`, without formatting machinery or a
/// string of its own.
///
/// ```
/// use rust_decimal::Decimal;
/// let mut out = Vec::new();
/// checkout_engine::decimal::write_text(&Decimal::new(-5, 3), &mut out);
/// assert_eq!(out, b"-0.005");
/// ```
pub fn write_text(value: &Decimal, out: &mut Vec<u8>) {
    // The mantissa's digits, least significant first, padded with zeros to the scale as
    // `Display` pads them (a mantissa has at most 29 digits, a scale at most 28).
    let mut digits = [b'0'; 40];
    let mut len = 0;
    let mut mantissa = value.mantissa().unsigned_abs();
    while mantissa > u128::from(u64::MAX) {
        digits[len] = b'0' + (mantissa % 10) as u8;
        mantissa /= 10;
        len += 1;
    }
    let mut small = mantissa as u64;
    while small != 0 {
        digits[len] = b'0' + (small % 10) as u8;
        small /= 10;
        len += 1;
    }
    let scale = value.scale() as usize;
    let len = len.max(scale);
    // `Display` writes the sign of a negative zero too.
    if value.is_sign_negative() {
        out.push(b'-');
    }
    let whole = len - scale;
    if whole == 0 {
        out.push(b'0');
    }
    out.extend(digits[scale..len].iter().rev());
    if scale > 0 {
        out.push(b'.');
        out.extend(digits[..scale].iter().rev());
    }
}

/// The text of serde_json's private form of a number (`{"$serde_json::private::Number": "…"}`),
/// in which `arbitrary_precision` hands a number's text to a visitor (a unit test holds it to
/// serde_json's).
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Reads an amount as [`serde_json::Number`] would read it, but parses the number's text where
/// serde_json hands it over instead of building a `Number` (which parses the text again) and
/// writing it out to a second string.
struct AmountVisitor;

impl<'de> Visitor<'de> for AmountVisitor {
    type Value = Decimal;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON number")
    }

    // Integers that fit 64 bits come as integers; `Decimal::from` is what parsing their text
    // gives (scale 0, at most 20 digits).
    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Decimal, E> {
        Ok(Decimal::from(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Decimal, E> {
        Ok(Decimal::from(value))
    }

    // The rest, which serde_json's own deserializers never produce from a JSON text, as before:
    // through the number's text.
    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Decimal, E> {
        let number = serde_json::Number::from_i128(value)
            .ok_or_else(|| E::custom("JSON number out of range"))?;
        parse_json_number(number.as_str()).map_err(E::custom)
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Decimal, E> {
        let number = serde_json::Number::from_u128(value)
            .ok_or_else(|| E::custom("JSON number out of range"))?;
        parse_json_number(number.as_str()).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Decimal, E> {
        let number =
            serde_json::Number::from_f64(value).ok_or_else(|| E::custom("not a JSON number"))?;
        parse_json_number(number.as_str()).map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decimal, A::Error> {
        if map.next_key::<NumberKey>()?.is_none() {
            return Err(de::Error::invalid_type(de::Unexpected::Map, &self));
        }
        map.next_value::<NumberText>()
            .map(|NumberText(value)| value)
    }
}

/// The key of serde_json's private form of a number.
struct NumberKey;

impl<'de> Deserialize<'de> for NumberKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<NumberKey, D::Error> {
        struct KeyVisitor;

        impl Visitor<'_> for KeyVisitor {
            type Value = NumberKey;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a valid number field")
            }

            fn visit_str<E: de::Error>(self, key: &str) -> Result<NumberKey, E> {
                if key == NUMBER_TOKEN {
                    Ok(NumberKey)
                } else {
                    Err(E::custom("expected field with custom name"))
                }
            }
        }

        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// The value of serde_json's private form of a number: its text, read as an amount. The text
/// must be a JSON number, as `serde_json::Number`'s parse of it requires.
struct NumberText(Decimal);

impl<'de> Deserialize<'de> for NumberText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<NumberText, D::Error> {
        struct TextVisitor;

        impl Visitor<'_> for TextVisitor {
            type Value = NumberText;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("string containing a number")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<NumberText, E> {
                if !is_json_number(text) {
                    return Err(E::custom("invalid number"));
                }
                parse_json_number(text).map(NumberText).map_err(E::custom)
            }
        }

        deserializer.deserialize_str(TextVisitor)
    }
}

/// Whether `text` is a JSON number: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn is_json_number(text: &str) -> bool {
    fn digits(bytes: &[u8]) -> usize {
        bytes.iter().take_while(|b| b.is_ascii_digit()).count()
    }
    let bytes = text.as_bytes();
    let mut i = usize::from(bytes.first() == Some(&b'-'));
    match bytes.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i += digits(&bytes[i..]),
        _ => return false,
    }
    if bytes.get(i) == Some(&b'.') {
        let n = digits(&bytes[i + 1..]);
        if n == 0 {
            return false;
        }
        i += 1 + n;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let n = digits(&bytes[i..]);
        if n == 0 {
            return false;
        }
        i += n;
    }
    i == bytes.len()
}

/// Deserialises a JSON number into a decimal exactly as written.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Decimal, D::Error> {
    deserializer.deserialize_any(AmountVisitor)
}

/// JSON Schema of an amount: a JSON number.
pub fn schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "number" })
}

/// The same, for optional amounts (`null` allowed).
pub fn option_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": ["number", "null"] })
}

/// (De)serialisation of `Option<Decimal>` amounts.
pub mod option {
    use super::*;

    /// Serialises `Some` as a JSON number with its scale, `None` as `null`.
    pub fn serialize<S: Serializer>(
        value: &Option<Decimal>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => super::serialize(value, serializer),
            None => serializer.serialize_none(),
        }
    }

    /// Deserialises `null` as `None`, a number exactly as written.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Decimal>, D::Error> {
        struct OptionVisitor;

        impl<'de> Visitor<'de> for OptionVisitor {
            type Value = Option<Decimal>;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("option")
            }

            fn visit_none<E: de::Error>(self) -> Result<Option<Decimal>, E> {
                Ok(None)
            }

            fn visit_unit<E: de::Error>(self) -> Result<Option<Decimal>, E> {
                Ok(None)
            }

            fn visit_some<D: Deserializer<'de>>(
                self,
                deserializer: D,
            ) -> Result<Option<Decimal>, D::Error> {
                super::deserialize(deserializer).map(Some)
            }
        }

        deserializer.deserialize_option(OptionVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Serialize, Deserialize)]
    struct Holder {
        #[serde(with = "super")]
        amount: Decimal,
    }

    fn round_trip(json: &str) -> String {
        let holder: Holder = serde_json::from_str(json).expect("parses");
        serde_json::to_string(&holder).expect("serialises")
    }

    #[test]
    fn amounts_round_trip_exactly_r_1_1() {
        assert_eq!(round_trip(r#"{"amount":0.1}"#), r#"{"amount":0.1}"#);
        assert_eq!(round_trip(r#"{"amount":1e2}"#), r#"{"amount":100}"#);
        assert_eq!(round_trip(r#"{"amount":1E-2}"#), r#"{"amount":0.01}"#);
        assert_eq!(
            round_trip(r#"{"amount":123456789012345678.91}"#),
            r#"{"amount":123456789012345678.91}"#
        );
        assert_eq!(round_trip(r#"{"amount":120.00}"#), r#"{"amount":120.00}"#);
        assert_eq!(round_trip(r#"{"amount":-0.5}"#), r#"{"amount":-0.5}"#);
    }

    #[test]
    fn through_a_value_too() {
        let value: serde_json::Value =
            serde_json::from_str(r#"{"amount":0.30000000000000004441}"#).unwrap();
        let holder: Holder = serde_json::from_value(value).unwrap();
        assert_eq!(holder.amount.to_string(), "0.30000000000000004441");
    }

    /// The old reading of an amount: a `serde_json::Number`, its text written out, parsed.
    fn through_number(json: &str) -> Result<Decimal, String> {
        let number: serde_json::Number = serde_json::from_str(json).map_err(|e| e.to_string())?;
        parse_json_number(&number.to_string()).map_err(|e| e.to_string())
    }

    #[test]
    fn amounts_read_as_through_a_json_number() {
        let texts = [
            "0",
            "-0",
            "0.0",
            "-0.00",
            "1",
            "-1",
            "80",
            "100.00",
            "0.1",
            "1e2",
            "1E-2",
            "1.5e+1",
            "-2.50E1",
            "120.00",
            "16.8",
            "0.30000000000000004441",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "1234567890123456789012345678",
            "12345678901234567890123456789",
            "0.00000000000000000000000000001",
            "1e40",
            "1e-40",
            "0e40",
            "99999999999999999999e8",
            "1.2345678901234567890123456789",
        ];
        for text in texts {
            let holder = serde_json::from_str::<Holder>(&format!(r#"{{"amount":{text}}}"#))
                .map(|h| h.amount)
                .map_err(|e| e.to_string());
            let expected = through_number(text);
            assert_eq!(
                holder.is_ok(),
                expected.is_ok(),
                "{text}: {holder:?} {expected:?}"
            );
            if let (Ok(read), Ok(expected)) = (&holder, &expected) {
                assert_eq!(read, expected, "{text}");
                assert_eq!(read.to_string(), expected.to_string(), "{text}");
                assert_eq!(
                    read.is_sign_negative(),
                    expected.is_sign_negative(),
                    "{text}"
                );
            }
            // Through a JSON value (the full path of validation) too.
            if let Ok(value) =
                serde_json::from_str::<serde_json::Value>(&format!(r#"{{"amount":{text}}}"#))
            {
                let read = serde_json::from_value::<Holder>(value.clone()).map(|h| h.amount);
                let number = value["amount"].as_number().map(|n| n.to_string());
                let expected = number.map(|n| parse_json_number(&n));
                assert_eq!(
                    read.ok(),
                    expected.and_then(Result::ok),
                    "{text} through a value"
                );
            }
        }
    }

    #[test]
    fn the_private_number_form_is_serde_jsons() {
        // serde_json reads its private form of a number as that number: the token is its.
        let value: serde_json::Value =
            serde_json::from_str(&format!(r#"{{"{NUMBER_TOKEN}":"1.50"}}"#)).unwrap();
        assert_eq!(value.as_number().map(|n| n.as_str()), Some("1.50"));
        let holder: Holder =
            serde_json::from_str(&format!(r#"{{"amount":{{"{NUMBER_TOKEN}":"1.50"}}}}"#)).unwrap();
        assert_eq!(holder.amount.to_string(), "1.50");
        for bad in [
            r#"{"x":"1"}"#,
            &format!(r#"{{"{NUMBER_TOKEN}":"1x"}}"#),
            r#"{}"#,
            r#""1""#,
        ] {
            let json = format!(r#"{{"amount":{bad}}}"#);
            assert!(serde_json::from_str::<Holder>(&json).is_err(), "{json}");
        }
    }

    #[test]
    fn optional_amounts_read_null_as_none() {
        #[derive(Deserialize)]
        struct Optional {
            #[serde(default, with = "super::option")]
            amount: Option<Decimal>,
        }
        let read = |json: &str| serde_json::from_str::<Optional>(json).map(|o| o.amount);
        assert_eq!(read(r#"{"amount":null}"#).unwrap(), None);
        assert_eq!(read(r#"{}"#).unwrap(), None);
        assert_eq!(
            read(r#"{"amount":2.50}"#).unwrap().map(|d| d.to_string()),
            Some("2.50".to_owned())
        );
        assert!(read(r#"{"amount":"2"}"#).is_err());
        assert!(read(r#"{"amount":1e40}"#).is_err());
    }

    #[test]
    fn json_number_grammar() {
        for good in ["0", "-0", "1", "10", "1.0", "-1.25e+3", "1E5", "0.5e-2"] {
            assert!(is_json_number(good), "{good}");
        }
        for bad in [
            "", "-", "01", "1.", ".5", "1e", "1e+", "+1", "1x", " 1", "0x10", "1.5.2",
        ] {
            assert!(!is_json_number(bad), "{bad}");
        }
    }

    /// [`serialize`] writes what serialising [`to_json_number`]'s `Number` writes, as JSON text
    /// and as a `serde_json::Value`, with `Some` and `None` alike.
    #[test]
    fn serialized_amounts_are_the_numbers_of_their_text() {
        #[derive(Serialize)]
        struct Fast {
            #[serde(with = "super")]
            amount: Decimal,
            #[serde(with = "super::option")]
            maybe: Option<Decimal>,
        }
        #[derive(Serialize)]
        struct Slow {
            amount: serde_json::Number,
            maybe: Option<serde_json::Number>,
        }
        let mut negative_zero = Decimal::new(0, 2);
        negative_zero.set_sign_negative(true);
        for value in [
            Decimal::ZERO,
            negative_zero,
            Decimal::new(150, 2),
            Decimal::new(-5, 3),
            Decimal::new(18_050, 2),
            Decimal::from_i128_with_scale(123_456_789_012_345_678_901_234_567, 27),
            Decimal::MAX,
            Decimal::MIN,
        ] {
            for maybe in [Some(value), None] {
                let fast = Fast {
                    amount: value,
                    maybe,
                };
                let slow = Slow {
                    amount: to_json_number(&value),
                    maybe: maybe.as_ref().map(to_json_number),
                };
                assert_eq!(
                    serde_json::to_string(&fast).unwrap(),
                    serde_json::to_string(&slow).unwrap()
                );
                assert_eq!(
                    serde_json::to_value(&fast).unwrap(),
                    serde_json::to_value(&slow).unwrap()
                );
            }
        }
        assert_eq!(
            serde_json::to_string(&Fast {
                amount: Decimal::new(1_00, 2),
                maybe: None
            })
            .unwrap(),
            r#"{"amount":1.00,"maybe":null}"#
        );
    }

    #[test]
    fn written_text_is_display() {
        let mut seen = 0;
        let mut check = |value: Decimal| {
            let mut out = Vec::new();
            write_text(&value, &mut out);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                value.to_string(),
                "{value:?}"
            );
            seen += 1;
        };
        let mantissas = [
            0_i128,
            1,
            5,
            9,
            10,
            99,
            100,
            123_456,
            1_000_000_007,
            i128::from(u64::MAX) - 1,
            i128::from(u64::MAX),
            i128::from(u64::MAX) + 1,
            10_i128.pow(20),
            10_i128.pow(28) - 1,
            79_228_162_514_264_337_593_543_950_335, // Decimal::MAX's mantissa
        ];
        for mantissa in mantissas {
            for scale in 0..=28 {
                for sign in [1, -1] {
                    check(Decimal::from_i128_with_scale(sign * mantissa, scale));
                }
            }
        }
        let mut negative_zero = Decimal::new(0, 2);
        negative_zero.set_sign_negative(true);
        check(negative_zero);
        check(Decimal::MIN);
        check(Decimal::MAX);
        // A pseudo-random sweep of mantissas and scales.
        let mut x: u128 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let mantissa = ((x >> 32) % 79_228_162_514_264_337_593_543_950_336) >> (x % 96);
            let scale = (x % 29) as u32;
            let sign = if x & 1 == 0 { 1 } else { -1 };
            check(Decimal::from_i128_with_scale(
                sign * mantissa as i128,
                scale,
            ));
        }
        assert!(seen > 20_000);
    }

    #[test]
    fn more_than_28_significant_digits_is_refused_r_1_1() {
        assert_eq!(
            parse_json_number("1234567890123456789012345678")
                .unwrap()
                .to_string(),
            "1234567890123456789012345678"
        );
        assert_eq!(
            parse_json_number("12345678901234567890123456789"),
            Err(DecimalTextError::TooPrecise)
        );
        assert_eq!(
            parse_json_number("0.00000000000000000000000000001"),
            Err(DecimalTextError::TooPrecise)
        );
        assert!(
            serde_json::from_str::<Holder>(r#"{"amount":1.2345678901234567890123456789}"#).is_err()
        );
        assert_eq!(parse_json_number("1e40"), Err(DecimalTextError::TooPrecise));
    }
}
