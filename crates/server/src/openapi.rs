//! The OpenAPI 3.1 document (`GET /openapi.json`), generated from the wire
//! types' `utoipa::ToSchema` derives: a field added to a wire struct appears
//! in the document without anyone editing it.
//!
//! Each operation is one row of its area's table (containers, processes,
//! files, skills, each model API, E2B...: a function per area, each called
//! once by `build`): method, path, tag, summary, and the types of its body
//! and answer. That every route [`crate::router`] serves is in a table, and
//! nothing else, is checked by this file's test against the router itself
//! (its recorded paths, probed with every method), so a route added without
//! its documentation fails the build's tests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use shellgate_wire as wire;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{
    ArrayBuilder, ObjectBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    Components, ContentBuilder, InfoBuilder, OpenApiBuilder, Paths, Ref, RefOr, Required,
    ResponseBuilder, ServerBuilder,
};
use utoipa::ToSchema;

mod model_paths;
mod sandbox_paths;
mod schemas;

use schemas::Schemas;

/// `GET /openapi.json`: the document, rendered once.
pub async fn serve() -> impl IntoResponse {
    static RENDERED: OnceLock<String> = OnceLock::new();
    let body = RENDERED.get_or_init(|| document().to_string());
    ([(header::CONTENT_TYPE, "application/json")], body.as_str())
}

/// What an operation takes.
// Built a few dozen times, once per process: size does not matter here.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Body {
    None,
    Json(RefOr<Schema>),
    /// A multipart upload; its parts described by the schema.
    Multipart(RefOr<Schema>),
    /// Either a multipart upload or a JSON body (container files).
    MultipartOrJson(RefOr<Schema>, RefOr<Schema>),
    /// Raw bytes of the given media type (a process's stdin; files by path, streamed).
    Bytes(&'static str),
}

/// What an operation answers with 200.
#[derive(Clone)]
enum Answer {
    Json(RefOr<Schema>),
    /// JSON, or server-sent events when the request asks to stream.
    JsonOrEvents(RefOr<Schema>),
    /// Bytes of the given media type.
    Bytes(&'static str),
    /// Plain text (Prometheus' exposition format).
    Text,
    /// Nothing: 204.
    NoContent,
    /// JSON with these success statuses (E2B's create answers 201, its
    /// connect 200 or 201).
    JsonWith(&'static [&'static str], RefOr<Schema>),
    /// A WebSocket: 101 Switching Protocols, then its frames (described).
    WebSocket(&'static str),
}

/// How an operation's errors are written.
#[derive(Clone, Copy)]
enum Errors {
    /// OpenAI's `{"error": {"message", "type", "param", "code"}}`.
    OpenAi,
    /// Anthropic's `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
    /// Only a failure of the server itself (no authentication).
    ServerOnly,
    /// E2B's `{"code": <status>, "message"}` (its control plane).
    E2b,
    /// Google's `{"error": {"code", "message", "status"}}` (the Gemini API).
    Google,
}

/// Which query parameters an operation takes: none, a list's (`limit`,
/// `order`, `after`, and a filter), or a stored response's stream's.
#[derive(Clone, Copy)]
enum Query {
    None,
    List,
    ListByName,
    ListByPurpose,
    ResumeStream,
    /// A process's output: `after`, `wait_ms`, `max_bytes`, `stream`.
    ProcessOutput,
    /// A process's stdin: `eof`.
    ProcessStdin,
    /// A process's WebSocket: `after`, `access_token`.
    ProcessSocket,
    /// Named parameters of their own: (name, description, required).
    Named(&'static [(&'static str, &'static str, bool)]),
}

/// One row of the table.
struct Operation {
    method: HttpMethod,
    path: &'static str,
    tag: &'static str,
    summary: &'static str,
    body: Body,
    answer: Answer,
    query: Query,
    errors: Errors,
}

/// The document builder: the paths so far and every schema they refer to.
#[derive(Default)]
struct Builder {
    paths: Paths,
    schemas: BTreeMap<String, RefOr<Schema>>,
    /// Names two different schemas were registered under (two wire types
    /// of the same name in different modules): the test refuses any.
    collisions: Vec<String>,
    /// Per dialect prefix, the schema names registered under it.
    scoped: BTreeMap<String, BTreeSet<String>>,
    /// The dialects' schemas, references rewritten, as JSON (utoipa's
    /// schema types do not read back every schema they write).
    scoped_schemas: BTreeMap<String, serde_json::Value>,
}

impl Builder {
    /// A reference to `T`'s schema, registered under its own name with the
    /// schemas it refers to.
    fn schema<T: ToSchema>(&mut self) -> RefOr<Schema> {
        self.named::<T>(&T::name())
    }

    /// A reference to `T`'s schema registered as `name` (a generic such as
    /// `List<Container>` gets a name of its own: `ContainerList`).
    fn named<T: ToSchema>(&mut self, name: &str) -> RefOr<Schema> {
        let mut referred = Vec::new();
        T::schemas(&mut referred);
        referred.push((name.to_owned(), T::schema()));
        for (name, schema) in referred {
            self.insert(name, schema);
        }
        RefOr::Ref(Ref::from_schema_name(name))
    }

    fn insert(&mut self, name: String, schema: RefOr<Schema>) {
        if let Some(before) = self.schemas.insert(name.clone(), schema) {
            if Some(&before) != self.schemas.get(&name) {
                self.collisions.push(name);
            }
        }
    }

    /// A reference to `T`'s schema registered as `prefix.name`, with the
    /// schemas it refers to as `prefix.<their name>`: each dialect (the
    /// Responses API, the Messages API) has its own `Tool`, `Message` or
    /// `Usage`, and the document keeps them apart the way the Rust modules
    /// do.
    fn scoped<T: ToSchema>(&mut self, prefix: &str, name: &str) -> RefOr<Schema> {
        let mut collected = Vec::new();
        T::schemas(&mut collected);
        collected.push((name.to_owned(), T::schema()));
        let names = self.scoped.entry(prefix.to_owned()).or_default();
        names.extend(collected.iter().map(|(name, _)| name.clone()));
        let names = names.clone();
        for (name, schema) in collected {
            let scoped_name = format!("{prefix}.{name}");
            // A schema is plain data, always written as JSON; were one not,
            // its name is reported with the collisions (the test fails).
            let Ok(mut schema) = serde_json::to_value(&schema) else {
                self.collisions.push(scoped_name);
                continue;
            };
            prefix_references(&mut schema, prefix, &names);
            if let Some(before) = self.scoped_schemas.insert(scoped_name.clone(), schema) {
                if Some(&before) != self.scoped_schemas.get(&scoped_name) {
                    self.collisions.push(scoped_name);
                }
            }
        }
        RefOr::Ref(Ref::from_schema_name(format!("{prefix}.{name}")))
    }

    /// A reference to a page of `T`s, registered as `name`, and `T`'s own
    /// schema (a generic's `schemas` leaves its parameter out).
    fn list<T: ToSchema>(&mut self, name: &str) -> RefOr<Schema> {
        self.schema::<T>();
        self.named::<wire::List<T>>(name)
    }

    fn add(&mut self, operation: Operation) {
        let place = (operation.errors, operation.path, operation.method.clone());
        let mut built = OperationBuilder::new()
            .tag(operation.tag)
            .summary(Some(operation.summary))
            .operation_id(Some(operation_id(operation.method.clone(), operation.path)));
        for name in path_parameters(operation.path) {
            built = built.parameter(
                ParameterBuilder::new()
                    .name(name)
                    .parameter_in(ParameterIn::Path)
                    .required(Required::True)
                    .schema(Some(string())),
            );
        }
        for parameter in query_parameters(operation.query) {
            built = built.parameter(parameter);
        }
        built = built.request_body(request_body(operation.body));
        built = answered(built, operation.answer);
        self.finish(built, place)
    }

    /// The errors of an operation, and the operation into the document.
    fn finish(
        &mut self,
        mut built: OperationBuilder,
        (errors, path, method): (Errors, &'static str, HttpMethod),
    ) {
        match errors {
            Errors::OpenAi => {
                for status in ["400", "401", "404", "413", "429", "500"] {
                    built = built.response(status, Ref::from_response_name("Error"));
                }
            }
            Errors::Anthropic => {
                for status in ["400", "401", "404", "429", "500"] {
                    built = built.response(status, Ref::from_response_name("AnthropicError"));
                }
            }
            Errors::E2b => {
                for status in ["400", "401", "404", "409", "429", "500", "501"] {
                    built = built.response(status, Ref::from_response_name("E2bError"));
                }
            }
            Errors::Google => {
                for status in ["400", "401", "404", "429", "500"] {
                    built = built.response(status, Ref::from_response_name("GoogleError"));
                }
            }
            Errors::ServerOnly => {
                built = built.response("500", Ref::from_response_name("Error"));
                // Open to anyone: no key asked.
                built = built.security(SecurityRequirement::default());
            }
        }
        self.paths
            .add_path_operation(path, vec![method], built.build());
    }
}

/// Points `schema`'s references to `names` at `prefix.<name>`.
fn prefix_references(schema: &mut serde_json::Value, prefix: &str, names: &BTreeSet<String>) {
    match schema {
        serde_json::Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                match inner {
                    serde_json::Value::String(target) if key == "$ref" => {
                        if let Some(name) = target.strip_prefix("#/components/schemas/") {
                            if names.contains(name) {
                                *target = format!("#/components/schemas/{prefix}.{name}");
                            }
                        }
                    }
                    _ => prefix_references(inner, prefix, names),
                }
            }
        }
        serde_json::Value::Array(items) => items
            .iter_mut()
            .for_each(|item| prefix_references(item, prefix, names)),
        _ => {}
    }
}

/// `createContainer`-like ids: the method and the path's words.
fn operation_id(method: HttpMethod, path: &str) -> String {
    let method = match method {
        HttpMethod::Get => "get",
        HttpMethod::Post => "post",
        HttpMethod::Put => "put",
        HttpMethod::Delete => "delete",
        HttpMethod::Options => "options",
        HttpMethod::Head => "head",
        HttpMethod::Patch => "patch",
        HttpMethod::Trace => "trace",
    };
    let words: String = path
        .split(['/', '{', '}', '_', '.'])
        .filter(|word| !word.is_empty())
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect();
    // `/ports/{port}/` beside `/ports/{port}`: ids stay unique.
    let slash = if path.ends_with('/') { "Slash" } else { "" };
    format!("{method}{words}{slash}")
}

/// The `{name}` segments of a path.
fn path_parameters(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
}

/// What an operation takes, as its request body.
fn request_body(body: Body) -> Option<utoipa::openapi::request_body::RequestBody> {
    match body {
        Body::None => None,
        Body::Json(schema) => Some(required_body("application/json", schema)),
        Body::Multipart(schema) => Some(required_body("multipart/form-data", schema)),
        Body::MultipartOrJson(multipart, json) => Some(
            RequestBodyBuilder::new()
                .required(Some(Required::True))
                .content(
                    "multipart/form-data",
                    ContentBuilder::new().schema(Some(multipart)).build(),
                )
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(json)).build(),
                )
                .build(),
        ),
        Body::Bytes(media_type) => Some(
            RequestBodyBuilder::new()
                .content(
                    media_type,
                    ContentBuilder::new().schema(Some(binary())).build(),
                )
                .build(),
        ),
    }
}

/// A required body of one media type, its schema `schema`.
fn required_body(
    media_type: &str,
    schema: RefOr<Schema>,
) -> utoipa::openapi::request_body::RequestBody {
    RequestBodyBuilder::new()
        .required(Some(Required::True))
        .content(
            media_type,
            ContentBuilder::new().schema(Some(schema)).build(),
        )
        .build()
}

/// `built` with the answers of `answer`: 200 with its content, or the
/// statuses an answer of its kind has (204, 101, E2B's 201).
fn answered(mut built: OperationBuilder, answer: Answer) -> OperationBuilder {
    let ok = match answer {
        Answer::Json(schema) => ResponseBuilder::new().description("OK").content(
            "application/json",
            ContentBuilder::new().schema(Some(schema)).build(),
        ),
        Answer::JsonOrEvents(schema) => ResponseBuilder::new()
            .description("OK: the object, or its server-sent events with `stream: true`")
            .content(
                "application/json",
                ContentBuilder::new().schema(Some(schema)).build(),
            )
            .content(
                "text/event-stream",
                ContentBuilder::new().schema(Some(string())).build(),
            ),
        Answer::Bytes(media_type) => ResponseBuilder::new().description("OK").content(
            media_type,
            ContentBuilder::new().schema(Some(binary())).build(),
        ),
        Answer::Text => ResponseBuilder::new().description("OK").content(
            "text/plain",
            ContentBuilder::new().schema(Some(string())).build(),
        ),
        Answer::NoContent => {
            return built.response("204", ResponseBuilder::new().description("Done").build())
        }
        Answer::JsonWith(statuses, schema) => {
            for status in statuses {
                built = built.response(
                    *status,
                    ResponseBuilder::new()
                        .description(if *status == "201" { "Created" } else { "OK" })
                        .content(
                            "application/json",
                            ContentBuilder::new().schema(Some(schema.clone())).build(),
                        )
                        .build(),
                );
            }
            return built;
        }
        Answer::WebSocket(frames) => {
            return built.response("101", ResponseBuilder::new().description(frames).build())
        }
    };
    built.response("200", ok.build())
}

/// An operation's query parameters, by the kind its row names.
fn query_parameters(query: Query) -> Vec<utoipa::openapi::path::Parameter> {
    match query {
        Query::None => Vec::new(),
        Query::List => page_parameters(),
        Query::ListByName => {
            let mut parameters = page_parameters();
            parameters.push(optional_query(
                "name",
                "Only the containers of this name.",
                string(),
            ));
            parameters
        }
        Query::ListByPurpose => {
            let mut parameters = page_parameters();
            parameters.push(optional_query(
                "purpose",
                "Only the files of this purpose.",
                string(),
            ));
            parameters
        }
        Query::ResumeStream => resume_stream_parameters(),
        Query::ProcessOutput => process_output_parameters(),
        Query::ProcessStdin => vec![optional_query(
            "eof",
            "`true`: close stdin after these bytes (a terminal gets ^D).",
            ObjectBuilder::new().schema_type(Type::Boolean).into(),
        )],
        Query::ProcessSocket => process_socket_parameters(),
        Query::Named(named) => named_parameters(named),
    }
}

/// An optional query parameter.
fn optional_query(
    name: &str,
    description: &str,
    schema: Schema,
) -> utoipa::openapi::path::Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

/// A page's: `limit`, `order`, `after`.
fn page_parameters() -> Vec<utoipa::openapi::path::Parameter> {
    vec![
        optional_query(
            "limit",
            "How many to answer, 1 to 100 (20 when omitted).",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(100))
                .default(Some(20.into()))
                .into(),
        ),
        optional_query(
            "order",
            "By creation time: `asc` or `desc` (when omitted).",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["asc", "desc"]))
                .default(Some("desc".into()))
                .into(),
        ),
        optional_query(
            "after",
            "The id of the last object of the previous page.",
            string(),
        ),
    ]
}

/// A stored response's stream, read again: `stream`, `starting_after`.
fn resume_stream_parameters() -> Vec<utoipa::openapi::path::Parameter> {
    vec![
        optional_query(
            "stream",
            "`true`: the response's events, as server-sent events.",
            ObjectBuilder::new().schema_type(Type::Boolean).into(),
        ),
        optional_query(
            "starting_after",
            "With `stream=true`: only the events after this sequence number.",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(0))
                .into(),
        ),
    ]
}

/// A process's output: `after`, `wait_ms`, `max_bytes`, `stream`.
fn process_output_parameters() -> Vec<utoipa::openapi::path::Parameter> {
    let integer = |min: i64, max: Option<i64>| -> Schema {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(min))
            .maximum(max)
            .into()
    };
    vec![
        optional_query(
            "after",
            "Byte offset in the process's output (every stream together) to read from (0 when omitted).",
            integer(0, None),
        ),
        optional_query(
            "wait_ms",
            "Wait up to this long (at most 30000) for output past `after`, or the end.",
            integer(0, Some(30_000)),
        ),
        optional_query(
            "max_bytes",
            "Most bytes of output to answer (1 to 1048576, the whole buffer when omitted).",
            integer(1, Some(1 << 20)),
        ),
        optional_query(
            "stream",
            "`true`: server-sent events `output`, `dropped`, then `exit` (the process).",
            ObjectBuilder::new().schema_type(Type::Boolean).into(),
        ),
    ]
}

/// A process's WebSocket: `after`, `access_token`.
fn process_socket_parameters() -> Vec<utoipa::openapi::path::Parameter> {
    vec![
        optional_query(
            "after",
            "Byte offset to send output from (0 when omitted: the kept buffer first).",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(0))
                .into(),
        ),
        optional_query(
            "access_token",
            "The API key, for browsers (which cannot set headers on a WebSocket).",
            string(),
        ),
    ]
}

/// Parameters of an operation's own: (name, description, required).
fn named_parameters(named: &[(&str, &str, bool)]) -> Vec<utoipa::openapi::path::Parameter> {
    named
        .iter()
        .map(|(name, description, required)| {
            ParameterBuilder::new()
                .name(*name)
                .parameter_in(ParameterIn::Query)
                .required(if *required {
                    Required::True
                } else {
                    Required::False
                })
                .description(Some(*description))
                .schema(Some(string()))
                .build()
        })
        .collect()
}

fn string() -> Schema {
    ObjectBuilder::new().schema_type(Type::String).into()
}

fn binary() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::Custom("binary".to_owned())))
        .into()
}

/// A JSON object with any keys (a body not yet typed in `wire`).
fn any_object(description: &str) -> RefOr<Schema> {
    RefOr::T(
        ObjectBuilder::new()
            .schema_type(SchemaType::from(Type::Object))
            .description(Some(description))
            .into(),
    )
}

/// A multipart body of one `file` part (and the Files API's `purpose`).
fn file_upload(with_purpose: bool) -> RefOr<Schema> {
    let mut object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("file", binary())
        .required("file");
    if with_purpose {
        object = object
            .property(
                "purpose",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(wire::FILE_PURPOSES.iter().copied())),
            )
            .required("purpose")
            .property(
                "expires_after",
                ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .description(Some(
                        "`expires_after[anchor]` (`created_at`) and `expires_after[seconds]`",
                    )),
            );
    }
    RefOr::T(object.into())
}

/// A skill's multipart upload: one zip, or a directory's files.
fn skill_upload() -> RefOr<Schema> {
    RefOr::T(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "One zip (`files`), or a directory: a `files[]` part per file, named by its path; \
                 one folder with a SKILL.md at its top.",
            ))
            .property(
                "files",
                ArrayBuilder::new().items(RefOr::T(binary())).build(),
            )
            .property(
                "default",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some("A new version only: `true` makes it the default")),
            )
            .into(),
    )
}

/// `POST /v1/images`: a build (`dockerfile`, `context`) or an import
/// (`file`).
fn image_upload() -> RefOr<Schema> {
    let text = |description: &'static str| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(description))
    };
    RefOr::T(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "`name` and either `dockerfile` (a build: FROM, RUN, COPY, ENV, WORKDIR, USER; \
                 `context`, a tar or gzipped tar, for COPY; `network_policy`, JSON, what the \
                 steps may reach, default none) or `file` (an import: an OCI image layout as a \
                 tar, or a `docker save`/`podman save` archive).",
            ))
            .property("name", text("The image's name (the project's own)"))
            .required("name")
            .property("dockerfile", text("The Dockerfile's text"))
            .property("context", binary())
            .property(
                "network_policy",
                text("A container's network_policy, as JSON (default: disabled)"),
            )
            .property("file", binary())
            .into(),
    )
}

/// The whole document.
pub fn document() -> serde_json::Value {
    build().0
}
/// The document, and the schema names that collided while it was built.
///
/// The schemas are registered first, all at once and in one order (a
/// dialect's references are rewritten by the names it has so far); then
/// each area adds its operations.
fn build() -> (serde_json::Value, Vec<String>) {
    let mut d = Builder::default();
    let s = Schemas::register(&mut d);
    sandbox_paths::containers(&mut d, &s);
    sandbox_paths::processes(&mut d, &s);
    sandbox_paths::container_records(&mut d, &s);
    sandbox_paths::container_files(&mut d, &s);
    sandbox_paths::fs_paths(&mut d, &s);
    sandbox_paths::fs_trees(&mut d, &s);
    sandbox_paths::files(&mut d, &s);
    sandbox_paths::skills(&mut d, &s);
    sandbox_paths::volumes(&mut d, &s);
    sandbox_paths::snapshots(&mut d, &s);
    model_paths::responses(&mut d, &s);
    model_paths::chat_and_models(&mut d, &s);
    model_paths::gemini(&mut d, &s);
    model_paths::messages(&mut d, &s);
    usage_and_operations(&mut d, &s);
    sandbox_paths::e2b(&mut d, &s);
    sandbox_paths::ports(&mut d);
    finish(d, &s)
}

/// An operation of the table with OpenAI's errors and no query.
fn operation(
    method: HttpMethod,
    path: &'static str,
    tag: &'static str,
    summary: &'static str,
    body: Body,
    answer: Answer,
) -> Operation {
    Operation {
        method,
        path,
        tag,
        summary,
        body,
        answer,
        query: Query::None,
        errors: Errors::OpenAi,
    }
}

/// A `GET` of one object.
fn get(
    path: &'static str,
    tag: &'static str,
    summary: &'static str,
    answer: &RefOr<Schema>,
) -> Operation {
    operation(
        HttpMethod::Get,
        path,
        tag,
        summary,
        Body::None,
        Answer::Json(answer.clone()),
    )
}

/// A `GET` of a page.
fn list(
    path: &'static str,
    tag: &'static str,
    summary: &'static str,
    answer: &RefOr<Schema>,
    query: Query,
) -> Operation {
    Operation {
        query,
        ..get(path, tag, summary, answer)
    }
}

/// A `DELETE` answering `answer`.
fn delete(
    path: &'static str,
    tag: &'static str,
    summary: &'static str,
    answer: &RefOr<Schema>,
) -> Operation {
    operation(
        HttpMethod::Delete,
        path,
        tag,
        summary,
        Body::None,
        Answer::Json(answer.clone()),
    )
}

/// A `GET` open to anyone (no key).
fn public(path: &'static str, summary: &'static str, answer: Answer) -> Operation {
    Operation {
        errors: Errors::ServerOnly,
        ..operation(
            HttpMethod::Get,
            path,
            "Operations",
            summary,
            Body::None,
            answer,
        )
    }
}

/// Usage, and what operators and probes read (no key for the probes).
fn usage_and_operations(d: &mut Builder, s: &Schemas) {
    let Schemas { usage, .. } = s;
    for operation in [
        get(
            "/v1/usage",
            "Usage",
            "Sandbox seconds and tokens billed to the caller's project (shellgate extension)",
            usage,
        ),
        public(
            "/healthz",
            "Health: the store answers (and how a first start's build of the default image goes)",
            Answer::Json(any_object(
                "`{\"status\": \"ok\"}`, and `default_image` while built",
            )),
        ),
        public(
            "/livez",
            "Liveness: the process serves (the store is not asked: a probe that restarts on it \
             would end a node's containers when only its database is away)",
            Answer::Json(any_object("`{\"status\": \"alive\"}`")),
        ),
        public(
            "/metrics",
            "Prometheus metrics (with `metrics_token` set, only for a scraper that presents it)",
            Answer::Text,
        ),
        public(
            "/openapi.json",
            "This document",
            Answer::Json(any_object("An OpenAPI 3.1 document")),
        ),
    ] {
        d.add(operation);
    }
}

/// The components: every schema, the error envelopes each dialect answers
/// with, and the bearer key.
fn components(schemas: BTreeMap<String, RefOr<Schema>>, s: &Schemas) -> Components {
    let Schemas {
        error,
        anthropic_error,
        google_error,
        e2b_error,
        ..
    } = s;
    let mut components = Components::new();
    components.schemas = schemas;
    components.responses.insert(
        "Error".to_owned(),
        RefOr::T(
            ResponseBuilder::new()
                .description("OpenAI's error envelope; `param` names the field at fault")
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(error.clone())).build(),
                )
                .build(),
        ),
    );
    components.responses.insert(
        "AnthropicError".to_owned(),
        RefOr::T(
            ResponseBuilder::new()
                .description(
                    "Anthropic's error envelope: `{\"type\": \"error\", \"error\": {\"type\", \
                     \"message\"}}`",
                )
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(anthropic_error.clone()))
                        .build(),
                )
                .build(),
        ),
    );
    components.responses.insert(
        "GoogleError".to_owned(),
        RefOr::T(
            ResponseBuilder::new()
                .description(
                    "Google's error envelope (the Gemini API): `{\"error\": {\"code\", \
                     \"message\", \"status\"}}`",
                )
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(google_error.clone()))
                        .build(),
                )
                .build(),
        ),
    );
    components.responses.insert(
        "E2bError".to_owned(),
        RefOr::T(
            ResponseBuilder::new()
                .description("E2B's error body: `{\"code\": <status>, \"message\"}`")
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(e2b_error.clone()))
                        .build(),
                )
                .build(),
        ),
    );
    components.security_schemes.insert(
        "bearer".to_owned(),
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some("An API key of a project (`shellgate keys create`)"))
                .build(),
        ),
    );
    components
}

/// The document around the paths, and the dialects' schemas joined to the
/// rest; with the schema names that collided.
fn finish(d: Builder, s: &Schemas) -> (serde_json::Value, Vec<String>) {
    let mut collisions = d.collisions;
    let scoped_schemas = d.scoped_schemas;
    let document = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("shellgate")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "OpenAI-compatible Containers, Container Files, Files, Skills and Responses \
                     APIs and Anthropic's Messages API, plus direct exec, on isolated Linux \
                     sandboxes.",
                ))
                .build(),
        )
        .servers(Some([
            ServerBuilder::new().url("http://127.0.0.1:8080").build(),
            // Every /v1 path again under /api/v1 (OpenRouter's base URL).
            ServerBuilder::new()
                .url("http://127.0.0.1:8080/api")
                .description(Some(
                    "The same API under OpenRouter's path prefix: every /v1 path is served \
                     under /api/v1 too",
                ))
                .build(),
        ]))
        .security(Some([SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]))
        .paths(d.paths)
        .components(Some(components(d.schemas, s)))
        .build();
    // The dialects' schemas join the rest (every name is checked unique).
    let mut document = serde_json::to_value(&document).unwrap_or_default();
    if let Some(schemas) = document
        .pointer_mut("/components/schemas")
        .and_then(serde_json::Value::as_object_mut)
    {
        for (name, schema) in scoped_schemas {
            if schemas.insert(name.clone(), schema).is_some() {
                collisions.push(name);
            }
        }
    }
    (document, collisions)
}

#[cfg(test)]
mod tests;
