//! The server's blobs in the object store (`shellgate_objects`): the key
//! each kind of blob has, the store the configuration names, and the
//! pieces handlers share to put a request's body there.
//!
//! Keys: `files/<file id>` (Files API uploads and promoted container
//! files), `skills/<skill version id>.zip` (skill bundles, normalized
//! zips), `audit/<name>` (`shellgate audit export --to-object`). The local
//! backend's root is the data directory, so these are the paths the blobs
//! had before there was an object store: a box upgraded in place finds
//! them where they were. On S3 they sit under the configured prefix.
//!
//! A blob is written before its row and removed after it: a crash in
//! between leaves an orphan blob at worst, never a row without its blob.

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::multipart::Field;
use shellgate_objects::{ByteStream, Key, LocalStore, ObjectError, ObjectStore, S3Store};

use crate::config::{Config, ConfigError};
use crate::error::{ApiError, ApiResult};
use crate::http::multipart_error;

/// A Files API file's blob.
pub(crate) fn file_key(id: &str) -> ApiResult<Key> {
    Key::new(format!("files/{id}")).map_err(internal)
}

/// A skill version's bundle.
pub(crate) fn skill_key(version_id: &str) -> ApiResult<Key> {
    Key::new(format!("skills/{version_id}.zip")).map_err(internal)
}

/// An export of the command audit, named by the operator.
pub fn audit_key(name: &str) -> Result<Key, ObjectError> {
    Key::new(format!("audit/{name}"))
}

/// The object store of `config`: the data directory, or the S3 bucket it
/// names. Nothing is asked of a remote service yet ([`check`] does).
pub fn open(config: &Config) -> Result<Arc<dyn ObjectStore>, ConfigError> {
    match config.store.object_location()? {
        None => LocalStore::open(&config.server.data_dir)
            .map(|store| Arc::new(store) as Arc<dyn ObjectStore>)
            .map_err(|e| ConfigError(format!("the data directory's objects: {e}"))),
        Some((location, settings)) => S3Store::new(location, settings)
            .map(|store| Arc::new(store) as Arc<dyn ObjectStore>)
            .map_err(|e| ConfigError(format!("object_store: {e}"))),
    }
}

/// How long the start waits for the store's answer (the S3 client retries
/// an unreachable service for minutes).
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Asks the store whether it can be used, so a bucket that is missing,
/// unreachable or closed to these credentials fails the start, not the
/// first upload.
pub async fn check(objects: &dyn ObjectStore) -> Result<(), ObjectError> {
    tokio::time::timeout(CHECK_TIMEOUT, objects.check())
        .await
        .map_err(|_| {
            ObjectError::Remote(format!(
                "no answer within {} seconds",
                CHECK_TIMEOUT.as_secs()
            ))
        })?
}

/// An object store failure as the API's error (a 500: the server's
/// storage failed, not the request).
pub(crate) fn internal(error: ObjectError) -> ApiError {
    ApiError::internal(error.to_string())
}

/// Reads a Files API file's blob as an open file (for the engine to copy
/// into a container). A file deleted (or expired) since its row was read
/// is gone, as if it had never been: a 404, not a `server_error`.
pub(crate) async fn open_file(
    objects: &dyn ObjectStore,
    scratch: &Path,
    file_id: &str,
) -> ApiResult<std::fs::File> {
    match objects.open_file(&file_key(file_id)?, scratch).await {
        Ok(file) => Ok(file),
        Err(ObjectError::NotFound(_)) => Err(ApiError::not_found("file", file_id)),
        Err(e) => Err(internal(e)),
    }
}

/// Why a body handed to the object store stopped, in the API's words (the
/// store sees only an `io::Error` and says nothing was stored).
#[derive(Default)]
pub(crate) struct BodyFailure(Mutex<Option<ApiError>>);

impl BodyFailure {
    fn set(&self, error: ApiError) -> std::io::Error {
        let message = error.message.clone();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
        std::io::Error::other(message)
    }

    /// The error a put ended with: the body's own, or the store's.
    pub(crate) fn explain(&self, error: ObjectError) -> ApiError {
        let body = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        match (error, body) {
            (ObjectError::Body { .. }, Some(own)) => own,
            (other, _) => internal(other),
        }
    }
}

/// A multipart field as a body, at most `cap` bytes: past it, or on a
/// malformed or stalled upload, the body fails and `failure` says why.
pub(crate) fn field_body<'a>(
    field: &'a mut Field<'_>,
    cap: u64,
    failure: &'a BodyFailure,
) -> ByteStream<'a> {
    Box::pin(futures_util::stream::unfold(
        (field, 0u64, false),
        move |(field, received, done)| async move {
            if done {
                return None;
            }
            match field.chunk().await {
                Ok(None) => None,
                Ok(Some(chunk)) => {
                    let received = received + chunk.len() as u64;
                    if received > cap {
                        let error = failure.set(ApiError::too_large(format!(
                            "Files are limited to {cap} bytes."
                        )));
                        return Some((Err(error), (field, received, true)));
                    }
                    Some((Ok(chunk), (field, received, false)))
                }
                Err(e) => Some((
                    Err(failure.set(multipart_error(e))),
                    (field, received, true),
                )),
            }
        },
    ))
}

/// A stream of chunks (a container file's, masked) as a body, at most
/// `cap` bytes (past it the body fails and `failure` says 413).
pub(crate) fn capped_body<'a>(
    chunks: impl futures_util::Stream<Item = std::io::Result<Vec<u8>>> + Send + 'a,
    cap: u64,
    failure: &'a BodyFailure,
) -> ByteStream<'a> {
    use futures_util::StreamExt;
    let mut received = 0u64;
    Box::pin(chunks.map(move |chunk| {
        let chunk = chunk?;
        received += chunk.len() as u64;
        if received > cap {
            return Err(failure.set(ApiError::too_large(format!(
                "The file is larger than the {cap} bytes a file may have."
            ))));
        }
        Ok(Bytes::from(chunk))
    }))
}

/// A blob stored ahead of its row: removed when this is dropped unless
/// [`Unrecorded::recorded`] said the row was written, so an upload that
/// fails after its blob was stored (a bad field, the client gone while the
/// rest of the form arrives, a failed insert) leaves no blob behind.
pub(crate) struct Unrecorded {
    objects: Arc<dyn ObjectStore>,
    key: Option<Key>,
}

impl Unrecorded {
    pub(crate) fn new(objects: &Arc<dyn ObjectStore>, key: Key) -> Self {
        Self {
            objects: Arc::clone(objects),
            key: Some(key),
        }
    }

    /// Its row is written: the blob stays.
    pub(crate) fn recorded(mut self) {
        self.key = None;
    }
}

impl Drop for Unrecorded {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        let objects = Arc::clone(&self.objects);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = objects.delete(&key).await {
                    tracing::warn!("could not remove the blob of a failed upload: {e}");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_todays_local_layout() {
        assert_eq!(file_key("file-abc").unwrap().as_str(), "files/file-abc");
        assert_eq!(
            skill_key("skillver_1").unwrap().as_str(),
            "skills/skillver_1.zip"
        );
        assert_eq!(
            audit_key("2025-06.jsonl").unwrap().as_str(),
            "audit/2025-06.jsonl"
        );
        // The operator's name stays in audit/.
        for bad in ["../shellgate.db", "/etc/passwd", "", "a/../../b"] {
            assert!(audit_key(bad).is_err(), "{bad}");
        }
    }
}
