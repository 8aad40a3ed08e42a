//! The handlers driven in-process: the real router, store and extractors
//! over the recording backend of [`crate::testing`], each test asserting
//! the status, the body (OpenAI's error envelope on every refusal) and what
//! the backend was asked to do. The lifecycle tests move the manual clock
//! instead of waiting.

use axum::http::Method;
use serde_json::json;

use crate::testing::{Call, Harness, ALPHA, BETA};

// --- authentication ----------------------------------------------------------

#[tokio::test]
async fn no_key_is_a_401_envelope() {
    let harness = Harness::new();
    let answer = harness
        .call(None, Method::GET, "/v1/containers", None)
        .await;
    let error = answer.error(401);
    assert_eq!(error["code"], "invalid_api_key");
    assert_eq!(error["type"], "invalid_request_error");
}

#[tokio::test]
async fn a_wrong_key_is_a_401_and_reaches_no_handler() {
    let harness = Harness::new();
    let answer = harness
        .call(
            Some("sg-not-a-key"),
            Method::POST,
            "/v1/containers",
            Some(json!({"name": "x"})),
        )
        .await;
    assert_eq!(answer.error(401)["code"], "invalid_api_key");
    assert!(harness.backend.calls().is_empty());
}

#[tokio::test]
async fn the_x_api_key_header_is_accepted_too() {
    let harness = Harness::new();
    let request = axum::http::Request::get("/v1/usage")
        .header("x-api-key", ALPHA)
        .body(axum::body::Body::empty())
        .unwrap();
    let answer = harness.send(request).await;
    assert_eq!(answer.ok()["project"], "alpha");
}

// --- routing -------------------------------------------------------------------

#[tokio::test]
async fn an_unknown_url_and_a_wrong_method_get_envelopes() {
    let harness = Harness::new();
    let answer = harness.get("/v1/nothing-here").await;
    assert_eq!(answer.error(404)["code"], "unknown_url");
    let answer = harness
        .call(Some(ALPHA), Method::PUT, "/v1/containers", None)
        .await;
    answer.error(405);
}

// --- containers --------------------------------------------------------------

#[tokio::test]
async fn a_created_container_is_made_by_the_backend_and_shown() {
    let harness = Harness::new();
    let answer = harness
        .post(
            "/v1/containers",
            json!({"name": "box", "memory_limit": "4g"}),
        )
        .await;
    let container = answer.ok();
    let id = container["id"].as_str().unwrap();
    assert!(id.starts_with("cntr_"), "{container}");
    assert_eq!(container["object"], "container");
    assert_eq!(container["name"], "box");
    assert_eq!(container["status"], "running");
    assert_eq!(container["memory_limit"], "4g");
    assert_eq!(container["network_policy"], json!({"type": "disabled"}));
    assert_eq!(
        container["expires_after"],
        json!({"anchor": "last_active_at", "minutes": 20})
    );
    assert_eq!(
        harness.backend.calls(),
        vec![Call::Create {
            id: id.to_owned(),
            memory_bytes: 4 << 30
        }]
    );
    let retrieved = harness.get(&format!("/v1/containers/{id}")).await;
    assert_eq!(retrieved.ok()["id"], id);
}

#[tokio::test]
async fn a_bad_create_body_is_a_400_and_makes_nothing() {
    let harness = Harness::new();
    let answer = harness
        .post("/v1/containers", json!({"name": "x", "memory_limit": "2g"}))
        .await;
    answer.error(400);
    let answer = harness
        .post("/v1/containers", json!({"name": "x", "colour": "blue"}))
        .await;
    assert!(
        answer.error(400)["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{}",
        answer.json
    );
    assert!(harness.backend.calls().is_empty());
}

#[tokio::test]
async fn a_memory_limit_beyond_the_hosts_ceiling_is_a_400_naming_it() {
    let harness = Harness::new();
    let answer = harness
        .post(
            "/v1/containers",
            json!({"name": "x", "memory_limit": "64g"}),
        )
        .await;
    assert_eq!(
        answer.error(400)["param"],
        "memory_limit",
        "{}",
        answer.json
    );
    assert!(harness.backend.calls().is_empty());
}

#[tokio::test]
async fn listing_shows_only_the_projects_containers_newest_first() {
    let harness = Harness::new();
    let first = harness.container("one").await;
    let second = harness.container("two").await;
    let list = harness.get("/v1/containers").await;
    let list = list.ok();
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    // Made in the same second: either order is newest first.
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&first.as_str()) && ids.contains(&second.as_str()));
    assert_eq!(list["has_more"], false);
    let named = harness.get("/v1/containers?name=two").await;
    assert_eq!(named.ok()["data"][0]["id"], second);
    let theirs = harness
        .call(Some(BETA), Method::GET, "/v1/containers", None)
        .await;
    assert_eq!(theirs.ok()["data"], json!([]));
}

#[tokio::test]
async fn another_projects_container_is_a_404_and_left_alone() {
    let harness = Harness::new();
    let id = harness.container("mine").await;
    let path = format!("/v1/containers/{id}");
    for method in [Method::GET, Method::DELETE] {
        let answer = harness.call(Some(BETA), method, &path, None).await;
        let error = answer.error(404);
        assert_eq!(error["code"], "not_found");
        assert!(error["message"].as_str().unwrap().contains(&id));
    }
    let answer = harness
        .call(
            Some(BETA),
            Method::POST,
            &format!("{path}/exec"),
            Some(json!({"commands": ["id"]})),
        )
        .await;
    answer.error(404);
    // Only the create reached the backend.
    assert_eq!(harness.backend.calls().len(), 1);
    harness.get(&path).await.ok();
}

#[tokio::test]
async fn a_deleted_container_is_destroyed_and_gone() {
    let harness = Harness::new();
    let id = harness.container("doomed").await;
    let path = format!("/v1/containers/{id}");
    let answer = harness.delete(&path).await;
    assert_eq!(
        answer.ok(),
        &json!({"id": id, "object": "container.deleted", "deleted": true})
    );
    assert!(harness.backend.calls().contains(&Call::Destroy(id.clone())));
    assert_eq!(harness.get(&path).await.error(404)["code"], "not_found");
    assert_eq!(harness.delete(&path).await.error(404)["code"], "not_found");
}

#[tokio::test]
async fn a_stale_list_cursor_is_a_400_naming_after() {
    let harness = Harness::new();
    let answer = harness.get("/v1/containers?after=cntr_gone").await;
    let error = answer.error(400);
    assert_eq!(error["param"], "after");
    assert_eq!(error["code"], "invalid_cursor");
}

#[tokio::test]
async fn list_limits_and_orders_out_of_range_name_their_param() {
    let harness = Harness::new();
    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("order=sideways", "order"),
    ] {
        let answer = harness.get(&format!("/v1/files?{query}")).await;
        assert_eq!(answer.error(400)["param"], param, "{query}");
    }
}

#[tokio::test]
async fn the_running_container_quota_is_a_429_naming_the_limit() {
    let harness =
        Harness::with_config(|config| config.sandbox.max_running_containers_per_project = 1);
    harness.container("first").await;
    let answer = harness
        .post("/v1/containers", json!({"name": "second"}))
        .await;
    let error = answer.error(429);
    assert_eq!(error["code"], "too_many_running_containers");
    assert_eq!(error["type"], "rate_limit_error");
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("max_running_containers_per_project"));
    // Another project has its own quota.
    let theirs = harness
        .call(
            Some(BETA),
            Method::POST,
            "/v1/containers",
            Some(json!({"name": "theirs"})),
        )
        .await;
    theirs.ok();
    let creates = harness
        .backend
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Create { .. }))
        .count();
    assert_eq!(creates, 2);
}

// --- exec ----------------------------------------------------------------------

#[tokio::test]
async fn exec_runs_the_commands_in_order_and_audits_them() {
    let harness = Harness::new();
    let id = harness.container("worker").await;
    let answer = harness
        .post(
            &format!("/v1/containers/{id}/exec"),
            json!({"commands": ["echo a", "echo b"], "timeout_ms": 5000}),
        )
        .await;
    let output = answer.ok();
    assert_eq!(output["type"], "shell_call_output");
    assert_eq!(output["status"], "completed");
    assert_eq!(output["output"][0]["stdout"], "ran: echo a\n");
    assert_eq!(output["output"][1]["stdout"], "ran: echo b\n");
    assert_eq!(
        output["output"][1]["outcome"],
        json!({"type": "exit", "exit_code": 0})
    );
    assert!(harness.backend.calls().contains(&Call::Run {
        id: id.clone(),
        commands: vec!["echo a".into(), "echo b".into()],
        timeout_ms: 5000,
    }));
    // The audit is written in batches, soon after the run: its batch is
    // written now rather than waited for.
    harness.state.billing.flush().await;
    let audit = harness.get(&format!("/v1/containers/{id}/commands")).await;
    let audit = audit.ok();
    let commands: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    assert_eq!(commands.len(), 2, "{audit}");
    assert!(commands.contains(&"echo a") && commands.contains(&"echo b"));
    let entry = &audit["data"][0];
    assert_eq!(entry["object"], "container.command");
    assert_eq!(entry["container_id"], id.as_str());
    assert_eq!(entry["response_id"], serde_json::Value::Null);
    assert_eq!(entry["outcome"], json!({"type": "exit", "exit_code": 0}));
}

#[tokio::test]
async fn a_streamed_exec_sends_its_deltas_then_the_result() {
    let harness = Harness::new();
    let id = harness.container("streamer").await;
    let answer = harness
        .post(
            &format!("/v1/containers/{id}/exec"),
            json!({"commands": ["echo one"], "stream": true}),
        )
        .await;
    assert_eq!(answer.status, 200);
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&answer.bytes)
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    assert_eq!(
        events.first(),
        Some(&json!({
            "type": "exec.output.delta",
            "command_index": 0,
            "stream": "stdout",
            "delta": "ran: echo one\n",
        })),
        "{events:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "exec.completed");
    assert_eq!(
        last["shell_call_output"]["output"][0]["stdout"],
        "ran: echo one\n"
    );
}

#[tokio::test]
async fn exec_timeouts_out_of_range_are_400s_naming_timeout_ms() {
    let harness = Harness::new();
    let id = harness.container("worker").await;
    for timeout in [json!(0), json!(300_001)] {
        let answer = harness
            .post(
                &format!("/v1/containers/{id}/exec"),
                json!({"commands": ["true"], "timeout_ms": timeout}),
            )
            .await;
        assert_eq!(answer.error(400)["param"], "timeout_ms", "{timeout}");
    }
    let answer = harness
        .post(
            &format!("/v1/containers/{id}/exec"),
            json!({"commands": ["true"], "timeout_ms": "soon"}),
        )
        .await;
    answer.error(400);
    assert!(
        !harness
            .backend
            .calls()
            .iter()
            .any(|c| matches!(c, Call::Run { .. })),
        "nothing ran"
    );
}

#[tokio::test]
async fn exec_without_commands_is_a_400() {
    let harness = Harness::new();
    let id = harness.container("worker").await;
    let answer = harness
        .post(
            &format!("/v1/containers/{id}/exec"),
            json!({"commands": []}),
        )
        .await;
    assert_eq!(answer.error(400)["param"], "commands");
}

#[tokio::test]
async fn the_exec_quota_is_a_429() {
    let harness = Harness::with_config(|config| config.sandbox.max_execs_per_project = 0);
    let id = harness.container("worker").await;
    let answer = harness
        .post(
            &format!("/v1/containers/{id}/exec"),
            json!({"commands": ["true"]}),
        )
        .await;
    assert_eq!(answer.error(429)["code"], "too_many_concurrent_execs");
}

// --- files -----------------------------------------------------------------------

#[tokio::test]
async fn a_file_uploaded_is_listed_downloaded_and_deleted() {
    let harness = Harness::new();
    let answer = harness
        .upload(
            "/v1/files",
            "notes.txt",
            b"hello",
            &[("purpose", "user_data")],
        )
        .await;
    let file = answer.ok();
    let id = file["id"].as_str().unwrap();
    assert_eq!(file["object"], "file");
    assert_eq!(file["filename"], "notes.txt");
    assert_eq!(file["bytes"], 5);
    assert_eq!(file["purpose"], "user_data");
    let list = harness.get("/v1/files").await;
    assert_eq!(list.ok()["data"][0]["id"], id);
    let content = harness.get(&format!("/v1/files/{id}/content")).await;
    assert_eq!(content.status, 200);
    assert_eq!(content.bytes, b"hello");
    let theirs = harness
        .call(Some(BETA), Method::GET, &format!("/v1/files/{id}"), None)
        .await;
    theirs.error(404);
    let deleted = harness.delete(&format!("/v1/files/{id}")).await;
    assert_eq!(deleted.ok()["deleted"], true);
    harness.get(&format!("/v1/files/{id}")).await.error(404);
}

#[tokio::test]
async fn a_file_upload_without_a_valid_purpose_names_it() {
    let harness = Harness::new();
    let answer = harness
        .upload("/v1/files", "a.txt", b"x", &[("purpose", "mischief")])
        .await;
    assert_eq!(answer.error(400)["param"], "purpose");
    let answer = harness.upload("/v1/files", "a.txt", b"x", &[]).await;
    assert_eq!(answer.error(400)["param"], "purpose");
    let answer = harness
        .post("/v1/files", json!({"purpose": "user_data"}))
        .await;
    answer.error(415);
}

/// The blobs in the data directory's `files/` (the local object store), and
/// what its puts left in `.partial`.
fn blobs_on_disk(harness: &Harness) -> (Vec<String>, usize) {
    let dir = &harness.state.config.server.data_dir;
    let names = |sub: &str| -> Vec<String> {
        std::fs::read_dir(dir.join(sub))
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    (names("files"), names(".partial").len())
}

#[tokio::test]
async fn a_file_is_a_private_blob_at_its_old_path_and_a_failed_upload_leaves_none() {
    use std::os::unix::fs::PermissionsExt;
    let harness = Harness::with_config(|config| config.server.max_upload_bytes = 1000);
    let answer = harness
        .upload("/v1/files", "a.txt", b"kept", &[("purpose", "user_data")])
        .await;
    let id = answer.ok()["id"].as_str().unwrap().to_owned();
    // Where a Files API blob always was: an upgraded box finds its blobs.
    let blob = harness.state.config.server.data_dir.join("files").join(&id);
    assert_eq!(std::fs::read(&blob).unwrap(), b"kept");
    assert_eq!(
        std::fs::metadata(&blob).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Refused after the blob was stored (the purpose comes after the
    // file), and too large: no blob stays, no partial file either.
    let bad_purpose = async {
        use axum::body::Body;
        let body = "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\n\
                    data\r\n--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n\
                    mischief\r\n--b--\r\n";
        let request = axum::http::Request::post("/v1/files")
            .header("authorization", format!("Bearer {ALPHA}"))
            .header("content-type", "multipart/form-data; boundary=b")
            .body(Body::from(body))
            .unwrap();
        harness.send(request).await
    };
    assert_eq!(bad_purpose.await.error(400)["param"], "purpose");
    let too_large = harness
        .upload(
            "/v1/files",
            "big.bin",
            &[7u8; 5000],
            &[("purpose", "user_data")],
        )
        .await;
    too_large.error(413);
    let only_the_kept = || blobs_on_disk(&harness) == (vec![id.clone()], 0);
    for _ in 0..100 {
        if only_the_kept() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(blobs_on_disk(&harness), (vec![id.clone()], 0));
    // Row first, then blob.
    harness.delete(&format!("/v1/files/{id}")).await.ok();
    assert_eq!(blobs_on_disk(&harness), (vec![], 0));
}

#[tokio::test]
async fn container_files_uploaded_or_made_by_commands_are_listed() {
    let harness = Harness::new();
    let id = harness.container("files").await;
    let answer = harness
        .upload(
            &format!("/v1/containers/{id}/files"),
            "../../etc/data.csv",
            b"a,b\n",
            &[],
        )
        .await;
    let file = answer.ok();
    // Only the last path component is kept: it lands in /mnt/data.
    assert_eq!(file["path"], "/mnt/data/data.csv");
    assert_eq!(file["source"], "user");
    assert!(harness.backend.calls().contains(&Call::WriteFile {
        id: id.clone(),
        path: "/mnt/data/data.csv".into()
    }));
    harness
        .backend
        .make_file(&id, "/mnt/data/out/report.txt", b"made");
    let list = harness.get(&format!("/v1/containers/{id}/files")).await;
    let list = list.ok();
    let mut seen: Vec<(String, String)> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["source"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("/mnt/data/data.csv".to_owned(), "user".to_owned()),
            (
                "/mnt/data/out/report.txt".to_owned(),
                "assistant".to_owned()
            ),
        ]
    );
    let file_id = file["id"].as_str().unwrap();
    let content = harness
        .get(&format!("/v1/containers/{id}/files/{file_id}/content"))
        .await;
    assert_eq!(content.bytes, b"a,b\n");
}

#[tokio::test]
async fn a_files_api_file_is_copied_into_a_container_by_id() {
    let harness = Harness::new();
    let upload = harness
        .upload("/v1/files", "in.txt", b"input", &[("purpose", "user_data")])
        .await;
    let file_id = upload.ok()["id"].as_str().unwrap().to_owned();
    let id = harness.container("copy").await;
    let answer = harness
        .post(
            &format!("/v1/containers/{id}/files"),
            json!({"file_id": file_id}),
        )
        .await;
    assert_eq!(answer.ok()["path"], "/mnt/data/in.txt");
    let missing = harness
        .post(
            &format!("/v1/containers/{id}/files"),
            json!({"file_id": "file-nobody"}),
        )
        .await;
    missing.error(404);
}

// --- skills ----------------------------------------------------------------------

const MANIFEST: &[u8] =
    b"---\nname: adder\ndescription: Adds numbers.\n---\n\nUse `python3 add.py`.\n";

#[tokio::test]
async fn a_skill_uploaded_as_a_directory_is_shown_and_versioned() {
    let harness = Harness::new();
    let answer = harness
        .upload_part("/v1/skills", "files[]", "adder/SKILL.md", MANIFEST, &[])
        .await;
    let skill = answer.ok();
    let id = skill["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("skill_"), "{skill}");
    assert_eq!(skill["object"], "skill");
    assert_eq!(skill["name"], "adder");
    assert_eq!(skill["description"], "Adds numbers.");
    assert_eq!(skill["default_version"], "1");
    assert_eq!(skill["latest_version"], "1");
    assert_eq!(harness.get(&format!("/v1/skills/{id}")).await.ok(), skill);
    assert_eq!(harness.get("/v1/skills").await.ok()["data"][0]["id"], id);
    let version = harness
        .get(&format!("/v1/skills/{id}/versions/latest"))
        .await;
    let version = version.ok();
    assert_eq!(version["object"], "skill.version");
    assert_eq!(version["skill_id"], id.as_str());
    assert_eq!(version["version"], "1");
    // The default version cannot go; the skill can.
    let refused = harness.delete(&format!("/v1/skills/{id}/versions/1")).await;
    assert_eq!(refused.error(400)["param"], "version");
    let deleted = harness.delete(&format!("/v1/skills/{id}")).await;
    assert_eq!(
        deleted.ok(),
        &json!({"id": id, "object": "skill.deleted", "deleted": true})
    );
    harness.get(&format!("/v1/skills/{id}")).await.error(404);
}

#[tokio::test]
async fn a_skill_update_names_default_version_whatever_is_wrong() {
    let harness = Harness::new();
    let answer = harness
        .upload_part("/v1/skills", "files[]", "adder/SKILL.md", MANIFEST, &[])
        .await;
    let id = answer.ok()["id"].as_str().unwrap().to_owned();
    let update = |body: serde_json::Value| {
        let (harness, id) = (&harness, &id);
        async move { harness.post(&format!("/v1/skills/{id}"), body).await }
    };
    for body in [
        json!({}),
        json!({"default_version": true}),
        json!({"default_version": null}),
        json!([1]),
    ] {
        let answer = update(body.clone()).await;
        let error = answer.error(400);
        assert_eq!(error["param"], "default_version", "{body}");
        assert_eq!(
            error["message"], "default_version (a version number) is required",
            "{body}"
        );
    }
    let answer = update(json!({"default_version": "1", "name": "other"})).await;
    assert_eq!(
        answer.error(400)["message"],
        "only default_version may be changed"
    );
    let answer = update(json!({"default_version": "0"})).await;
    assert_eq!(answer.error(400)["param"], "default_version");
    assert_eq!(
        update(json!({"default_version": 1})).await.ok()["default_version"],
        "1"
    );
    assert_eq!(
        update(json!({"default_version": "latest"})).await.ok()["default_version"],
        "1"
    );
}

#[tokio::test]
async fn a_containers_skill_entries_are_refused_naming_their_field() {
    let harness = Harness::new();
    let answer = harness
        .upload_part("/v1/skills", "files[]", "adder/SKILL.md", MANIFEST, &[])
        .await;
    let id = answer.ok()["id"].as_str().unwrap().to_owned();
    let refused = |skill: serde_json::Value| {
        let harness = &harness;
        async move {
            let answer = harness
                .post("/v1/containers", json!({"name": "x", "skills": [skill]}))
                .await;
            let error = answer.error(400);
            (
                error["param"].as_str().unwrap_or_default().to_owned(),
                error["message"].as_str().unwrap_or_default().to_owned(),
            )
        }
    };
    assert_eq!(refused(json!("adder")).await.0, "skills[0].type");
    assert_eq!(
        refused(json!({"type": "skill_reference", "skill_id": id, "extra": 1})).await,
        (
            "skills[0].extra".to_owned(),
            "unknown field \"extra\"".to_owned()
        )
    );
    // A wrong version type is said once the skill is found.
    assert_eq!(
        refused(json!({"type": "skill_reference", "skill_id": "skill_none", "version": true}))
            .await
            .0,
        "skills[0].skill_id"
    );
    assert_eq!(
        refused(json!({"type": "skill_reference", "skill_id": id, "version": true})).await,
        (
            "skills[0].version".to_owned(),
            "version is a positive integer or 'latest'".to_owned()
        )
    );
    assert_eq!(
        refused(json!({"type": "inline", "description": "d", "source": {}})).await,
        ("skills[0].name".to_owned(), "name is required".to_owned())
    );
    assert!(harness.backend.calls().is_empty());
}

#[tokio::test]
async fn a_referenced_skill_is_shown_on_its_container_as_mounted() {
    let harness = Harness::new();
    let answer = harness
        .upload_part("/v1/skills", "files[]", "adder/SKILL.md", MANIFEST, &[])
        .await;
    let id = answer.ok()["id"].as_str().unwrap().to_owned();
    let answer = harness
        .post(
            "/v1/containers",
            json!({"name": "x", "skills": [{"type": "skill_reference", "skill_id": id}]}),
        )
        .await;
    let container = answer.ok();
    let expected = json!([{
        "name": "adder",
        "description": "Adds numbers.",
        "path": "/mnt/skills/adder",
        "skill_id": id,
        "version": "1",
    }]);
    assert_eq!(container["skills"], expected);
    let shown = harness
        .get(&format!(
            "/v1/containers/{}",
            container["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(shown.ok()["skills"], expected);
}

#[tokio::test]
async fn a_skill_without_a_manifest_is_a_400_naming_files() {
    let harness = Harness::new();
    let answer = harness
        .upload_part("/v1/skills", "files[]", "adder/add.py", b"print(1)", &[])
        .await;
    assert_eq!(answer.error(400)["param"], "files");
}

// --- responses and messages ---------------------------------------------------

#[tokio::test]
async fn an_unknown_response_is_a_404_envelope() {
    let harness = Harness::new();
    for method in [Method::GET, Method::DELETE] {
        let answer = harness
            .call(Some(ALPHA), method, "/v1/responses/resp_nobody", None)
            .await;
        assert_eq!(answer.error(404)["code"], "not_found");
    }
}

#[tokio::test]
async fn the_messages_api_refuses_a_missing_key_in_anthropics_envelope() {
    let harness = Harness::new();
    let answer = harness
        .call(
            None,
            Method::POST,
            "/v1/messages",
            Some(json!({"model": "m", "max_tokens": 1, "messages": []})),
        )
        .await;
    assert_eq!(answer.status, 401, "{}", answer.json);
    assert_eq!(answer.json["type"], "error");
    assert_eq!(answer.json["error"]["type"], "authentication_error");
    assert!(answer.json["error"]["message"].is_string());
}

#[tokio::test]
async fn count_tokens_names_a_bad_field_in_anthropics_envelope() {
    let harness = Harness::new();
    for (body, param) in [
        (
            json!({"model": "m", "messages": [], "max_tokens": 5}),
            "max_tokens",
        ),
        (json!({"model": "m"}), "messages"),
        (
            json!({"model": "m", "messages": [], "thinking": {"type": "enabled"}}),
            "thinking.budget_tokens",
        ),
    ] {
        let answer = harness.post("/v1/messages/count_tokens", body).await;
        assert_eq!(answer.status, 400, "{}", answer.json);
        assert_eq!(answer.json["error"]["type"], "invalid_request_error");
        let message = answer.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(param), "{message}");
    }
}

#[tokio::test]
async fn without_an_upstream_the_model_apis_answer_503_in_their_envelopes() {
    // The harness configures no upstream, as a first start does.
    let harness = Harness::new();
    let answer = harness
        .call(
            Some(ALPHA),
            Method::POST,
            "/v1/responses",
            Some(json!({"model": "gpt-5", "input": "hi"})),
        )
        .await;
    let error = answer.error(503);
    assert_eq!(error["type"], "server_error");
    assert_eq!(error["code"], "upstream_not_configured");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("upstream_url")),
        "{error}"
    );
    let answer = harness
        .call(
            Some(ALPHA),
            Method::POST,
            "/v1/messages",
            Some(json!({"model": "claude-x", "max_tokens": 1,
                        "messages": [{"role": "user", "content": "hi"}]})),
        )
        .await;
    assert_eq!(answer.status, 503, "{}", answer.json);
    assert_eq!(answer.json["type"], "error");
    assert_eq!(answer.json["error"]["type"], "api_error");
    // A request without a model is still the client's error.
    let answer = harness
        .call(
            Some(ALPHA),
            Method::POST,
            "/v1/responses",
            Some(json!({"input": "hi"})),
        )
        .await;
    assert_eq!(answer.error(400)["param"], "model");
}

// --- usage and images ---------------------------------------------------------

#[tokio::test]
async fn usage_is_the_callers_projects() {
    let harness = Harness::new();
    let usage = harness.get("/v1/usage").await;
    let usage = usage.ok();
    assert_eq!(usage["object"], "usage");
    assert_eq!(usage["project"], "alpha");
    assert_eq!(usage["containers"], json!([]));
}

#[tokio::test]
async fn images_are_listed_with_the_default() {
    let harness = Harness::new();
    let images = harness.get("/v1/images").await;
    let images = images.ok();
    assert_eq!(images["object"], "list");
    assert_eq!(images["has_more"], false);
    assert_eq!(
        images["default_image"],
        harness.state.config.sandbox.default_image
    );
}

// --- lifecycle, on the manual clock ------------------------------------------------

/// The container's `last_active_at`: the lifecycle tests set the clock
/// relative to it (the rows' times come from the system's clock).
async fn last_active_at(harness: &Harness, id: &str) -> i64 {
    let container = harness.get(&format!("/v1/containers/{id}")).await;
    container.ok()["last_active_at"].as_i64().unwrap()
}

#[tokio::test]
async fn an_idle_container_expires_when_the_clock_reaches_its_expiry() {
    let harness = Harness::new();
    let id = harness.container("short").await;
    let active = last_active_at(&harness, &id).await;
    // A second before twenty minutes (the default expiry) of idleness, it
    // is kept (suspended, past the idle limit), not destroyed.
    harness.clock.set(active + 20 * 60 - 1);
    crate::lifecycle::sweep(&harness.state).await.unwrap();
    harness.get(&format!("/v1/containers/{id}")).await.ok();
    assert!(!harness.backend.calls().contains(&Call::Destroy(id.clone())));
    harness.clock.set(active + 20 * 60);
    crate::lifecycle::sweep(&harness.state).await.unwrap();
    let answer = harness.get(&format!("/v1/containers/{id}")).await;
    assert_eq!(answer.error(404)["code"], "not_found");
    assert!(harness.backend.calls().contains(&Call::Destroy(id)));
}

#[tokio::test]
async fn an_idle_container_is_suspended_then_woken_by_a_command() {
    let harness = Harness::new();
    let id = harness.container("sleepy").await;
    let active = last_active_at(&harness, &id).await;
    // The idle limit is five minutes.
    harness.clock.set(active + 5 * 60 - 1);
    crate::lifecycle::sweep(&harness.state).await.unwrap();
    assert!(!harness.backend.calls().contains(&Call::Suspend(id.clone())));
    harness.clock.set(active + 5 * 60);
    crate::lifecycle::sweep(&harness.state).await.unwrap();
    assert!(harness.backend.calls().contains(&Call::Suspend(id.clone())));
    assert_eq!(
        harness.backend.state_of(&id),
        Some(shellgate_sandbox_api::ContainerState::Stopped)
    );
    let container = harness.get(&format!("/v1/containers/{id}")).await;
    assert_eq!(container.ok()["status"], "suspended");
    let answer = harness
        .post(
            &format!("/v1/containers/{id}/exec"),
            json!({"commands": ["true"]}),
        )
        .await;
    answer.ok();
    let container = harness.get(&format!("/v1/containers/{id}")).await;
    assert_eq!(container.ok()["status"], "running");
}

/// More idle containers than one pass suspends at once: every one is
/// suspended, its session closed, by the same pass.
#[tokio::test]
async fn one_pass_suspends_every_idle_container() {
    let harness = Harness::new();
    let mut ids = Vec::new();
    for n in 0..40 {
        ids.push(harness.container(&format!("idle-{n}")).await);
    }
    let mut latest = 0;
    for id in &ids {
        latest = latest.max(last_active_at(&harness, id).await);
    }
    harness.clock.set(latest + 5 * 60);
    crate::lifecycle::sweep(&harness.state).await.unwrap();
    let calls = harness.backend.calls();
    for id in &ids {
        assert!(
            calls.contains(&Call::Suspend(id.clone())),
            "{id} not suspended"
        );
        let container = harness.get(&format!("/v1/containers/{id}")).await;
        assert_eq!(container.ok()["status"], "suspended", "{id}");
    }
}

#[tokio::test]
async fn a_file_expires_when_the_clock_reaches_its_expires_at() {
    let harness = Harness::new();
    let upload = harness
        .upload(
            "/v1/files",
            "brief.txt",
            b"x",
            &[
                ("purpose", "user_data"),
                ("expires_after[anchor]", "created_at"),
                ("expires_after[seconds]", "3600"),
            ],
        )
        .await;
    let file = upload.ok();
    let id = file["id"].as_str().unwrap().to_owned();
    let expires_at = file["expires_at"].as_i64().unwrap();
    assert_eq!(expires_at, file["created_at"].as_i64().unwrap() + 3600);
    harness.clock.set(expires_at - 1);
    crate::lifecycle::sweep(&harness.state).await.unwrap();
    harness.get(&format!("/v1/files/{id}")).await.ok();
    harness.clock.set(expires_at);
    crate::lifecycle::sweep(&harness.state).await.unwrap();
    harness.get(&format!("/v1/files/{id}")).await.error(404);
}

/// A cluster's node whose replicas declared it lost (the harness's single
/// box stands for it: its containers are on its node, registered under its
/// name): while lost, its sweep keeps every container it has and wakes
/// none; a suspension its stall finished late leaves the row lost. Back
/// (registered again), it gets them back as its engine holds them, its
/// idle one suspended and its running one running, and removes the one its
/// tenant deleted meanwhile, nothing else.
#[tokio::test]
async fn a_node_back_from_lost_gets_its_containers_back_and_removes_the_deleted_one() {
    use shellgate_store::{ContainerStatus, LostDeletion};
    let harness = Harness::new();
    let (kept, asleep, doomed) = (
        harness.container("kept").await,
        harness.container("asleep").await,
        harness.container("doomed").await,
    );
    let key = asleep.clone();
    harness.state.engine.stop(&asleep).await.unwrap();
    harness
        .state
        .db(move |s| s.close_session(&key, ContainerStatus::Suspended))
        .await
        .unwrap();
    crate::cluster::node::register(&harness.state)
        .await
        .unwrap();
    let now = crate::now();
    harness
        .state
        .db(move |s| s.mark_lost_nodes(i64::MAX, now))
        .await
        .unwrap();
    let status = |id: &str| {
        let id = id.to_owned();
        let state = std::sync::Arc::clone(&harness.state);
        async move {
            state
                .db(move |s| s.container_node(&id))
                .await
                .unwrap()
                .map(|(_, status)| status)
        }
    };

    // Lost: swept, woken, suspended late, and still all there.
    harness.clock.set(now + 3600);
    crate::lifecycle::sweep(&harness.state).await.unwrap();
    let answer = harness
        .post(
            &format!("/v1/containers/{asleep}/exec"),
            json!({"commands": ["true"]}),
        )
        .await;
    assert_eq!(answer.error(409)["code"], "container_lost");
    let key = kept.clone();
    harness
        .state
        .db(move |s| s.close_session(&key, ContainerStatus::Suspended))
        .await
        .unwrap();
    for id in [&kept, &asleep, &doomed] {
        assert_eq!(status(id).await, Some(ContainerStatus::Lost), "{id}");
        assert!(!harness.backend.calls().contains(&Call::Destroy(id.clone())));
    }
    let key = doomed.clone();
    let deleted = harness
        .state
        .db(move |s| s.delete_lost_container(&key))
        .await;
    assert_eq!(deleted.unwrap(), LostDeletion::Deleted);

    // Back.
    crate::cluster::node::register(&harness.state)
        .await
        .unwrap();
    assert_eq!(status(&kept).await, Some(ContainerStatus::Running));
    assert_eq!(status(&asleep).await, Some(ContainerStatus::Suspended));
    let destroyed: Vec<Call> = harness
        .backend
        .calls()
        .into_iter()
        .filter(|call| matches!(call, Call::Destroy(_)))
        .collect();
    assert_eq!(destroyed, vec![Call::Destroy(doomed)]);
    let answer = harness
        .post(
            &format!("/v1/containers/{kept}/exec"),
            json!({"commands": ["true"]}),
        )
        .await;
    answer.ok();
    // Still idle as long as when it was lost: not expired by the blind time.
    crate::lifecycle::sweep(&harness.state).await.unwrap();
    harness.get(&format!("/v1/containers/{asleep}")).await.ok();
}

// --- files by path ------------------------------------------------

#[tokio::test]
async fn files_by_path_check_their_input_before_the_backend_and_say_what_it_lacks() {
    let harness = Harness::new();
    let id = harness.container("paths").await;
    let calls = harness.backend.calls().len();
    let fs = |rest: &str| format!("/v1/containers/{id}/fs/{rest}");
    // Refusals naming their parameter, before the backend is asked.
    for (path, param) in [
        (fs("content?path="), json!("path")),
        (fs("list?path=/tmp&depth=33"), json!("depth")),
        (fs("list?path=/tmp&limit=0"), json!("limit")),
        (fs("archive?path=/tmp&path=/x"), json!("path")),
        (fs("archive?path=/tmp&bogus=1"), json!("bogus")),
        // (The query extractor's own refusal names no field.)
        (fs("stat?path=/tmp&bogus=1"), serde_json::Value::Null),
    ] {
        let answer = harness.get(&path).await;
        assert_eq!(answer.error(400)["param"], param, "{path}");
    }
    let answer = harness
        .call(
            Some(ALPHA),
            Method::POST,
            &fs("mkdir"),
            Some(json!({"path": "/tmp/a", "mode": "rwx"})),
        )
        .await;
    assert_eq!(answer.error(400)["param"], "mode");
    assert_eq!(harness.backend.calls().len(), calls);
    // Another project's container: a 404, as every container route.
    let answer = harness
        .call(Some(BETA), Method::GET, &fs("stat?path=/tmp"), None)
        .await;
    assert_eq!(answer.error(404)["code"], "not_found");
    // A backend without files by path says so in an envelope.
    let answer = harness.get(&fs("stat?path=/tmp")).await;
    assert_eq!(answer.error(501)["code"], "not_supported");
}
