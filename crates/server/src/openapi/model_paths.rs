//! The document's model APIs: Responses, Chat Completions and models,
//! Gemini's, and Anthropic's Messages.

use utoipa::openapi::path::HttpMethod;

use super::{
    delete, get, list, operation, Answer, Body, Builder, Errors, Operation, Query, Schemas,
};

/// The Responses API.
pub(super) fn responses(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Get, Post};
    let Schemas {
        response,
        create_response,
        response_deleted,
        input_items,
        input_tokens_request,
        input_token_count,
        compact_request,
        compacted_response,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/responses",
            "Responses",
            "Create a response (OpenAI's Responses API over any upstream model, the hosted \
             `shell` tool run in shellgate's containers)",
            Body::Json(create_response.clone()),
            Answer::JsonOrEvents(response.clone()),
        ),
        operation(
            Get,
            "/v1/responses",
            "Responses",
            "The Responses API's WebSocket mode: text frames `response.create` in (a create \
             request with its `type`), one response at a time; out, the events a stream sends, \
             or an `error` event for a request that cannot start",
            Body::None,
            Answer::WebSocket("Switching Protocols: a WebSocket session of responses"),
        ),
        Operation {
            query: Query::ResumeStream,
            ..operation(
                Get,
                "/v1/responses/{response_id}",
                "Responses",
                "Retrieve a response; with `stream=true`, its events again (live while it runs)",
                Body::None,
                Answer::JsonOrEvents(response.clone()),
            )
        },
        delete(
            "/v1/responses/{response_id}",
            "Responses",
            "Delete a response",
            response_deleted,
        ),
        operation(
            Post,
            "/v1/responses/{response_id}/cancel",
            "Responses",
            "Cancel a background response",
            Body::None,
            Answer::Json(response.clone()),
        ),
        list(
            "/v1/responses/{response_id}/input_items",
            "Responses",
            "List a response's input items (`include` values are accepted: the items are \
             listed whole)",
            input_items,
            Query::List,
        ),
        operation(
            Post,
            "/v1/responses/input_tokens",
            "Responses",
            "Count the input tokens of a request (the upstream's count where its protocol has \
             one, else an estimate)",
            Body::Json(input_tokens_request.clone()),
            Answer::Json(input_token_count.clone()),
        ),
        operation(
            Post,
            "/v1/responses/compact",
            "Responses",
            "Compact a conversation: its user messages, then a `compaction` item holding a summary \
             the request's model wrote (opaque; carried as input, it gives the next turn's model \
             the summary, over any upstream)",
            Body::Json(compact_request.clone()),
            Answer::Json(compacted_response.clone()),
        ),
    ] {
        d.add(operation);
    }
}

/// Chat Completions and the models the upstreams serve.
pub(super) fn chat_and_models(d: &mut Builder, s: &Schemas) {
    use HttpMethod::Post;
    let Schemas {
        chat_request,
        chat_completion,
        model,
        models,
        ..
    } = s;
    for operation in [
        operation(
            Post,
            "/v1/chat/completions",
            "Chat",
            "Create a chat completion (passed through to the model's upstream: verbatim to a \
             Chat Completions upstream, translated for others; the shell tools are refused \
             here, they run on /v1/responses and /v1/messages)",
            Body::Json(chat_request.clone()),
            Answer::JsonOrEvents(chat_completion.clone()),
        ),
        get(
            "/v1/models",
            "Models",
            "List the models the configured upstreams serve, per route (Anthropic's shape, \
             paged by `after_id`/`before_id`/`limit`, when the request sends \
             `anthropic-version`)",
            models,
        ),
        get(
            "/v1/models/{model}",
            "Models",
            "Retrieve a model (Anthropic's shape when the request sends `anthropic-version`)",
            model,
        ),
    ] {
        d.add(operation);
    }
}

/// Gemini's API: a model's methods, and its models.
pub(super) fn gemini(d: &mut Builder, s: &Schemas) {
    use HttpMethod::Post;
    let Schemas {
        generate_content,
        generated,
        gemini_model,
        gemini_models,
        gemini_create_file,
        gemini_uploaded,
        gemini_file,
        gemini_files,
        gemini_deleted_file,
        ..
    } = s;
    let gemini_call = |path| Operation {
        errors: Errors::Google,
        ..operation(
            Post,
            path,
            "Gemini",
            "Gemini's methods on a model, named after a colon: `{model}:generateContent`, \
             `:streamGenerateContent` (`?alt=sse`: events), `:countTokens` (its body a \
             CountTokensRequest, its answer a CountTokensResponse), over any upstream; \
             `codeExecution` runs in a shellgate container (header `x-shellgate-container` \
             names one to reuse)",
            Body::Json(generate_content.clone()),
            Answer::JsonOrEvents(generated.clone()),
        )
    };
    for operation in [
        gemini_call("/v1/models/{model}"),
        gemini_call("/v1beta/models/{model}"),
        Operation {
            errors: Errors::Google,
            ..get(
                "/v1beta/models",
                "Gemini",
                "List the models the configured upstreams serve (Gemini's shape)",
                gemini_models,
            )
        },
        Operation {
            errors: Errors::Google,
            ..get(
                "/v1beta/models/{model}",
                "Gemini",
                "Retrieve a model (Gemini's shape)",
                gemini_model,
            )
        },
        Operation {
            errors: Errors::Google,
            query: Query::Named(&[(
                "upload_id",
                "The upload the bytes are for (the X-Goog-Upload-URL a start answered); \
                 without it, the request is a start",
                false,
            )]),
            ..operation(
                Post,
                "/upload/v1beta/files",
                "Gemini",
                "Upload a file by Google's resumable protocol: a start (headers \
                 `X-Goog-Upload-Protocol: resumable`, `X-Goog-Upload-Command: start`; this \
                 body) answers `X-Goog-Upload-URL`; the file's bytes go there whole with \
                 `X-Goog-Upload-Command: upload, finalize`, answered an UploadedFile. The \
                 project's files (/v1/files), kept 48 hours",
                Body::Json(gemini_create_file.clone()),
                Answer::Json(gemini_uploaded.clone()),
            )
        },
        Operation {
            errors: Errors::Google,
            query: Query::Named(&[
                ("pageSize", "Files a page (1 to 100, 10 by default)", false),
                ("pageToken", "The nextPageToken of the page before", false),
            ]),
            ..get(
                "/v1beta/files",
                "Gemini",
                "List the project's files (Gemini's shape), newest first",
                gemini_files,
            )
        },
        Operation {
            errors: Errors::Google,
            ..get(
                "/v1beta/files/{file}",
                "Gemini",
                "Retrieve a file (Gemini's shape)",
                gemini_file,
            )
        },
        Operation {
            errors: Errors::Google,
            ..delete(
                "/v1beta/files/{file}",
                "Gemini",
                "Delete a file",
                gemini_deleted_file,
            )
        },
    ] {
        d.add(operation);
    }
}

/// Anthropic's Messages API and its token count.
pub(super) fn messages(d: &mut Builder, s: &Schemas) {
    use HttpMethod::Post;
    let Schemas {
        create_message,
        message,
        count_tokens,
        token_count,
        ..
    } = s;
    let messages = |path, summary| Operation {
        errors: Errors::Anthropic,
        ..operation(
            Post,
            path,
            "Messages",
            summary,
            Body::Json(create_message.clone()),
            Answer::JsonOrEvents(message.clone()),
        )
    };
    let count = |path, summary| Operation {
        errors: Errors::Anthropic,
        ..operation(
            Post,
            path,
            "Messages",
            summary,
            Body::Json(count_tokens.clone()),
            Answer::Json(token_count.clone()),
        )
    };
    for operation in [
        messages(
            "/v1/messages",
            "Create a message (Anthropic's Messages API)",
        ),
        messages(
            "/v1/v1/messages",
            "Create a message (the same, for Anthropic SDKs given a base URL that ends in /v1)",
        ),
        count(
            "/v1/messages/count_tokens",
            "Count a message's input tokens (the upstream's count for an Anthropic upstream, \
             else an estimate)",
        ),
        count(
            "/v1/v1/messages/count_tokens",
            "Count a message's input tokens (the same, for a base URL that ends in /v1)",
        ),
    ] {
        d.add(operation);
    }
    message_batches(d, s);
}

/// Anthropic's Message Batches, at `/v1/messages/batches` and again under
/// a doubled `/v1` (for SDKs given a base URL that ends in /v1).
fn message_batches(d: &mut Builder, s: &Schemas) {
    use HttpMethod::{Delete, Get, Post};
    let Schemas {
        create_batch,
        message_batch,
        batch_page,
        batch_deleted,
        ..
    } = s;
    let batch = |method, path, summary, body, answer| Operation {
        errors: Errors::Anthropic,
        ..operation(method, path, "Messages", summary, body, answer)
    };
    let doubled = "The same, for Anthropic SDKs given a base URL that ends in /v1";
    for (method, path, twin, summary, body, answer) in [
        (
            Post,
            "/v1/messages/batches",
            "/v1/v1/messages/batches",
            "Create a message batch (its requests run in the background)",
            Body::Json(create_batch.clone()),
            Answer::Json(message_batch.clone()),
        ),
        (
            Get,
            "/v1/messages/batches",
            "/v1/v1/messages/batches",
            "List message batches, newest first (after_id, before_id, limit)",
            Body::None,
            Answer::Json(batch_page.clone()),
        ),
        (
            Get,
            "/v1/messages/batches/{batch_id}",
            "/v1/v1/messages/batches/{batch_id}",
            "Retrieve a message batch",
            Body::None,
            Answer::Json(message_batch.clone()),
        ),
        (
            Delete,
            "/v1/messages/batches/{batch_id}",
            "/v1/v1/messages/batches/{batch_id}",
            "Delete an ended message batch",
            Body::None,
            Answer::Json(batch_deleted.clone()),
        ),
        (
            Post,
            "/v1/messages/batches/{batch_id}/cancel",
            "/v1/v1/messages/batches/{batch_id}/cancel",
            "Cancel a message batch (its requests not started are canceled)",
            Body::None,
            Answer::Json(message_batch.clone()),
        ),
        (
            Get,
            "/v1/messages/batches/{batch_id}/results",
            "/v1/v1/messages/batches/{batch_id}/results",
            "A message batch's results, one JSON line per request, once it has ended",
            Body::None,
            Answer::Bytes("application/x-jsonl"),
        ),
    ] {
        d.add(batch(
            method.clone(),
            path,
            summary,
            body.clone(),
            answer.clone(),
        ));
        d.add(batch(method, twin, doubled, body, answer));
    }
}
