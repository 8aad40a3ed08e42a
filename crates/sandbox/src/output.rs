//! Capped capture of a command's output stream.
//!
//! A command may write gigabytes; the engine keeps O(cap) bytes: the first
//! bytes and a ring of the last bytes, and counts everything. The result
//! holds the head **and** the tail, with a marker saying how much was cut,
//! and never more than `max_chars` characters. Invalid UTF-8 is replaced.

/// The longest UTF-8 encoding of one character.
const MAX_UTF8_BYTES: usize = 4;

/// Accumulates one stream.
#[derive(Debug)]
pub struct CappedOutput {
    max_chars: usize,
    /// Bytes kept from the start (at most `limit` bytes).
    head: Vec<u8>,
    /// Ring buffer of the last `limit` bytes written after the head filled.
    tail: Vec<u8>,
    tail_start: usize,
    limit: usize,
    total_bytes: u64,
    /// Characters seen, counted as UTF-8 lead bytes.
    total_chars: u64,
}

impl CappedOutput {
    pub fn new(max_chars: usize) -> Self {
        let limit = max_chars.saturating_mul(MAX_UTF8_BYTES).max(MAX_UTF8_BYTES);
        Self {
            max_chars,
            head: Vec::new(),
            tail: Vec::new(),
            tail_start: 0,
            limit,
            total_bytes: 0,
            total_chars: 0,
        }
    }

    /// Every byte seen so far.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    pub fn push(&mut self, mut chunk: &[u8]) {
        self.total_bytes += chunk.len() as u64;
        // A lead byte is any byte that is not a continuation byte (10xxxxxx).
        self.total_chars += chunk.iter().filter(|&&b| (b as i8) >= -0x40).count() as u64;
        if self.head.len() < self.limit {
            let take = chunk.len().min(self.limit - self.head.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        if chunk.len() >= self.limit {
            self.tail.clear();
            self.tail
                .extend_from_slice(&chunk[chunk.len() - self.limit..]);
            self.tail_start = 0;
            return;
        }
        // Into the ring, a slice at a time: first what fills it, then over
        // its oldest bytes from `tail_start` on, wrapping at its end.
        while !chunk.is_empty() {
            if self.tail.len() < self.limit {
                let take = chunk.len().min(self.limit - self.tail.len());
                self.tail.extend_from_slice(&chunk[..take]);
                chunk = &chunk[take..];
            } else {
                let take = chunk.len().min(self.limit - self.tail_start);
                self.tail[self.tail_start..self.tail_start + take].copy_from_slice(&chunk[..take]);
                self.tail_start = (self.tail_start + take) % self.limit;
                chunk = &chunk[take..];
            }
        }
    }

    fn tail_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.tail.len());
        out.extend_from_slice(&self.tail[self.tail_start..]);
        out.extend_from_slice(&self.tail[..self.tail_start]);
        out
    }

    /// The text to report: everything if it fits, else head, marker, tail.
    pub fn finish(self) -> String {
        let dropped_bytes = self.total_bytes - (self.head.len() + self.tail.len()) as u64;
        if dropped_bytes == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&self.tail_bytes());
            let text = String::from_utf8_lossy(&all).into_owned();
            if text.chars().count() <= self.max_chars {
                return text;
            }
            return truncate_middle(&text, &text, self.total_chars, self.max_chars);
        }
        let head = String::from_utf8_lossy(&self.head).into_owned();
        let tail_bytes = self.tail_bytes();
        // Skip continuation bytes at the cut so the tail starts on a character.
        let start = tail_bytes
            .iter()
            .position(|&b| (b as i8) >= -0x40)
            .unwrap_or(tail_bytes.len());
        let tail = String::from_utf8_lossy(&tail_bytes[start..]).into_owned();
        truncate_middle(&head, &tail, self.total_chars, self.max_chars)
    }
}

/// Keeps the first and last characters of a stream of `total_chars`
/// characters whose start is `head` and whose end is `tail`.
fn truncate_middle(head: &str, tail: &str, total_chars: u64, max_chars: usize) -> String {
    // The marker's length depends on the count it reports; size it for the
    // largest count, which only makes the kept text a little shorter.
    let marker_len = marker(total_chars).chars().count();
    if max_chars <= marker_len + 2 {
        return head.chars().take(max_chars).collect();
    }
    let budget = max_chars - marker_len;
    let keep_head = budget / 2;
    let keep_tail = budget - keep_head;
    let kept_tail_start = tail.chars().count().saturating_sub(keep_tail);
    let cut = total_chars.saturating_sub((keep_head + keep_tail) as u64);
    let mut out: String = head.chars().take(keep_head).collect();
    out.push_str(&marker(cut));
    out.extend(tail.chars().skip(kept_tail_start));
    out
}

fn marker(cut_chars: u64) -> String {
    format!("\n…[{cut_chars} characters truncated]…\n")
}

/// Turns a byte stream into text deltas for streaming: never splits a
/// character across deltas, and stops after `budget` characters (the final
/// result still carries the head and tail).
#[derive(Debug)]
pub struct DeltaEncoder {
    carry: Vec<u8>,
    budget: usize,
}

impl DeltaEncoder {
    pub fn new(budget: usize) -> Self {
        Self {
            carry: Vec::new(),
            budget,
        }
    }

    /// The text of `chunk` to stream now (possibly empty).
    pub fn push(&mut self, chunk: &[u8]) -> String {
        if self.budget == 0 {
            return String::new();
        }
        self.carry.extend_from_slice(chunk);
        // Keep an incomplete trailing character for the next chunk.
        let mut end = self.carry.len();
        let start_of_last = self
            .carry
            .iter()
            .rposition(|&b| (b as i8) >= -0x40)
            .unwrap_or(0);
        let needed = match self.carry.get(start_of_last) {
            Some(b) if *b >= 0xF0 => 4,
            Some(b) if *b >= 0xE0 => 3,
            Some(b) if *b >= 0xC0 => 2,
            _ => 1,
        };
        if self.carry.len() - start_of_last < needed {
            end = start_of_last;
        }
        let text = String::from_utf8_lossy(&self.carry[..end]).into_owned();
        self.carry.drain(..end);
        let text: String = text.chars().take(self.budget).collect();
        self.budget -= text.chars().count();
        text
    }
}

#[cfg(test)]
mod delta_tests {
    use super::*;

    #[test]
    fn deltas_never_split_characters_and_respect_the_budget() {
        let mut encoder = DeltaEncoder::new(5);
        let snow = "☃".as_bytes();
        assert_eq!(encoder.push(&snow[..1]), "");
        assert_eq!(encoder.push(&snow[1..]), "☃");
        assert_eq!(encoder.push(b"abcdefgh"), "abcd");
        assert_eq!(encoder.push(b"more"), "");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(max: usize, chunks: &[&[u8]]) -> String {
        let mut out = CappedOutput::new(max);
        for chunk in chunks {
            out.push(chunk);
        }
        out.finish()
    }

    #[test]
    fn short_output_is_returned_whole() {
        assert_eq!(capture(100, &[b"hello ", b"world\n"]), "hello world\n");
    }

    #[test]
    fn long_output_keeps_head_and_tail_within_the_cap() {
        let data: Vec<u8> = (0..100_000).map(|i| b'a' + (i % 26) as u8).collect();
        for chunking in [1usize, 7, 4096, 100_000] {
            let mut out = CappedOutput::new(1000);
            for chunk in data.chunks(chunking) {
                out.push(chunk);
            }
            let text = out.finish();
            assert!(
                text.chars().count() <= 1000,
                "{} chars",
                text.chars().count()
            );
            assert!(text.starts_with("abcdefghij"));
            let tail: String = String::from_utf8(data[data.len() - 20..].to_vec()).unwrap();
            assert!(text.ends_with(&tail));
            assert!(text.contains("characters truncated"));
        }
    }

    #[test]
    fn the_marker_counts_the_cut_characters() {
        let text = capture(100, &["x".repeat(1000).as_bytes()]);
        let kept = text.chars().filter(|&c| c == 'x').count() as u64;
        let cut: u64 = text
            .split('[')
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(kept + cut, 1000);
    }

    #[test]
    fn multibyte_characters_count_as_one() {
        let snow = "☃".repeat(50);
        assert_eq!(capture(50, &[snow.as_bytes()]), snow);
        let text = capture(40, &["☃".repeat(10_000).as_bytes()]);
        assert!(text.chars().count() <= 40);
        assert!(!text.contains('\u{FFFD}'), "cut inside a character: {text}");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(
            capture(100, &[b"ok \xff\xfe done"]),
            "ok \u{FFFD}\u{FFFD} done"
        );
    }

    #[test]
    fn tiny_caps_still_hold() {
        let text = capture(5, &[b"0123456789abcdef"]);
        assert_eq!(text, "01234");
    }

    #[test]
    fn memory_stays_bounded() {
        let mut out = CappedOutput::new(16);
        let chunk = vec![b'z'; 1 << 16];
        for _ in 0..64 {
            out.push(&chunk);
        }
        assert!(out.head.capacity() + out.tail.capacity() < 1024);
        assert_eq!(out.total_bytes(), 64 << 16);
    }
}
