//! The document's sandbox operations: containers, their processes, files
//! and ports, the Files and Skills APIs, and E2B's control plane.

use utoipa::openapi::path::HttpMethod;

use super::{
    delete, file_upload, get, list, operation, skill_upload, Answer, Body, Builder, Errors,
    Operation, Query, Schemas,
};

/// Containers: create, list, retrieve, delete, and exec.
pub(super) fn containers(d: &mut Builder, s: &Schemas) {
    use HttpMethod::Post;
    let Schemas {
        container,
        container_list,
        create_container,
        deleted,
        exec,
        shell_call_output,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/containers",
            "Containers",
            "Create a container",
            Body::Json(create_container.clone()),
            Answer::Json(container.clone()),
        ),
        list(
            "/v1/containers",
            "Containers",
            "List containers",
            container_list,
            Query::ListByName,
        ),
        get(
            "/v1/containers/{container_id}",
            "Containers",
            "Retrieve a container",
            container,
        ),
        delete(
            "/v1/containers/{container_id}",
            "Containers",
            "Delete a container",
            deleted,
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/exec",
            "Exec",
            "Run commands (shellgate extension); with `stream: true`, server-sent events \
             `exec.output.delta` and `exec.completed`",
            Body::Json(exec.clone()),
            Answer::JsonOrEvents(shell_call_output.clone()),
        ),
    ] {
        d.add(operation);
    }
}

/// A container's processes: start, list, output, stdin, signals, terminals,
/// WebSockets.
pub(super) fn processes(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Get, Post};
    let Schemas {
        process,
        processes,
        process_create,
        process_output,
        process_signal,
        process_resize,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/containers/{container_id}/processes",
            "Processes",
            "Start a process, with optional stdin and a terminal (shellgate extension); 201",
            Body::Json(process_create.clone()),
            Answer::Json(process.clone()),
        ),
        get(
            "/v1/containers/{container_id}/processes",
            "Processes",
            "The container's live processes and the ended ones still kept (10 minutes, at most 64)",
            processes,
        ),
        get(
            "/v1/containers/{container_id}/processes/{process_id}",
            "Processes",
            "Retrieve a process",
            process,
        ),
        delete(
            "/v1/containers/{container_id}/processes/{process_id}",
            "Processes",
            "Kill a process and every descendant; answers the ended process",
            process,
        ),
        Operation {
            query: Query::ProcessOutput,
            ..operation(
                Get,
                "/v1/containers/{container_id}/processes/{process_id}/output",
                "Processes",
                "A process's output from a byte offset (kept: its last 1 MiB); with `stream=true`, \
                 server-sent events `output` (ProcessChunk), `dropped` (ProcessDropped) and last \
                 `exit` (Process)",
                Body::None,
                Answer::JsonOrEvents(process_output.clone()),
            )
        },
        Operation {
            query: Query::ProcessStdin,
            ..operation(
                Post,
                "/v1/containers/{container_id}/processes/{process_id}/stdin",
                "Processes",
                "Write raw bytes (at most 1 MiB) to a process's stdin or terminal; 409 \
                 `process_exited` once it ended",
                Body::Bytes("application/octet-stream"),
                Answer::NoContent,
            )
        },
        operation(
            Post,
            "/v1/containers/{container_id}/processes/{process_id}/signal",
            "Processes",
            "Send a signal to a process's group (SIGKILL: every descendant)",
            Body::Json(process_signal.clone()),
            Answer::NoContent,
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/processes/{process_id}/resize",
            "Processes",
            "Resize a process's terminal",
            Body::Json(process_resize.clone()),
            Answer::NoContent,
        ),
        Operation {
            query: Query::ProcessSocket,
            ..operation(
                Get,
                "/v1/containers/{container_id}/processes/{process_id}/ws",
                "Processes",
                "A WebSocket to a process: binary frames are its output (server to client) and \
                 its stdin (client to server); text frames ProcessClientMessage in, \
                 ProcessServerMessage out (`exit` last, then a close)",
                Body::None,
                Answer::WebSocket(
                    "Switching Protocols: a WebSocket session with the process",
                ),
            )
        },
    ] {
        d.add(operation);
    }
}

/// What a container keeps about itself (its command audit, egress log,
/// secrets), and the images containers are made from.
pub(super) fn container_records(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Post, Put};
    let Schemas {
        container,
        commands,
        egress,
        supply,
        network_policy,
        images,
        image,
        image_build,
        deleted,
        ..
    } = s;
    for operation in [
        list(
            "/v1/containers/{container_id}/commands",
            "Containers",
            "The container's command audit: every command run, its outcome, duration and \
             output size (shellgate extension)",
            commands,
            Query::List,
        ),
        list(
            "/v1/containers/{container_id}/egress",
            "Containers",
            "The container's egress log: every connection and refusal, and DNS lookups (past a \
             budget, and connections over the limit, counted in aggregated rows) (shellgate \
             extension)",
            egress,
            Query::List,
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/secrets",
            "Containers",
            "Supply a container's secrets again after a restart of the server (shellgate \
             extension)",
            Body::Json(supply.clone()),
            Answer::Json(container.clone()),
        ),
        operation(
            Put,
            "/v1/containers/{container_id}/network_policy",
            "Containers",
            "Replace the domains a container made with network may reach (`disabled`: none), \
             running or suspended, for every connection it opens from now on; its secrets stay \
             the create's. 409 for a container made without network (shellgate extension)",
            Body::Json(network_policy.clone()),
            Answer::Json(container.clone()),
        ),
        get(
            "/v1/images",
            "Containers",
            "The images containers can be made from (shellgate extension)",
            images,
        ),
        operation(
            Post,
            "/v1/images",
            "Containers",
            "Make an image of the project's: a Dockerfile built in a build sandbox, or an OCI \
             image imported; answers the job, which runs on (shellgate extension)",
            Body::Multipart(super::image_upload()),
            Answer::Json(image_build.clone()),
        ),
        get(
            "/v1/images/{name}",
            "Containers",
            "Retrieve an image (shellgate extension)",
            image,
        ),
        delete(
            "/v1/images/{name}",
            "Containers",
            "Delete one of the project's own images; containers made from it keep it until they \
             go (shellgate extension)",
            deleted,
        ),
        Operation {
            query: Query::Named(&[
                (
                    "log_offset",
                    "The first log entry to answer (default 0)",
                    false,
                ),
                (
                    "log_limit",
                    "Log entries to answer at most (default 100, at most 1000)",
                    false,
                ),
            ]),
            ..get(
                "/v1/images/builds/{build_id}",
                "Containers",
                "An image build's status and a page of its log (shellgate extension)",
                image_build,
            )
        },
    ] {
        d.add(operation);
    }
}

/// Container files: /mnt/data by file id, OpenAI's Container Files API.
pub(super) fn container_files(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Get, Post};
    let Schemas {
        deleted,
        container_file,
        container_files,
        from_file_id,
        file,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/containers/{container_id}/files",
            "Container Files",
            "Add a file to /mnt/data: an upload, or a Files API file by id",
            Body::MultipartOrJson(file_upload(false), from_file_id.clone()),
            Answer::Json(container_file.clone()),
        ),
        list(
            "/v1/containers/{container_id}/files",
            "Container Files",
            "List files in /mnt/data (uploaded and made by commands)",
            container_files,
            Query::List,
        ),
        get(
            "/v1/containers/{container_id}/files/{file_id}",
            "Container Files",
            "Retrieve a container file",
            container_file,
        ),
        delete(
            "/v1/containers/{container_id}/files/{file_id}",
            "Container Files",
            "Delete a container file",
            deleted,
        ),
        operation(
            Get,
            "/v1/containers/{container_id}/files/{file_id}/content",
            "Container Files",
            "Download a container file",
            Body::None,
            Answer::Bytes("application/octet-stream"),
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/files/{file_id}/promote",
            "Container Files",
            "Promote a container file into the Files API (shellgate extension)",
            Body::None,
            Answer::Json(file.clone()),
        ),
    ] {
        d.add(operation);
    }
}

/// Files by path anywhere in a container, read and written whole, and their
/// metadata (shellgate extension).
pub(super) fn fs_paths(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Get, Put};
    let Schemas {
        fs_entry, fs_list, ..
    } = s;
    for operation in [
        Operation {
            query: Query::Named(FS_PATH),
            ..operation(
                Get,
                "/v1/containers/{container_id}/fs/content",
                "Container Files",
                "Read a regular file by path, streamed (a suspended container's /mnt/data \
                 without waking it)",
                Body::None,
                Answer::Bytes("application/octet-stream"),
            )
        },
        Operation {
            query: Query::Named(FS_WRITE),
            ..operation(
                Put,
                "/v1/containers/{container_id}/fs/content",
                "Container Files",
                "Write a file by path from the streamed body (a temporary file renamed over \
                 it: a cut upload leaves the old file)",
                Body::Bytes("application/octet-stream"),
                Answer::Json(fs_entry.clone()),
            )
        },
        Operation {
            query: Query::Named(FS_PATH),
            ..get(
                "/v1/containers/{container_id}/fs/stat",
                "Container Files",
                "An entry by path (lstat: a link is reported, not followed)",
                fs_entry,
            )
        },
        Operation {
            query: Query::Named(FS_LIST),
            ..get(
                "/v1/containers/{container_id}/fs/list",
                "Container Files",
                "A directory's entries, depth first",
                fs_list,
            )
        },
    ] {
        d.add(operation);
    }
}

/// Directories anywhere in a container: made, moved, deleted, and archived
/// whole (shellgate extension).
pub(super) fn fs_trees(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Get, Post};
    let Schemas {
        fs_entry,
        fs_mkdir,
        fs_move,
        fs_deleted,
        fs_archive,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/containers/{container_id}/fs/mkdir",
            "Container Files",
            "Make a directory",
            Body::Json(fs_mkdir.clone()),
            Answer::Json(fs_entry.clone()),
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/fs/move",
            "Container Files",
            "Move (rename) a file or directory",
            Body::Json(fs_move.clone()),
            Answer::Json(fs_entry.clone()),
        ),
        Operation {
            query: Query::Named(FS_REMOVE),
            ..delete(
                "/v1/containers/{container_id}/fs",
                "Container Files",
                "Remove a file, link or directory (a tree with recursive=true)",
                fs_deleted,
            )
        },
        Operation {
            query: Query::Named(FS_EXPORT),
            ..operation(
                Get,
                "/v1/containers/{container_id}/fs/archive",
                "Container Files",
                "Export a directory as a tar stream",
                Body::None,
                Answer::Bytes("application/x-tar"),
            )
        },
        Operation {
            query: Query::Named(FS_IMPORT),
            ..operation(
                Post,
                "/v1/containers/{container_id}/fs/archive",
                "Container Files",
                "Import a tar stream into a directory (a refused or cut archive leaves nothing)",
                Body::Bytes("application/x-tar"),
                Answer::Json(fs_archive.clone()),
            )
        },
    ] {
        d.add(operation);
    }
}

/// The Files API.
pub(super) fn files(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Get, Post};
    let Schemas {
        deleted,
        file,
        files,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/files",
            "Files",
            "Upload a file",
            Body::Multipart(file_upload(true)),
            Answer::Json(file.clone()),
        ),
        list(
            "/v1/files",
            "Files",
            "List files",
            files,
            Query::ListByPurpose,
        ),
        get("/v1/files/{file_id}", "Files", "Retrieve a file", file),
        delete("/v1/files/{file_id}", "Files", "Delete a file", deleted),
        operation(
            Get,
            "/v1/files/{file_id}/content",
            "Files",
            "Download a file",
            Body::None,
            Answer::Bytes("application/octet-stream"),
        ),
    ] {
        d.add(operation);
    }
}

/// Volumes.
pub(super) fn volumes(d: &mut Builder, s: &Schemas) {
    use HttpMethod::Post;
    let Schemas {
        deleted,
        volume,
        volumes,
        create_volume,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/volumes",
            "Volumes",
            "Create a volume: a persistent directory of the project, mounted read-write by \
             `volumes` at a container's create",
            Body::Json(create_volume.clone()),
            Answer::Json(volume.clone()),
        ),
        list(
            "/v1/volumes",
            "Volumes",
            "List volumes",
            volumes,
            Query::List,
        ),
        get(
            "/v1/volumes/{volume_id}",
            "Volumes",
            "Retrieve a volume",
            volume,
        ),
        delete(
            "/v1/volumes/{volume_id}",
            "Volumes",
            "Delete a volume and its files (409 `volume_in_use` while a container mounts it)",
            deleted,
        ),
    ] {
        d.add(operation);
    }
}

/// Snapshots and forks.
pub(super) fn snapshots(d: &mut Builder, s: &Schemas) {
    use HttpMethod::Post;
    let Schemas {
        deleted,
        snapshot,
        snapshots,
        create_snapshot,
        fork_container,
        container_list,
        image,
        commit_image,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/containers/{container_id}/snapshots",
            "Snapshots",
            "Snapshot a container's files (its processes frozen while they are copied)",
            Body::Json(create_snapshot.clone()),
            Answer::Json(snapshot.clone()),
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/fork",
            "Snapshots",
            "Copies of a container (1 to 16), each with its own disk, from one snapshot taken now",
            Body::Json(fork_container.clone()),
            Answer::Json(container_list.clone()),
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/image",
            "Snapshots",
            "Commit a container to an image of the project's: its image with its changes, its \
             home as new containers' home (shellgate extension)",
            Body::Json(commit_image.clone()),
            Answer::Json(image.clone()),
        ),
        list(
            "/v1/snapshots",
            "Snapshots",
            "List snapshots",
            snapshots,
            Query::List,
        ),
        get(
            "/v1/snapshots/{snapshot_id}",
            "Snapshots",
            "Retrieve a snapshot",
            snapshot,
        ),
        delete(
            "/v1/snapshots/{snapshot_id}",
            "Snapshots",
            "Delete a snapshot and its files",
            deleted,
        ),
    ] {
        d.add(operation);
    }
}

/// Skills and their versions.
pub(super) fn skills(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Get, Post};
    let Schemas {
        deleted,
        skill,
        skills,
        update_skill,
        version,
        versions,
        version_deleted,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/skills",
            "Skills",
            "Create a skill from a zip or a directory upload",
            Body::Multipart(skill_upload()),
            Answer::Json(skill.clone()),
        ),
        list("/v1/skills", "Skills", "List skills", skills, Query::List),
        get("/v1/skills/{skill_id}", "Skills", "Retrieve a skill", skill),
        operation(
            Post,
            "/v1/skills/{skill_id}",
            "Skills",
            "Set the default version",
            Body::Json(update_skill.clone()),
            Answer::Json(skill.clone()),
        ),
        delete(
            "/v1/skills/{skill_id}",
            "Skills",
            "Delete a skill and its versions",
            deleted,
        ),
        operation(
            Get,
            "/v1/skills/{skill_id}/content",
            "Skills",
            "The default version as a zip",
            Body::None,
            Answer::Bytes("application/zip"),
        ),
        operation(
            Post,
            "/v1/skills/{skill_id}/versions",
            "Skills",
            "Add a version",
            Body::Multipart(skill_upload()),
            Answer::Json(version.clone()),
        ),
        list(
            "/v1/skills/{skill_id}/versions",
            "Skills",
            "List versions",
            versions,
            Query::List,
        ),
        get(
            "/v1/skills/{skill_id}/versions/{version}",
            "Skills",
            "Retrieve a version (a number, or `latest`)",
            version,
        ),
        delete(
            "/v1/skills/{skill_id}/versions/{version}",
            "Skills",
            "Delete a version (not the default)",
            version_deleted,
        ),
        operation(
            Get,
            "/v1/skills/{skill_id}/versions/{version}/content",
            "Skills",
            "A version as a zip",
            Body::None,
            Answer::Bytes("application/zip"),
        ),
    ] {
        d.add(operation);
    }
}

/// E2B's control plane, at the root as E2B serves it.
pub(super) fn e2b(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Delete, Get, Patch, Post, Put};
    let Schemas {
        e2b_create,
        e2b_sandbox,
        e2b_detail,
        e2b_listed,
        e2b_timeout,
        e2b_connect,
        e2b_pause,
        e2b_alias,
        e2b_new_volume,
        e2b_volume,
        e2b_volumes,
        e2b_volume_entry,
        e2b_volume_entries,
        e2b_volume_patch,
        e2b_snapshot_request,
        e2b_snapshot,
        e2b_snapshots,
        e2b_fork_request,
        e2b_fork_results,
        e2b_template_request,
        e2b_template_requested,
        e2b_template_file,
        e2b_template_start,
        e2b_template_status,
        e2b_refresh,
        e2b_metrics,
        e2b_metrics_by_id,
        e2b_logs,
        e2b_logs_v2,
        e2b_network_update,
        ..
    } = s;
    let e2b_op = |method, path, summary, body, answer| Operation {
        method,
        path,
        tag: "E2B",
        summary,
        body,
        answer,
        query: Query::None,
        errors: Errors::E2b,
    };
    let e2b_list = |path, summary| Operation {
        query: Query::Named(E2B_LIST_QUERY),
        ..e2b_op(
            Get,
            path,
            summary,
            Body::None,
            Answer::Json(e2b_listed.clone()),
        )
    };
    // The volume content API: the volume's token as the bearer credential.
    let volume_content = |method, path, summary, body, answer| Operation {
        query: Query::Named(VOLUME_CONTENT_QUERY),
        ..e2b_op(method, path, summary, body, answer)
    };
    for operation in [
        e2b_op(
            Post,
            "/v2/sandboxes",
            "Create a sandbox (a container): `templateID` names an image (`base`, `code-interpreter-v1`: the default); `Idempotency-Key` replays a create for 24 hours",
            Body::Json(e2b_create.clone()),
            Answer::JsonWith(&["201"], e2b_sandbox.clone()),
        ),
        e2b_op(
            Post,
            "/sandboxes",
            "Create a sandbox (older SDKs)",
            Body::Json(e2b_create.clone()),
            Answer::JsonWith(&["201"], e2b_sandbox.clone()),
        ),
        e2b_list("/v2/sandboxes", "List the project's sandboxes (the next page's token in `x-next-token`)"),
        e2b_list("/sandboxes", "List the project's sandboxes (older SDKs)"),
        e2b_op(Get, "/sandboxes/{sandbox_id}", "A sandbox's state, times and resources", Body::None, Answer::Json(e2b_detail.clone())),
        e2b_op(Delete, "/sandboxes/{sandbox_id}", "Kill a sandbox (its container is deleted)", Body::None, Answer::NoContent),
        e2b_op(
            Post,
            "/sandboxes/{sandbox_id}/timeout",
            "Set the sandbox's timeout, in seconds from now",
            Body::Json(e2b_timeout.clone()),
            Answer::NoContent,
        ),
        e2b_op(
            Post,
            "/sandboxes/{sandbox_id}/pause",
            "Pause: processes end, files stay (409 when paused already)",
            Body::Json(e2b_pause.clone()),
            Answer::NoContent,
        ),
        e2b_op(
            Post,
            "/v2/sandboxes/{sandbox_id}/connect",
            "Connect: 200 running (timeout only extended), 201 resumed from a pause",
            Body::Json(e2b_connect.clone()),
            Answer::JsonWith(&["200", "201"], e2b_sandbox.clone()),
        ),
        e2b_op(
            Post,
            "/sandboxes/{sandbox_id}/connect",
            "Connect (older SDKs)",
            Body::Json(e2b_connect.clone()),
            Answer::JsonWith(&["200", "201"], e2b_sandbox.clone()),
        ),
        e2b_op(
            Post,
            "/sandboxes/{sandbox_id}/resume",
            "Resume a paused sandbox (older SDKs; 409 when running)",
            Body::Json(e2b_connect.clone()),
            Answer::JsonWith(&["201"], e2b_sandbox.clone()),
        ),
        e2b_op(
            Get,
            "/templates/aliases/{alias}",
            "The template an alias names (the default templates, the server's images, the \
             project's templates; 404 otherwise)",
            Body::None,
            Answer::Json(e2b_alias.clone()),
        ),
        e2b_op(
            Post,
            "/volumes",
            "Create a volume (a project's persistent directory, mounted by `volumeMounts` at a sandbox's create)",
            Body::Json(e2b_new_volume.clone()),
            Answer::JsonWith(&["201"], e2b_volume.clone()),
        ),
        e2b_op(Get, "/volumes", "List the project's volumes", Body::None, Answer::Json(e2b_volumes.clone())),
        e2b_op(Get, "/volumes/{volume_id}", "A volume and its token", Body::None, Answer::Json(e2b_volume.clone())),
        e2b_op(
            Delete,
            "/volumes/{volume_id}",
            "Destroy a volume and its files (409 while a sandbox mounts it)",
            Body::None,
            Answer::NoContent,
        ),
        volume_content(Get, "/volumecontent/{volume_id}/path", "An entry of the volume (a link shown as one, never followed)", Body::None, Answer::Json(e2b_volume_entry.clone())),
        volume_content(Delete, "/volumecontent/{volume_id}/path", "Remove an entry (a directory with what it holds)", Body::None, Answer::NoContent),
        volume_content(Patch, "/volumecontent/{volume_id}/path", "Set an entry's mode (`uid` and `gid` are refused)", Body::Json(e2b_volume_patch.clone()), Answer::Json(e2b_volume_entry.clone())),
        volume_content(Get, "/volumecontent/{volume_id}/dir", "A directory's entries, `depth` levels down", Body::None, Answer::Json(e2b_volume_entries.clone())),
        volume_content(Post, "/volumecontent/{volume_id}/dir", "Make a directory (`force`: its parents too)", Body::None, Answer::JsonWith(&["201"], e2b_volume_entry.clone())),
        volume_content(Get, "/volumecontent/{volume_id}/file", "A file's bytes", Body::None, Answer::Bytes("application/octet-stream")),
        volume_content(Put, "/volumecontent/{volume_id}/file", "Write a file, whole or not at all (`force` replaces one)", Body::Bytes("application/octet-stream"), Answer::JsonWith(&["201"], e2b_volume_entry.clone())),
        e2b_op(
            Post,
            "/v3/templates",
            "A new build of the project's template `name` (202): its template and build ids",
            Body::Json(e2b_template_request.clone()),
            Answer::JsonWith(&["202"], e2b_template_requested.clone()),
        ),
        e2b_op(
            Get,
            "/templates/{template_id}/files/{hash}",
            "Whether a COPY step's files are uploaded (201), else the URL to PUT them to",
            Body::None,
            Answer::JsonWith(&["201"], e2b_template_file.clone()),
        ),
        e2b_op(
            Put,
            "/templates/{template_id}/files/{hash}",
            "A COPY step's files (the SDK's gzipped tar), authorised by the upload URL's \
             `token` (no key)",
            Body::Bytes("application/gzip"),
            Answer::NoContent,
        ),
        e2b_op(
            Post,
            "/v2/templates/{template_id}/builds/{build_id}",
            "The build's steps, start and ready commands: the build starts (202)",
            Body::Json(e2b_template_start.clone()),
            Answer::NoContent,
        ),
        e2b_op(
            Get,
            "/templates/{template_id}/builds/{build_id}/status",
            "A build's status, its log entries from `logsOffset` (100 at most) and why it failed",
            Body::None,
            Answer::Json(e2b_template_status.clone()),
        ),
        e2b_op(
            Delete,
            "/templates/{template_id}",
            "Deletes the project's template and its layer, or the project's snapshot of that id \
             (204)",
            Body::None,
            Answer::NoContent,
        ),
        Operation {
            query: Query::Named(E2B_METRICS_QUERY),
            ..e2b_op(
                Get,
                "/sandboxes/{sandbox_id}/metrics",
                "The sandbox's resource samples from `start` to `end` (its cgroup's CPU and \
                 memory, its disk), taken every 5 s and kept for an hour, oldest first",
                Body::None,
                Answer::Json(e2b_metrics.clone()),
            )
        },
        Operation {
            query: Query::Named(E2B_LISTED_METRICS_QUERY),
            ..e2b_op(
                Get,
                "/sandboxes/metrics",
                "The latest sample of each running sandbox `sandbox_ids` names, by id",
                Body::None,
                Answer::Json(e2b_metrics_by_id.clone()),
            )
        },
        Operation {
            query: Query::Named(E2B_LOGS_QUERY),
            ..e2b_op(
                Get,
                "/sandboxes/{sandbox_id}/logs",
                "The sandbox's log from `start`: its create, resume and the start and end of \
                 each process it ran (from the command audit), as lines and entries",
                Body::None,
                Answer::Json(e2b_logs.clone()),
            )
        },
        Operation {
            query: Query::Named(E2B_LOGS_V2_QUERY),
            ..e2b_op(
                Get,
                "/v2/sandboxes/{sandbox_id}/logs",
                "The sandbox's log entries from `cursor`, `forward` or `backward`, at `level` or \
                 above, holding `search`",
                Body::None,
                Answer::Json(e2b_logs_v2.clone()),
            )
        },
        e2b_op(
            Post,
            "/sandboxes/{sandbox_id}/snapshots",
            "Snapshot a sandbox's files (one of the project's snapshots; `memory` is not kept): \
             its id is a `templateID` to create sandboxes from (on any node of a cluster)",
            Body::Json(e2b_snapshot_request.clone()),
            Answer::JsonWith(&["201"], e2b_snapshot.clone()),
        ),
        Operation {
            query: Query::Named(E2B_SNAPSHOT_LIST_QUERY),
            ..e2b_op(
                Get,
                "/snapshots",
                "List the project's snapshots, newest first (the next page's token in \
                 `x-next-token`)",
                Body::None,
                Answer::Json(e2b_snapshots.clone()),
            )
        },
        e2b_op(
            Post,
            "/sandboxes/{sandbox_id}/fork",
            "`count` copies of a sandbox (its files, template, metadata and environment) from one \
             snapshot taken now, all made or none",
            Body::Json(e2b_fork_request.clone()),
            Answer::JsonWith(&["201"], e2b_fork_results.clone()),
        ),
        e2b_op(
            Post,
            "/sandboxes/{sandbox_id}/refreshes",
            "Keep a running sandbox alive `duration` seconds from now (0 to 3600, 15 at least); \
             never shortens its timeout (409 when paused)",
            Body::Json(e2b_refresh.clone()),
            Answer::NoContent,
        ),
        e2b_op(
            Put,
            "/sandboxes/{sandbox_id}/network",
            "Replace a running or paused sandbox's egress rules (a field omitted is cleared), \
             mapped as a create's `network`; in force for every connection begun after it, kept \
             across pauses and restarts. 409 for a sandbox created without network",
            Body::Json(e2b_network_update.clone()),
            Answer::NoContent,
        ),
    ] {
        d.add(operation);
    }
}

/// A container's exposed ports: every method, proxied as it comes.
pub(super) fn ports(d: &mut Builder) {
    use HttpMethod::{Delete, Get, Options, Patch, Post, Put, Trace};
    for (path, summary) in [
        (
            "/v1/containers/{container_id}/ports/{port}",
            "The container's port `port` (exposed at create), its path `/`: proxied to \
             127.0.0.1:{port} inside the container, HTTP/1.1 and upgrades (WebSocket). The \
             project's API key or the container's `port_token` (`x-shellgate-port-token`, or \
             `?shellgate_port_token=`); neither reaches the container. 404: not exposed, or not \
             the caller's; 502 `port_not_listening`: nothing listens, or the container is \
             suspended (not woken). Also served by host name: `{port}-{container_id}.` + the \
             server's `ports_base_domain` (shellgate extension)",
        ),
        (
            "/v1/containers/{container_id}/ports/{port}/",
            "As `/v1/containers/{container_id}/ports/{port}` (shellgate extension)",
        ),
        (
            "/v1/containers/{container_id}/ports/{port}/{rest}",
            "The container's port `port`, its path `/{rest}` (the prefix stripped; \
             `X-Forwarded-Prefix` says it), as `/v1/containers/{container_id}/ports/{port}` \
             (shellgate extension)",
        ),
    ] {
        for method in [Get, Post, Put, Patch, Delete, Options, Trace] {
            d.add(Operation {
                method,
                path,
                tag: "Ports",
                summary,
                body: Body::None,
                answer: Answer::Bytes("*/*"),
                query: Query::None,
                errors: Errors::OpenAi,
            });
        }
    }
}

/// The query parameters of the files-by-path routes.
const FS_PATH: &[(&str, &str, bool)] = &[(
    "path",
    "An absolute path in the container (a relative one is under /mnt/data)",
    true,
)];
const FS_WRITE: &[(&str, &str, bool)] = &[
    FS_PATH[0],
    ("mode", "Octal permission bits (`0644` when omitted)", false),
    (
        "parents",
        "Create missing parent directories (`true` when omitted)",
        false,
    ),
];
const FS_LIST: &[(&str, &str, bool)] = &[
    FS_PATH[0],
    (
        "depth",
        "Levels to descend, 1 to 32 (1 when omitted)",
        false,
    ),
    (
        "limit",
        "Most entries, 1 to 10000 (1000 when omitted); `truncated` says more exist",
        false,
    ),
];
const FS_REMOVE: &[(&str, &str, bool)] = &[
    FS_PATH[0],
    (
        "recursive",
        "Remove a directory's whole tree (`false` when omitted)",
        false,
    ),
];
const FS_EXPORT: &[(&str, &str, bool)] = &[
    ("path", "The directory (`/mnt/data` when omitted)", false),
    (
        "exclude",
        "A glob relative to it (`*`, `**`, `?`), repeatable; a matching directory is left out whole",
        false,
    ),
];
const FS_IMPORT: &[(&str, &str, bool)] = &[(
    "path",
    "The directory to unpack into (`/mnt/data` when omitted)",
    false,
)];

/// A listing of E2B snapshots: its query parameters.
const E2B_SNAPSHOT_LIST_QUERY: &[(&str, &str, bool)] = &[
    ("sandboxID", "Only the snapshots of this sandbox", false),
    ("name", "Only the snapshots of this name or id", false),
    (
        "limit",
        "At most this many (1 to 100, 100 when omitted)",
        false,
    ),
    (
        "nextToken",
        "The previous page's `x-next-token` response header",
        false,
    ),
];

/// E2B's volume content calls: their query parameters.
const VOLUME_CONTENT_QUERY: &[(&str, &str, bool)] = &[
    ("path", "The entry's path from the volume's root", true),
    (
        "depth",
        "A listing's levels (1 to 32, 1 when omitted)",
        false,
    ),
    (
        "mode",
        "A made directory's or written file's mode (0777 and 0666 when omitted)",
        false,
    ),
    (
        "force",
        "A make: its parents too; a write: replace an existing file",
        false,
    ),
    (
        "uid",
        "Refused (400): sandboxes write as host ids of their own",
        false,
    ),
    ("gid", "Refused (400), as `uid`", false),
];

/// A listing of E2B sandboxes: its query parameters.
const E2B_METRICS_QUERY: &[(&str, &str, bool)] = &[
    (
        "start",
        "Unix seconds: the window's start (the sandbox's create when omitted)",
        false,
    ),
    (
        "end",
        "Unix seconds: the window's end (now when omitted)",
        false,
    ),
];

const E2B_LISTED_METRICS_QUERY: &[(&str, &str, bool)] = &[(
    "sandbox_ids",
    "Comma-separated sandbox ids (1 to 100)",
    true,
)];

const E2B_LOGS_QUERY: &[(&str, &str, bool)] = &[
    (
        "start",
        "Unix milliseconds: the first entry's earliest time",
        false,
    ),
    (
        "limit",
        "Entries at most (0 to 1000, 1000 when omitted)",
        false,
    ),
];

const E2B_LOGS_V2_QUERY: &[(&str, &str, bool)] = &[
    (
        "cursor",
        "Unix milliseconds: where the page starts (the sandbox's create going forward, now \
         going backward)",
        false,
    ),
    ("direction", "`forward` (oldest first) or `backward`", false),
    (
        "level",
        "`debug`, `info`, `warn` or `error`: the lowest shown",
        false,
    ),
    (
        "search",
        "Only entries whose message holds it (case-sensitive)",
        false,
    ),
    (
        "limit",
        "Entries at most (0 to 1000, 1000 when omitted)",
        false,
    ),
];

const E2B_LIST_QUERY: &[(&str, &str, bool)] = &[
    (
        "metadata",
        "Url-encoded `k=v` pairs joined by `&`: sandboxes whose metadata has them all",
        false,
    ),
    (
        "state",
        "`running`, `paused`, or both, comma separated",
        false,
    ),
    (
        "limit",
        "At most this many (1 to 100, 100 when omitted)",
        false,
    ),
    (
        "nextToken",
        "The previous page's `x-next-token` response header",
        false,
    ),
    (
        "order",
        "`asc` or `desc` (newest first, the default) by creation",
        false,
    ),
    (
        "startedAfter",
        "RFC 3339: only sandboxes started at or after it",
        false,
    ),
    ("template", "Only sandboxes of this `templateID`", false),
];
