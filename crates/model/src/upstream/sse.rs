//! The one reader of server-sent event streams (every upstream adapter's,
//! and `shellgate local`'s of its own server), as the EventSource spec
//! (WHATWG HTML, "Parsing an event stream") reads them, with caps:
//!
//! - lines end at `\n`, `\r\n` or a lone `\r`; a line may be at most
//!   [`SseLimits::max_line_bytes`] long, found out while it arrives (a line
//!   without end is never buffered past the cap);
//! - `data:` lines of one event are joined with `\n`, and the event is
//!   dispatched at the blank line that ends it; its data may be at most
//!   [`SseLimits::max_event_bytes`];
//! - `event:` names the event, `id:` sets the last event id (unless it
//!   holds a NUL), `retry:` and unknown fields are ignored, and so are
//!   comments (lines beginning with `:`); one space after the colon is
//!   not part of the value; a line without a colon is a field with an
//!   empty value;
//! - an event without data is not dispatched (the spec's rule), nor is
//!   the half line a stream ends in. One leniency: data still waiting for
//!   its blank line when the stream ends is dispatched (the reader before
//!   this one did, and a model server that omits the last blank line
//!   should not lose its last event).
//!
//! Linear in the stream's length: each byte is looked at once for the end
//! of its line, and only partial lines are moved.

use std::fmt;

/// Bounds on one stream's lines and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    /// Most bytes of one line (without its end).
    pub max_line_bytes: usize,
    /// Most bytes of one event's data (its `data:` lines joined).
    pub max_event_bytes: usize,
}

impl SseLimits {
    /// 32 MiB each: an event may hold a whole answer (the Responses API's
    /// `response.completed` repeats it), so the caps are an answer's.
    pub const DEFAULT: Self = Self {
        max_line_bytes: 32 * 1024 * 1024,
        max_event_bytes: 32 * 1024 * 1024,
    };
}

impl Default for SseLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// Its `event:` name; `message` when it has none.
    pub name: String,
    /// Its `data:` lines, joined with `\n`.
    pub data: String,
    /// The last event id so far (the spec's, which carries over).
    pub id: String,
}

/// A stream broke a cap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("a line of the event stream is longer than the limit of {limit} bytes")]
    LineTooLong { limit: usize },
    #[error("an event of the event stream has more than the limit of {limit} bytes of data")]
    EventTooLarge { limit: usize },
}

/// Why reading stopped: a cap, or whatever the caller's handler said.
#[derive(Debug)]
pub enum Stop<E> {
    Sse(SseError),
    Handler(E),
}

impl<E: fmt::Display> fmt::Display for Stop<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Sse(e) => e.fmt(f),
            Stop::Handler(e) => e.fmt(f),
        }
    }
}

/// An event stream being read, chunk by chunk.
#[derive(Debug, Default)]
pub struct EventReader {
    limits: SseLimits,
    /// A partial line, waiting for its end.
    pending: Vec<u8>,
    /// The last chunk ended in `\r`: a `\n` starting the next one belongs
    /// to that line's end.
    after_cr: bool,
    /// The event being built.
    data: String,
    has_data: bool,
    name: String,
    last_id: String,
    /// Bytes examined for a line's end, and bytes moved: for tests.
    examined: usize,
    moved: usize,
}

impl EventReader {
    pub fn new(limits: SseLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Adds `chunk`, calling `each` with every event it completes; `each`
    /// returns `false` to stop (then so does this, and the rest of the
    /// chunk is not read).
    pub fn push<E>(
        &mut self,
        chunk: &[u8],
        mut each: impl FnMut(Event) -> Result<bool, E>,
    ) -> Result<bool, Stop<E>> {
        let mut rest = chunk;
        if self.after_cr {
            self.after_cr = false;
            if let Some(tail) = rest.strip_prefix(b"\n") {
                rest = tail;
            }
        }
        // Lines wholly inside `rest` are read in place; only the bytes
        // after the last line end join `pending`.
        loop {
            let Some(offset) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') else {
                self.examined += rest.len();
                if self.pending.len() + rest.len() > self.limits.max_line_bytes {
                    return Err(Stop::Sse(SseError::LineTooLong {
                        limit: self.limits.max_line_bytes,
                    }));
                }
                self.moved += rest.len();
                self.pending.extend_from_slice(rest);
                return Ok(true);
            };
            self.examined += offset + 1;
            if self.pending.len() + offset > self.limits.max_line_bytes {
                return Err(Stop::Sse(SseError::LineTooLong {
                    limit: self.limits.max_line_bytes,
                }));
            }
            let end = rest[offset];
            let go_on = if self.pending.is_empty() {
                self.line(&rest[..offset], &mut each)?
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(&rest[..offset]);
                let go_on = self.line(&line, &mut each)?;
                line.clear();
                self.pending = line;
                go_on
            };
            rest = &rest[offset + 1..];
            if end == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            if !go_on {
                return Ok(false);
            }
        }
    }

    /// The stream ended: the event still waiting for its blank line, if
    /// it has data (see the module's note; the half line after the last
    /// line end is dropped, as the spec says).
    pub fn finish(&mut self) -> Option<Event> {
        self.pending.clear();
        self.take_event()
    }

    /// One whole line, without its end.
    fn line<E>(
        &mut self,
        line: &[u8],
        each: &mut impl FnMut(Event) -> Result<bool, E>,
    ) -> Result<bool, Stop<E>> {
        if line.is_empty() {
            return match self.take_event() {
                Some(event) => each(event).map_err(Stop::Handler),
                None => Ok(true),
            };
        }
        if line[0] == b':' {
            return Ok(true);
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                // Counted as decoded: each invalid byte becomes a U+FFFD
                // of three bytes, which the cap must see.
                let value = String::from_utf8_lossy(value);
                let joined = self.data.len() + usize::from(self.has_data) + value.len();
                if joined > self.limits.max_event_bytes {
                    return Err(Stop::Sse(SseError::EventTooLarge {
                        limit: self.limits.max_event_bytes,
                    }));
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => self.name = String::from_utf8_lossy(value).into_owned(),
            b"id" if !value.contains(&0) => {
                self.last_id = String::from_utf8_lossy(value).into_owned();
            }
            _ => {}
        }
        Ok(true)
    }

    /// The event built so far, if it has data; the next starts afresh.
    fn take_event(&mut self) -> Option<Event> {
        let name = std::mem::take(&mut self.name);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(Event {
            name: if name.is_empty() {
                "message".to_owned()
            } else {
                name
            },
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
        })
    }
}

/// The invariants of the reader over any bytes, shared by the unit tests
/// and the fuzz targets (`fuzz/fuzz_targets/sse.rs`, and the stable runner).
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing {
    use super::*;

    /// Inputs to start from: streams as the upstreams write them.
    pub fn seeds() -> Vec<Vec<u8>> {
        [
            &b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"[..],
            b"event: content_block_delta\r\ndata: {\"type\":\"x\"}\r\n\r\n: ping\r\n\r\n",
            b"id: 1\nevent: response.completed\ndata: {\ndata: }\n\nretry: 5\n\n",
            b"data:a\rdata:b\r\rdata",
        ]
        .iter()
        .map(|seed| seed.to_vec())
        .collect()
    }

    /// Any bytes, cut into chunks anywhere: the reader never panics, no
    /// event's data is over its cap, and the events do not depend on where
    /// the chunks were cut.
    pub fn check_events(bytes: &[u8]) {
        let limits = SseLimits {
            max_line_bytes: 64,
            max_event_bytes: 96,
        };
        let whole = read(bytes, bytes.len().max(1), limits);
        let cut = bytes.first().map_or(1, |b| usize::from(*b % 7) + 1);
        let pieces = read(bytes, cut, limits);
        assert_eq!(whole, pieces, "chunks of {cut} bytes");
        if let Ok(events) = &whole {
            for event in events {
                assert!(event.data.len() <= limits.max_event_bytes);
            }
        }
    }

    /// The events of `bytes` fed `chunk` bytes at a time, or the cap hit.
    fn read(bytes: &[u8], chunk: usize, limits: SseLimits) -> Result<Vec<Event>, SseError> {
        let mut reader = EventReader::new(limits);
        let mut events = Vec::new();
        for piece in bytes.chunks(chunk) {
            let pushed = reader.push(piece, |event| {
                events.push(event);
                Ok::<_, std::convert::Infallible>(true)
            });
            match pushed {
                Ok(_) => {}
                Err(Stop::Sse(e)) => return Err(e),
                Err(Stop::Handler(never)) => match never {},
            }
        }
        events.extend(reader.finish());
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(stream: &[u8]) -> Vec<Event> {
        events_within(stream, SseLimits::DEFAULT).unwrap()
    }

    fn events_within(stream: &[u8], limits: SseLimits) -> Result<Vec<Event>, SseError> {
        let mut reader = EventReader::new(limits);
        let mut seen = Vec::new();
        // A byte at a time and whole: the same events.
        let mut one = EventReader::new(limits);
        let mut by_byte = Vec::new();
        for byte in stream.chunks(1) {
            if let Err(Stop::Sse(e)) = one.push(byte, |event| {
                by_byte.push(event);
                Ok::<_, ()>(true)
            }) {
                by_byte.clear();
                let whole = reader.push(stream, |_| Ok::<_, ()>(true));
                assert!(matches!(whole, Err(Stop::Sse(ref again)) if *again == e));
                return Err(e);
            }
        }
        by_byte.extend(one.finish());
        match reader.push(stream, |event| {
            seen.push(event);
            Ok::<_, ()>(true)
        }) {
            Ok(_) => {}
            Err(Stop::Sse(e)) => return Err(e),
            Err(Stop::Handler(())) => unreachable!(),
        }
        seen.extend(reader.finish());
        assert_eq!(seen, by_byte);
        Ok(seen)
    }

    fn data(stream: &[u8]) -> Vec<String> {
        events(stream).into_iter().map(|e| e.data).collect()
    }

    #[test]
    fn multi_line_data_is_joined_with_newlines_at_the_blank_line() {
        assert_eq!(
            data(b"data: a\ndata: b\ndata:\n\ndata: c\n\n"),
            ["a\nb\n", "c"]
        );
        // Only one space after the colon goes; a line without a colon is
        // a field with no value.
        assert_eq!(data(b"data:  x\ndata\n\n"), [" x\n"]);
    }

    #[test]
    fn every_line_end_the_spec_names_ends_a_line() {
        assert_eq!(
            data(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"),
            ["a", "b", "c"]
        );
        // A `\r\n` split across chunks is one line end, not two.
        let mut reader = EventReader::new(SseLimits::DEFAULT);
        let mut seen = Vec::new();
        for piece in [&b"data: a\r"[..], b"\ndata: b\r", b"\n\r", b"\n"] {
            reader
                .push(piece, |e| {
                    seen.push(e.data);
                    Ok::<_, ()>(true)
                })
                .unwrap();
        }
        assert_eq!(seen, ["a\nb"]);
    }

    #[test]
    fn event_names_ids_and_comments_follow_the_spec() {
        let seen = events(b": a comment\nevent: delta\nid: 7\nretry: 10\nfoo: bar\ndata: x\n\ndata: y\n\nid: 8\x00\ndata: z\n\n");
        assert_eq!(seen.len(), 3);
        assert_eq!((seen[0].name.as_str(), seen[0].id.as_str()), ("delta", "7"));
        // The name is the event's; the id carries over, a NUL one is ignored.
        assert_eq!(
            (seen[1].name.as_str(), seen[1].id.as_str()),
            ("message", "7")
        );
        assert_eq!(seen[2].id, "7");
    }

    #[test]
    fn events_without_data_and_a_trailing_half_line_are_not_dispatched() {
        assert!(events(b"event: ping\n\n: keep-alive\n\n\n\n").is_empty());
        // Data waiting for its blank line at the end is dispatched; a
        // half line is not.
        assert_eq!(data(b"data: last\n"), ["last"]);
        assert_eq!(data(b"data: one\n\ndata: cut"), ["one"]);
    }

    #[test]
    fn a_line_over_its_cap_fails_before_it_ends() {
        let limits = SseLimits {
            max_line_bytes: 10,
            max_event_bytes: 100,
        };
        assert_eq!(events_within(b"data: 1234\n\n", limits).unwrap().len(), 1);
        assert_eq!(
            events_within(b"data: 12345\n\n", limits),
            Err(SseError::LineTooLong { limit: 10 })
        );
        // A line without end is refused as soon as it passes the cap.
        let mut reader = EventReader::new(limits);
        assert!(reader.push(b"data: 1234", |_| Ok::<_, ()>(true)).is_ok());
        assert!(matches!(
            reader.push(b"5", |_| Ok::<_, ()>(true)),
            Err(Stop::Sse(SseError::LineTooLong { limit: 10 }))
        ));
        // Comments count too: a keep-alive without end is no way around it.
        assert!(events_within(&[b':'; 11], limits).is_err());
    }

    #[test]
    fn an_event_over_its_cap_fails_though_each_line_is_short() {
        let limits = SseLimits {
            max_line_bytes: 12,
            max_event_bytes: 9,
        };
        // "abcd\nefgh" is 9 bytes: at the cap.
        assert_eq!(
            events_within(b"data: abcd\ndata: efgh\n\n", limits).unwrap()[0].data,
            "abcd\nefgh"
        );
        assert_eq!(
            events_within(b"data: abcd\ndata: efghi\n\n", limits),
            Err(SseError::EventTooLarge { limit: 9 })
        );
        // Bytes that are not UTF-8 count as what they decode to (found by
        // the fuzz target: three bytes each).
        assert_eq!(
            events_within(b"data: \xff\xff\xff\xff\n\n", limits),
            Err(SseError::EventTooLarge { limit: 9 })
        );
        // The cap is per event: many events of the cap are fine.
        let many = b"data: abcd\ndata: efgh\n\n".repeat(100);
        assert_eq!(events_within(&many, limits).unwrap().len(), 100);
    }

    #[test]
    fn a_handler_that_stops_stops_the_reader() {
        let mut reader = EventReader::new(SseLimits::DEFAULT);
        let mut seen = 0;
        let go_on = reader
            .push(b"data: 1\n\ndata: 2\n\n", |_| {
                seen += 1;
                Ok::<_, ()>(false)
            })
            .unwrap();
        assert!(!go_on);
        assert_eq!(seen, 1);
        assert!(matches!(
            reader.push(b"data: 3\n\n", |_| Err("no")),
            Err(Stop::Handler("no"))
        ));
    }

    #[test]
    fn lines_are_cut_in_linear_time_however_the_bytes_come() {
        // 16 MiB of events in one chunk: nothing moved.
        let event = format!("data: {{\"x\":\"{}\"}}\n\n", "a".repeat(100));
        let many = event.repeat(16 * 1024 * 1024 / event.len());
        let mut reader = EventReader::new(SseLimits::DEFAULT);
        let mut count = 0;
        reader
            .push(many.as_bytes(), |e| {
                assert_eq!(e.data.len(), event.len() - "data: \n\n".len());
                count += 1;
                Ok::<_, ()>(true)
            })
            .unwrap();
        assert_eq!(count, many.len() / event.len());
        assert_eq!(reader.examined, many.len());
        assert_eq!(reader.moved, 0);
        // One 16 MiB line, 8 KiB at a time: each byte examined and moved
        // once (the quadratic cases of the first reader).
        let huge = format!("data: {}\n\n", "b".repeat(16 * 1024 * 1024));
        let mut reader = EventReader::new(SseLimits::DEFAULT);
        let mut seen = Vec::new();
        for piece in huge.as_bytes().chunks(8 * 1024) {
            reader
                .push(piece, |e| {
                    seen.push(e.data.len());
                    Ok::<_, ()>(true)
                })
                .unwrap();
        }
        assert_eq!(seen, vec![16 * 1024 * 1024]);
        assert_eq!(reader.examined, huge.len());
        assert!(reader.moved < huge.len());
    }

    #[test]
    fn the_fuzz_invariants_hold_on_tricky_streams() {
        for stream in [
            &b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"[..],
            b"data: 0123456789012345678901234567890123456789012345678901234567890123",
            b"\xff\xfe data: \xc3\n\n",
            b"data:x\ndata:y\ndata:z\n",
        ] {
            fuzzing::check_events(stream);
        }
    }
}
