//! The server's robustness against real clients, over real sockets: one
//! tenant never stalls another, idle and slow connections are bounded,
//! quotas refuse with a 429 naming the limit, a client that hangs up
//! changes nothing, and errors a client causes are 4xx envelopes.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::server::*;
use common::{processes_matching, wait_until};
use serde_json::{json, Value};

fn get(port: u16, path: &str, key: &str) -> Response {
    request(port, "GET", path, Some(key), &[], b"")
}

fn multipart_file(name: &str, contents: &[u8]) -> (String, Vec<u8>) {
    let boundary = "XBOUNDARYX";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(contents);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// The container's row as the store has it (the test reads the database
/// the server writes).
fn stored_row(server: &Server, id: &str) -> shellgate_store::ContainerRow {
    let store = shellgate_store::Store::open(&server.dir.path().join("shellgate.db")).unwrap();
    store.container("alpha", id).unwrap().expect("row")
}

fn raise_own_file_limit() {
    let limit = libc::rlimit {
        rlim_cur: 65_536,
        rlim_max: 65_536,
    };
    // SAFETY: setrlimit reads the rlimit we pass.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
}

#[test]
fn thousands_of_idle_connections_do_not_stop_the_server() {
    raise_own_file_limit();
    let server = start(
        "http-idle",
        &[
            ("SHELLGATE_MAX_CONNECTIONS", "1000"),
            ("SHELLGATE_HEADER_READ_TIMEOUT_SECS", "60"),
        ],
    );
    let port = server.port;
    let id = create_container(port, KEY);
    // Three times the cap of sockets that connect and never say a word.
    let idle: Vec<TcpStream> = (0..3000)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    assert!(idle.len() > 2000, "only {} sockets opened", idle.len());
    // The server has taken its cap of them before it is asked anything.
    let server_fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", server.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert!(
        wait_until(|| server_fds() >= 1000, Duration::from_secs(30)),
        "the server took only {} descriptors' worth of connections",
        server_fds()
    );
    for _ in 0..5 {
        assert_eq!(request(port, "GET", "/healthz", None, &[], b"").status, 200);
        let done = exec(port, &id, &["echo still here"]);
        assert_eq!(done.json()["output"][0]["stdout"], "still here\n");
    }
    let fds = server_fds();
    assert!(fds < 1500, "the server holds {fds} descriptors");
    drop(idle);
}

#[test]
fn slow_headers_and_slow_bodies_are_cut_off() {
    let server = start(
        "http-slow",
        &[
            ("SHELLGATE_HEADER_READ_TIMEOUT_SECS", "2"),
            ("SHELLGATE_BODY_READ_TIMEOUT_SECS", "2"),
        ],
    );
    let port = server.port;
    // A header that never ends: the connection is closed.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut buf = [0u8; 256];
    let read = slow.read(&mut buf);
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "the server answered a half header"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // A body that trickles: 408, and the request does nothing.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    slow.write_all(
        format!(
            "POST /v1/containers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"na"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert_eq!(container_count(port), 0);
}

/// One HTTP/1.1 response read off `stream` (its body by Content-Length):
/// its status line and body, or `None` if the connection ended first.
fn read_response(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => seen.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&seen).into_owned();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    let status = head.lines().next().unwrap_or_default().to_owned();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

#[test]
fn a_refusal_sent_before_the_body_arrives_still_reaches_the_client() {
    let server = start("http-early-refusal", &[]);
    let port = server.port;
    let (content_type, body) = multipart_file("notes.txt", &[b'x'; 64 * 1024]);
    for key in ["not-a-key", KEY] {
        let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        // The head alone: a refusal (401 for a bad key, 404 for a container
        // that does not exist) is answered before any of the body is read.
        client
            .write_all(
                format!(
                    "POST /v1/containers/cntr_missing/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            )
            .unwrap();
        let (status, answer) = read_response(&mut client).expect("the refusal");
        assert!(
            status.contains(if key == KEY { "404" } else { "401" }),
            "{status} {answer}"
        );
        assert!(answer.contains("\"error\""), "{answer}");
        // The client, still sending its body, is not cut off: the body is
        // read, and the connection serves its next request.
        client.write_all(&body).unwrap();
        client
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let (status, _) = read_response(&mut client).expect("the connection was kept");
        assert!(status.contains("200"), "{status}");
    }
}

#[test]
fn quotas_refuse_with_a_429_naming_the_limit() {
    let server = start(
        "http-quotas",
        &[
            ("SHELLGATE_MAX_RUNNING_CONTAINERS_PER_PROJECT", "2"),
            ("SHELLGATE_MAX_MEMORY_PER_PROJECT", "5g"),
            ("SHELLGATE_MAX_EXECS_PER_PROJECT", "1"),
            ("SHELLGATE_SANDBOX_MEMORY_CEILING", "8g"),
        ],
    );
    let port = server.port;
    let create = |key: &str, memory: &str| {
        post_json(
            port,
            "/v1/containers",
            key,
            &json!({"name": "q", "memory_limit": memory}),
        )
    };
    let first = create(KEY, "1g").json()["id"].as_str().unwrap().to_owned();
    let second = create(KEY, "4g").json()["id"].as_str().unwrap().to_owned();
    let refused = create(KEY, "1g").error(429);
    assert_eq!(refused["code"], "too_many_running_containers");
    assert!(refused["message"]
        .as_str()
        .unwrap()
        .contains("max_running_containers_per_project"));
    // Another project is not affected.
    create(OTHER_KEY, "1g").json()["id"].as_str().unwrap();
    request(
        port,
        "DELETE",
        &format!("/v1/containers/{first}"),
        Some(KEY),
        &[],
        b"",
    );
    let refused = create(KEY, "4g").error(429);
    assert_eq!(refused["code"], "project_memory_exceeded");
    assert!(refused["message"]
        .as_str()
        .unwrap()
        .contains("max_memory_per_project"));
    // More than every sandbox together may have: a 400, whoever asks.
    let refused = create(OTHER_KEY, "16g").error(400);
    assert_eq!(refused["param"], "memory_limit");
    // One exec at a time for this project.
    let busy = std::thread::spawn({
        let second = second.clone();
        // A duration no other test uses: its process is this one.
        move || exec(port, &second, &["sleep 3.05"]).status
    });
    assert!(wait_until(
        || processes_matching("sleep 3.05") > 0,
        Duration::from_secs(30)
    ));
    let answer = exec(port, &second, &["true"]);
    let refused = answer.error(429);
    assert_eq!(refused["code"], "too_many_concurrent_execs");
    assert!(refused["message"]
        .as_str()
        .unwrap()
        .contains("max_execs_per_project"));
    assert_eq!(busy.join().unwrap(), 200);
    assert_eq!(exec(port, &second, &["true"]).status, 200);
}

#[test]
fn a_client_that_hangs_up_changes_nothing() {
    let server = start("http-hangup", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    // An exec whose client leaves: still killed at its timeout, and billed.
    {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let body = json!({"commands": ["sleep 4001"], "timeout_ms": 2000}).to_string();
        write!(
            stream,
            "POST /v1/containers/{id}/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        // Hang up only once the command runs.
        assert!(wait_until(
            || processes_matching("sleep 4001") > 0,
            Duration::from_secs(30)
        ));
    }
    // Killed at its timeout, and its time billed.
    assert!(wait_until(
        || processes_matching("sleep 4001") == 0,
        Duration::from_secs(30)
    ));
    assert!(
        wait_until(
            || stored_row(&server, &id).session_seconds >= 1.9,
            Duration::from_secs(30)
        ),
        "the abandoned command's time was not billed: {}",
        stored_row(&server, &id).session_seconds
    );
    let left = exec(port, &id, &["pgrep -c -f '[s]leep 4001' || true"]);
    assert_eq!(left.json()["output"][0]["stdout"], "0\n");
    // A create whose client leaves, at any moment, either completes or
    // leaves nothing: no half-made row, directory or id slot.
    for delay_ms in [0, 1, 2, 4, 8, 16, 32] {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let body = json!({"name": "abandoned"}).to_string();
        write!(
            stream,
            "POST /v1/containers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        // Hanging up at each of these moments is the test, not a wait.
        std::thread::sleep(Duration::from_millis(delay_ms));
    }
    // Every abandoned create settles: made whole, or cleaned up.
    let settled = || {
        let store = shellgate_store::Store::open(&server.dir.path().join("shellgate.db")).unwrap();
        let rows = store.all_containers().unwrap();
        let mut on_disk: Vec<String> =
            std::fs::read_dir(server.dir.path().join("sandbox/containers"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
        on_disk.sort();
        let mut in_store: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        in_store.sort();
        (rows, on_disk, in_store)
    };
    wait_until(
        || {
            let (rows, on_disk, in_store) = settled();
            rows.iter()
                .all(|row| row.status != shellgate_store::ContainerStatus::Creating)
                && on_disk == in_store
        },
        Duration::from_secs(30),
    );
    let (rows, on_disk, in_store) = settled();
    assert!(
        rows.iter()
            .all(|row| row.status != shellgate_store::ContainerStatus::Creating),
        "{rows:?}"
    );
    assert_eq!(on_disk, in_store, "the engine and the store disagree");
    // Each names its disk's ids: its own (a range leased per start) or a
    // slot kept for good, never one another container keeps.
    let kept: Vec<String> = on_disk
        .iter()
        .map(|id| {
            std::fs::read_to_string(
                server
                    .dir
                    .path()
                    .join("sandbox/containers")
                    .join(id)
                    .join("uid-slot"),
            )
            .unwrap()
        })
        .filter(|slot| slot.trim() != "idmapped")
        .collect();
    let distinct: std::collections::HashSet<&String> = kept.iter().collect();
    assert_eq!(
        distinct.len(),
        kept.len(),
        "two containers share an id slot"
    );
}

#[test]
fn a_delete_during_an_exec_and_an_upload_onto_a_fifo_are_409s() {
    let server = start("http-conflicts", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    let running = std::thread::spawn({
        let id = id.clone();
        // A duration no other test uses: its process is this one.
        move || exec(port, &id, &["sleep 3003"])
    });
    assert!(wait_until(
        || processes_matching("sleep 3003") > 0,
        Duration::from_secs(30)
    ));
    assert_eq!(
        request(
            port,
            "DELETE",
            &format!("/v1/containers/{id}"),
            Some(KEY),
            &[],
            b""
        )
        .status,
        200
    );
    let interrupted = running.join().unwrap();
    assert_eq!(interrupted.error(409)["code"], "container_deleted");

    let id = create_container(port, KEY);
    exec(port, &id, &["mkfifo /mnt/data/pipe"]);
    let (content_type, body) = multipart_file("pipe", b"data");
    let refused = request(
        port,
        "POST",
        &format!("/v1/containers/{id}/files"),
        Some(KEY),
        &[("Content-Type", &content_type)],
        &body,
    )
    .error(409);
    assert!(
        refused["message"].as_str().unwrap().contains("FIFO"),
        "{refused}"
    );
}

#[test]
fn a_first_start_keeps_its_secrets_private() {
    let server = start("http-first-start", &[("SHELLGATE_API_KEYS", "")]);
    let dir = server.dir.path();
    let key = std::fs::read_to_string(dir.join("initial-api-key")).unwrap();
    assert_eq!(get(server.port, "/v1/containers", key.trim()).status, 200);
    for file in [
        "initial-api-key",
        "shellgate.db",
        "shellgate.db-wal",
        "shellgate.db-shm",
    ] {
        let mode = std::fs::metadata(dir.join(file))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{file} is {mode:o}");
    }
}

#[test]
fn a_suspended_containers_files_are_read_without_waking_or_billing_it() {
    let server = start(
        "http-suspended",
        &[
            ("SHELLGATE_IDLE_SUSPEND_AFTER_SECS", "1"),
            ("SHELLGATE_SWEEP_INTERVAL_SECS", "1"),
        ],
    );
    let port = server.port;
    let id = create_container(port, KEY);
    exec(port, &id, &["echo kept > /mnt/data/note.txt"]);
    assert!(
        wait_until(
            || get(port, &format!("/v1/containers/{id}"), KEY).json()["status"] == "suspended",
            Duration::from_secs(20)
        ),
        "never suspended"
    );
    let before = get(port, &format!("/v1/containers/{id}"), KEY).json();
    let usage_before = get(port, "/v1/usage", KEY).json()["sandbox_seconds"].clone();
    // Once the clock is past its last activity (second resolution), a
    // wrongful renewal by the reads below would show in `last_active_at`.
    let last_active = before["last_active_at"].as_i64().unwrap();
    assert!(wait_until(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
                > last_active
        },
        Duration::from_secs(5)
    ));
    for _ in 0..3 {
        let files = list_files(port, &id);
        let file = files["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == "/mnt/data/note.txt")
            .cloned()
            .expect("listed");
        let content = get(
            port,
            &format!(
                "/v1/containers/{id}/files/{}/content",
                file["id"].as_str().unwrap()
            ),
            KEY,
        );
        assert_eq!(content.body, b"kept\n");
    }
    let after = get(port, &format!("/v1/containers/{id}"), KEY).json();
    assert_eq!(after["status"], "suspended");
    assert_eq!(after["last_active_at"], before["last_active_at"]);
    assert_eq!(
        get(port, "/v1/usage", KEY).json()["sandbox_seconds"],
        usage_before
    );
}

#[test]
fn cursors_sparse_files_metrics_deadlines_and_file_expiry() {
    let server = start(
        "http-misc",
        &[
            ("SHELLGATE_METRICS_TOKEN", "s3cret"),
            ("SHELLGATE_SWEEP_INTERVAL_SECS", "1"),
            ("SHELLGATE_REQUEST_DEADLINE_SECS", "2"),
        ],
    );
    let port = server.port;
    let id = create_container(port, KEY);
    // A stale cursor names itself.
    let stale = get(
        port,
        &format!("/v1/containers/{id}/files?after=cfile_gone"),
        KEY,
    )
    .error(400);
    assert_eq!(stale["param"], "after");
    get(port, "/v1/containers?after=cntr_gone", KEY).error(400);
    // The request deadline: the running command is killed, the rest not run.
    let results = exec(port, &id, &["echo first", "sleep 30", "echo never"]).json();
    let output = results["output"].as_array().unwrap();
    assert_eq!(output[0]["stdout"], "first\n");
    assert_eq!(output[1]["outcome"]["type"], "timeout");
    assert_eq!(output[2]["outcome"]["type"], "timeout");
    assert!(output[2]["stderr"].as_str().unwrap().contains("not run"));
    // A sparse file larger than the container's disk is refused.
    exec(port, &id, &["truncate -s 1T /mnt/data/huge"]);
    let listed = list_files(port, &id);
    let huge = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/mnt/data/huge")
        .cloned()
        .unwrap();
    let refused = get(
        port,
        &format!(
            "/v1/containers/{id}/files/{}/content",
            huge["id"].as_str().unwrap()
        ),
        KEY,
    )
    .error(400);
    assert_eq!(refused["code"], "file_too_large");
    // Metrics need the token.
    request(port, "GET", "/metrics", None, &[], b"").error(401);
    let metrics = request(
        port,
        "GET",
        "/metrics",
        None,
        &[("Authorization", "Bearer s3cret")],
        b"",
    );
    assert_eq!(metrics.status, 200);
    assert!(!String::from_utf8_lossy(&metrics.body).contains("alpha"));
    // Files API expires_after.
    let boundary = "XB";
    let upload = |seconds: &str| {
        let body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nassistants\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"expires_after[anchor]\"\r\n\r\ncreated_at\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"expires_after[seconds]\"\r\n\r\n{seconds}\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhello\r\n--{boundary}--\r\n"
        );
        request(
            port,
            "POST",
            "/v1/files",
            Some(KEY),
            &[(
                "Content-Type",
                &format!("multipart/form-data; boundary={boundary}"),
            )],
            body.as_bytes(),
        )
    };
    assert_eq!(upload("10").error(400)["param"], "expires_after.seconds");
    let file: Value = upload("3600").json();
    assert_eq!(
        file["expires_at"].as_i64(),
        file["created_at"].as_i64().map(|c| c + 3600)
    );
    let file_id = file["id"].as_str().unwrap();
    // Let the hour pass: move its expiry into the past in the database.
    let moved = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3; c = sqlite3.connect('{}'); c.execute(\"UPDATE files SET expires_at = 1 WHERE id = '{file_id}'\"); c.commit()",
            server.dir.path().join("shellgate.db").display()
        ))
        .status()
        .unwrap();
    assert!(moved.success());
    assert!(
        wait_until(
            || get(port, &format!("/v1/files/{file_id}"), KEY).status == 404,
            Duration::from_secs(10)
        ),
        "the expired file was not deleted"
    );
    assert!(!server.dir.path().join("files").join(file_id).exists());
}
