//! Files in and out of containers: the names a file may take in
//! `/mnt/data`, the store's rows of a container's files kept in step with
//! its disk, and file contents streamed out with a container's secrets
//! masked; and a Files API file's removal (its row, then its blob), which
//! OpenAI's, Anthropic's and Google's file routes and the expiry share.
//!
//! The store keeps one row per file (its id, path, size, source). A listing
//! walks /mnt/data once (off the async workers, bounded) and syncs the rows
//! in one linear pass. None of this wakes a suspended container, bills it or
//! renews its expiry: the engine reads a stopped container's disk without
//! starting it.

use std::sync::Arc;

use shellgate_egress::secrets::Masker;
use shellgate_sandbox_api::backend::{limits, SkippedFiles};
use shellgate_store::{FileRow, PresentFile};
use shellgate_wire::{new_id, FileObject, ListIncomplete};

use crate::engine::engine_error;
use crate::error::ApiResult;
use crate::state::AppState;

/// The `file` object of a project file's row, as every dialect shows it.
pub(crate) fn file_object(row: &FileRow) -> FileObject {
    FileObject {
        id: row.id.clone(),
        object: "file".to_owned(),
        bytes: row.bytes,
        created_at: row.created_at,
        filename: row.filename.clone(),
        purpose: row.purpose.clone(),
        status: "processed".to_owned(),
        expires_at: row.expires_at,
        status_details: None,
    }
}

/// Streams a file in chunks, without loading it whole, through `masker`
/// if it has one (a file of a container with secrets: a value it holds,
/// whole or in one of its encodings, becomes its placeholder, wherever it
/// falls across the chunks).
pub(crate) fn masked_file_stream(
    mut file: tokio::fs::File,
    masker: Option<Arc<Masker>>,
) -> impl tokio_stream::Stream<Item = std::io::Result<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut mask = masker.map(|m| m.stream());
    tokio::spawn(async move {
        loop {
            let mut buf = vec![0u8; 64 * 1024];
            let chunk = match file.read(&mut buf).await {
                Ok(0) => {
                    if let Some(mask) = mask.as_mut() {
                        let mut tail = Vec::new();
                        mask.finish(&mut tail);
                        if !tail.is_empty() {
                            let _ = tx.send(Ok(tail)).await;
                        }
                    }
                    return;
                }
                Ok(n) => {
                    buf.truncate(n);
                    match mask.as_mut() {
                        Some(mask) => {
                            let mut out = Vec::with_capacity(n);
                            mask.push(&buf, &mut out);
                            Ok(out)
                        }
                        None => Ok(buf),
                    }
                }
                Err(e) => Err(e),
            };
            let failed = chunk.is_err();
            if tx.send(chunk).await.is_err() || failed {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// What a listing had to leave out, said in the list (never silently).
fn incomplete(skipped: SkippedFiles, secret_names: usize) -> Option<ListIncomplete> {
    if !skipped.any() && secret_names == 0 {
        return None;
    }
    let mut reasons = Vec::new();
    if secret_names > 0 {
        reasons.push(format!("{secret_names} names hold a secret's value"));
    }
    if skipped.entry_limit_reached {
        reasons.push(format!(
            "it holds more than the {} files a listing walks",
            limits::MAX_LISTED_FILES
        ));
    }
    if skipped.too_deep_directories > 0 {
        reasons.push(format!(
            "{} directories are nested deeper than {} levels",
            skipped.too_deep_directories,
            limits::MAX_LISTED_DEPTH
        ));
    }
    if skipped.non_utf8_names > 0 {
        reasons.push(format!(
            "{} names are not valid UTF-8",
            skipped.non_utf8_names
        ));
    }
    Some(ListIncomplete {
        message: format!(
            "This listing is incomplete: {}. Reach the rest with commands.",
            reasons.join("; ")
        ),
        non_utf8_names: skipped.non_utf8_names,
        too_deep_directories: skipped.too_deep_directories,
        entry_limit_reached: skipped.entry_limit_reached,
    })
}

/// Brings the store's rows of a container's files up to date: files commands
/// made appear (source `assistant`), files that are gone disappear. One sync
/// per container at a time (a second waits, then finds nothing to change).
pub(crate) async fn sync_files(state: &AppState, id: &str) -> ApiResult<Option<ListIncomplete>> {
    let lock = state.sync_lock(id);
    let _one_at_a_time = lock.lock().await;
    let listing = state
        .engine
        .list_files(id)
        .await
        .map_err(|e| engine_error(id, e))?;
    let skipped = listing.skipped;
    // A name that holds a secret's value (a command can make one) is
    // neither stored nor shown: only commands reach such a file.
    let masker = state.engine.masker(id);
    let mut secret_names = 0;
    let present: Vec<PresentFile> = listing
        .files
        .into_iter()
        .filter(|f| {
            let clean = masker
                .as_ref()
                .is_none_or(|m| m.mask(f.path.as_bytes()) == f.path.as_bytes());
            secret_names += usize::from(!clean);
            clean
        })
        .map(|f| PresentFile {
            path: f.path,
            bytes: f.bytes,
            modified_unix: f.modified_unix,
        })
        .collect();
    let key = id.to_owned();
    state
        .db(move |s| s.sync_container_files(&key, &present, || new_id("cfile_")))
        .await?;
    Ok(incomplete(skipped, secret_names))
}

/// Stores `file`, `container`'s file at `path` (opened by the engine), as
/// a Files API file of `project` (named after it, `purpose: user_data`),
/// its content masked as a download's is: promote's path, and the files
/// Anthropic's code execution returns. Either the whole file is stored
/// and recorded, or nothing is.
pub(crate) async fn store_container_file(
    state: &AppState,
    project: &str,
    container: &str,
    path: &str,
    file: std::fs::File,
) -> ApiResult<FileRow> {
    let id = new_id("file-");
    let key = crate::blobs::file_key(&id)?;
    let limit = state.config.server.max_upload_bytes as u64;
    let chunks = masked_file_stream(
        tokio::fs::File::from_std(file),
        state.engine.masker(container),
    );
    let failure = crate::blobs::BodyFailure::default();
    let bytes = state
        .objects
        .put(&key, crate::blobs::capped_body(chunks, limit, &failure))
        .await
        .map_err(|e| failure.explain(e))?;
    let blob = crate::blobs::Unrecorded::new(&state.objects, key);
    let row = FileRow {
        id,
        project: project.to_owned(),
        filename: safe_file_name(path.rsplit('/').next().unwrap_or("file")),
        purpose: "user_data".to_owned(),
        bytes,
        created_at: crate::time::now(),
        expires_at: None,
        mime_type: None,
    };
    let inserted = row.clone();
    // A failed insert drops `blob`, which removes it.
    state.db(move |s| s.insert_file(&inserted)).await?;
    blob.recorded();
    Ok(row)
}

/// A file name safe to place in `/mnt/data`: its last path component.
pub fn safe_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("").trim();
    match base {
        "" | "." | ".." => "upload".to_owned(),
        other => other.chars().filter(|c| *c != '\0').take(255).collect(),
    }
}

/// Deletes a file's row, then its blob (an expired file, or a delete).
pub(crate) async fn remove_file(state: &AppState, project: &str, id: &str) -> ApiResult<bool> {
    let (owner, key) = (project.to_owned(), id.to_owned());
    let deleted = state.db(move |s| s.delete_file(&owner, &key)).await?;
    // The row is gone: a blob that cannot be removed is an orphan, never
    // a file the API shows.
    if let Err(e) = state.objects.delete(&crate::blobs::file_key(id)?).await {
        tracing::warn!(file = %id, "could not remove the file's blob: {e}");
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploaded_names_stay_in_mnt_data() {
        assert_eq!(safe_file_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_file_name("a\\b.txt"), "b.txt");
        assert_eq!(safe_file_name(".."), "upload");
        assert_eq!(safe_file_name(""), "upload");
        assert_eq!(safe_file_name("report.csv"), "report.csv");
    }
}
