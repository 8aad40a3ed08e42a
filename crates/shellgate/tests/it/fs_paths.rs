//! Files by path over a real `shellgate serve`: byte-exact round
//! trips anywhere the sandbox user may write, a gibibyte streamed through
//! without the server holding it, the hostile paths refused (host files,
//! init's root, FIFOs, devices, magic links, read-only paths), an archive
//! export that cannot be made refused before its first byte, a recursive
//! delete that cannot finish refused before anything goes, a cut upload
//! leaving the old file, the disk quota, and a suspended container's
//! `/mnt/data` read without waking it.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::server::*;
use common::wait_until;
use serde_json::{json, Value};

fn get(port: u16, path: &str) -> Response {
    request(port, "GET", path, Some(KEY), &[], b"")
}

fn put(port: u16, id: &str, query: &str, body: &[u8]) -> Response {
    request(
        port,
        "PUT",
        &format!("/v1/containers/{id}/fs/content?{query}"),
        Some(KEY),
        &[("Content-Type", "application/octet-stream")],
        body,
    )
}

fn read(port: u16, id: &str, path: &str) -> Response {
    get(port, &format!("/v1/containers/{id}/fs/content?path={path}"))
}

fn stat(port: u16, id: &str, path: &str) -> Response {
    get(port, &format!("/v1/containers/{id}/fs/stat?path={path}"))
}

fn ok_json(response: Response) -> Value {
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    response.json()
}

/// The byte at offset `i` of the test pattern (not periodic in a way a
/// shifted or repeated chunk could match).
fn pattern(i: u64) -> u8 {
    ((i % 251) ^ ((i >> 16) % 253)) as u8
}

#[test]
fn files_round_trip_byte_exact_anywhere_the_sandbox_user_may_write() {
    let server = start("fs-round-trip", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    let payload: Vec<u8> = (0..50_000_000u64).map(pattern).collect();

    for path in [
        "/mnt/data/blob.bin",
        "/tmp/deep/er/blob.bin",
        "/home/user/blob.bin",
    ] {
        let entry = ok_json(put(port, &id, &format!("path={path}"), &payload));
        assert_eq!(entry["object"], "container.fs_entry");
        assert_eq!(entry["path"], path);
        assert_eq!(entry["size"], 50_000_000);
        assert_eq!(entry["mode"], "0644");
        let back = read(port, &id, path);
        assert_eq!(back.status, 200);
        assert!(back
            .headers
            .to_ascii_lowercase()
            .contains("content-length: 50000000"));
        assert!(back.body == payload, "{path} did not read back byte-exact");
    }
    // A relative path is under /mnt/data; mode is honoured, and parents
    // are made only when asked (they are by default).
    let entry = ok_json(put(port, &id, "path=rel/x.sh&mode=0750", b"echo hi\n"));
    assert_eq!(entry["path"], "/mnt/data/rel/x.sh");
    assert_eq!(entry["mode"], "0750");
    let run = exec(
        port,
        &id,
        &["stat -c '%a %U' /mnt/data/rel/x.sh && /mnt/data/rel/x.sh"],
    );
    assert_eq!(
        run.json()["output"][0]["stdout"],
        "750 user\nhi\n",
        "{}",
        run.json()
    );
    let missing = put(port, &id, "path=/tmp/none/x&parents=false", b"x");
    assert_eq!(missing.error(404)["code"], "file_not_found");
    assert_eq!(
        put(port, &id, "path=/tmp/x&mode=999", b"x").error(400)["param"],
        "mode"
    );

    // stat reports a link, not its target; list goes depth first, sorted.
    exec(port, &id, &["ln -s /tmp/deep /mnt/data/link"]);
    let link = ok_json(stat(port, &id, "/mnt/data/link"));
    assert_eq!(link["type"], "symlink");
    assert_eq!(link["link_target"], "/tmp/deep");
    let listing = ok_json(get(
        port,
        &format!("/v1/containers/{id}/fs/list?path=/tmp/deep&depth=2"),
    ));
    let paths: Vec<&str> = listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/tmp/deep/er", "/tmp/deep/er/blob.bin"]);
    assert_eq!(listing["truncated"], false);
    let one = ok_json(get(
        port,
        &format!("/v1/containers/{id}/fs/list?path=/tmp/deep&depth=2&limit=1"),
    ));
    assert_eq!(one["truncated"], true);
    assert_eq!(
        get(
            port,
            &format!("/v1/containers/{id}/fs/list?path=/tmp&depth=0")
        )
        .error(400)["param"],
        "depth"
    );
    // A name that is not UTF-8 is counted, not dropped silently.
    exec(
        port,
        &id,
        &["mkdir /tmp/odd && touch /tmp/odd/ok $'/tmp/odd/\\xff'"],
    );
    let odd = ok_json(get(
        port,
        &format!("/v1/containers/{id}/fs/list?path=/tmp/odd"),
    ));
    assert_eq!(odd["data"].as_array().unwrap().len(), 1, "{odd}");
    assert_eq!(odd["non_utf8_names"], 1, "{odd}");

    // mkdir, move, remove.
    let fs = |what: &str| format!("/v1/containers/{id}/fs/{what}");
    let made = ok_json(post_json(
        port,
        &fs("mkdir"),
        KEY,
        &json!({"path": "/tmp/a/b", "mode": "0700"}),
    ));
    assert_eq!(
        (made["type"].clone(), made["mode"].clone()),
        (json!("directory"), json!("0700"))
    );
    let again = post_json(
        port,
        &fs("mkdir"),
        KEY,
        &json!({"path": "/tmp/a/b", "parents": false}),
    );
    assert_eq!(again.status, 409);
    let moved = ok_json(post_json(
        port,
        &fs("move"),
        KEY,
        &json!({"from": "/tmp/deep/er/blob.bin", "to": "/tmp/a/b/moved.bin"}),
    ));
    assert_eq!(moved["size"], 50_000_000);
    ok_json(put(port, &id, "path=/tmp/a/other", b"x"));
    let refused = post_json(
        port,
        &fs("move"),
        KEY,
        &json!({"from": "/tmp/a/other", "to": "/tmp/a/b/moved.bin"}),
    );
    assert_eq!(refused.error(409)["code"], Value::Null);
    ok_json(post_json(
        port,
        &fs("move"),
        KEY,
        &json!({"from": "/tmp/a/other", "to": "/tmp/a/b/moved.bin", "overwrite": true}),
    ));
    let remove = |query: &str| {
        request(
            port,
            "DELETE",
            &format!("/v1/containers/{id}/fs?{query}"),
            Some(KEY),
            &[],
            b"",
        )
    };
    assert_eq!(remove("path=/tmp/a").status, 409);
    let deleted = ok_json(remove("path=/tmp/a&recursive=true"));
    assert_eq!(deleted["object"], "container.fs_entry.deleted");
    assert_eq!(
        stat(port, &id, "/tmp/a").error(404)["code"],
        "file_not_found"
    );

    // Another project sees nothing.
    let foreign = request(
        port,
        "GET",
        &format!("/v1/containers/{id}/fs/stat?path=/tmp"),
        Some(OTHER_KEY),
        &[],
        b"",
    );
    foreign.error(404);
}

#[test]
fn hostile_paths_are_refused_and_nothing_hangs() {
    let server = start("fs-hostile", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    exec(
        port,
        &id,
        &["mkfifo /mnt/data/fifo /tmp/fifo && \
           ln -s /proc/self/root/etc/hostname /mnt/data/magic && \
           ln -s /etc/hostname /mnt/data/plain"],
    );
    // The host's shadow file is not in the container at all.
    assert_eq!(
        read(port, &id, "/etc/shadow").error(404)["code"],
        "file_not_found"
    );
    // Init's root: the sandbox user may not look there.
    let init = read(port, &id, "/proc/1/root/etc/hostname").error(403);
    assert_eq!(init["code"], "permission_denied");
    // A FIFO (a read would block for ever), a device (a read would never
    // end), a directory: refused at once, naming the path.
    for path in [
        "/mnt/data/fifo",
        "/tmp/fifo",
        "/dev/zero",
        "/dev/null",
        "/tmp",
    ] {
        assert_eq!(read(port, &id, path).error(400)["param"], "path", "{path}");
    }
    // A magic link is not followed; an ordinary link is, as a command's
    // would be (to the container's own file).
    assert_eq!(
        read(port, &id, "/mnt/data/magic").error(400)["param"],
        "path"
    );
    assert_eq!(
        read(port, &id, "/proc/self/fd/0").error(400)["param"],
        "path"
    );
    let hostname = exec(port, &id, &["cat /etc/hostname"]).json()["output"][0]["stdout"].clone();
    assert_eq!(
        String::from_utf8_lossy(&read(port, &id, "/mnt/data/plain").body),
        hostname.as_str().unwrap()
    );
    // Read-only places: refused (403; /proc's answer is its own ENOENT),
    // nothing written.
    for path in ["/usr/bin/evil", "/etc/evil", "/proc/evil", "/"] {
        let refused = put(port, &id, &format!("path={path}"), b"x");
        assert!(
            matches!(refused.status, 400 | 403 | 404),
            "{path}: {}",
            String::from_utf8_lossy(&refused.body)
        );
    }
    assert_eq!(
        put(port, &id, "path=/usr/bin/evil", b"x").error(403)["code"],
        "permission_denied"
    );
    // Writing over a FIFO is refused, not opened.
    assert_eq!(put(port, &id, "path=/tmp/fifo", b"x").status, 409);
    // Bad paths name the parameter.
    assert_eq!(read(port, &id, "").error(400)["param"], "path");
    assert_eq!(read(port, &id, "a%00b").error(400)["param"], "path");
    // The container still serves commands: nothing above hung a worker.
    assert_eq!(
        exec(port, &id, &["echo alive"]).json()["output"][0]["stdout"],
        "alive\n"
    );
}

fn export(port: u16, id: &str, path: &str) -> Response {
    get(port, &format!("/v1/containers/{id}/fs/archive?path={path}"))
}

fn remove(port: u16, id: &str, path: &str, recursive: bool) -> Response {
    request(
        port,
        "DELETE",
        &format!("/v1/containers/{id}/fs?path={path}&recursive={recursive}"),
        Some(KEY),
        &[],
        b"",
    )
}

/// An archive export that cannot be made is an error answer, in the API's
/// envelope and with the status `fs/content` gives the same path, before
/// the first byte: never a 200 whose stream is then cut.
#[test]
fn an_export_that_cannot_be_made_is_refused_before_its_first_byte() {
    let server = start("fs-export-refused", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    exec(
        port,
        &id,
        &[
            "mkdir -p /mnt/data/dir /mnt/data/closed && echo hi > /mnt/data/dir/f.txt && \
           mkfifo /mnt/data/fifo /tmp/fifo && chmod 000 /mnt/data/closed && \
           ln -s /proc/self/root /mnt/data/magic && ln -s dir /mnt/data/plain",
        ],
    );
    let refused = |path: &str, status: u16| {
        let answer = export(port, &id, path);
        let error = answer.error(status);
        assert!(
            !answer
                .headers
                .to_ascii_lowercase()
                .contains("application/x-tar"),
            "{path}: {}",
            answer.headers
        );
        error
    };
    for path in ["/mnt/data/none", "/nowhere", "/mnt/data/dir/none"] {
        assert_eq!(refused(path, 404)["code"], "file_not_found", "{path}");
        assert_eq!(read(port, &id, path).status, 404, "{path}");
    }
    // Not a directory: a regular file, a FIFO (which is not opened), a
    // device, a magic link; 400 naming the path.
    for path in [
        "/mnt/data/dir/f.txt",
        "/etc/hostname",
        "/mnt/data/fifo",
        "/tmp/fifo",
        "/dev/zero",
        "/mnt/data/magic",
    ] {
        let error = refused(path, 400);
        assert_eq!(error["param"], "path", "{path}");
    }
    assert!(refused("/dev/zero", 400)["message"]
        .as_str()
        .is_some_and(|m| m.contains("only a directory")));
    // Where the sandbox user may not look: 403, as for a read.
    for path in ["/proc/1/root", "/proc/1/root/etc", "/mnt/data/closed"] {
        assert_eq!(refused(path, 403)["code"], "permission_denied", "{path}");
    }
    assert_eq!(read(port, &id, "/proc/1/root/etc/hostname").status, 403);
    // A directory, through an ordinary link too, still exports.
    for path in ["/mnt/data/dir", "/mnt/data/plain"] {
        let archive = export(port, &id, path);
        assert_eq!(archive.status, 200, "{path}");
        assert_eq!(tar_names(&archive.body), ["f.txt"], "{path}");
    }
    // Nothing above left a worker behind.
    assert_eq!(
        exec(port, &id, &["echo alive"]).json()["output"][0]["stdout"],
        "alive\n"
    );
}

/// A recursive delete that cannot finish (a mount point, an entry the
/// sandbox user may not remove, deep in the tree) is refused before
/// anything is removed: the client is never told "refused" about a tree
/// that lost part of its contents.
#[test]
fn a_delete_that_cannot_finish_is_refused_before_anything_is_removed() {
    let server = start("fs-remove-whole", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    exec(
        port,
        &id,
        &[
            "mkdir -p /mnt/data/sub /mnt/data/tree/locked && echo a > /mnt/data/a.txt && \
           echo b > /mnt/data/sub/b.txt && echo h > /home/user/h.txt && \
           echo w > /workspace/w.txt && echo t > /tmp/t.txt && \
           for i in $(seq 30); do echo $i > /mnt/data/tree/f$i; done && \
           echo x > /mnt/data/tree/locked/inner && chmod 555 /mnt/data/tree/locked",
        ],
    );
    let everything = || {
        exec(
            port,
            &id,
            &["find /mnt/data /home/user /workspace /tmp -mindepth 1 | sort"],
        )
        .json()["output"][0]["stdout"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let before = everything();
    assert!(before.contains("/mnt/data/tree/f30\n"), "{before}");
    // Mount points: the container's disk and home, /tmp.
    for path in ["/mnt/data", "/home/user", "/workspace", "/tmp"] {
        let error = remove(port, &id, path, true).error(409);
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("mount point") && message.contains("nothing was removed"),
            "{path}: {message}"
        );
    }
    // A directory the sandbox user may not empty, among 30 files it may.
    let error = remove(port, &id, "/mnt/data/tree", true).error(403);
    assert_eq!(error["code"], "permission_denied");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("/mnt/data/tree/locked")),
        "{error}"
    );
    // Read-only places: refused, nothing removed.
    assert_eq!(remove(port, &id, "/usr/share", true).status, 403);
    assert_eq!(remove(port, &id, "/proc/1", true).status, 403);
    assert_eq!(everything(), before);
    // Once it can be removed whole, it is.
    exec(port, &id, &["chmod 755 /mnt/data/tree/locked"]);
    ok_json(remove(port, &id, "/mnt/data/tree", true));
    ok_json(remove(port, &id, "/mnt/data/sub", true));
    let after = everything();
    assert!(!after.contains("/mnt/data/tree") && !after.contains("/mnt/data/sub"));
    assert!(after.contains("/mnt/data/a.txt") && after.contains("/tmp/t.txt"));
}

#[test]
fn a_cut_upload_leaves_the_old_file_and_a_full_disk_is_a_413() {
    let server = start("fs-cut", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    ok_json(put(port, &id, "path=/mnt/data/keep.txt", b"old\n"));
    // Announce 10 MB, send 5 KB, hang up.
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "PUT /v1/containers/{id}/fs/content?path=/mnt/data/keep.txt HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {KEY}\r\nContent-Length: 10000000\r\n\r\n"
    )
    .unwrap();
    stream.write_all(&[b'x'; 5000]).unwrap();
    drop(stream);
    // Once no worker writes any more (its temporary file gone), the old
    // file is what is there.
    assert!(wait_until(
        || {
            let listing = get(port, &format!("/v1/containers/{id}/fs/list?path=/mnt/data")).json();
            listing["data"]
                .as_array()
                .is_some_and(|d| d.len() == 1 && d[0]["name"] == "keep.txt")
        },
        Duration::from_secs(20)
    ));
    assert_eq!(read(port, &id, "/mnt/data/keep.txt").body, b"old\n");

    // /dev/shm and /tmp share one cap (/tmp's share of the memory limit,
    // 256 MiB here, and a quarter more): with 300 MiB in /tmp, 100 MB do
    // not fit in /dev/shm. The answer is the quota's, nothing is left.
    ok_json(put(port, &id, "path=/dev/shm/f", b"small"));
    let filled = exec(port, &id, &["head -c 300M /dev/zero > /tmp/fill; echo $?"]).json();
    assert_eq!(filled["output"][0]["stdout"], "0\n", "{filled}");
    let full = put(port, &id, "path=/dev/shm/f", &vec![7u8; 100_000_000]);
    assert_eq!(full.error(413)["code"], "quota_exceeded");
    assert_eq!(read(port, &id, "/dev/shm/f").body, b"small");
    let shm = get(port, &format!("/v1/containers/{id}/fs/list?path=/dev/shm")).json();
    assert_eq!(shm["data"].as_array().unwrap().len(), 1, "{shm}");
}

#[test]
fn a_suspended_containers_data_is_read_without_waking_it() {
    let server = start(
        "fs-suspended",
        &[
            ("SHELLGATE_IDLE_SUSPEND_AFTER_SECS", "1"),
            ("SHELLGATE_SWEEP_INTERVAL_SECS", "1"),
        ],
    );
    let port = server.port;
    let id = create_container(port, KEY);
    ok_json(put(port, &id, "path=/mnt/data/sub/note.txt", b"kept\n"));
    exec(port, &id, &["mkfifo /mnt/data/sub/fifo"]);
    let status = || get(port, &format!("/v1/containers/{id}")).json()["status"].clone();
    assert!(
        wait_until(|| status() == "suspended", Duration::from_secs(30)),
        "never suspended"
    );
    let before = get(port, &format!("/v1/containers/{id}")).json();
    for _ in 0..2 {
        assert_eq!(read(port, &id, "/mnt/data/sub/note.txt").body, b"kept\n");
        assert_eq!(
            ok_json(stat(port, &id, "/mnt/data/sub"))["type"],
            "directory"
        );
        let listing = ok_json(get(
            port,
            &format!("/v1/containers/{id}/fs/list?path=/mnt/data&depth=2"),
        ));
        assert_eq!(listing["data"].as_array().unwrap().len(), 3, "{listing}");
        assert_eq!(read(port, &id, "/mnt/data/none").status, 404);
        // Its archive too, from the disk (the FIFO left out); what cannot
        // be exported is an error answer, as for a running container.
        let archive = export(port, &id, "/mnt/data");
        assert_eq!(archive.status, 200);
        assert_eq!(tar_names(&archive.body), ["sub/", "sub/note.txt"]);
        assert_eq!(
            export(port, &id, "/mnt/data/none").error(404)["code"],
            "file_not_found"
        );
        for path in ["/mnt/data/sub/note.txt", "/mnt/data/sub/fifo"] {
            assert_eq!(export(port, &id, path).error(400)["param"], "path");
        }
    }
    let after = get(port, &format!("/v1/containers/{id}")).json();
    assert_eq!(after["status"], "suspended");
    assert_eq!(after["last_active_at"], before["last_active_at"]);
    // Outside /mnt/data the container must answer: it is woken.
    ok_json(stat(port, &id, "/tmp"));
    assert_eq!(status(), "running");
}

/// The member names of a tar stream, as `tar -t` lists them.
fn tar_names(archive: &[u8]) -> Vec<String> {
    let mut child = std::process::Command::new("tar")
        .arg("-t")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(archive).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "not a tar stream");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Sends a PUT of `length` pattern bytes in chunks, never holding them.
fn put_streamed(port: u16, id: &str, path: &str, length: u64) -> Value {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    write!(
        stream,
        "PUT /v1/containers/{id}/fs/content?path={path} HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {KEY}\r\nConnection: close\r\nContent-Length: {length}\r\n\r\n"
    )
    .unwrap();
    let mut chunk = vec![0u8; 1 << 20];
    let mut sent = 0u64;
    while sent < length {
        let n = (length - sent).min(chunk.len() as u64) as usize;
        for (i, byte) in chunk[..n].iter_mut().enumerate() {
            *byte = pattern(sent + i as u64);
        }
        stream.write_all(&chunk[..n]).unwrap();
        sent += n as u64;
    }
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    serde_json::from_slice(&answer[split + 4..]).unwrap()
}

/// Reads a GET's body in chunks, checking each byte against the pattern;
/// returns how many bytes came.
fn get_streamed(port: u16, id: &str, path: &str) -> u64 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    write!(
        stream,
        "GET /v1/containers/{id}/fs/content?path={path} HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {KEY}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut head = Vec::new();
    let mut offset = 0u64;
    let mut in_body = false;
    loop {
        let n = stream.read(&mut buf).unwrap();
        if n == 0 {
            return offset;
        }
        let mut data = &buf[..n];
        if !in_body {
            head.extend_from_slice(data);
            let Some(split) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            assert!(
                head.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&head)
            );
            let text = String::from_utf8_lossy(&head[..split]).to_ascii_lowercase();
            assert!(!text.contains("chunked"), "{text}");
            in_body = true;
            let rest = head[split + 4..].to_vec();
            for (i, byte) in rest.iter().enumerate() {
                assert_eq!(
                    *byte,
                    pattern(offset + i as u64),
                    "at {}",
                    offset + i as u64
                );
            }
            offset += rest.len() as u64;
            data = &[];
        }
        for (i, byte) in data.iter().enumerate() {
            assert_eq!(
                *byte,
                pattern(offset + i as u64),
                "at {}",
                offset + i as u64
            );
        }
        offset += data.len() as u64;
    }
}

#[test]
fn a_gibibyte_streams_through_without_the_server_holding_it() {
    let server = start("fs-gibibyte", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    let pid = server.child.id().to_string();
    let before = common::peak_rss_kib(&pid);
    let length = 1u64 << 30;
    let entry = put_streamed(port, &id, "/mnt/data/gib.bin", length);
    assert_eq!(entry["size"], length);
    assert_eq!(get_streamed(port, &id, "/mnt/data/gib.bin"), length);
    let growth_mib = common::peak_rss_kib(&pid).saturating_sub(before) / 1024;
    assert!(
        growth_mib < 64,
        "the server's peak memory grew by {growth_mib} MiB for a 1 GiB round trip"
    );
}

/// Starts a GET of `path` and reads its head and a little of its body,
/// leaving the rest unread.
fn start_download(port: u16, id: &str, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET /v1/containers/{id}/fs/content?path={path} HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {KEY}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 4096];
    let n = stream.read(&mut head).unwrap();
    assert!(
        head[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head[..n])
    );
    stream
}

#[test]
fn a_client_that_leaves_or_stops_reading_frees_the_container() {
    let server = start(
        "fs-stall",
        &[
            ("SHELLGATE_IDLE_SUSPEND_AFTER_SECS", "1"),
            ("SHELLGATE_SWEEP_INTERVAL_SECS", "1"),
            ("SHELLGATE_TRANSFER_STALL_SECS", "2"),
        ],
    );
    let port = server.port;
    let id = create_container(port, KEY);
    let status = || get(port, &format!("/v1/containers/{id}")).json()["status"].clone();
    // /tmp: read by a worker in the container (which keeps it busy while
    // it sends); far more than the pipes and sockets between hold.
    let payload = vec![1u8; 64_000_000];
    for leaves in [true, false] {
        ok_json(put(port, &id, "path=/tmp/big.bin", &payload));
        let stream = start_download(port, &id, "/tmp/big.bin");
        if leaves {
            drop(stream);
            assert!(
                wait_until(|| status() == "suspended", Duration::from_secs(30)),
                "a download whose client left kept the container busy"
            );
        } else {
            // The client holds the connection open and reads nothing: the
            // stalled transfer is ended, and the container is idle again.
            assert!(
                wait_until(|| status() == "suspended", Duration::from_secs(30)),
                "a stalled download kept the container busy"
            );
            drop(stream);
        }
    }
}
