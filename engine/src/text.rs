//! The one text rule of request strings (R-8.10): no control characters but tab, line feed and
//! carriage return, so that a NUL byte or an escape sequence never reaches storage, logs or
//! receipts.
//!
//! The rule is one set of characters, [`CONTROL_CHARACTERS`]. Everything else is derived from
//! it: [`is_control_character`] for one character, [`has_control_characters`] for a text (the
//! multipart fields and the payment page's form, which do not come as JSON, and the validation
//! fast path), and [`TEXT_PATTERN`], the regular expression the request schemas give every plain
//! string, written out from the same ranges when the crate is compiled.
//!
//! ```
//! use checkout_engine::text::{TEXT_PATTERN, has_control_characters};
//!
//! assert!(!has_control_characters("Room 12\tfloor 3\r\n"));
//! assert!(has_control_characters("Room\u{0}12"));
//! assert!(has_control_characters("\u{1b}[31mred")); // an escape sequence
//! assert!(has_control_characters("C1 \u{85} next line"));
//! assert_eq!(TEXT_PATTERN, r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*$");
//! ```

use std::ops::RangeInclusive;

/// The characters request text must not hold: the C0 controls U+0000–U+001F except tab
/// (U+0009), line feed (U+000A) and carriage return (U+000D); DEL (U+007F) and the C1 controls
/// U+0080–U+009F. Ascending and disjoint; every one below U+0100.
pub const CONTROL_CHARACTERS: [RangeInclusive<char>; 4] = [
    '\u{00}'..='\u{08}',
    '\u{0B}'..='\u{0C}',
    '\u{0E}'..='\u{1F}',
    '\u{7F}'..='\u{9F}',
];

/// Whether `c` is one of [`CONTROL_CHARACTERS`].
pub fn is_control_character(c: char) -> bool {
    CONTROL_CHARACTERS.iter().any(|range| range.contains(&c))
}

/// Whether `text` breaks the text rule: it holds one of [`CONTROL_CHARACTERS`].
///
/// It reads the UTF-8 bytes rather than the characters, because the validation fast path calls
/// it on every string of a body: every refused character is below U+0100, so it is one byte
/// (below U+0080) or a lead byte `C2`/`C3` and one continuation byte.
pub fn has_control_characters(text: &str) -> bool {
    let bytes = text.as_bytes();
    let refused_at = |i: usize| match bytes[i] {
        byte @ 0x00..=0x7F => REFUSED[usize::from(byte)],
        byte @ (0xC2 | 0xC3) => bytes.get(i + 1).is_some_and(|&next| {
            REFUSED[(usize::from(byte & 0x1F) << 6) | usize::from(next & 0x3F)]
        }),
        _ => false,
    };
    // A run of printable ASCII (U+0020–U+007E) holds no refused character and no lead byte: it
    // is passed over 16 bytes at a time (a test the compiler does for all 16 at once); any
    // other run is read byte by byte, each byte with the one after it.
    let mut start = 0;
    while start < bytes.len() {
        let end = bytes.len().min(start + 16);
        let printable = <&[u8; 16]>::try_from(&bytes[start..end]).is_ok_and(|run| {
            run.iter()
                .fold(true, |all, &byte| all & (byte.wrapping_sub(0x20) < 0x5F))
        });
        if !printable && (start..end).any(refused_at) {
            return true;
        }
        start = end;
    }
    false
}

/// [`CONTROL_CHARACTERS`] as a table over U+0000–U+00FF.
const REFUSED: [bool; 0x100] = refused_table();

const fn refused_table() -> [bool; 0x100] {
    let mut table = [false; 0x100];
    let mut r = 0;
    while r < CONTROL_CHARACTERS.len() {
        let (start, end) = bounds(r);
        assert!(
            end < 0x100,
            "the byte scan reads characters below U+0100 only"
        );
        let mut code = start;
        while code <= end {
            table[code as usize] = true;
            code += 1;
        }
        r += 1;
    }
    table
}

/// The code points of the `r`-th range of [`CONTROL_CHARACTERS`].
const fn bounds(r: usize) -> (u32, u32) {
    let range = &CONTROL_CHARACTERS[r];
    (*range.start() as u32, *range.end() as u32)
}

/// The regular expression of text without [`CONTROL_CHARACTERS`], as the request schemas state
/// the rule: `^[^…]*$` with each range written `\xHH-\xHH` (two neighbours as `\xHH\xHH`).
/// Given to every request string that has no pattern, format or enumeration of its own.
pub const TEXT_PATTERN: &str = match std::str::from_utf8(&PATTERN_BYTES) {
    Ok(pattern) => pattern,
    Err(_) => panic!("the text pattern is ASCII"),
};

const PATTERN_LEN: usize = write_pattern(&mut [0; 256]);
const PATTERN_BYTES: [u8; PATTERN_LEN] = {
    let mut buffer = [0; 256];
    write_pattern(&mut buffer);
    let mut bytes = [0; PATTERN_LEN];
    let mut i = 0;
    while i < PATTERN_LEN {
        bytes[i] = buffer[i];
        i += 1;
    }
    bytes
};

/// Writes [`TEXT_PATTERN`] into `out` and answers its length.
const fn write_pattern(out: &mut [u8; 256]) -> usize {
    let mut len = put(out, 0, b"^[^");
    let mut r = 0;
    while r < CONTROL_CHARACTERS.len() {
        let (start, end) = bounds(r);
        len = put_hex(out, len, start);
        if end > start {
            if end > start + 1 {
                len = put(out, len, b"-");
            }
            len = put_hex(out, len, end);
        }
        r += 1;
    }
    put(out, len, b"]*$")
}

const fn put(out: &mut [u8; 256], mut len: usize, text: &[u8]) -> usize {
    let mut i = 0;
    while i < text.len() {
        out[len] = text[i];
        len += 1;
        i += 1;
    }
    len
}

/// `\xHH`, upper-case, for a code point below U+0100.
const fn put_hex(out: &mut [u8; 256], len: usize, code: u32) -> usize {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let escape = [
        b'\\',
        b'x',
        DIGITS[(code >> 4) as usize & 0xF],
        DIGITS[code as usize & 0xF],
    ];
    put(out, len, &escape)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// [`TEXT_PATTERN`] compiled as the schema pass compiles a body schema.
    fn schema() -> jsonschema::Validator {
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&json!({ "type": "string", "pattern": TEXT_PATTERN }))
            .unwrap_or_else(|e| panic!("{TEXT_PATTERN}: {e}"))
    }

    /// The pattern, the character test and the byte scan agree on `c`, alone and inside text.
    fn agree(schema: &jsonschema::Validator, c: char) {
        for text in [c.to_string(), format!("a{c}b"), format!("é{c}\u{1F600}")] {
            let by_pattern = !schema.is_valid(&Value::String(text.clone()));
            assert_eq!(by_pattern, is_control_character(c), "{c:?} in {text:?}");
            assert_eq!(
                has_control_characters(&text),
                by_pattern,
                "{c:?} in {text:?}"
            );
        }
    }

    #[test]
    fn the_pattern_and_the_functions_agree_at_every_boundary_r_8_10() {
        let schema = schema();
        let mut boundaries = vec![
            '\u{0}', '\u{FF}', '\u{100}', '\u{7FF}', '\u{800}', '\u{D7FF}',
        ];
        boundaries.extend(['\u{E000}', '\u{FFFF}', '\u{10000}', char::MAX]);
        for range in &CONTROL_CHARACTERS {
            let (start, end) = (u32::from(*range.start()), u32::from(*range.end()));
            boundaries.extend(
                [start.checked_sub(1), Some(start), Some(end), Some(end + 1)]
                    .into_iter()
                    .flatten()
                    .filter_map(char::from_u32),
            );
        }
        for c in boundaries {
            agree(&schema, c);
        }
    }

    #[test]
    fn the_pattern_and_the_functions_agree_on_the_basic_plane() {
        let schema = schema();
        (0_u32..0x1_0000)
            .filter_map(char::from_u32)
            .for_each(|c| agree(&schema, c));
    }

    #[test]
    fn the_byte_scan_is_the_character_test_on_every_character() {
        let mut buffer = [0; 4];
        for c in (0_u32..=0x10_FFFF).filter_map(char::from_u32) {
            let text: &str = c.encode_utf8(&mut buffer);
            assert_eq!(
                has_control_characters(text),
                is_control_character(c),
                "{c:?}"
            );
        }
    }

    /// Inside longer text, at every place of a run of 16 bytes and across two runs (a two-byte
    /// character split between them included), the scan is the character test.
    #[test]
    fn the_byte_scan_is_the_character_test_at_every_offset() {
        let mut characters: Vec<char> = vec!['\t', '\n', '\r', ' ', '~', 'é', '\u{A0}'];
        characters.extend('\u{0}'..='\u{9F}');
        characters.extend(['\u{100}', '\u{20AC}', '\u{1F600}']);
        for c in characters {
            for offset in 0..40 {
                for filler in ["a", "é"] {
                    let mut text = filler.repeat(offset);
                    text.push(c);
                    text.push_str(&"b".repeat(40 - offset));
                    assert_eq!(
                        has_control_characters(&text),
                        is_control_character(c),
                        "{c:?} after {offset} of {filler:?}"
                    );
                }
            }
        }
        let long = "printable ascii, then more of it. ".repeat(20);
        assert!(!has_control_characters(&long));
        assert!(has_control_characters(&format!("{long}\u{7F}")));
        assert!(has_control_characters(&format!("{long}\u{85}{long}")));
    }

    #[test]
    fn the_pattern_is_written_from_the_ranges() {
        // The text the committed schemas carry; a change of the set shows here first.
        assert_eq!(TEXT_PATTERN, r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*$");
        assert!(has_control_characters("\u{9F}") && !has_control_characters("\u{A0}"));
        assert!(!has_control_characters("\t\n\r") && has_control_characters("\u{7F}"));
    }
}
