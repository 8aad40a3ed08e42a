//! The trait every backend implements, and what moves through it.

use std::fmt;
use std::path::Path;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use crate::error::ObjectError;
use crate::key::Key;

/// A body: chunks of bytes, or the error that cut it off.
pub type ByteStream<'a> = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send + 'a>>;

/// An object being read: its size, and its bytes as they come.
pub struct Object {
    pub size: u64,
    pub body: ByteStream<'static>,
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object").field("size", &self.size).finish()
    }
}

/// An object a folder listing found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: Key,
    /// When it was last written, in seconds since the Unix epoch.
    pub modified_unix: i64,
}

/// Where blobs that outlive a node live.
#[async_trait::async_trait]
pub trait ObjectStore: Send + Sync + fmt::Debug {
    /// Where the objects are, for the log and the start-up summary (never
    /// a credential).
    fn describe(&self) -> String;

    /// Asks the backend whether the store can be used at all (the
    /// directory is there; the bucket exists and these credentials may
    /// list it), so a wrong setting fails a start, not the first upload.
    async fn check(&self) -> Result<(), ObjectError>;

    /// Stores `body` under `key`, replacing what was there, once the whole
    /// body arrived; answers its size. A body that ends in an error
    /// ([`ObjectError::Body`]), a failed write, or this future dropped
    /// before it finished leaves nothing: the old object (if any) stays,
    /// no new one, partial file or unfinished upload appears.
    async fn put(&self, key: &Key, body: ByteStream<'_>) -> Result<u64, ObjectError>;

    /// Reads an object as a stream ([`ObjectError::NotFound`] if there is
    /// none).
    async fn get(&self, key: &Key) -> Result<Object, ObjectError>;

    /// Removes an object; one that is not there is no error.
    async fn delete(&self, key: &Key) -> Result<(), ObjectError>;

    /// An object's size, `None` if there is none.
    async fn size(&self, key: &Key) -> Result<Option<u64>, ObjectError>;

    /// The objects directly in `folder` (keys `folder/<name>`, none deeper),
    /// each with when it was last written: what a sweep of a folder's stale
    /// objects reads. A folder with nothing in it lists empty.
    async fn list_folder(&self, folder: &Key) -> Result<Vec<Listed>, ObjectError>;

    /// An object as an open file, for code that needs a descriptor (the
    /// engine copies a file into a container from one). The default
    /// streams it into an anonymous file (`O_TMPFILE`) in `scratch`, gone
    /// when closed; the local backend opens its own file.
    async fn open_file(&self, key: &Key, scratch: &Path) -> Result<std::fs::File, ObjectError> {
        let object = self.get(key).await?;
        spool(key, object.body, scratch).await
    }
}

/// Stores `bytes` under `key` (a small object already in memory).
pub async fn put_bytes(
    store: &dyn ObjectStore,
    key: &Key,
    bytes: impl Into<Bytes>,
) -> Result<u64, ObjectError> {
    let bytes: Bytes = bytes.into();
    store
        .put(key, Box::pin(futures_util::stream::iter([Ok(bytes)])))
        .await
}

/// Reads a whole object into memory, refusing one larger than `limit`
/// ([`ObjectError::TooLarge`]) before or while it is read.
pub async fn read_to_vec(
    store: &dyn ObjectStore,
    key: &Key,
    limit: u64,
) -> Result<Vec<u8>, ObjectError> {
    let too_large = || ObjectError::TooLarge {
        key: key.to_string(),
        limit,
    };
    let mut object = store.get(key).await?;
    if object.size > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(object.size).unwrap_or(0));
    while let Some(chunk) = object.body.next().await {
        let chunk = chunk.map_err(|source| ObjectError::Io {
            key: key.to_string(),
            source,
        })?;
        if (bytes.len() + chunk.len()) as u64 > limit {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The size of the chunks files are read in.
const READ_CHUNK: usize = 64 * 1024;

/// A file's bytes as a stream, read in 64 KiB chunks as they are wanted.
pub fn file_stream(file: tokio::fs::File) -> ByteStream<'static> {
    Box::pin(futures_util::stream::unfold(
        Some(file),
        |file| async move {
            use tokio::io::AsyncReadExt;
            let mut file = file?;
            let mut buffer = bytes::BytesMut::zeroed(READ_CHUNK);
            match file.read(&mut buffer).await {
                Ok(0) => None,
                Ok(n) => {
                    buffer.truncate(n);
                    Some((Ok(buffer.freeze()), Some(file)))
                }
                // The error ends the stream.
                Err(e) => Some((Err(e), None)),
            }
        },
    ))
}

/// Writes `body` into an anonymous file in `scratch` and rewinds it.
async fn spool(
    key: &Key,
    mut body: ByteStream<'static>,
    scratch: &Path,
) -> Result<std::fs::File, ObjectError> {
    use tokio::io::{AsyncSeekExt, AsyncWriteExt};
    let io = |source| ObjectError::Io {
        key: key.to_string(),
        source,
    };
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(scratch)
        .await
        .map_err(io)?;
    let mut file = file;
    while let Some(chunk) = body.next().await {
        file.write_all(&chunk.map_err(io)?).await.map_err(io)?;
    }
    file.flush().await.map_err(io)?;
    file.rewind().await.map_err(io)?;
    Ok(file.into_std().await)
}

/// How much a [`BodyWriter`] gathers before it sends a chunk.
const WRITE_CHUNK: usize = 64 * 1024;

/// A body written by blocking code (`io::Write`) while a put reads it.
/// Chunks wait in a short queue: the writer blocks while the store
/// catches up, so nothing piles up in memory. The body ends only at
/// [`BodyWriter::finish`]; a writer dropped before (its producer failed)
/// or [`BodyWriter::fail`]ed ends it in an error, and nothing is stored.
pub fn blocking_body() -> (BodyWriter, ByteStream<'static>) {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Piece>(4);
    let body = futures_util::stream::unfold(Some(receiver), |receiver| async move {
        let mut receiver = receiver?;
        match receiver.recv().await {
            Some(Piece::Chunk(bytes)) => Some((Ok(bytes), Some(receiver))),
            Some(Piece::Failed(error)) => Some((Err(error), None)),
            Some(Piece::End) => None,
            None => Some((
                Err(std::io::Error::other(
                    "the body's writer stopped before its end",
                )),
                None,
            )),
        }
    });
    let writer = BodyWriter {
        sender,
        buffer: Vec::with_capacity(WRITE_CHUNK),
    };
    (writer, Box::pin(body))
}

enum Piece {
    Chunk(Bytes),
    Failed(std::io::Error),
    End,
}

/// The writing end of [`blocking_body`]: for blocking threads only (it
/// waits for the put to take each chunk).
pub struct BodyWriter {
    sender: tokio::sync::mpsc::Sender<Piece>,
    buffer: Vec<u8>,
}

impl BodyWriter {
    fn send(&mut self, piece: Piece) -> std::io::Result<()> {
        self.sender.blocking_send(piece).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the object store stopped reading the body",
            )
        })
    }

    fn send_buffer(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(WRITE_CHUNK),
        ));
        self.send(Piece::Chunk(chunk))
    }

    /// Ends the body: the put may commit it.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.send_buffer()?;
        self.send(Piece::End)
    }

    /// Ends the body in `error`: the put stores nothing.
    pub fn fail(mut self, error: std::io::Error) {
        let _ = self.send(Piece::Failed(error));
    }
}

impl std::io::Write for BodyWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= WRITE_CHUNK {
            self.send_buffer()?;
        }
        Ok(bytes.len())
    }

    /// Sends what was gathered (the body does not end).
    fn flush(&mut self) -> std::io::Result<()> {
        self.send_buffer()
    }
}
