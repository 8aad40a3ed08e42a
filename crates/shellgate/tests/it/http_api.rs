//! The HTTP API of a real `shellgate serve`, over real TCP: every error case
//! and status, escapes through the files API, and 32 concurrent clients.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::server::*;
use common::{wait_until, BINARY};
use serde_json::{json, Value};

#[test]
fn every_error_is_an_envelope_with_the_right_status_and_changes_nothing() {
    let server = start(
        "http-errors",
        &[
            ("SHELLGATE_MAX_UPLOAD_BYTES", "1024"),
            ("SHELLGATE_MAX_REQUEST_BYTES", "65536"),
        ],
    );
    let port = server.port;
    let id = create_container(port, KEY);
    let before = container_count(port);

    // 401: no key, a wrong key, a malformed header.
    request(port, "GET", "/v1/containers", None, &[], b"").error(401);
    request(port, "GET", "/v1/containers", Some("nope"), &[], b"").error(401);
    let malformed = request(
        port,
        "GET",
        "/v1/containers",
        None,
        &[("Authorization", "Basic abc")],
        b"",
    );
    assert_eq!(malformed.error(401)["code"], "invalid_api_key");

    // 404: unknown ids, another project's ids, unknown URLs.
    request(port, "GET", "/v1/containers/cntr_nope", Some(KEY), &[], b"").error(404);
    request(
        port,
        "GET",
        &format!("/v1/containers/{id}"),
        Some(OTHER_KEY),
        &[],
        b"",
    )
    .error(404);
    request(
        port,
        "DELETE",
        &format!("/v1/containers/{id}"),
        Some(OTHER_KEY),
        &[],
        b"",
    )
    .error(404);
    post_json(
        port,
        &format!("/v1/containers/{id}/exec"),
        OTHER_KEY,
        &json!({"commands": ["true"]}),
    )
    .error(404);
    request(
        port,
        "GET",
        &format!("/v1/containers/{id}/files/cfile_nope"),
        Some(KEY),
        &[],
        b"",
    )
    .error(404);
    request(
        port,
        "GET",
        "/v1/files/file-nope/content",
        Some(KEY),
        &[],
        b"",
    )
    .error(404);
    request(port, "GET", "/v1/nothing-here", Some(KEY), &[], b"").error(404);
    post_json(
        port,
        "/v1/containers",
        KEY,
        &json!({"name": "x", "file_ids": ["file-nope"]}),
    )
    .error(404);

    // 405: a wrong method.
    request(port, "PUT", "/v1/containers", Some(KEY), &[], b"").error(405);

    // 400: malformed JSON, wrong types, unknown fields and enum values.
    let post_raw = |path: &str, body: &str| {
        request(
            port,
            "POST",
            path,
            Some(KEY),
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
    };
    post_raw("/v1/containers", "{\"name\": ").error(400);
    post_raw("/v1/containers", "[1,2,3]").error(400);
    assert_eq!(
        post_raw("/v1/containers", r#"{"name": 5}"#).error(400)["param"],
        "name"
    );
    assert_eq!(
        post_raw("/v1/containers", r#"{"name": "x", "memory_limit": "3g"}"#).error(400)["param"],
        "memory_limit"
    );
    post_raw("/v1/containers", r#"{"name": "x", "colour": "blue"}"#).error(400);
    post_raw("/v1/containers", r#"{"name": ""}"#).error(400);
    assert_eq!(
        post_raw(
            "/v1/containers",
            r#"{"name": "x", "expires_after": {"anchor": "created_at", "minutes": 5}}"#
        )
        .error(400)["param"],
        "expires_after.anchor"
    );
    post_raw(
        "/v1/containers",
        r#"{"name": "x", "expires_after": {"anchor": "last_active_at", "minutes": 0}}"#,
    )
    .error(400);
    let domains: Vec<String> = (0..51).map(|i| format!("d{i}.example.com")).collect();
    post_json(
        port,
        "/v1/containers",
        KEY,
        &json!({"name": "x", "network_policy": {"type": "allowlist", "allowed_domains": domains}}),
    )
    .error(400);
    // Deeply nested: refused, not a stack overflow.
    let deep = format!(
        "{{\"name\": \"x\", \"skills\": [{}1{}]}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let deep_response = post_raw("/v1/containers", &deep);
    assert!(
        deep_response.status == 400 || deep_response.status == 413,
        "{}",
        deep_response.status
    );
    deep_response.error(deep_response.status);
    // Exec limits name their param.
    let exec_error = |body: Value| {
        post_json(port, &format!("/v1/containers/{id}/exec"), KEY, &body).error(400)["param"]
            .clone()
    };
    assert_eq!(
        exec_error(json!({"commands": ["true"], "timeout_ms": 300_001})),
        "timeout_ms"
    );
    assert_eq!(
        exec_error(json!({"commands": ["true"], "timeout_ms": 0})),
        "timeout_ms"
    );
    assert_eq!(
        exec_error(json!({"commands": ["true"], "max_output_length": 65_537})),
        "max_output_length"
    );
    assert_eq!(
        exec_error(json!({"commands": vec!["true"; 101]})),
        "commands"
    );
    assert_eq!(exec_error(json!({"commands": []})), "commands");
    post_json(
        port,
        &format!("/v1/containers/{id}/exec"),
        KEY,
        &json!({"commands": "true"}),
    )
    .error(400);
    // List parameters.
    request(port, "GET", "/v1/containers?limit=0", Some(KEY), &[], b"").error(400);
    request(port, "GET", "/v1/containers?limit=101", Some(KEY), &[], b"").error(400);
    request(
        port,
        "GET",
        "/v1/containers?order=sideways",
        Some(KEY),
        &[],
        b"",
    )
    .error(400);
    request(port, "GET", "/v1/containers?limit=ten", Some(KEY), &[], b"").error(400);

    // 413: bodies and uploads over their caps.
    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(100_000));
    post_raw("/v1/containers", &huge).error(413);
    let boundary = "XBOUNDARYX";
    let multipart = |name: &str, size: usize| {
        let mut body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .into_bytes();
        body.extend(std::iter::repeat_n(b'a', size));
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        body
    };
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let upload = |size| {
        request(
            port,
            "POST",
            &format!("/v1/containers/{id}/files"),
            Some(KEY),
            &[("Content-Type", &content_type)],
            &multipart("big.bin", size),
        )
    };
    upload(4096).error(413);
    assert_eq!(upload(100).status, 200);

    // 409: a directory already sits where the file would go.
    exec(port, &id, &["mkdir -p /mnt/data/taken"]);
    let conflict = request(
        port,
        "POST",
        &format!("/v1/containers/{id}/files"),
        Some(KEY),
        &[("Content-Type", &content_type)],
        &multipart("taken", 10),
    );
    conflict.error(409);

    // 415: wrong content types.
    request(
        port,
        "POST",
        "/v1/containers",
        Some(KEY),
        &[("Content-Type", "text/plain")],
        b"{\"name\":\"x\"}",
    )
    .error(415);
    request(
        port,
        "POST",
        &format!("/v1/containers/{id}/files"),
        Some(KEY),
        &[("Content-Type", "text/plain")],
        b"x",
    )
    .error(415);
    request(
        port,
        "POST",
        "/v1/files",
        Some(KEY),
        &[("Content-Type", "application/json")],
        b"{}",
    )
    .error(415);

    // Nothing changed.
    assert_eq!(container_count(port), before);
    let files = list_files(port, &id);
    assert_eq!(files["data"].as_array().unwrap().len(), 1, "{files}");
    assert_eq!(
        exec(port, &id, &["echo fine"]).json()["output"][0]["stdout"],
        "fine\n"
    );
}

#[test]
fn rate_limits_answer_429_with_retry_after() {
    let server = start(
        "http-ratelimit",
        &[("SHELLGATE_RATE_LIMIT_PER_MINUTE", "5")],
    );
    for _ in 0..5 {
        assert_eq!(
            request(server.port, "GET", "/v1/containers", Some(KEY), &[], b"").status,
            200
        );
    }
    let limited = request(server.port, "GET", "/v1/containers", Some(KEY), &[], b"");
    assert_eq!(limited.error(429)["code"], "rate_limit_exceeded");
    assert!(
        limited
            .headers
            .to_ascii_lowercase()
            .contains("retry-after:"),
        "{}",
        limited.headers
    );
    // Another project has its own budget.
    assert_eq!(
        request(
            server.port,
            "GET",
            "/v1/containers",
            Some(OTHER_KEY),
            &[],
            b""
        )
        .status,
        200
    );
}

#[test]
fn the_files_api_never_follows_links_or_dot_dots_out_of_mnt_data() {
    let server = start("http-escapes", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    // Uploaded names cannot climb.
    let boundary = "B0UNDARY";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../../etc/evil\"\r\n\r\nx\r\n--{boundary}--\r\n"
    );
    let uploaded = request(
        port,
        "POST",
        &format!("/v1/containers/{id}/files"),
        Some(KEY),
        &[(
            "Content-Type",
            &format!("multipart/form-data; boundary={boundary}"),
        )],
        body.as_bytes(),
    );
    assert_eq!(uploaded.json()["path"], "/mnt/data/evil");
    assert_eq!(
        exec(
            port,
            &id,
            &["cat /mnt/data/evil; ls /etc/evil 2>&1 | head -1"]
        )
        .json()["output"][0]["stdout"],
        "xls: cannot access '/etc/evil': No such file or directory\n"
    );

    // A listed file swapped for links to the host's and the container's files.
    exec(
        port,
        &id,
        &["echo harmless > a.txt; echo harmless > b.txt; echo harmless > c.txt"],
    );
    let listed = list_files(port, &id);
    let file_id = |name: &str| {
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == format!("/mnt/data/{name}"))
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (a, b, c) = (file_id("a.txt"), file_id("b.txt"), file_id("c.txt"));
    exec(port, &id, &["ln -sf /etc/passwd a.txt; ln -sf ../../../../../etc/shadow b.txt; mkdir -p d; ln -sfn /etc d; mv c.txt c2.txt; ln -s /proc/1/root/etc/passwd c.txt"]);
    for file in [a, b, c] {
        let response = request(
            port,
            "GET",
            &format!("/v1/containers/{id}/files/{file}/content"),
            Some(KEY),
            &[],
            b"",
        );
        let body = String::from_utf8_lossy(&response.body);
        assert!(!body.contains("root:"), "a link escaped: {body}");
        assert_ne!(response.status, 200, "{body}");
    }
    // Links are never listed as files.
    let listed = list_files(port, &id);
    let paths: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        !paths.contains(&"/mnt/data/a.txt") && !paths.iter().any(|p| p.starts_with("/mnt/data/d/")),
        "{paths:?}"
    );
}

fn server_fds(server: &Server) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", server.child.id()))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn thirty_two_concurrent_clients_run_two_hundred_execs_each() {
    let server = start("http-load", &[]);
    let port = server.port;
    let containers: Vec<String> = (0..4).map(|_| create_container(port, KEY)).collect();
    // Warm up, then count descriptors.
    for id in &containers {
        exec(port, id, &["true"]);
    }
    let fds_before = server_fds(&server);
    let threads: Vec<_> = (0..32)
        .map(|client| {
            let id = containers[client % containers.len()].clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    let response = exec(port, &id, &[&format!("echo {client}-{i}")]);
                    assert_eq!(
                        response.status,
                        200,
                        "{}",
                        String::from_utf8_lossy(&response.body)
                    );
                    assert_eq!(
                        response.json()["output"][0]["stdout"],
                        format!("{client}-{i}\n")
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a client failed");
    }
    // The server closes the clients' connections as it notices them gone.
    wait_until(
        || server_fds(&server) <= fds_before + 8,
        Duration::from_secs(30),
    );
    let fds_after = server_fds(&server);
    assert!(
        fds_after <= fds_before + 8,
        "server descriptors grew from {fds_before} to {fds_after}"
    );
    let metrics = String::from_utf8_lossy(&request(port, "GET", "/metrics", None, &[], b"").body)
        .into_owned();
    let commands: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("shellgate_commands_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(commands >= 6400, "{metrics}");
    assert!(
        metrics.contains("shellgate_exec_errors_total 0"),
        "{metrics}"
    );
}

#[test]
fn streaming_exec_sends_deltas_then_the_result() {
    let server = start("http-sse", &[]);
    let id = create_container(server.port, KEY);
    let response = post_json(
        server.port,
        &format!("/v1/containers/{id}/exec"),
        KEY,
        &json!({"commands": ["echo one; sleep 0.2; echo two >&2"], "stream": true}),
    );
    assert_eq!(response.status, 200);
    assert!(response
        .headers
        .to_ascii_lowercase()
        .contains("text/event-stream"));
    let text = String::from_utf8_lossy(&response.body);
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        events.iter().any(|e| e["type"] == "exec.output.delta"
            && e["stream"] == "stdout"
            && e["delta"] == "one\n"),
        "{text}"
    );
    assert!(
        events.iter().any(|e| e["type"] == "exec.output.delta"
            && e["stream"] == "stderr"
            && e["delta"] == "two\n"),
        "{text}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "exec.completed");
    assert_eq!(last["shell_call_output"]["output"][0]["stdout"], "one\n");
    assert_eq!(last["shell_call_output"]["output"][0]["stderr"], "two\n");
}

#[test]
fn health_metrics_openapi_and_keys() {
    let server = start("http-ops", &[]);
    let port = server.port;
    assert_eq!(
        request(port, "GET", "/healthz", None, &[], b"").json()["status"],
        "ok"
    );
    assert_eq!(
        request(port, "GET", "/livez", None, &[], b"").json()["status"],
        "alive"
    );
    let openapi = request(port, "GET", "/openapi.json", None, &[], b"").json();
    assert_eq!(openapi["openapi"], "3.1.0");
    for path in [
        "/v1/containers",
        "/v1/containers/{container_id}/exec",
        "/v1/files",
        "/v1/skills",
        "/v1/skills/{skill_id}/versions/{version}/content",
        "/v1/images",
        "/v1/usage",
        "/v1/messages",
        "/v1/containers/{container_id}/files/{file_id}/promote",
        "/v1/containers/{container_id}/secrets",
    ] {
        assert!(openapi["paths"].get(path).is_some(), "{path} undocumented");
    }
    let metrics = String::from_utf8_lossy(&request(port, "GET", "/metrics", None, &[], b"").body)
        .into_owned();
    for name in [
        "shellgate_containers{status=\"running\"}",
        "shellgate_exec_duration_seconds_bucket",
        "shellgate_sandbox_seconds_total",
    ] {
        assert!(metrics.contains(name), "{name} missing from {metrics}");
    }
    // A key made by `shellgate keys create` works at once, for its project.
    let output = Command::new(BINARY)
        .arg("--data-dir")
        .arg(server.dir.path())
        .args(["keys", "create", "--project", "gamma"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let key = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert!(key.starts_with("sg-"));
    let usage = request(port, "GET", "/v1/usage", Some(&key), &[], b"").json();
    assert_eq!(usage["project"], "gamma");
    assert_eq!(usage["sandbox_seconds"], 0.0);
    // `--e2b` makes a key of the shape E2B's SDKs check, as good.
    let output = Command::new(BINARY)
        .arg("--data-dir")
        .arg(server.dir.path())
        .args(["keys", "create", "--project", "gamma", "--e2b"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let key = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    let hex = key.strip_prefix("e2b_").unwrap_or_default();
    assert!(
        hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{key}"
    );
    let usage = request(port, "GET", "/v1/usage", Some(&key), &[], b"").json();
    assert_eq!(usage["project"], "gamma");

    // `keys create --admin` says the key's id and role (on stderr; the key
    // alone on stdout); `keys list` shows ids, never keys; `keys revoke`
    // ends a key for a running server within its key cache's 5 seconds.
    let keys = |args: &[&str]| {
        let output = Command::new(BINARY)
            .arg("--data-dir")
            .arg(server.dir.path())
            .arg("keys")
            .args(args)
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ok, admin_key, said) = keys(&["create", "--project", "ops", "--admin"]);
    assert!(ok, "{said}");
    let admin_key = admin_key.trim().to_owned();
    assert!(said.contains("admin") && said.contains("key_"), "{said}");
    let (ok, listed, said) = keys(&["list"]);
    assert!(ok, "{said}");
    assert!(
        !listed.contains(&admin_key) && !listed.contains(&key),
        "{listed}"
    );
    let admin_line = listed
        .lines()
        .find(|line| line.contains("\tops\tadmin\t"))
        .unwrap_or_else(|| panic!("{listed}"));
    // A key's id is `key_` and the start of its hash.
    let gamma_id = shellgate_store::key_id(&shellgate_store::hash_key(&key));
    assert!(
        listed.contains(&format!("{gamma_id}\tgamma\tmember\t")),
        "{listed}"
    );
    assert!(admin_line.starts_with("key_"));
    let (ok, _, said) = keys(&["list", "--project", "ops"]);
    assert!(ok, "{said}");
    // Revoke the e2b-shaped key of gamma.
    let (ok, _, said) = keys(&["revoke", &gamma_id]);
    assert!(ok, "{said}");
    let (ok, _, said) = keys(&["revoke", &gamma_id]);
    assert!(ok && said.contains("already"), "{said}");
    let (ok, _, said) = keys(&["revoke", "key_0000000000000000"]);
    assert!(!ok && said.contains("no API key"), "{said}");
    let revoked = key.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while request(port, "GET", "/v1/usage", Some(&revoked), &[], b"").status != 401 {
        assert!(
            std::time::Instant::now() < deadline,
            "a revoked key still opens the API"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, listed, _) = keys(&["list"]);
    let line = listed.lines().find(|l| l.starts_with(&gamma_id)).unwrap();
    assert!(!line.ends_with("\t-"), "{line}");
    // The admin key works for its own project through the API.
    let usage = request(port, "GET", "/v1/usage", Some(&admin_key), &[], b"").json();
    assert_eq!(usage["project"], "ops");
}

#[test]
fn large_container_files_stream_without_filling_server_memory() {
    let server = start("http-large", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    let made = exec(
        port,
        &id,
        &["head -c 200000000 /dev/urandom > big.bin; sha256sum big.bin | cut -c1-64"],
    );
    let digest = made.json()["output"][0]["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .to_owned();
    let listed = list_files(port, &id);
    let file = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/mnt/data/big.bin")
        .unwrap()
        .clone();
    assert_eq!(file["bytes"], 200_000_000);
    let before = common::peak_rss_kib(&server.child.id().to_string());
    let download = request(
        port,
        "GET",
        &format!(
            "/v1/containers/{id}/files/{}/content",
            file["id"].as_str().unwrap()
        ),
        Some(KEY),
        &[],
        b"",
    );
    assert_eq!(download.status, 200);
    assert_eq!(download.body.len(), 200_000_000);
    let got = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(&download.body)?;
            child.wait_with_output()
        });
    assert_eq!(String::from_utf8_lossy(&got.unwrap().stdout)[..64], digest);
    let growth_mib =
        (common::peak_rss_kib(&server.child.id().to_string()).saturating_sub(before)) / 1024;
    assert!(
        growth_mib < 64,
        "the server's peak memory grew by {growth_mib} MiB for a 200 MB download"
    );
}

#[test]
fn large_uploads_are_spooled_not_held_in_memory() {
    let server = start("http-upload", &[]);
    let port = server.port;
    let id = create_container(port, KEY);
    let boundary = "UPLOADBOUNDARY";
    let payload: Vec<u8> = (0..150_000_000u32).map(|i| (i % 251) as u8).collect();
    let multipart = |extra: &str| {
        let mut body = format!(
            "--{boundary}\r\n{extra}Content-Disposition: form-data; name=\"file\"; filename=\"blob.bin\"\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(&payload);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        body
    };
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let before = common::peak_rss_kib(&server.child.id().to_string());
    let uploaded = request(
        port,
        "POST",
        &format!("/v1/containers/{id}/files"),
        Some(KEY),
        &[("Content-Type", &content_type)],
        &multipart(""),
    );
    assert_eq!(
        uploaded.status,
        200,
        "{}",
        String::from_utf8_lossy(&uploaded.body)
    );
    assert_eq!(uploaded.json()["bytes"], 150_000_000);
    let purpose = format!(
        "Content-Disposition: form-data; name=\"purpose\"\r\n\r\nuser_data\r\n--{boundary}\r\n"
    );
    let file = request(
        port,
        "POST",
        "/v1/files",
        Some(KEY),
        &[("Content-Type", &content_type)],
        &multipart(&purpose),
    );
    assert_eq!(file.status, 200, "{}", String::from_utf8_lossy(&file.body));
    assert_eq!(file.json()["bytes"], 150_000_000);
    let growth_mib =
        common::peak_rss_kib(&server.child.id().to_string()).saturating_sub(before) / 1024;
    assert!(
        growth_mib < 64,
        "the server's peak memory grew by {growth_mib} MiB for two 150 MB uploads"
    );
    // What arrived is what was sent, in the container and in the Files API.
    let check = exec(port, &id, &["cmp <(python3 -c 'import sys; sys.stdout.buffer.write(bytes(i % 251 for i in range(150_000_000)))') blob.bin && echo same"]);
    assert_eq!(check.json()["output"][0]["stdout"], "same\n");
    let file_id = file.json()["id"].as_str().unwrap().to_owned();
    let content = request(
        port,
        "GET",
        &format!("/v1/files/{file_id}/content"),
        Some(KEY),
        &[],
        b"",
    );
    assert!(
        content.body == payload,
        "the Files API returned other bytes"
    );
}
