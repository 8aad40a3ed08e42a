//! The escapes a server wraps reflected text in, undone for the masker.
//!
//! A server that echoes a secret's value may percent-encode it (`%73%6B`),
//! write it as JSON `\u0073` escapes or other backslash escapes (`\x73`,
//! `\/`), or as HTML character references (`&#115;`, `&#x73;`, `&amp;`),
//! whole or a few characters at a time. Rather than list every mixture as a
//! form of the value, the masker also reads the text with these escapes
//! undone ([`decode`]) and looks for the value there: every decoded byte
//! knows the raw bytes it came from, so a match is masked in the text as
//! it was sent. Decoding is done a bounded number of times over
//! (`%2573`, a percent-encoded `%73`, is read twice).
//!
//! A stream is decoded as it comes: an escape cut by the end of what has
//! arrived so far (`%7`, `\u00`) is left undecided until the rest comes, or
//! the stream ends (then it is plain text).

/// One reading of a text: its bytes and, for each, the offset in the raw
/// text of the escape (or plain byte) it came from.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub bytes: Vec<u8>,
    /// Per byte of `bytes`: where its unit starts in the raw text. Units
    /// tile the raw text, so a unit ends where the next one starts (the
    /// last decided one at [`Decoded::end`]).
    pub starts: Vec<usize>,
    /// Where the decided part ends in the raw text: the rest is an escape
    /// cut short, waiting for more.
    pub end: usize,
}

impl Decoded {
    /// The raw span of bytes `from..to` of this reading (`from < to`).
    pub fn raw_span(&self, from: usize, to: usize) -> (usize, usize) {
        let start = self.starts[from];
        let last = self.starts[to - 1];
        // The unit of the last byte ends where a later unit starts.
        let end = self.starts[to..]
            .iter()
            .find(|&&s| s != last)
            .copied()
            .unwrap_or(self.end);
        (start, end)
    }
}

/// Whether `bytes` hold anything [`decode`] could undo: the text is read
/// again only then.
pub(crate) fn has_escapes(bytes: &[u8]) -> bool {
    bytes.iter().any(|b| matches!(b, b'%' | b'\\' | b'&'))
}

/// What one escape at the start of a text is.
enum Escape {
    /// Not an escape: the first byte stands for itself.
    Plain,
    /// The text ends inside what may be an escape.
    Cut,
    /// An escape of `length` input bytes meaning `bytes` (at most 4).
    Decoded {
        length: usize,
        bytes: [u8; 4],
        count: usize,
    },
}

/// `input` (a raw text, or an earlier reading whose byte `i` came from raw
/// offset `starts[i]`, its decided part ending at `input_end`) with its
/// escapes undone. Unless `end`, an escape cut by the end of `input` is
/// left undecided (see [`Decoded::end`]).
pub(crate) fn decode(
    input: &[u8],
    starts: Option<&[usize]>,
    input_end: usize,
    end: bool,
) -> Decoded {
    let origin = |i: usize| match starts {
        Some(starts) => starts.get(i).copied().unwrap_or(input_end),
        None => i,
    };
    let mut out = Decoded {
        bytes: Vec::with_capacity(input.len()),
        starts: Vec::with_capacity(input.len()),
        end: input_end,
    };
    let mut at = 0;
    while at < input.len() {
        match escape(&input[at..]) {
            Escape::Plain => {
                out.bytes.push(input[at]);
                out.starts.push(origin(at));
                at += 1;
            }
            Escape::Cut if !end => {
                out.end = origin(at);
                return out;
            }
            Escape::Cut => {
                out.bytes.push(input[at]);
                out.starts.push(origin(at));
                at += 1;
            }
            Escape::Decoded {
                length,
                bytes,
                count,
            } => {
                let start = origin(at);
                for &byte in &bytes[..count] {
                    out.bytes.push(byte);
                    out.starts.push(start);
                }
                at += length;
            }
        }
    }
    out
}

fn hex_digit(byte: u8) -> Option<u32> {
    char::from(byte).to_digit(16)
}

/// `count` hex digits at the start of `text`: their value, `Err(true)` when
/// the text ends first (the escape is cut), `Err(false)` when a byte is not
/// a hex digit.
fn hex_digits(text: &[u8], count: usize) -> Result<u32, bool> {
    let mut value = 0;
    for i in 0..count {
        let Some(&byte) = text.get(i) else {
            return Err(true);
        };
        value = value * 16 + hex_digit(byte).ok_or(false)?;
    }
    Ok(value)
}

fn char_escape(length: usize, c: char) -> Escape {
    let mut bytes = [0u8; 4];
    let count = c.encode_utf8(&mut bytes).len();
    Escape::Decoded {
        length,
        bytes,
        count,
    }
}

fn byte_escape(length: usize, byte: u8) -> Escape {
    Escape::Decoded {
        length,
        bytes: [byte, 0, 0, 0],
        count: 1,
    }
}

/// Reads the escape (if any) at the start of `text`.
fn escape(text: &[u8]) -> Escape {
    match text.first() {
        Some(b'%') => match hex_digits(&text[1..], 2) {
            Ok(value) => byte_escape(3, value as u8),
            Err(true) => Escape::Cut,
            Err(false) => Escape::Plain,
        },
        Some(b'\\') => backslash(text),
        Some(b'&') => reference(text),
        _ => Escape::Plain,
    }
}

/// `\uXXXX` (a UTF-16 surrogate pair as two), `\UXXXXXXXX`, `\xXX`, and
/// the escaped punctuation of JSON and string literals (`\"`, `\\`, `\/`,
/// `\'`).
fn backslash(text: &[u8]) -> Escape {
    let Some(&kind) = text.get(1) else {
        return Escape::Cut;
    };
    match kind {
        b'"' | b'\\' | b'/' | b'\'' => byte_escape(2, kind),
        b'x' => match hex_digits(&text[2..], 2) {
            Ok(value) => byte_escape(4, value as u8),
            Err(true) => Escape::Cut,
            Err(false) => Escape::Plain,
        },
        b'U' => match hex_digits(&text[2..], 8) {
            Ok(value) => char::from_u32(value).map_or(Escape::Plain, |c| char_escape(10, c)),
            Err(true) => Escape::Cut,
            Err(false) => Escape::Plain,
        },
        b'u' => {
            let unit = match hex_digits(&text[2..], 4) {
                Ok(unit) => unit,
                Err(true) => return Escape::Cut,
                Err(false) => return Escape::Plain,
            };
            if !(0xD800..0xDC00).contains(&unit) {
                // A lone low surrogate is no character: left as text.
                return char::from_u32(unit).map_or(Escape::Plain, |c| char_escape(6, c));
            }
            // A high surrogate: a character only with the low one after it.
            let low = &text[6..];
            match (low.first(), low.get(1)) {
                (None, _) | (Some(b'\\'), None) => return Escape::Cut,
                (Some(b'\\'), Some(b'u')) => {}
                _ => return Escape::Plain,
            }
            match hex_digits(&low[2..], 4) {
                Ok(second) if (0xDC00..0xE000).contains(&second) => {
                    let c = 0x10000 + ((unit - 0xD800) << 10) + (second - 0xDC00);
                    char::from_u32(c).map_or(Escape::Plain, |c| char_escape(12, c))
                }
                Err(true) => Escape::Cut,
                _ => Escape::Plain,
            }
        }
        _ => Escape::Plain,
    }
}

/// Longest numeric character reference read (`&#x` and 8 digits, `;`):
/// leading zeros beyond it are not.
const MAX_REFERENCE: usize = 12;

/// The named references an HTML or XML escaper writes.
const NAMED: [(&[u8], u8); 5] = [
    (b"&amp;", b'&'),
    (b"&lt;", b'<'),
    (b"&gt;", b'>'),
    (b"&quot;", b'"'),
    (b"&apos;", b'\''),
];

/// `&#DDD;`, `&#xHH;` and the named references of [`NAMED`].
fn reference(text: &[u8]) -> Escape {
    if text.get(1) == Some(&b'#') {
        let hex = matches!(text.get(2), Some(b'x' | b'X'));
        let digits_from = if hex { 3 } else { 2 };
        let mut value: u32 = 0;
        let mut at = digits_from;
        loop {
            if at >= MAX_REFERENCE {
                return Escape::Plain;
            }
            let Some(&byte) = text.get(at) else {
                return Escape::Cut;
            };
            let digit = if hex {
                hex_digit(byte)
            } else {
                char::from(byte).to_digit(10)
            };
            match digit {
                Some(digit) => {
                    value = value.saturating_mul(if hex { 16 } else { 10 }) + digit;
                    at += 1;
                }
                None if byte == b';' && at > digits_from => {
                    return char::from_u32(value).map_or(Escape::Plain, |c| char_escape(at + 1, c));
                }
                None => return Escape::Plain,
            }
        }
    }
    for (name, byte) in NAMED {
        if text.len() < name.len() {
            if name[..text.len()].eq_ignore_ascii_case(text) {
                return Escape::Cut;
            }
        } else if text[..name.len()].eq_ignore_ascii_case(name) {
            return byte_escape(name.len(), byte);
        }
    }
    Escape::Plain
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(decoded: &Decoded) -> String {
        String::from_utf8_lossy(&decoded.bytes).into_owned()
    }

    #[test]
    fn every_escape_is_undone_and_knows_its_raw_bytes() {
        let raw = br#"a%73\u0062\x63\/&#100;&#x65;&amp;\uD83D\uDE00\U0001F600%2573"#;
        let once = decode(raw, None, raw.len(), true);
        assert_eq!(text(&once), "asbc/de&\u{1F600}\u{1F600}%73");
        // `s` came from `%73` (raw 1..4), the emoji from its two escapes.
        assert_eq!(once.raw_span(1, 2), (1, 4));
        let emoji = once.bytes.len() - 3 - 8;
        assert_eq!(once.raw_span(emoji, emoji + 4), (33, 45));
        // Read again, `%2573` is `s`, spanning all five raw bytes.
        let twice = decode(&once.bytes, Some(&once.starts), once.end, true);
        assert_eq!(text(&twice), "asbc/de&\u{1F600}\u{1F600}s");
        let last = twice.bytes.len() - 1;
        assert_eq!(twice.raw_span(last, last + 1), (raw.len() - 5, raw.len()));
    }

    #[test]
    fn what_is_no_escape_stays_as_it_is() {
        for raw in [
            "100% sure",
            "%zz",
            "\\n\\q",
            "\\uZZZZ",
            "\\uDE00x",
            "\\uD83Dx",
            "\\uD83D\\u0041",
            "&#;",
            "&#xZ;",
            "&nbsp;",
            "& then",
            "&#12345678901234;",
            "\\U00110000",
        ] {
            let decoded = decode(raw.as_bytes(), None, raw.len(), true);
            assert!(
                decoded.bytes.starts_with(&raw.as_bytes()[..1]),
                "{raw:?}: {:?}",
                text(&decoded)
            );
        }
        assert_eq!(text(&decode(b"100% sure", None, 9, true)), "100% sure");
        assert_eq!(text(&decode(b"\\uD83D\\u0041", None, 12, true)), "\\uD83DA");
    }

    #[test]
    fn an_escape_cut_by_the_end_of_a_piece_waits_for_the_rest() {
        for raw in [
            "ab%7",
            "ab%",
            "ab\\",
            "ab\\u00",
            "ab\\uD83D",
            "ab\\uD83D\\",
            "ab\\uD83D\\uDE",
            "ab&#1",
            "ab&am",
            "ab&",
            "ab\\x",
        ] {
            let decoded = decode(raw.as_bytes(), None, raw.len(), false);
            assert_eq!(text(&decoded), "ab", "{raw:?}");
            assert_eq!(decoded.end, 2, "{raw:?}");
            // At the stream's end it is text.
            let ended = decode(raw.as_bytes(), None, raw.len(), true);
            assert_eq!(text(&ended), raw, "{raw:?}");
        }
    }
}
