//! The S3 backend: any S3-compatible service, through `object_store`.
//!
//! A put reads its body into one part-sized buffer: a body that ends
//! within it is one `PUT` (S3 commits it whole or not at all); a longer
//! one is a multipart upload, parts of [`PART_BYTES`] sent two at a time
//! while the next fills, completed only after the last. An upload that
//! fails is aborted, and so is one whose future is dropped (the abort is
//! spawned as the future goes): S3 keeps no parts of it. Only a process
//! killed mid-upload can leave parts behind, which a bucket lifecycle rule
//! (`AbortIncompleteMultipartUpload`) removes.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};

use crate::error::ObjectError;
use crate::key::Key;
use crate::object::{ByteStream, Listed, Object, ObjectStore};

/// The size of a multipart upload's parts (S3 asks at least 5 MiB of every
/// part but the last); a body shorter than one is a single `PUT`.
pub const PART_BYTES: usize = 8 << 20;
/// Parts sent at once (the memory an upload holds is this many parts and
/// the one filling).
const PARTS_IN_FLIGHT: usize = 2;

/// `s3://bucket/prefix`, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    /// Where under the bucket the objects go: empty, or segments without
    /// a leading or trailing `/`.
    pub prefix: String,
}

impl S3Location {
    /// Reads `s3://bucket` or `s3://bucket/prefix`.
    pub fn parse(url: &str) -> Result<Self, ObjectError> {
        let bad =
            |why: &str| ObjectError::Settings(format!("{url:?} is not s3://bucket/prefix: {why}"));
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| bad("it must start with s3://"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        // S3's bucket naming rules: 3 to 63 of lower-case letters, digits,
        // dots and hyphens.
        if !(3..=63).contains(&bucket.len())
            || !bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        {
            return Err(bad(
                "the bucket must be 3 to 63 lower-case letters, digits, dots and hyphens",
            ));
        }
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty() {
            Key::new(prefix).map_err(|e| bad(&e.to_string()))?;
        }
        Ok(Self {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }
}

/// How to reach the service. What is not set here is read from the
/// environment as AWS's tools read it (`AWS_ACCESS_KEY_ID`,
/// `AWS_WEB_IDENTITY_TOKEN_FILE`, the instance's metadata...).
#[derive(Clone, Default)]
pub struct S3Settings {
    /// The service's URL (`http://127.0.0.1:9000`); `None`: AWS's for the
    /// region. A set endpoint is addressed path-style (`endpoint/bucket/key`),
    /// as MinIO and most S3-compatible services want.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Whether an `http://` endpoint may be used (plain text: only on a
    /// trusted network).
    pub allow_http: bool,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<hidden>"),
            )
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// Objects in an S3 bucket, under a prefix.
#[derive(Debug)]
pub struct S3Store {
    client: Arc<AmazonS3>,
    location: S3Location,
    endpoint: Option<String>,
}

impl S3Store {
    /// A client for `location` (nothing is asked of the service yet).
    pub fn new(location: S3Location, settings: S3Settings) -> Result<Self, ObjectError> {
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&location.bucket)
            .with_allow_http(settings.allow_http);
        if let Some(endpoint) = &settings.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false);
        }
        if let Some(region) = &settings.region {
            builder = builder.with_region(region);
        }
        if let Some(id) = &settings.access_key_id {
            builder = builder.with_access_key_id(id);
        }
        if let Some(secret) = &settings.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        let client = builder
            .build()
            .map_err(|e| ObjectError::Settings(e.to_string()))?;
        Ok(Self {
            client: Arc::new(client),
            location,
            endpoint: settings.endpoint,
        })
    }

    fn path(&self, key: &Key) -> Result<ObjectPath, ObjectError> {
        let full = if self.location.prefix.is_empty() {
            key.as_str().to_owned()
        } else {
            format!("{}/{}", self.location.prefix, key)
        };
        ObjectPath::parse(full).map_err(|_| ObjectError::InvalidKey {
            key: key.to_string(),
            reason: "refused by the S3 client's path rules",
        })
    }

    /// Sends a body too long for one `PUT` as a multipart upload;
    /// `buffer` holds its first full part. Completed only once every part
    /// arrived; aborted otherwise.
    async fn put_multipart(
        &self,
        key: &Key,
        path: &ObjectPath,
        buffer: BytesMut,
        body: ByteStream<'_>,
    ) -> Result<u64, ObjectError> {
        let upload = self
            .client
            .put_multipart(path)
            .await
            .map_err(|e| remote(key, e))?;
        let mut upload = Unfinished(Some(upload));
        match send_parts(key, &mut upload, buffer, body).await {
            Ok(size) => {
                upload.complete(key).await?;
                Ok(size)
            }
            Err(e) => {
                upload.abort().await;
                Err(e)
            }
        }
    }
}

/// Sends `buffer` and the rest of `body` as parts of `upload`, at most
/// [`PARTS_IN_FLIGHT`] at a time; on an error, waits until no part is in
/// flight (so an abort that follows is the last word).
async fn send_parts(
    key: &Key,
    upload: &mut Unfinished,
    mut buffer: BytesMut,
    mut body: ByteStream<'_>,
) -> Result<u64, ObjectError> {
    let mut in_flight = tokio::task::JoinSet::new();
    let mut size = 0u64;
    let mut ended = false;
    let result = loop {
        while buffer.len() >= PART_BYTES || (ended && !buffer.is_empty()) {
            let take = buffer.len().min(PART_BYTES);
            let part: Bytes = buffer.split_to(take).freeze();
            size += part.len() as u64;
            in_flight.spawn(upload.part(PutPayload::from(part))?);
            while in_flight.len() >= PARTS_IN_FLIGHT {
                if let Err(e) = sent(key, in_flight.join_next().await) {
                    in_flight.shutdown().await;
                    return Err(e);
                }
            }
        }
        if ended {
            break Ok(size);
        }
        match body.next().await {
            Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
            Some(Err(source)) => {
                break Err(ObjectError::Body {
                    key: key.to_string(),
                    source,
                })
            }
            None => ended = true,
        }
    };
    if result.is_err() {
        in_flight.shutdown().await;
        return result;
    }
    while let Some(joined) = in_flight.join_next().await {
        if let Err(e) = sent(key, Some(joined)) {
            in_flight.shutdown().await;
            return Err(e);
        }
    }
    result
}

/// An error of the service about `key`.
fn remote(key: &Key, error: object_store::Error) -> ObjectError {
    match error {
        object_store::Error::NotFound { .. } => ObjectError::NotFound(key.to_string()),
        other => ObjectError::Remote(format!("{key}: {other}")),
    }
}

/// A part's upload, joined.
fn sent(
    key: &Key,
    joined: Option<Result<object_store::Result<()>, tokio::task::JoinError>>,
) -> Result<(), ObjectError> {
    match joined {
        None | Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(e))) => Err(remote(key, e)),
        Some(Err(e)) => Err(ObjectError::Remote(format!("{key}: a part's upload: {e}"))),
    }
}

/// A multipart upload not yet completed: aborted if dropped so (an error
/// returned early, or the put's future dropped), so S3 keeps no parts.
struct Unfinished(Option<Box<dyn MultipartUpload>>);

impl Unfinished {
    fn part(&mut self, payload: PutPayload) -> Result<object_store::UploadPart, ObjectError> {
        match self.0.as_mut() {
            Some(upload) => Ok(upload.put_part(payload)),
            None => Err(ObjectError::Remote("the upload already ended".to_owned())),
        }
    }

    async fn complete(&mut self, key: &Key) -> Result<(), ObjectError> {
        let Some(upload) = self.0.as_mut() else {
            return Err(ObjectError::Remote("the upload already ended".to_owned()));
        };
        match upload.complete().await {
            Ok(_) => {
                self.0 = None;
                Ok(())
            }
            // Dropped with it still set: aborted.
            Err(e) => Err(remote(key, e)),
        }
    }

    async fn abort(&mut self) {
        if let Some(mut upload) = self.0.take() {
            if let Err(e) = upload.abort().await {
                tracing::warn!("could not abort a multipart upload: {e}");
            }
        }
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(mut upload) = self.0.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = upload.abort().await {
                        tracing::warn!("could not abort a multipart upload: {e}");
                    }
                });
            }
            Err(_) => tracing::warn!("a multipart upload was dropped outside a runtime"),
        }
    }
}

#[async_trait::async_trait]
impl ObjectStore for S3Store {
    fn describe(&self) -> String {
        let url = if self.location.prefix.is_empty() {
            format!("s3://{}", self.location.bucket)
        } else {
            format!("s3://{}/{}", self.location.bucket, self.location.prefix)
        };
        match &self.endpoint {
            Some(endpoint) => format!("{url} at {endpoint}"),
            None => url,
        }
    }

    /// One listing of the prefix's top level (a few names: `files/`,
    /// `skills/`, `audit/`): a missing bucket, a wrong endpoint or
    /// credentials that may not list fail here.
    async fn check(&self) -> Result<(), ObjectError> {
        use object_store::ObjectStore as _;
        let prefix = if self.location.prefix.is_empty() {
            None
        } else {
            Some(
                ObjectPath::parse(&self.location.prefix)
                    .map_err(|e| ObjectError::Settings(e.to_string()))?,
            )
        };
        self.client
            .list_with_delimiter(prefix.as_ref())
            .await
            .map(drop)
            .map_err(|e| ObjectError::Remote(e.to_string()))
    }

    async fn put(&self, key: &Key, mut body: ByteStream<'_>) -> Result<u64, ObjectError> {
        let path = self.path(key)?;
        let mut buffer = BytesMut::new();
        while buffer.len() < PART_BYTES {
            match body.next().await {
                Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                Some(Err(source)) => {
                    return Err(ObjectError::Body {
                        key: key.to_string(),
                        source,
                    })
                }
                None => {
                    let size = buffer.len() as u64;
                    self.client
                        .put(&path, PutPayload::from(buffer.freeze()))
                        .await
                        .map_err(|e| remote(key, e))?;
                    return Ok(size);
                }
            }
        }
        self.put_multipart(key, &path, buffer, body).await
    }

    async fn get(&self, key: &Key) -> Result<Object, ObjectError> {
        let path = self.path(key)?;
        let got = self.client.get(&path).await.map_err(|e| remote(key, e))?;
        let size = got.meta.size;
        let body = got
            .into_stream()
            .map(|chunk| chunk.map_err(std::io::Error::other));
        Ok(Object {
            size,
            body: Box::pin(body),
        })
    }

    async fn delete(&self, key: &Key) -> Result<(), ObjectError> {
        let path = self.path(key)?;
        match self.client.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(remote(key, e)),
        }
    }

    async fn size(&self, key: &Key) -> Result<Option<u64>, ObjectError> {
        let path = self.path(key)?;
        match self.client.head(&path).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(remote(key, e)),
        }
    }

    /// One listing with a delimiter (the client follows its pages): the
    /// folder's own objects, not those of folders below it.
    async fn list_folder(&self, folder: &Key) -> Result<Vec<Listed>, ObjectError> {
        use object_store::ObjectStore as _;
        let path = self.path(folder)?;
        let listing = self
            .client
            .list_with_delimiter(Some(&path))
            .await
            .map_err(|e| remote(folder, e))?;
        let mut listed = Vec::new();
        for meta in listing.objects {
            let Some(name) = meta.location.filename() else {
                continue;
            };
            let Ok(key) = Key::new(format!("{folder}/{name}")) else {
                continue;
            };
            listed.push(Listed {
                key,
                modified_unix: meta.last_modified.timestamp(),
            });
        }
        Ok(listed)
    }
}
