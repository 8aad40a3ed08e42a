//! A container file's upload is spooled to an anonymous file (`O_TMPFILE`)
//! while it arrives, with the size cap enforced chunk by chunk: an upload
//! never sits in memory, and a crash mid-upload leaves no file behind. The
//! engine then copies it into the container. (A Files API upload streams
//! into the object store instead: `blobs`.)

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use axum::extract::multipart::Field;
use tokio::io::AsyncWriteExt;

use crate::error::{ApiError, ApiResult};
use crate::http::multipart_error;

/// An upload on disk, not yet named.
pub struct Spooled {
    pub file: File,
}

fn internal(what: &str, error: std::io::Error) -> ApiError {
    ApiError::internal(format!("{what}: {error}"))
}

/// Streams a multipart field into an anonymous file in `dir`.
pub async fn spool(field: &mut Field<'_>, dir: &Path, cap: usize) -> ApiResult<Spooled> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(dir)
        .map_err(|e| internal("spool upload", e))?;
    let mut writer =
        tokio::fs::File::from_std(file.try_clone().map_err(|e| internal("spool upload", e))?);
    let mut bytes = 0u64;
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        bytes += chunk.len() as u64;
        if bytes > cap as u64 {
            return Err(ApiError::too_large(format!(
                "Files are limited to {cap} bytes."
            )));
        }
        writer
            .write_all(&chunk)
            .await
            .map_err(|e| internal("spool upload", e))?;
    }
    writer
        .flush()
        .await
        .map_err(|e| internal("spool upload", e))?;
    drop(writer);
    let mut file = file;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| internal("spool upload", e))?;
    Ok(Spooled { file })
}
