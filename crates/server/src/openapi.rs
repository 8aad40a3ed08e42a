//! The OpenAPI 3.1 document (`GET /openapi.json`), generated from the wire
//! types' `utoipa::ToSchema` derives: a field added to a wire struct appears
//! in the document without anyone editing it.
//!
//! Each operation is one line of [`document`]'s table: method, path, tag,
//! summary, and the types of its body and answer. That every route
//! [`crate::router`] serves is in the table, and nothing else, is checked by
//! this file's test against the router itself (its recorded paths, probed
//! with every method), so a route added without its documentation fails the
//! build's tests.

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

use crate::container_egress::{EgressPage, SupplySecrets};

/// `GET /openapi.json`: the document, rendered once.
pub async fn serve() -> impl IntoResponse {
    static RENDERED: OnceLock<String> = OnceLock::new();
    let body = RENDERED.get_or_init(|| document().to_string());
    ([(header::CONTENT_TYPE, "application/json")], body.as_str())
}

/// What an operation takes.
// Built a few dozen times, once per process: size does not matter here.
#[allow(clippy::large_enum_variant)]
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
        let body = match operation.body {
            Body::None => None,
            Body::Json(schema) => Some(
                RequestBodyBuilder::new()
                    .required(Some(Required::True))
                    .content(
                        "application/json",
                        ContentBuilder::new().schema(Some(schema)).build(),
                    )
                    .build(),
            ),
            Body::Multipart(schema) => Some(
                RequestBodyBuilder::new()
                    .required(Some(Required::True))
                    .content(
                        "multipart/form-data",
                        ContentBuilder::new().schema(Some(schema)).build(),
                    )
                    .build(),
            ),
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
        };
        built = built.request_body(body);
        let ok = match operation.answer {
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
                built = built.response("204", ResponseBuilder::new().description("Done").build());
                return self.finish(built, place);
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
                return self.finish(built, place);
            }
            Answer::WebSocket(frames) => {
                built = built.response("101", ResponseBuilder::new().description(frames).build());
                return self.finish(built, place);
            }
        };
        built = built.response("200", ok.build());
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

fn query_parameters(query: Query) -> Vec<utoipa::openapi::path::Parameter> {
    let parameter = |name: &str, description: &str, schema: Schema| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Query)
            .required(Required::False)
            .description(Some(description))
            .schema(Some(schema))
            .build()
    };
    let mut parameters = match query {
        Query::None => return Vec::new(),
        Query::ProcessOutput => {
            let integer = |min: i64, max: Option<i64>| -> Schema {
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(min))
                    .maximum(max)
                    .into()
            };
            return vec![
                parameter(
                    "after",
                    "Byte offset in the process's output (every stream together) to read from (0 when omitted).",
                    integer(0, None),
                ),
                parameter(
                    "wait_ms",
                    "Wait up to this long (at most 30000) for output past `after`, or the end.",
                    integer(0, Some(30_000)),
                ),
                parameter(
                    "max_bytes",
                    "Most bytes of output to answer (1 to 1048576, the whole buffer when omitted).",
                    integer(1, Some(1 << 20)),
                ),
                parameter(
                    "stream",
                    "`true`: server-sent events `output`, `dropped`, then `exit` (the process).",
                    ObjectBuilder::new().schema_type(Type::Boolean).into(),
                ),
            ];
        }
        Query::ProcessStdin => {
            return vec![parameter(
                "eof",
                "`true`: close stdin after these bytes (a terminal gets ^D).",
                ObjectBuilder::new().schema_type(Type::Boolean).into(),
            )]
        }
        Query::ProcessSocket => {
            return vec![
                parameter(
                    "after",
                    "Byte offset to send output from (0 when omitted: the kept buffer first).",
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0))
                        .into(),
                ),
                parameter(
                    "access_token",
                    "The API key, for browsers (which cannot set headers on a WebSocket).",
                    string(),
                ),
            ];
        }
        Query::Named(named) => {
            return named
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
        Query::ResumeStream => {
            return vec![
                parameter(
                    "stream",
                    "`true`: the response's events, as server-sent events.",
                    ObjectBuilder::new().schema_type(Type::Boolean).into(),
                ),
                parameter(
                    "starting_after",
                    "With `stream=true`: only the events after this sequence number.",
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0))
                        .into(),
                ),
            ]
        }
        _ => vec![
            parameter(
                "limit",
                "How many to answer, 1 to 100 (20 when omitted).",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .maximum(Some(100))
                    .default(Some(20.into()))
                    .into(),
            ),
            parameter(
                "order",
                "By creation time: `asc` or `desc` (when omitted).",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["asc", "desc"]))
                    .default(Some("desc".into()))
                    .into(),
            ),
            parameter(
                "after",
                "The id of the last object of the previous page.",
                string(),
            ),
        ],
    };
    match query {
        Query::ListByName => parameters.push(parameter(
            "name",
            "Only the containers of this name.",
            string(),
        )),
        Query::ListByPurpose => parameters.push(parameter(
            "purpose",
            "Only the files of this purpose.",
            string(),
        )),
        Query::None
        | Query::List
        | Query::ResumeStream
        | Query::ProcessOutput
        | Query::ProcessStdin
        | Query::ProcessSocket
        | Query::Named(_) => {}
    }
    parameters
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

/// The whole document.
pub fn document() -> serde_json::Value {
    build().0
}

/// The document, and the schema names that collided while it was built.
fn build() -> (serde_json::Value, Vec<String>) {
    use HttpMethod::{Delete, Get, Options, Patch, Post, Put, Trace};
    let mut d = Builder::default();
    let container = d.schema::<wire::Container>();
    let container_list = d.list::<wire::Container>("ContainerList");
    let create_container = d.schema::<wire::CreateContainer>();
    let deleted = d.schema::<wire::Deleted>();
    let exec = d.schema::<wire::ExecRequest>();
    let process = d.schema::<wire::Process>();
    let processes = d.list::<wire::Process>("ProcessList");
    let process_create = d.schema::<wire::ProcessCreate>();
    let process_output = d.schema::<wire::ProcessOutput>();
    let process_signal = d.schema::<wire::ProcessSignal>();
    let process_resize = d.schema::<wire::ProcessResize>();
    d.schema::<wire::ProcessDropped>();
    d.schema::<wire::ProcessClientMessage>();
    d.schema::<wire::ProcessServerMessage>();
    let shell_call_output = d.schema::<wire::ShellCallOutput>();
    let commands = d.list::<wire::ContainerCommand>("ContainerCommandList");
    let egress = d.schema::<EgressPage>();
    let supply = d.schema::<SupplySecrets>();
    let images = d.schema::<wire::ImageList>();
    let container_file = d.schema::<wire::ContainerFile>();
    let container_files = d.list::<wire::ContainerFile>("ContainerFileList");
    let from_file_id = d.schema::<wire::CreateContainerFileFromId>();
    let fs_entry = d.schema::<wire::fs::FsEntry>();
    let fs_list = d.schema::<wire::fs::FsEntryList>();
    let fs_mkdir = d.schema::<wire::fs::FsMkdir>();
    let fs_move = d.schema::<wire::fs::FsMove>();
    let fs_deleted = d.schema::<wire::fs::FsDeleted>();
    let fs_archive = d.schema::<wire::fs::FsArchive>();
    let file = d.schema::<wire::FileObject>();
    let files = d.list::<wire::FileObject>("FileList");
    let usage = d.schema::<wire::Usage>();
    let skill = d.schema::<wire::Skill>();
    let skills = d.list::<wire::Skill>("SkillList");
    let update_skill = d.schema::<wire::UpdateSkill>();
    let version = d.schema::<wire::SkillVersion>();
    let versions = d.list::<wire::SkillVersion>("SkillVersionList");
    let version_deleted = d.schema::<wire::SkillVersionDeleted>();
    let error = d.schema::<wire::ErrorEnvelope>();
    use wire::chat::served;
    let chat_request = d.scoped::<served::ChatCompletionRequest>("chat", "ChatCompletionRequest");
    let chat_completion = d.scoped::<served::Completion>("chat", "Completion");
    d.scoped::<served::CompletionChunk>("chat", "CompletionChunk");
    let model = d.schema::<wire::models::Model>();
    let models = d.schema::<wire::models::ModelList>();
    use wire::{messages, responses};
    let response = d.scoped::<responses::Response>("responses", "Response");
    // `input`'s schema is referred to but not collected by the derive.
    d.scoped::<responses::Input>("responses", "Input");
    let create_response = d.scoped::<responses::CreateResponse>("responses", "CreateResponse");
    let response_deleted = d.scoped::<responses::ResponseDeleted>("responses", "ResponseDeleted");
    d.scoped::<responses::Item>("responses", "Item");
    let input_items = d.scoped::<wire::List<responses::Item>>("responses", "ItemList");
    let create_message = d.scoped::<messages::CreateMessage>("messages", "CreateMessage");
    let message = d.scoped::<messages::Message>("messages", "Message");
    let anthropic_error = d.scoped::<messages::ErrorResponse>("messages", "ErrorResponse");
    let count_tokens = d.scoped::<messages::CountTokens>("messages", "CountTokens");
    let token_count = d.scoped::<messages::TokenCount>("messages", "TokenCount");
    use wire::gemini;
    let generate_content =
        d.scoped::<gemini::GenerateContentRequest>("gemini", "GenerateContentRequest");
    let generated =
        d.scoped::<gemini::GenerateContentResponse>("gemini", "GenerateContentResponse");
    d.scoped::<gemini::CountTokensRequest>("gemini", "CountTokensRequest");
    d.scoped::<gemini::CountTokensResponse>("gemini", "CountTokensResponse");
    let gemini_model = d.scoped::<gemini::Model>("gemini", "Model");
    let gemini_models = d.scoped::<gemini::ListModelsResponse>("gemini", "ListModelsResponse");
    let google_error = d.scoped::<gemini::ErrorResponse>("gemini", "ErrorResponse");
    use wire::e2b;
    let e2b_create = d.scoped::<e2b::NewSandbox>("e2b", "NewSandbox");
    let e2b_sandbox = d.scoped::<e2b::Sandbox>("e2b", "Sandbox");
    let e2b_detail = d.scoped::<e2b::SandboxDetail>("e2b", "SandboxDetail");
    let e2b_listed = d.scoped::<Vec<e2b::ListedSandbox>>("e2b", "ListedSandboxList");
    d.scoped::<e2b::ListedSandbox>("e2b", "ListedSandbox");
    let e2b_timeout = d.scoped::<e2b::TimeoutRequest>("e2b", "TimeoutRequest");
    let e2b_connect = d.scoped::<e2b::ConnectRequest>("e2b", "ConnectRequest");
    let e2b_pause = d.scoped::<e2b::PauseRequest>("e2b", "PauseRequest");
    let e2b_error = d.scoped::<e2b::E2bErrorBody>("e2b", "Error");

    let operation = |method, path, tag, summary, body, answer| Operation {
        method,
        path,
        tag,
        summary,
        body,
        answer,
        query: Query::None,
        errors: Errors::OpenAi,
    };
    let get = |path, tag, summary, answer: &RefOr<Schema>| {
        operation(
            Get,
            path,
            tag,
            summary,
            Body::None,
            Answer::Json(answer.clone()),
        )
    };
    let list = |path, tag, summary, answer: &RefOr<Schema>, query| Operation {
        query,
        ..get(path, tag, summary, answer)
    };
    let delete = |path, tag, summary, answer: &RefOr<Schema>| {
        operation(
            Delete,
            path,
            tag,
            summary,
            Body::None,
            Answer::Json(answer.clone()),
        )
    };
    let public = |path, summary, answer| Operation {
        errors: Errors::ServerOnly,
        ..operation(Get, path, "Operations", summary, Body::None, answer)
    };
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
    let table = [
        // Containers.
        operation(
            Post,
            "/v1/containers",
            "Containers",
            "Create a container",
            Body::Json(create_container),
            Answer::Json(container.clone()),
        ),
        list(
            "/v1/containers",
            "Containers",
            "List containers",
            &container_list,
            Query::ListByName,
        ),
        get(
            "/v1/containers/{container_id}",
            "Containers",
            "Retrieve a container",
            &container,
        ),
        delete(
            "/v1/containers/{container_id}",
            "Containers",
            "Delete a container",
            &deleted,
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/exec",
            "Exec",
            "Run commands (shellgate extension); with `stream: true`, server-sent events \
             `exec.output.delta` and `exec.completed`",
            Body::Json(exec),
            Answer::JsonOrEvents(shell_call_output),
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/processes",
            "Processes",
            "Start a process, with optional stdin and a terminal (shellgate extension); 201",
            Body::Json(process_create),
            Answer::Json(process.clone()),
        ),
        get(
            "/v1/containers/{container_id}/processes",
            "Processes",
            "The container's live processes and the ended ones still kept (10 minutes, at most 64)",
            &processes,
        ),
        get(
            "/v1/containers/{container_id}/processes/{process_id}",
            "Processes",
            "Retrieve a process",
            &process,
        ),
        delete(
            "/v1/containers/{container_id}/processes/{process_id}",
            "Processes",
            "Kill a process and every descendant; answers the ended process",
            &process,
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
                Answer::JsonOrEvents(process_output),
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
            Body::Json(process_signal),
            Answer::NoContent,
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/processes/{process_id}/resize",
            "Processes",
            "Resize a process's terminal",
            Body::Json(process_resize),
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
        list(
            "/v1/containers/{container_id}/commands",
            "Containers",
            "The container's command audit: every command run, its outcome, duration and \
             output size (shellgate extension)",
            &commands,
            Query::List,
        ),
        list(
            "/v1/containers/{container_id}/egress",
            "Containers",
            "The container's egress log: every connection and refusal, and DNS lookups (past a \
             budget, and connections over the limit, counted in aggregated rows) (shellgate \
             extension)",
            &egress,
            Query::List,
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/secrets",
            "Containers",
            "Supply a container's secrets again after a restart of the server (shellgate \
             extension)",
            Body::Json(supply),
            Answer::Json(container.clone()),
        ),
        get(
            "/v1/images",
            "Containers",
            "The images containers can be made from (shellgate extension)",
            &images,
        ),
        // Container files.
        operation(
            Post,
            "/v1/containers/{container_id}/files",
            "Container Files",
            "Add a file to /mnt/data: an upload, or a Files API file by id",
            Body::MultipartOrJson(file_upload(false), from_file_id),
            Answer::Json(container_file.clone()),
        ),
        list(
            "/v1/containers/{container_id}/files",
            "Container Files",
            "List files in /mnt/data (uploaded and made by commands)",
            &container_files,
            Query::List,
        ),
        get(
            "/v1/containers/{container_id}/files/{file_id}",
            "Container Files",
            "Retrieve a container file",
            &container_file,
        ),
        delete(
            "/v1/containers/{container_id}/files/{file_id}",
            "Container Files",
            "Delete a container file",
            &deleted,
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
        // Files by path (shellgate extension).
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
                &fs_entry,
            )
        },
        Operation {
            query: Query::Named(FS_LIST),
            ..get(
                "/v1/containers/{container_id}/fs/list",
                "Container Files",
                "A directory's entries, depth first",
                &fs_list,
            )
        },
        operation(
            Post,
            "/v1/containers/{container_id}/fs/mkdir",
            "Container Files",
            "Make a directory",
            Body::Json(fs_mkdir),
            Answer::Json(fs_entry.clone()),
        ),
        operation(
            Post,
            "/v1/containers/{container_id}/fs/move",
            "Container Files",
            "Move (rename) a file or directory",
            Body::Json(fs_move),
            Answer::Json(fs_entry.clone()),
        ),
        Operation {
            query: Query::Named(FS_REMOVE),
            ..delete(
                "/v1/containers/{container_id}/fs",
                "Container Files",
                "Remove a file, link or directory (a tree with recursive=true)",
                &fs_deleted,
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
                Answer::Json(fs_archive),
            )
        },
        // Files.
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
            &files,
            Query::ListByPurpose,
        ),
        get("/v1/files/{file_id}", "Files", "Retrieve a file", &file),
        delete("/v1/files/{file_id}", "Files", "Delete a file", &deleted),
        operation(
            Get,
            "/v1/files/{file_id}/content",
            "Files",
            "Download a file",
            Body::None,
            Answer::Bytes("application/octet-stream"),
        ),
        // Skills.
        operation(
            Post,
            "/v1/skills",
            "Skills",
            "Create a skill from a zip or a directory upload",
            Body::Multipart(skill_upload()),
            Answer::Json(skill.clone()),
        ),
        list("/v1/skills", "Skills", "List skills", &skills, Query::List),
        get(
            "/v1/skills/{skill_id}",
            "Skills",
            "Retrieve a skill",
            &skill,
        ),
        operation(
            Post,
            "/v1/skills/{skill_id}",
            "Skills",
            "Set the default version",
            Body::Json(update_skill),
            Answer::Json(skill.clone()),
        ),
        delete(
            "/v1/skills/{skill_id}",
            "Skills",
            "Delete a skill and its versions",
            &deleted,
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
            &versions,
            Query::List,
        ),
        get(
            "/v1/skills/{skill_id}/versions/{version}",
            "Skills",
            "Retrieve a version (a number, or `latest`)",
            &version,
        ),
        delete(
            "/v1/skills/{skill_id}/versions/{version}",
            "Skills",
            "Delete a version (not the default)",
            &version_deleted,
        ),
        operation(
            Get,
            "/v1/skills/{skill_id}/versions/{version}/content",
            "Skills",
            "A version as a zip",
            Body::None,
            Answer::Bytes("application/zip"),
        ),
        // Responses.
        operation(
            Post,
            "/v1/responses",
            "Responses",
            "Create a response (OpenAI's Responses API over any upstream model, the hosted \
             `shell` tool run in shellgate's containers)",
            Body::Json(create_response),
            Answer::JsonOrEvents(response.clone()),
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
            &response_deleted,
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
            "List a response's input items",
            &input_items,
            Query::List,
        ),
        // Chat Completions and models.
        operation(
            Post,
            "/v1/chat/completions",
            "Chat",
            "Create a chat completion (passed through to the model's upstream: verbatim to a \
             Chat Completions upstream, translated for others; the shell tools are refused \
             here, they run on /v1/responses and /v1/messages)",
            Body::Json(chat_request),
            Answer::JsonOrEvents(chat_completion),
        ),
        get(
            "/v1/models",
            "Models",
            "List the models the configured upstreams serve, per route",
            &models,
        ),
        get("/v1/models/{model}", "Models", "Retrieve a model", &model),
        // Gemini's API.
        gemini_call("/v1/models/{model}"),
        gemini_call("/v1beta/models/{model}"),
        Operation {
            errors: Errors::Google,
            ..get(
                "/v1beta/models",
                "Gemini",
                "List the models the configured upstreams serve (Gemini's shape)",
                &gemini_models,
            )
        },
        Operation {
            errors: Errors::Google,
            ..get(
                "/v1beta/models/{model}",
                "Gemini",
                "Retrieve a model (Gemini's shape)",
                &gemini_model,
            )
        },
        // Messages.
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
        // Usage and operations.
        get(
            "/v1/usage",
            "Usage",
            "Sandbox seconds and tokens billed to the caller's project (shellgate extension)",
            &usage,
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
    ];
    for operation in table {
        d.add(operation);
    }
    // E2B's control plane, at the root as E2B serves it.
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
    const LIST_QUERY: &[(&str, &str, bool)] = &[
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
    let e2b_list = |path, summary| Operation {
        query: Query::Named(LIST_QUERY),
        ..e2b_op(
            Get,
            path,
            summary,
            Body::None,
            Answer::Json(e2b_listed.clone()),
        )
    };
    let unsupported =
        |method, path, summary| e2b_op(method, path, summary, Body::None, Answer::NoContent);
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
            Body::Json(e2b_create),
            Answer::JsonWith(&["201"], e2b_sandbox.clone()),
        ),
        e2b_list("/v2/sandboxes", "List the project's sandboxes (the next page's token in `x-next-token`)"),
        e2b_list("/sandboxes", "List the project's sandboxes (older SDKs)"),
        e2b_op(Get, "/sandboxes/{sandbox_id}", "A sandbox's state, times and resources", Body::None, Answer::Json(e2b_detail)),
        e2b_op(Delete, "/sandboxes/{sandbox_id}", "Kill a sandbox (its container is deleted)", Body::None, Answer::NoContent),
        e2b_op(
            Post,
            "/sandboxes/{sandbox_id}/timeout",
            "Set the sandbox's timeout, in seconds from now",
            Body::Json(e2b_timeout),
            Answer::NoContent,
        ),
        e2b_op(
            Post,
            "/sandboxes/{sandbox_id}/pause",
            "Pause: processes end, files stay (409 when paused already)",
            Body::Json(e2b_pause),
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
            Body::Json(e2b_connect),
            Answer::JsonWith(&["201"], e2b_sandbox),
        ),
        unsupported(Get, "/sandboxes/{sandbox_id}/metrics", "Not supported: 501"),
        unsupported(Get, "/sandboxes/metrics", "Not supported: 501"),
        unsupported(Get, "/sandboxes/{sandbox_id}/logs", "Not supported: 501"),
        unsupported(Get, "/v2/sandboxes/{sandbox_id}/logs", "Not supported: 501"),
        unsupported(Post, "/sandboxes/{sandbox_id}/fork", "Not supported: 501"),
        unsupported(Post, "/sandboxes/{sandbox_id}/snapshots", "Not supported: 501"),
        unsupported(Post, "/sandboxes/{sandbox_id}/refreshes", "Not supported: 501"),
        unsupported(Put, "/sandboxes/{sandbox_id}/network", "Not supported: 501"),
    ] {
        d.add(operation);
    }
    // A container's exposed ports: every method, proxied as it comes.
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

    let mut collisions = d.collisions;
    let scoped_schemas = d.scoped_schemas;
    let mut components = Components::new();
    components.schemas = d.schemas;
    components.responses.insert(
        "Error".to_owned(),
        RefOr::T(
            ResponseBuilder::new()
                .description("OpenAI's error envelope; `param` names the field at fault")
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(error)).build(),
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
                    ContentBuilder::new().schema(Some(anthropic_error)).build(),
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
                    ContentBuilder::new().schema(Some(google_error)).build(),
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
                    ContentBuilder::new().schema(Some(e2b_error)).build(),
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
        .components(Some(components))
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
mod tests {
    use std::collections::BTreeSet;

    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use tower::ServiceExt;

    /// Every `(method, path)` the router serves: its recorded paths, each
    /// probed with every method (a method it does not serve is a 405 from
    /// the router itself, before any handler or authentication).
    async fn served() -> BTreeSet<(String, String)> {
        let routes = crate::routes::served_routes(crate::fuzzing::state().unwrap());
        let mut served = BTreeSet::new();
        for path in &routes.paths {
            let concrete: Vec<&str> = path
                .split('/')
                .map(|segment| {
                    if segment.starts_with('{') {
                        "x"
                    } else {
                        segment
                    }
                })
                .collect();
            let mut any = false;
            for method in [
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
                Method::OPTIONS,
                Method::TRACE,
            ] {
                let request = Request::builder()
                    .method(method.clone())
                    .uri(concrete.join("/"))
                    .body(Body::empty())
                    .unwrap();
                let status = routes
                    .router
                    .clone()
                    .oneshot(request)
                    .await
                    .unwrap()
                    .status();
                if status != StatusCode::METHOD_NOT_ALLOWED {
                    // A catch-all `{*rest}` is the document's `{rest}`.
                    let documented = path.replace("{*", "{");
                    served.insert((method.as_str().to_ascii_lowercase(), documented));
                    any = true;
                }
            }
            assert!(any, "{path} is recorded but no method reaches it");
        }
        served
    }

    fn documented(document: &serde_json::Value) -> BTreeSet<(String, String)> {
        let mut documented = BTreeSet::new();
        for (path, item) in document["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                documented.insert((method.clone(), path.clone()));
            }
        }
        documented
    }

    #[tokio::test]
    async fn every_route_served_is_documented_and_nothing_else() {
        let document = serde_json::to_value(super::document()).unwrap();
        let served = served().await;
        // The /api/v1 paths are the /v1 ones again (the document names
        // them once, with a second server): each must be served both ways.
        let (aliases, served): (BTreeSet<_>, BTreeSet<_>) = served
            .into_iter()
            .partition(|(_, path)| path.starts_with(crate::routes::OPENROUTER_PREFIX));
        let unaliased: BTreeSet<_> = aliases
            .iter()
            .map(|(method, path)| {
                let rest = &path[crate::routes::OPENROUTER_PREFIX.len()..];
                (method.clone(), format!("/v1{rest}"))
            })
            .collect();
        let v1: BTreeSet<_> = served
            .iter()
            .filter(|(_, path)| path.starts_with("/v1/"))
            .cloned()
            .collect();
        assert_eq!(unaliased, v1, "the /api/v1 routes are not the /v1 ones");
        assert!(document["servers"][1]["url"]
            .as_str()
            .is_some_and(|url| url.ends_with("/api")));
        let documented = documented(&document);
        let undocumented: Vec<_> = served.difference(&documented).collect();
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(
            undocumented.is_empty() && unserved.is_empty(),
            "served but not documented: {undocumented:?}; documented but not served: {unserved:?}"
        );
    }

    /// Every `$ref` in `value`, with where it is.
    fn references(value: &serde_json::Value, at: String, found: &mut Vec<(String, String)>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, inner) in map {
                    match (key.as_str(), inner) {
                        ("$ref", serde_json::Value::String(target)) => {
                            found.push((target.clone(), at.clone()))
                        }
                        _ => references(inner, format!("{at}/{key}"), found),
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    references(item, format!("{at}/{index}"), found);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves_and_no_two_schemas_share_a_name() {
        let (document, collisions) = super::build();
        assert!(
            collisions.is_empty(),
            "schemas sharing a name: {collisions:?}"
        );
        let document = serde_json::to_value(document).unwrap();
        assert_eq!(document["openapi"], "3.1.0");
        let mut found = Vec::new();
        references(&document, String::new(), &mut found);
        assert!(found.len() > 40, "{found:?}");
        for (target, at) in found {
            let pointer = target.strip_prefix('#').unwrap();
            assert!(
                document.pointer(pointer).is_some(),
                "{target} (at {at}) does not resolve"
            );
        }
    }

    #[tokio::test]
    async fn the_served_document_is_the_generated_one() {
        let request = Request::get("/openapi.json").body(Body::empty()).unwrap();
        let response = crate::fuzzing::router()
            .unwrap()
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let served: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(served, serde_json::to_value(super::document()).unwrap());
        // The wire types' fields are there, from their derives.
        let container = &served["components"]["schemas"]["Container"]["properties"];
        for field in ["id", "network_policy", "memory_limit", "secrets_missing"] {
            assert!(container.get(field).is_some(), "Container.{field} missing");
        }
        // The limits the exec body's descriptions state are the engine's.
        use shellgate_sandbox_api::backend::limits;
        let exec = &served["components"]["schemas"]["ExecRequest"]["properties"];
        let described = |field: &str| exec[field]["description"].as_str().unwrap().to_owned();
        assert!(described("commands").contains(&limits::MAX_COMMANDS.to_string()));
        for limit in [limits::MAX_TIMEOUT_MS, limits::DEFAULT_TIMEOUT_MS] {
            assert!(described("timeout_ms").contains(&limit.to_string()));
        }
        for limit in [limits::MAX_OUTPUT_LENGTH, limits::DEFAULT_MAX_OUTPUT_LENGTH] {
            assert!(described("max_output_length").contains(&limit.to_string()));
        }
    }
}
