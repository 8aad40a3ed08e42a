//! An online copy of a SQLite store: `VACUUM INTO` on a read-only
//! connection of its own, so a running server keeps reading and writing
//! while the copy is made (WAL: the copy is one consistent snapshot, the
//! last transaction committed before it started).

use std::path::Path;

use crate::error::{Result, StoreError};

/// How long the copy waits for a writer's lock before it gives up (a
/// checkpoint can hold one briefly).
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Copies the SQLite database at `source` (a running server's) into
/// `dest`, a new file created private (0600: it holds key hashes and every
/// tenant's ids). `dest` must not exist: a backup never overwrites.
/// The source is opened read-only and not migrated: the copy has the
/// schema the server that wrote it has.
pub fn backup_sqlite(source: &Path, dest: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if !source.is_file() {
        return Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no SQLite store at {}", source.display()),
        )));
    }
    // An empty file is what VACUUM INTO accepts besides none; made here,
    // with its mode, so the copy is private from its first byte.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)?;
    let connection = rusqlite::Connection::open_with_flags(
        source,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    let target = dest.to_str().ok_or_else(|| {
        StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a UTF-8 path", dest.display()),
        ))
    })?;
    connection.execute("VACUUM INTO ?1", [target])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_holds_what_was_written_and_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile_dir("copy");
        let source = dir.join("shellgate.db");
        let store = crate::Store::open(&source).expect("open the store");
        let key = "sk-backup-test-key-0123456789";
        store.add_key(key, "alpha", 1).expect("add a key");
        let dest = dir.join("backup.db");
        backup_sqlite(&source, &dest).expect("back up while the store is open");
        let mode = std::fs::metadata(&dest)
            .expect("the copy")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the copy's mode is {mode:o}");
        let copy = crate::Store::open(&dest).expect("open the copy");
        assert_eq!(
            copy.project_for_key(key).expect("look the key up"),
            Some("alpha".to_owned()),
            "the copy resolves the key to its project"
        );
        let again = backup_sqlite(&source, &dest);
        assert!(again.is_err(), "a second copy over the first: {again:?}");
        std::fs::remove_dir_all(&dir).expect("remove the test's directory");
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "shellgate-backup-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make the test's directory");
        dir
    }
}
