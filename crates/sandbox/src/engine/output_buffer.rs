//! A process's output, kept by byte offset in its one output sequence: at
//! most `OUTPUT_BUFFER` bytes (older bytes are dropped and counted), read
//! from any offset, and how much may still come before it holds a whole
//! buffer nobody read (which paces the process's pump, see `processes`).

use std::collections::VecDeque;

use shellgate_sandbox_api::process::{process_limits, OutputChunk, ProcessStream};

/// Largest piece of output kept as one chunk (reads are merged up to it).
const CHUNK: usize = 64 * 1024;

/// Output kept, by offset in the process's one output sequence.
#[derive(Default)]
pub(super) struct Buffer {
    chunks: VecDeque<(ProcessStream, u64, Vec<u8>)>,
    /// Offset of the oldest byte kept.
    pub start: u64,
    /// Offset past the newest byte (= bytes produced).
    pub end: u64,
    /// The furthest offset a reader has been given: bytes past it are
    /// unread (see `room`).
    read_mark: u64,
}

impl Buffer {
    pub fn push(&mut self, stream: ProcessStream, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        match self.chunks.back_mut() {
            Some((last, _, data)) if *last == stream && data.len() + bytes.len() <= CHUNK => {
                data.extend_from_slice(bytes)
            }
            _ => self.chunks.push_back((stream, self.end, bytes.to_vec())),
        }
        self.end += bytes.len() as u64;
        // Older bytes go, the newest `OUTPUT_BUFFER` stay.
        while self.end - self.start > process_limits::OUTPUT_BUFFER as u64 {
            let excess = (self.end - self.start - process_limits::OUTPUT_BUFFER as u64) as usize;
            let Some((_, offset, data)) = self.chunks.front_mut() else {
                break;
            };
            if data.len() <= excess {
                self.start += data.len() as u64;
                self.chunks.pop_front();
            } else {
                data.drain(..excess);
                *offset += excess as u64;
                self.start += excess as u64;
            }
        }
    }

    /// Bytes that may still come before the buffer holds a whole
    /// `OUTPUT_BUFFER` nobody has read: while there are, the pump reads at
    /// full speed; once there are none, only at the unread rate (see
    /// `unread`), so output nobody reads does not spin the server.
    pub fn room(&self) -> usize {
        let unread = self.end - self.read_mark.max(self.start);
        process_limits::OUTPUT_BUFFER.saturating_sub(unread as usize)
    }

    /// A reader was given everything before `offset`; whether that moved
    /// the mark (and so made room).
    pub fn mark_read(&mut self, offset: u64) -> bool {
        let offset = offset.min(self.end);
        if offset > self.read_mark {
            self.read_mark = offset;
            return true;
        }
        false
    }

    /// At most `max` bytes from `after` (clamped to what is kept), and how
    /// many bytes past `after` are no longer kept.
    pub fn read(&self, after: u64, max: usize) -> (Vec<OutputChunk>, u64, u64) {
        let from = after.clamp(self.start, self.end);
        let dropped = self.start.saturating_sub(after);
        let mut chunks = Vec::new();
        let mut at = from;
        let mut left = max;
        for (stream, offset, data) in &self.chunks {
            let chunk_end = offset + data.len() as u64;
            if chunk_end <= at || left == 0 {
                if left == 0 {
                    break;
                }
                continue;
            }
            let skip = (at - offset) as usize;
            let take = (data.len() - skip).min(left);
            chunks.push(OutputChunk {
                stream: *stream,
                offset: at,
                data: data[skip..skip + take].to_vec(),
            });
            at += take as u64;
            left -= take;
        }
        (chunks, at, dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_keeps_the_newest_bytes_and_counts_what_it_dropped() {
        let mut buffer = Buffer::default();
        buffer.push(ProcessStream::Stdout, b"hello ");
        buffer.push(ProcessStream::Stderr, b"world");
        let (chunks, next, dropped) = buffer.read(0, 100);
        assert_eq!((next, dropped, chunks.len()), (11, 0, 2));
        assert_eq!(chunks[1].offset, 6);
        let (chunks, next, _) = buffer.read(3, 4);
        assert_eq!(chunks[0].data, b"lo ");
        assert_eq!(chunks[1].data, b"w");
        assert_eq!(next, 7);
        // Far past the cap: memory stays bounded, the offsets go on.
        let block = vec![b'y'; 100_000];
        for _ in 0..50 {
            buffer.push(ProcessStream::Pty, &block);
        }
        assert_eq!(buffer.end, 11 + 5_000_000);
        let kept: usize = buffer.chunks.iter().map(|(_, _, d)| d.len()).sum();
        assert_eq!(kept, process_limits::OUTPUT_BUFFER);
        assert_eq!(buffer.end - buffer.start, kept as u64);
        let (chunks, next, dropped) = buffer.read(0, 10);
        assert_eq!(dropped, buffer.start);
        assert_eq!(chunks[0].offset, buffer.start);
        assert_eq!(next, buffer.start + 10);
        // Past the end: nothing, at the end.
        let (chunks, next, dropped) = buffer.read(buffer.end + 5, 10);
        assert!(chunks.is_empty());
        assert_eq!((next, dropped), (buffer.end, 0));
    }
}
