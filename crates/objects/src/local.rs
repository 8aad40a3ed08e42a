//! The local backend: an object is the file `<root>/<key>`.
//!
//! A put writes a temporary file in `<root>/.partial` (0600), syncs it,
//! renames it into place and syncs the directory: a reader sees the old
//! object or the whole new one, never part of one, and a crash leaves at
//! worst a file in `.partial`, which the next [`LocalStore::open`] removes
//! (its name holds the pid of the process that wrote it). A put
//! that fails, or whose future is dropped, removes its temporary file.
//! Directories are made 0700: the objects are the server's alone.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::StreamExt;

use crate::error::ObjectError;
use crate::key::Key;
use crate::object::{file_stream, ByteStream, Listed, Object, ObjectStore};

/// Where puts write before they are renamed into place (a name no key can
/// take: keys never start with a dot).
const PARTIAL: &str = ".partial";

/// Objects in a directory of this machine.
#[derive(Debug)]
pub struct LocalStore {
    root: PathBuf,
    partial: PathBuf,
    /// Names temporary files apart within this process (the pid apart
    /// from other processes sharing the directory).
    counter: AtomicU64,
}

impl LocalStore {
    /// Opens (making it if needed) the store in `root`, and removes what a
    /// crash left in its `.partial` directory. An existing `root` keeps
    /// its mode (the data directory is traversable by sandboxes).
    pub fn open(root: &Path) -> Result<Self, ObjectError> {
        use std::os::unix::fs::DirBuilderExt;
        let io = |source| ObjectError::Io {
            key: root.display().to_string(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(io)?;
        let partial = root.join(PARTIAL);
        match std::fs::DirBuilder::new().mode(0o700).create(&partial) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        remove_leftovers(&partial).map_err(io)?;
        Ok(Self {
            root: root.to_owned(),
            partial,
            counter: AtomicU64::new(0),
        })
    }

    /// Where an object lives (the key was checked: relative, no `..`).
    pub fn path(&self, key: &Key) -> PathBuf {
        self.root.join(key.as_str())
    }

    /// Opens an object's file and reads its size, off the async workers.
    async fn open_regular(&self, key: &Key) -> Result<(std::fs::File, u64), ObjectError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path(key);
        let opened = tokio::task::spawn_blocking(move || {
            // Never through a link: the directory holds only what puts made.
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)?;
            let meta = file.metadata()?;
            // A directory (a key naming one) is no object.
            Ok::<_, std::io::Error>(meta.is_file().then_some((file, meta.len())))
        })
        .await
        .map_err(|e| io_error(key)(std::io::Error::other(e)))?;
        match opened {
            Ok(Some(found)) => Ok(found),
            Ok(None) => Err(ObjectError::NotFound(key.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(ObjectError::NotFound(key.to_string()))
            }
            Err(e) => Err(io_error(key)(e)),
        }
    }

    fn temporary(&self) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.partial
            .join(format!("{}-{n}.part", std::process::id()))
    }
}

/// Removes what puts of processes that are gone left in `partial` (a
/// crash mid-put: never objects). Another process sharing the directory
/// (`shellgate audit export` beside a running server) may be writing its
/// own temporary files there: those, named after a live pid, stay.
fn remove_leftovers(partial: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(partial)? {
        let entry = entry?;
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|name| name.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok());
        let alive = pid.is_some_and(|pid| Path::new("/proc").join(pid.to_string()).exists());
        if !alive {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// The regular files directly in `directory`, the objects of `folder`.
fn list_directory(folder: &Key, directory: &Path) -> Result<Vec<Listed>, ObjectError> {
    let io = io_error(folder);
    let entries = match std::fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let mut listed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(&io)?;
        // The entry's own metadata: a link is not followed.
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            // Removed since the directory was read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(e)),
        };
        let name = entry.file_name();
        let (true, Some(name)) = (meta.is_file(), name.to_str()) else {
            continue;
        };
        let Ok(key) = Key::new(format!("{folder}/{name}")) else {
            continue;
        };
        let modified_unix = meta
            .modified()
            .ok()
            .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| {
                i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
            });
        listed.push(Listed { key, modified_unix });
    }
    Ok(listed)
}

fn io_error(key: &Key) -> impl Fn(std::io::Error) -> ObjectError + '_ {
    move |source| ObjectError::Io {
        key: key.to_string(),
        source,
    }
}

/// Removes a temporary file unless disarmed: a put that returns early or
/// whose future is dropped leaves no partial file.
struct Temporary(Option<PathBuf>);

impl Temporary {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let Some(path) = self.0.take() else {
            return;
        };
        // Off the async workers where there is a runtime (a dropped future
        // runs this on one); inline otherwise.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || {
                    let _ = std::fs::remove_file(path);
                });
            }
            Err(_) => {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

#[async_trait::async_trait]
impl ObjectStore for LocalStore {
    fn describe(&self) -> String {
        format!("local directory {}", self.root.display())
    }

    async fn check(&self) -> Result<(), ObjectError> {
        let io = |source| ObjectError::Io {
            key: self.partial.display().to_string(),
            source,
        };
        let meta = tokio::fs::metadata(&self.partial).await.map_err(io)?;
        if !meta.is_dir() {
            return Err(io(std::io::Error::other("not a directory")));
        }
        Ok(())
    }

    async fn put(&self, key: &Key, mut body: ByteStream<'_>) -> Result<u64, ObjectError> {
        use std::os::unix::fs::DirBuilderExt;
        use tokio::io::AsyncWriteExt;
        let io = io_error(key);
        let temporary_path = self.temporary();
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary_path)
            .await
            .map_err(&io)?;
        let mut temporary = Temporary(Some(temporary_path.clone()));
        let mut size = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|source| ObjectError::Body {
                key: key.to_string(),
                source,
            })?;
            size += chunk.len() as u64;
            file.write_all(&chunk).await.map_err(&io)?;
        }
        file.flush().await.map_err(&io)?;
        // On disk before it is named: a crash after the rename never shows
        // a short object.
        file.sync_all().await.map_err(&io)?;
        drop(file);
        let target = self.path(key);
        let parent = target.parent().unwrap_or(&self.root).to_owned();
        let mut dirs = std::fs::DirBuilder::new();
        dirs.recursive(true).mode(0o700);
        let made = parent.clone();
        tokio::task::spawn_blocking(move || dirs.create(made))
            .await
            .map_err(|e| io(std::io::Error::other(e)))?
            .map_err(&io)?;
        tokio::fs::rename(&temporary_path, &target)
            .await
            .map_err(&io)?;
        temporary.disarm();
        // The rename itself made durable.
        tokio::task::spawn_blocking(move || std::fs::File::open(parent)?.sync_all())
            .await
            .map_err(|e| io(std::io::Error::other(e)))?
            .map_err(&io)?;
        Ok(size)
    }

    async fn get(&self, key: &Key) -> Result<Object, ObjectError> {
        let (file, size) = self.open_regular(key).await?;
        Ok(Object {
            size,
            body: file_stream(tokio::fs::File::from_std(file)),
        })
    }

    async fn delete(&self, key: &Key) -> Result<(), ObjectError> {
        match tokio::fs::remove_file(self.path(key)).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(key)(e)),
        }
    }

    async fn size(&self, key: &Key) -> Result<Option<u64>, ObjectError> {
        match tokio::fs::symlink_metadata(self.path(key)).await {
            Ok(meta) if meta.is_file() => Ok(Some(meta.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(key)(e)),
        }
    }

    async fn list_folder(&self, folder: &Key) -> Result<Vec<Listed>, ObjectError> {
        let directory = self.path(folder);
        let folder = folder.clone();
        let listing = tokio::task::spawn_blocking(move || list_directory(&folder, &directory));
        listing.await.map_err(|e| ObjectError::Io {
            key: String::new(),
            source: std::io::Error::other(e),
        })?
    }

    /// The object's own file: nothing is copied.
    async fn open_file(&self, key: &Key, _scratch: &Path) -> Result<std::fs::File, ObjectError> {
        Ok(self.open_regular(key).await?.0)
    }
}
