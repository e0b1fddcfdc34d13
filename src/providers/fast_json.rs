//! A validating JSON scanner for the few payload shapes that make up nearly
//! every streamed event (a chat chunk, a text delta), so decoding one costs
//! a pass over its bytes instead of a full serde walk.
//!
//! Each dialect reads its common shapes with it and falls back to its serde
//! types for everything else. The contract that makes this safe: the scanner
//! answers only for input that `serde_json::from_str` accepts, and then with
//! exactly what serde would build. It follows serde_json's rules to the
//! letter (strings skipped as values may hold any `\u` escape, strings read
//! as text must pair their surrogates; numbers are checked for grammar
//! only, as serde does when it ignores them), and it declines (`None`)
//! whenever it is unsure: invalid JSON, an escaped or duplicate key, a value
//! of a type it does not expect, nesting deeper than it tracks. Declining is
//! always correct, since serde then decides. `providers::tests` checks the
//! contract against serde on mutated payloads.
//!
//! A scanner may also note where the text it delivers and the scalars it
//! skips lie (a [`Layout`]), so `shape` can read the next payload of the same
//! layout by comparing bytes.

use std::borrow::Cow;

use super::shape::{Hole, Layout};

/// Nesting a skipped value may have (one bit of the container stack each);
/// deeper input is left to serde.
const MAX_DEPTH: u32 = 64;

/// A cursor over one JSON text, noting its layout if given one.
pub(super) struct Scanner<'a, 'l> {
    text: &'a str,
    at: usize,
    layout: Option<&'l mut Layout>,
}

/// Which fields of one object were read: serde refuses a duplicate field.
#[derive(Default)]
pub(super) struct Seen(u32);

impl Seen {
    /// Marks field `bit`; `None` if it was already there.
    pub(super) fn first(&mut self, bit: u32) -> Option<()> {
        let mask = 1 << bit;
        if self.0 & mask != 0 {
            return None;
        }
        self.0 |= mask;
        Some(())
    }
}

impl<'a, 'l> Scanner<'a, 'l> {
    #[cfg(test)]
    pub(super) fn new(text: &'a str) -> Self {
        Scanner { text, at: 0, layout: None }
    }

    /// A scanner that notes the layout of `text` in `layout` (cleared
    /// first; marked complete only if the whole text is read).
    pub(super) fn noting(text: &'a str, layout: &'l mut Layout) -> Self {
        layout.clear();
        Scanner { text, at: 0, layout: Some(layout) }
    }

    /// A scanner placed at byte `at` of `text`.
    pub(super) fn at(text: &'a str, at: usize) -> Self {
        Scanner { text, at, layout: None }
    }

    /// Where the cursor is.
    pub(super) fn position(&self) -> usize {
        self.at
    }

    /// The next byte after whitespace, not consumed.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(&byte) = bytes.get(self.at) {
            if !matches!(byte, b' ' | b'\n' | b'\t' | b'\r') {
                return Some(byte);
            }
            self.at += 1;
        }
        None
    }

    /// Consumes `byte` (after whitespace) if it comes next.
    #[inline]
    fn eat(&mut self, byte: u8) -> bool {
        let next = self.peek() == Some(byte);
        self.at += usize::from(next);
        next
    }

    /// Consumes `byte` or declines.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// Consumes `null` if it comes next.
    #[inline]
    fn eat_null(&mut self) -> bool {
        let null = self.peek() == Some(b'n') && self.text.as_bytes()[self.at..].starts_with(b"null");
        if null {
            self.at += 4;
        }
        null
    }

    /// Consumes a `null` or declines.
    pub(super) fn null(&mut self) -> Option<()> {
        self.eat_null().then_some(())
    }

    /// Only whitespace is left (serde refuses trailing characters).
    pub(super) fn end(mut self) -> Option<()> {
        self.peek().is_none().then_some(())?;
        if let Some(layout) = self.layout {
            layout.complete();
        }
        Some(())
    }

    fn note(&mut self, hole: Hole) {
        if let Some(layout) = &mut self.layout {
            layout.push(hole);
        }
    }

    /// Reads an object, handing each key to `member`, which must consume
    /// the value. Keys with escapes are declined: serde compares them
    /// decoded.
    pub(super) fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            self.expect(b'"')?;
            let (key, escaped) = self.raw_string()?;
            if escaped {
                return None;
            }
            self.expect(b':')?;
            member(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `null` as `None`, anything else read by `value`.
    pub(super) fn nullable<T>(&mut self, value: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.eat_null() { Some(None) } else { value(self).map(Some) }
    }

    /// A list's first element read by `first`, the rest skipped; `null` and
    /// `[]` are `None`.
    pub(super) fn first_of<T>(&mut self, first: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.eat_null() {
            return Some(None);
        }
        self.expect(b'[')?;
        if self.eat(b']') {
            return Some(None);
        }
        let item = first(self)?;
        while self.eat(b',') {
            self.skip()?;
        }
        self.expect(b']')?;
        Some(Some(item))
    }

    /// A string value, decoded.
    pub(super) fn text(&mut self) -> Option<Cow<'a, str>> {
        self.expect(b'"')?;
        let (raw, escaped) = self.raw_string()?;
        if escaped { unescape(raw).map(Cow::Owned) } else { Some(Cow::Borrowed(raw)) }
    }

    /// A string or `null`.
    pub(super) fn optional_text(&mut self) -> Option<Option<Cow<'a, str>>> {
        self.nullable(Self::text)
    }

    /// A string or `null` that is the output an event carries (content,
    /// reasoning, tool-call arguments): noted in the layout as its text.
    pub(super) fn optional_output(&mut self) -> Option<Option<Cow<'a, str>>> {
        self.nullable(|s| {
            let start = s.at_value()?;
            let text = s.text()?;
            s.note(Hole::text(start, s.at));
            Some(text)
        })
    }

    /// Skips one value of any kind, checking it as serde does when it
    /// ignores a value. A skipped string or number is noted in the layout:
    /// another of its kind may stand there.
    pub(super) fn skip(&mut self) -> Option<()> {
        let start = self.at_value()?;
        match self.text.as_bytes()[start] {
            b'"' => {
                self.string_token()?;
                self.note(Hole::string(start, self.at));
            }
            b'-' | b'0'..=b'9' => {
                self.number()?;
                self.note(Hole::number(start, self.at));
            }
            _ => self.skip_value()?,
        }
        Some(())
    }

    /// The position of the next value, past whitespace.
    fn at_value(&mut self) -> Option<usize> {
        self.peek()?;
        Some(self.at)
    }

    /// A skipped string token from the cursor, opening quote included.
    pub(super) fn string_token(&mut self) -> Option<()> {
        self.expect(b'"')?;
        self.raw_string().map(drop)
    }

    /// [`Self::skip`] for any value, noting nothing.
    fn skip_value(&mut self) -> Option<()> {
        // One bit per open container: 1 = object, 0 = list.
        let (mut stack, mut depth) = (0u64, 0u32);
        loop {
            // A value.
            match self.peek()? {
                open @ (b'{' | b'[') => {
                    self.at += 1;
                    if depth == MAX_DEPTH {
                        return None;
                    }
                    let object = open == b'{';
                    let close = if object { b'}' } else { b']' };
                    if !self.eat(close) {
                        stack = stack << 1 | u64::from(object);
                        depth += 1;
                        if object {
                            self.skipped_key()?;
                        }
                        continue;
                    }
                }
                b'"' => self.string_token()?,
                b'n' => self.literal(b"null")?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // After a value: close containers until one continues.
            loop {
                if depth == 0 {
                    return Some(());
                }
                let object = stack & 1 == 1;
                match self.peek()? {
                    b',' => {
                        self.at += 1;
                        if object {
                            self.skipped_key()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.at += 1;
                stack >>= 1;
                depth -= 1;
            }
        }
    }

    /// A key of a skipped object and its colon.
    fn skipped_key(&mut self) -> Option<()> {
        self.string_token()?;
        self.expect(b':')
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.text.as_bytes()[self.at..].starts_with(word).then(|| self.at += word.len())
    }

    /// A number's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    /// What may follow (`01` is refused) is the caller's check, as for any
    /// value.
    #[inline]
    pub(super) fn number(&mut self) -> Option<()> {
        let bytes = self.text.as_bytes();
        let digits = |at: usize| bytes[at.min(bytes.len())..].iter().take_while(|b| b.is_ascii_digit()).count();
        let mut at = self.at + usize::from(bytes.get(self.at) == Some(&b'-'));
        match bytes.get(at)? {
            b'0' => at += 1,
            b'1'..=b'9' => at += digits(at),
            _ => return None,
        }
        if bytes.get(at) == Some(&b'.') {
            let n = digits(at + 1);
            if n == 0 {
                return None;
            }
            at += 1 + n;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            at += usize::from(matches!(bytes.get(at), Some(b'+' | b'-')));
            let n = digits(at);
            if n == 0 {
                return None;
            }
            at += n;
        }
        self.at = at;
        Some(())
    }

    /// The rest of a string whose opening quote was consumed: its raw text
    /// and whether it holds escapes. Escapes are checked for form only
    /// (`\u` takes any four hex digits), control characters refused.
    #[inline(always)]
    fn raw_string(&mut self) -> Option<(&'a str, bool)> {
        let (bytes, start) = (self.text.as_bytes(), self.at);
        let at = start + plain_run(&bytes[start..]);
        self.at = at;
        if bytes.get(at) == Some(&b'"') {
            self.at += 1;
            return Some((self.text.get(start..at)?, false));
        }
        self.escaped_string(start)
    }

    /// [`Self::raw_string`] past its first escape or control character.
    #[inline(never)]
    fn escaped_string(&mut self, start: usize) -> Option<(&'a str, bool)> {
        let bytes = self.text.as_bytes();
        loop {
            match *bytes.get(self.at)? {
                b'"' => {
                    let raw = self.text.get(start..self.at)?;
                    self.at += 1;
                    return Some((raw, true));
                }
                b'\\' => {
                    self.at += match bytes.get(self.at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                        b'u' => {
                            hex4(bytes.get(self.at + 2..self.at + 6)?)?;
                            6
                        }
                        _ => return None,
                    };
                }
                byte if PLAIN[usize::from(byte)] => self.at += 1,
                _ => return None,
            }
        }
    }
}

/// Bytes that may stand in a string as they are.
const PLAIN: [bool; 256] = {
    let mut plain = [true; 256];
    let mut b = 0;
    while b < 0x20 {
        plain[b] = false;
        b += 1;
    }
    plain[b'"' as usize] = false;
    plain[b'\\' as usize] = false;
    plain
};

/// How many bytes from the start may stand in a string as they are. Most
/// strings (keys) are short, so the first eight are checked one by one;
/// longer ones eight at a time with the bit trick serde_json uses (the
/// lowest flagged byte of a word is exact), then the tail one by one.
#[inline(always)]
fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::MAX / 255;
    let mut at = 0;
    while at < 8 {
        if !bytes.get(at).is_some_and(|&b| PLAIN[usize::from(b)]) {
            return at;
        }
        at += 1;
    }
    while let Some(word) = bytes.get(at..at + 8) {
        let mut le = [0; 8];
        le.copy_from_slice(word);
        let w = u64::from_le_bytes(le);
        let control = w.wrapping_sub(ONES * 0x20) & !w;
        let quote = w ^ (ONES * u64::from(b'"'));
        let quote = quote.wrapping_sub(ONES) & !quote;
        let backslash = w ^ (ONES * u64::from(b'\\'));
        let backslash = backslash.wrapping_sub(ONES) & !backslash;
        let found = (control | quote | backslash) & (ONES << 7);
        if found != 0 {
            return at + found.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    while bytes.get(at).is_some_and(|&b| PLAIN[usize::from(b)]) {
        at += 1;
    }
    at
}

/// Four hex digits as a code unit.
fn hex4(digits: &[u8]) -> Option<u16> {
    digits.iter().try_fold(0u16, |n, &d| Some(n << 4 | (d as char).to_digit(16)? as u16))
}

/// Decodes a string's escapes (already checked for form) as serde does for
/// text: surrogates must come in pairs.
fn unescape(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let escape = rest.as_bytes().get(at + 1)?;
        rest = rest.get(at + 2..)?;
        let unit = match escape {
            b'u' => {
                let unit = hex4(rest.as_bytes().get(..4)?)?;
                rest = rest.get(4..)?;
                unit
            }
            other => u16::from(match other {
                b'b' => b'\x08',
                b'f' => b'\x0c',
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                same => *same,
            }),
        };
        let code = match unit {
            0xD800..=0xDBFF => {
                let low = rest.strip_prefix("\\u").and_then(|r| hex4(r.as_bytes().get(..4)?))?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return None;
                }
                rest = rest.get(6..)?;
                0x1_0000 + ((u32::from(unit) - 0xD800) << 10 | (u32::from(low) - 0xDC00))
            }
            unit => u32::from(unit),
        };
        // A lone trailing surrogate is not a char: serde refuses it too.
        out.push(char::from_u32(code)?);
    }
    out.push_str(rest);
    Some(out)
}
