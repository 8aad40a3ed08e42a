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

/// Where blobs that outlive a node live.
#[async_trait::async_trait]
pub trait ObjectStore: Send + Sync + fmt::Debug {
    /// Where the objects are, for the log and the start-up summary (never
    /// a credential).
    fn describe(&self) -> String;

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
