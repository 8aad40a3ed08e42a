//! One suite, run against both backends through the trait: the local one
//! always, the S3 one when `SHELLGATE_TEST_S3_ENDPOINT` names a running
//! S3-compatible server (`scripts/test` starts one; the bucket is
//! `SHELLGATE_TEST_S3_BUCKET`, `shellgate-test` by default, and must exist).
//! Each test works under a prefix of its own, so runs never meet.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;

use crate::{
    put_bytes, read_to_vec, ByteStream, Key, LocalStore, ObjectError, ObjectStore, S3Location,
    S3Settings, S3Store, PART_BYTES,
};

static NEXT: AtomicU64 = AtomicU64::new(0);

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{name}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A backend under test, and what the suite needs to look behind it.
enum Backend {
    Local {
        store: LocalStore,
        root: PathBuf,
    },
    S3 {
        store: S3Store,
        endpoint: String,
        bucket: String,
        prefix: String,
    },
}

impl Backend {
    fn store(&self) -> &dyn ObjectStore {
        match self {
            Backend::Local { store, .. } => store,
            Backend::S3 { store, .. } => store,
        }
    }

    /// Whether anything of an unfinished put is left: a temporary file
    /// (local), an unfinished multipart upload (S3).
    async fn leftovers(&self) -> Vec<String> {
        match self {
            Backend::Local { root, .. } => std::fs::read_dir(root.join(".partial"))
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Backend::S3 {
                endpoint,
                bucket,
                prefix,
                ..
            } => {
                // ListMultipartUploads, asked plainly (the test server takes
                // unsigned requests; one that does not fails here, loudly).
                let answer = reqwest::Client::new()
                    .get(format!("{endpoint}/{bucket}?uploads&prefix={prefix}/"))
                    .send()
                    .await
                    .unwrap();
                assert!(answer.status().is_success(), "{}", answer.status());
                let text = answer.text().await.unwrap();
                text.split("<Key>")
                    .skip(1)
                    .filter_map(|rest| rest.split("</Key>").next())
                    .map(str::to_owned)
                    .collect()
            }
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Backend::Local { root, .. } = self {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

fn local(name: &str) -> Backend {
    let root = std::env::temp_dir().join(format!("shellgate-objects-{}", unique(name)));
    let store = LocalStore::open(&root).unwrap();
    Backend::Local { store, root }
}

fn s3(name: &str) -> Option<Backend> {
    let endpoint = std::env::var("SHELLGATE_TEST_S3_ENDPOINT").ok()?;
    let bucket =
        std::env::var("SHELLGATE_TEST_S3_BUCKET").unwrap_or_else(|_| "shellgate-test".to_owned());
    let prefix = unique(name);
    let location = S3Location::parse(&format!("s3://{bucket}/{prefix}")).unwrap();
    let store = S3Store::new(
        location,
        S3Settings {
            endpoint: Some(endpoint.clone()),
            region: Some("us-east-1".to_owned()),
            access_key_id: Some("test".to_owned()),
            secret_access_key: Some("test".to_owned()),
            allow_http: true,
        },
    )
    .unwrap();
    Some(Backend::S3 {
        store,
        endpoint,
        bucket,
        prefix,
    })
}

/// Runs `test` against every backend there is.
async fn each_backend<F, Fut>(name: &str, test: F)
where
    F: Fn(Backend) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    test(local(name)).await;
    match s3(name) {
        Some(backend) => test(backend).await,
        None => eprintln!("{name}: S3 skipped (SHELLGATE_TEST_S3_ENDPOINT is not set)"),
    }
}

fn key(text: &str) -> Key {
    Key::new(text).unwrap()
}

/// `len` bytes no two runs of which line up by accident.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 4093) as u8).collect()
}

/// `bytes` in chunks of `chunk`, as a body.
fn chunked(bytes: Vec<u8>, chunk: usize) -> ByteStream<'static> {
    let chunks: Vec<std::io::Result<Bytes>> = bytes
        .chunks(chunk)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures_util::stream::iter(chunks))
}

/// `good` bytes, then an error: a client that hung up.
fn cut_off(good: usize) -> ByteStream<'static> {
    let body = chunked(pattern(good), 64 * 1024);
    Box::pin(
        body.chain(futures_util::stream::iter([Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "the client hung up",
        ))])),
    )
}

async fn read_all(store: &dyn ObjectStore, key: &Key) -> Vec<u8> {
    let mut object = store.get(key).await.unwrap();
    let mut bytes = Vec::new();
    while let Some(chunk) = object.body.next().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(object.size, bytes.len() as u64);
    bytes
}

async fn wait_for_no_leftovers(backend: &Backend) {
    for _ in 0..100 {
        if backend.leftovers().await.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("left behind: {:?}", backend.leftovers().await);
}

#[tokio::test]
async fn put_get_size_delete() {
    each_backend("basics", |backend| async move {
        let store = backend.store();
        store.check().await.unwrap();
        let k = key("files/file-abc");
        assert_eq!(store.size(&k).await.unwrap(), None);
        assert!(matches!(store.get(&k).await, Err(ObjectError::NotFound(_))));
        assert_eq!(put_bytes(store, &k, &b"hello"[..]).await.unwrap(), 5);
        assert_eq!(store.size(&k).await.unwrap(), Some(5));
        assert_eq!(read_all(store, &k).await, b"hello");
        // Replaced whole.
        put_bytes(store, &k, &b"bye"[..]).await.unwrap();
        assert_eq!(read_all(store, &k).await, b"bye");
        // An empty object is an object.
        let empty = key("files/empty");
        assert_eq!(put_bytes(store, &empty, Bytes::new()).await.unwrap(), 0);
        assert_eq!(store.size(&empty).await.unwrap(), Some(0));
        assert!(read_all(store, &empty).await.is_empty());
        store.delete(&k).await.unwrap();
        assert_eq!(store.size(&k).await.unwrap(), None);
        // Deleting what is not there is no error.
        store.delete(&k).await.unwrap();
        store.delete(&empty).await.unwrap();
        // A "directory" of the local layout is no object.
        assert_eq!(store.size(&key("files")).await.unwrap(), None);
        assert!(matches!(
            store.get(&key("files")).await,
            Err(ObjectError::NotFound(_))
        ));
        assert!(backend.leftovers().await.is_empty());
    })
    .await;
}

fn unix_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    since.as_secs() as i64
}

#[tokio::test]
async fn a_folder_lists_its_own_objects_with_their_times() {
    each_backend("listing", |backend| async move {
        let store = backend.store();
        assert_eq!(store.list_folder(&key("uploads")).await.unwrap(), vec![]);
        let before = unix_now() - 60;
        put_bytes(store, &key("uploads/a"), &b"a"[..])
            .await
            .unwrap();
        put_bytes(store, &key("uploads/a.0"), &b"b"[..])
            .await
            .unwrap();
        // Neither a deeper object nor a neighbour's is the folder's.
        put_bytes(store, &key("uploads/deeper/c"), &b"c"[..])
            .await
            .unwrap();
        put_bytes(store, &key("uploadsx/d"), &b"d"[..])
            .await
            .unwrap();
        let mut listed = store.list_folder(&key("uploads")).await.unwrap();
        listed.sort_by(|x, y| x.key.as_str().cmp(y.key.as_str()));
        let keys: Vec<&str> = listed.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["uploads/a", "uploads/a.0"], "{listed:?}");
        let after = unix_now() + 60;
        assert!(
            listed
                .iter()
                .all(|l| (before..=after).contains(&l.modified_unix)),
            "written between {before} and {after}: {listed:?}"
        );
        for k in ["uploads/a", "uploads/a.0", "uploads/deeper/c", "uploadsx/d"] {
            store.delete(&key(k)).await.unwrap();
        }
    })
    .await;
}

#[tokio::test]
async fn a_large_body_streams_in_and_out() {
    // Over two parts and a short last one (multipart on S3).
    let len = 2 * PART_BYTES + 12_345;
    each_backend("large", |backend| async move {
        let store = backend.store();
        let k = key("skills/skillver_large.zip");
        let size = store.put(&k, chunked(pattern(len), 100_003)).await.unwrap();
        assert_eq!(size, len as u64);
        assert_eq!(store.size(&k).await.unwrap(), Some(len as u64));
        let read = read_all(store, &k).await;
        assert!(read == pattern(len), "the object read back differs");
        assert!(matches!(
            read_to_vec(store, &k, 1000).await,
            Err(ObjectError::TooLarge { .. })
        ));
        assert_eq!(read_to_vec(store, &k, len as u64).await.unwrap().len(), len);
        // As a file (the local backend's own; S3's spooled).
        let scratch = std::env::temp_dir();
        let mut file = store.open_file(&k, &scratch).await.unwrap();
        let mut copied = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut copied).unwrap();
        assert!(copied == pattern(len), "the file differs");
        store.delete(&k).await.unwrap();
        assert!(backend.leftovers().await.is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_cut_off_body_leaves_nothing() {
    each_backend("cut", |backend| async move {
        let store = backend.store();
        // Short (one PUT on S3) and long (a multipart upload begun).
        for (name, good) in [("short", 1000), ("long", 2 * PART_BYTES + 5)] {
            let fresh = key(&format!("files/{name}"));
            let failed = store.put(&fresh, cut_off(good)).await;
            assert!(
                matches!(failed, Err(ObjectError::Body { .. })),
                "{failed:?}"
            );
            assert_eq!(store.size(&fresh).await.unwrap(), None, "{name}");
            // An object already there stays as it was.
            let old = key(&format!("files/{name}-old"));
            put_bytes(store, &old, &b"old"[..]).await.unwrap();
            assert!(store.put(&old, cut_off(good)).await.is_err());
            assert_eq!(read_all(store, &old).await, b"old");
            store.delete(&old).await.unwrap();
        }
        wait_for_no_leftovers(&backend).await;
    })
    .await;
}

#[tokio::test]
async fn a_put_dropped_midway_leaves_nothing() {
    each_backend("dropped", |backend| async move {
        let store = backend.store();
        for (name, sent) in [("short", 1000), ("long", PART_BYTES + 5)] {
            let k = key(&format!("files/{name}"));
            // Some bytes, then a client that neither sends nor hangs up:
            // the put is given up (its future dropped) at the timeout.
            let body: ByteStream<'static> =
                Box::pin(chunked(pattern(sent), 64 * 1024).chain(futures_util::stream::pending()));
            let given_up = tokio::time::timeout(Duration::from_secs(3), store.put(&k, body)).await;
            assert!(given_up.is_err(), "{name}: the put finished");
            assert_eq!(store.size(&k).await.unwrap(), None, "{name}");
        }
        wait_for_no_leftovers(&backend).await;
    })
    .await;
}

#[test]
fn keys_stay_relative_and_plain() {
    for good in [
        "files/file-abc",
        "skills/skillver_1.zip",
        "audit/2025-01.jsonl",
        "a=b+c",
    ] {
        assert_eq!(Key::new(good).unwrap().as_str(), good);
    }
    for bad in [
        "",
        "/etc/passwd",
        "../x",
        "files/../../x",
        "files/./x",
        "files//x",
        "files/",
        ".partial/x",
        "files/.hidden",
        "a b",
        "a\\b",
        "caf\u{e9}",
        "x\0",
    ] {
        assert!(
            matches!(Key::new(bad), Err(ObjectError::InvalidKey { .. })),
            "{bad:?}"
        );
    }
    assert!(Key::new("a".repeat(1025)).is_err());
}

#[test]
fn s3_locations_are_read() {
    let at = S3Location::parse("s3://shellgate-blobs/prod/node-a/").unwrap();
    assert_eq!(at.bucket, "shellgate-blobs");
    assert_eq!(at.prefix, "prod/node-a");
    assert_eq!(S3Location::parse("s3://bucket").unwrap().prefix, "");
    for bad in [
        "bucket/x",
        "http://bucket",
        "s3://",
        "s3://Bucket",
        "s3://b",
        "s3://bucket/../x",
        "s3://bucket//x",
    ] {
        assert!(S3Location::parse(bad).is_err(), "{bad}");
    }
    let settings = S3Settings {
        secret_access_key: Some("very-secret".to_owned()),
        ..S3Settings::default()
    };
    assert!(!format!("{settings:?}").contains("very-secret"));
}

#[test]
fn local_objects_are_private_and_crash_leftovers_go() {
    use std::os::unix::fs::PermissionsExt;
    let root = std::env::temp_dir().join(format!("shellgate-objects-{}", unique("modes")));
    let store = LocalStore::open(&root).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(put_bytes(&store, &key("files/nested/file-1"), &b"x"[..]))
        .unwrap();
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(root.join("files/nested/file-1")), 0o600);
    assert_eq!(mode(root.join("files")), 0o700);
    assert_eq!(mode(root.join("files/nested")), 0o700);
    assert_eq!(mode(root.join(".partial")), 0o700);
    // A put a crash interrupted (its process gone): removed at the next
    // open; a live process's put in progress (a server beside the CLI)
    // stays; objects stay.
    let dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    let mut dead = dead;
    dead.wait().unwrap();
    let crashed = root.join(format!(".partial/{dead_pid}-0.part"));
    let writing = root.join(format!(".partial/{}-7.part", std::process::id()));
    std::fs::write(&crashed, b"half").unwrap();
    std::fs::write(&writing, b"in progress").unwrap();
    std::fs::write(root.join(".partial/stray"), b"?").unwrap();
    drop(store);
    let store = LocalStore::open(&root).unwrap();
    let left: Vec<PathBuf> = std::fs::read_dir(root.join(".partial"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left, vec![writing.clone()]);
    std::fs::remove_file(writing).unwrap();
    assert_eq!(
        runtime
            .block_on(store.size(&key("files/nested/file-1")))
            .unwrap(),
        Some(1)
    );
    // A link planted in the directory is never followed.
    std::os::unix::fs::symlink("/etc/hostname", root.join("files/link")).unwrap();
    assert!(runtime.block_on(store.get(&key("files/link"))).is_err());
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test]
async fn a_body_written_by_blocking_code_is_stored_only_when_finished() {
    each_backend("blocking", |backend| async move {
        let store = backend.store();
        let lines = key("audit/export.jsonl");
        let (writer, body) = crate::blocking_body();
        let producer = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut writer = writer;
            for i in 0..20_000 {
                writeln!(writer, "{{\"line\":{i}}}").unwrap();
            }
            writer.finish().unwrap();
        });
        let size = store.put(&lines, body).await.unwrap();
        producer.await.unwrap();
        let read = read_all(store, &lines).await;
        assert_eq!(read.len() as u64, size);
        let text = String::from_utf8(read).unwrap();
        assert_eq!(text.lines().count(), 20_000);
        assert!(text.ends_with("{\"line\":19999}\n"));
        // A producer that gives up (or fails) stores nothing.
        for fails in [false, true] {
            let partial = key(&format!("audit/partial-{fails}"));
            let (writer, body) = crate::blocking_body();
            let producer = tokio::task::spawn_blocking(move || {
                use std::io::Write;
                let mut writer = writer;
                writer.write_all(&pattern(200_000)).unwrap();
                if fails {
                    writer.fail(std::io::Error::other("the store's read failed"));
                }
            });
            let put = store.put(&partial, body).await;
            producer.await.unwrap();
            assert!(matches!(put, Err(ObjectError::Body { .. })), "{put:?}");
            assert_eq!(store.size(&partial).await.unwrap(), None);
        }
        wait_for_no_leftovers(&backend).await;
    })
    .await;
}

#[tokio::test]
async fn a_store_that_cannot_be_used_fails_its_check() {
    let root = std::env::temp_dir().join(format!("shellgate-objects-{}", unique("check")));
    let store = LocalStore::open(&root).unwrap();
    store.check().await.unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    assert!(store.check().await.is_err());
    let Ok(endpoint) = std::env::var("SHELLGATE_TEST_S3_ENDPOINT") else {
        eprintln!("S3 skipped (SHELLGATE_TEST_S3_ENDPOINT is not set)");
        return;
    };
    // A bucket that is not there.
    let location = S3Location::parse(&format!("s3://{}/x", unique("missing"))).unwrap();
    let store = S3Store::new(
        location,
        S3Settings {
            endpoint: Some(endpoint),
            region: Some("us-east-1".to_owned()),
            access_key_id: Some("test".to_owned()),
            secret_access_key: Some("test".to_owned()),
            allow_http: true,
        },
    )
    .unwrap();
    let error = store.check().await.unwrap_err();
    assert!(error.to_string().contains("NoSuchBucket"), "{error}");
}
