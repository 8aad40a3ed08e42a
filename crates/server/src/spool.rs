//! Uploads are spooled to an anonymous file (`O_TMPFILE`) while they
//! arrive, with the size cap enforced chunk by chunk: an upload never sits
//! in memory, and a crash mid-upload leaves no file behind. A Files API
//! upload is then linked into place; a container file is copied into the
//! container by the engine.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use axum::extract::multipart::Field;
use tokio::io::AsyncWriteExt;

use crate::error::{ApiError, ApiResult};
use crate::http::multipart_error;

/// An upload on disk, not yet named.
pub struct Spooled {
    pub file: File,
    pub bytes: u64,
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
    Ok(Spooled { file, bytes })
}

impl Spooled {
    /// Gives the anonymous file a name (it must not exist yet).
    pub fn persist(&self, path: &Path) -> ApiResult<()> {
        let source = std::ffi::CString::new(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let target = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        // SAFETY: both are valid C strings; linkat with AT_SYMLINK_FOLLOW
        // resolves the magic link to the anonymous file and names it.
        let ret = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                source.as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if ret != 0 {
            return Err(internal("store upload", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}
