//! Server settings: embedded defaults, then a TOML file, then `SHELLGATE_*`
//! environment variables (each setting's upper-case name), then flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
pub use shellgate_model::upstream::Protocol;
use shellgate_objects::{S3Location, S3Settings};
use shellgate_store::KeyRole;

pub mod reference;

/// The fewest characters a configured key (`api_keys`) may have: a key
/// short enough to guess is refused at start. (`shellgate keys create`
/// makes keys of 35.)
pub const MIN_KEY_CHARS: usize = 16;

/// Every setting of `shellgate serve`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Where the database, files and sandboxes live.
    pub data_dir: PathBuf,
    /// The metadata store: empty for SQLite in the data directory (the
    /// embedded default), or `postgres://user:password@host:port/database`:
    /// the store a cluster's API replicas and nodes share.
    pub database_url: Secret,
    /// The Postgres schema the tables live in (created if missing; empty:
    /// the connection's default, `public`).
    pub database_schema: String,
    /// Postgres connections this server keeps open at most.
    pub database_pool_size: usize,
    /// A PEM file of the CA that signed the Postgres server's certificate
    /// (a private CA), trusted beside the host's roots. TLS is used as the
    /// URL's `sslmode` says (`prefer` by default, `require`, `disable`).
    pub database_ca_file: String,
    /// What this server is in a cluster: `all` (a single box:
    /// the API and the engine), `node` (the engine, registered in the
    /// shared store, taking requests only from API replicas) or `api` (a
    /// stateless API replica that places containers on nodes and routes
    /// each request to its container's node).
    pub role: Role,
    /// A node's name in the cluster (default: the host name).
    pub node_id: String,
    /// Where API replicas reach this node (`http://10.0.0.7:8080`;
    /// default: `http://` and the listen address).
    pub node_address: String,
    /// The secret API replicas show nodes (`X-Shellgate-Cluster-Secret`):
    /// at least 32 characters, the same on every replica and node.
    pub cluster_secret: Secret,
    /// How often a node heart-beats.
    pub node_heartbeat_secs: u64,
    /// A node silent this long is lost, with its containers.
    pub node_lost_after_secs: u64,
    /// An API replica waits this long for a node to begin its answer to a
    /// forwarded request before it asks the node whether it is alive at
    /// all (its `/livez`, given as long to answer): a node that answers
    /// that is waited for again (a long exec, a create building an image,
    /// a model's turn), one that does not is given up on (502
    /// `node_unreachable`; a safe request any node can answer is tried on
    /// another). A node declared lost meanwhile ends the wait at once.
    pub node_answer_timeout_secs: u64,
    /// Containers a node holds at most (placement's count of room).
    pub max_containers_per_node: u64,
    /// The first host uid of the sandboxes' id ranges (nodes sharing one
    /// host, as in the tests, each need ranges of their own).
    pub sandbox_uid_base: u32,
    /// Keys to seed, comma separated: `KEY`, `KEY:PROJECT` (project
    /// `default`) or `KEY:PROJECT:admin` (a key that also sees every
    /// project in the console); each at least [`MIN_KEY_CHARS`] characters
    /// long (a shorter one is refused at start).
    pub api_keys: String,
    /// Default `expires_after.minutes` of a container.
    pub default_expires_minutes: u32,
    /// Largest `expires_after.minutes` accepted (default 30 days).
    pub max_expires_minutes: u32,
    /// Idle time after which a container's processes end (its files stay).
    pub idle_suspend_after_secs: u64,
    /// How long a suspended container's files are kept.
    pub retention_days: u64,
    /// How often expiry, suspension and retention are checked.
    pub sweep_interval_secs: u64,
    /// Largest JSON request body.
    pub max_request_bytes: usize,
    /// Largest uploaded file.
    pub max_upload_bytes: usize,
    /// Requests per minute per project (0: unlimited).
    pub rate_limit_per_minute: u32,
    /// Containers started ahead of demand (see the sandbox engine).
    pub warm_containers: usize,
    /// A file transfer by path that moves no byte for this
    /// many seconds is ended (its worker killed): a client that stops
    /// reading cannot keep a container busy for ever.
    pub transfer_stall_secs: u64,
    /// Log format: `auto` (text on a terminal, JSON elsewhere), `json` or
    /// `text`; `serve --log-format` overrides it.
    pub log_format: LogFormat,
    /// Containers holding processes (running or being created) a project
    /// may have at once; suspended ones do not count (429 beyond).
    pub max_running_containers_per_project: u32,
    /// Sum of the `memory_limit`s of a project's running containers (429
    /// beyond). Limits are ceilings, not reservations: the host is protected
    /// by `sandbox_memory_ceiling`, this bounds one tenant's claim.
    pub max_memory_per_project: ByteSize,
    /// Exec requests a project may have running at once (429 beyond); a
    /// cluster's nodes share it. The console's terminals are not counted.
    pub max_execs_per_project: u32,
    /// Streams of one process's output (server-sent events, WebSockets,
    /// E2B's `Start` and `Connect`) open at once (429 beyond).
    pub max_streams_per_process: u32,
    /// Streams of process output a project may have open at once, on all
    /// its processes (429 beyond).
    pub max_streams_per_project: u32,
    /// Terminals a project may have open in the web console at once (429
    /// beyond), apart from `max_execs_per_project`.
    pub max_console_terminals_per_project: u32,
    /// A console terminal nobody is attached to (its tab closed) ends
    /// after this many seconds; attaching again within them keeps it.
    pub console_terminal_grace_secs: u64,
    /// CPU ceiling of each container, in cores (0: none).
    pub container_cpus: f64,
    /// Most time one exec request may take, whatever its commands'
    /// timeouts; commands still pending then get a `timeout` outcome.
    pub request_deadline_secs: u64,
    /// Memory all sandboxes together may use (their parent cgroup's limit):
    /// `auto` (the host's memory less a tenth, at least 1 GiB and at most
    /// 8 GiB kept for the server and the host) or a size such as `16g`. A
    /// container whose `memory_limit` is larger is refused (400).
    pub sandbox_memory_ceiling: MemoryCeiling,
    /// Open connections at most; past it, the oldest connection that has
    /// not yet sent a request is closed to make room.
    pub max_connections: usize,
    /// A connection must send a complete request header within this many
    /// seconds of opening or of its previous response: this bounds both
    /// slow (slow-loris) headers and idle keep-alive connections.
    pub header_read_timeout_secs: u64,
    /// A request body that sends nothing for this long, or less than
    /// 1 KiB/s on average after it, is cut off (408).
    pub body_read_timeout_secs: u64,
    /// If set, `GET /metrics` needs `Authorization: Bearer <token>`.
    pub metrics_token: String,
    /// Show the host's `/usr/local` inside `host`-image containers (off by
    /// default: host-installed tools are not vetted for sandboxes).
    pub expose_host_usr_local: bool,
    /// The default upstream model server's base URL (e.g.
    /// `https://api.openai.com/v1`, `http://localhost:11434/v1`); empty: none.
    pub upstream_url: String,
    /// Its API key (sent as a Bearer token; never logged or echoed).
    pub upstream_api_key: Secret,
    /// Its protocol: `chat` (OpenAI Chat Completions), `responses` or
    /// `anthropic`.
    pub upstream_protocol: Protocol,
    /// Longest wait for an upstream's answer to begin, and between its pieces.
    pub upstream_timeout_secs: u64,
    /// Attempts at a rate-limited (429) upstream request before it fails.
    pub upstream_attempts: u32,
    /// Most `input_file` parts in one Responses API request.
    pub max_input_files: usize,
    /// Most bytes of a request's `input_file` parts together.
    pub max_input_file_bytes: u64,
    /// Longest time for one whole upstream turn (request, retries and every
    /// piece of the answer): a model trickling its answer is cut off here.
    pub upstream_turn_timeout_secs: u64,
    /// Longest time one response (a Responses or Messages run: every turn
    /// and command) may take: past it the run ends `failed`, its commands
    /// killed.
    pub response_timeout_secs: u64,
    /// Most bytes of one upstream answer, and of the model's answers over
    /// every turn of one response together (over it the response fails).
    pub upstream_max_answer_bytes: u64,
    /// Most bytes of one tool call's arguments in an upstream answer.
    pub upstream_max_tool_call_bytes: u64,
    /// A request's tools the picked upstream cannot carry (a hosted tool
    /// such as `web_search` before a non-Responses upstream): `drop` (left
    /// out, reported in the `x-shellgate-uncarried` header, the response's
    /// metadata and the log) or `reject` (a 400 naming the tool).
    pub unsupported_tools: UnsupportedTools,
    /// The built-in prompt-injection rules over user input: `off`, `flag`
    /// (logged), `redact` or `block` (403).
    pub guardrail_input_default: GuardrailDefault,
    /// The same rules over shell output before the model reads it: `off`,
    /// `flag`, `redact` or `block` (the output is withheld).
    pub guardrail_tool_output_default: GuardrailDefault,
    /// More rules (config file only): `[[guardrails]] project = "*" or a
    /// project, target = "input" or "tool_output", pattern = "regex",
    /// action = "flag" | "redact" | "block"`.
    pub guardrails: Vec<GuardrailRule>,
    /// Price of a second of sandbox time (`server_tool_cost`).
    pub sandbox_price_per_second: f64,
    /// Upstreams for models by name prefix (config file only):
    /// `[[upstreams]] prefix = "llama", url = "...", api_key = "...", protocol = "chat"`.
    pub upstreams: Vec<UpstreamRoute>,
    /// The image containers are made from when a request names none; while
    /// it is not there (not built yet), `host` is used and the log says so.
    pub default_image: String,
    /// Build the default image in the background on a start that finds it
    /// missing (progress in the log and in `/healthz`); off, e.g. for tests,
    /// containers use `host` until `shellgate image build` is run.
    pub build_default_image: bool,
    /// Where images live; empty: `<data_dir>/sandbox/images`. Servers on
    /// one host may share a directory of built images.
    pub images_dir: String,
    /// Where the command line's short-lived engines (`exec`, `image`,
    /// `local --sandbox`) keep their state; empty: a RAM file system
    /// (`/run`, `$XDG_RUNTIME_DIR` or `/dev/shm`), else
    /// `<data_dir>/sandbox/oneshot`.
    pub oneshot_dir: String,
    /// Whether containers may have network access at all (through the
    /// egress proxy, by allowlist). Off: every `network_policy` allowlist
    /// is refused (400).
    pub egress: bool,
    /// The organization allowlist: the host names and `*.domain` patterns
    /// any container may be allowed (comma separated); a container's list
    /// must stay within it. `*`: any name.
    pub egress_allowed_domains: String,
    /// Whether a container's own list may be `*` (every name); off by
    /// default even when the organization list is `*`.
    pub egress_allow_any_domain: bool,
    /// Exceptions to the forbidden addresses, comma separated: host names
    /// that may resolve to private, loopback, link-local or reserved
    /// addresses (an internal package mirror, say), and address ranges
    /// (`10.20.0.0/16`, `fd00:1::/64`, or one address) any allowed name
    /// may resolve to.
    pub egress_private_exceptions: String,
    /// How long egress log rows are kept (seconds); older ones are deleted
    /// by the lifecycle sweeper. 0: kept forever.
    pub egress_log_retention_secs: u64,
    /// The DNS server the proxy asks (`IP:port`); empty: the host's resolver.
    pub egress_dns_server: String,
    /// More trusted roots (PEM files, comma separated) for the servers the
    /// proxy forwards intercepted TLS to, besides the host's.
    pub egress_trusted_roots: String,
    /// Fixed addresses for names (config file only), like `/etc/hosts`:
    /// `[egress_hosts] "mirror.internal" = ["10.0.0.5"]`.
    pub egress_hosts: std::collections::BTreeMap<String, Vec<std::net::IpAddr>>,
    /// Where clients reach this server (`https://sandbox.example.com`), for
    /// the URLs the API shows (a container's exposed ports); empty: the
    /// `Host` a request came with, over `http`.
    pub public_url: String,
    /// The domain under which a container's exposed port is reached by host
    /// name: `{port}-{container_id}.{ports_base_domain}` (`*.localhost`
    /// resolves to loopback in browsers, without DNS).
    pub ports_base_domain: String,
    /// Longest silence (nothing either way) on a proxied port connection,
    /// waiting for the container's answer included, before it is closed.
    pub ports_idle_timeout_secs: u64,
    /// Where blobs that outlive a node live (Files API uploads, skill
    /// bundles, audit exports): empty, the data directory (`files/`,
    /// `skills/`, `audit/` in it); `s3://bucket/prefix`, an S3-compatible
    /// bucket (see the `s3_*` settings).
    pub object_store: String,
    /// The S3 service's URL (`https://minio.internal:9000`), addressed
    /// path-style; empty: AWS's for `s3_region`.
    pub s3_endpoint: String,
    /// The S3 region; empty: `AWS_REGION` / `AWS_DEFAULT_REGION`, else
    /// `us-east-1`.
    pub s3_region: String,
    /// The S3 access key's id, with `s3_secret_access_key` (both or
    /// neither); empty (both): the environment's credentials as AWS's tools
    /// read them (`AWS_ACCESS_KEY_ID`, a web identity token, the instance's
    /// role).
    pub s3_access_key_id: String,
    /// The secret of `s3_access_key_id` (both or neither; never printed).
    pub s3_secret_access_key: Secret,
    /// Whether `s3_endpoint` may be plain `http://` (a trusted network only).
    pub s3_allow_http: bool,
}

/// A prompt-injection rule of the config file.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GuardrailRule {
    /// `*` for every project, or one project.
    #[serde(default = "every_project")]
    pub project: String,
    /// `input` (user messages) or `tool_output` (shell output).
    #[serde(default = "input_target")]
    pub target: GuardrailTarget,
    pub pattern: String,
    pub action: GuardrailAction,
    /// For logs; the pattern if not given.
    #[serde(default)]
    pub name: String,
}

fn every_project() -> String {
    "*".to_owned()
}

fn input_target() -> GuardrailTarget {
    GuardrailTarget::Input
}

/// An upstream for the models whose names start with `prefix`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamRoute {
    pub prefix: String,
    pub url: String,
    #[serde(default)]
    pub api_key: Secret,
    #[serde(default = "default_protocol")]
    pub protocol: Protocol,
}

fn default_protocol() -> Protocol {
    Protocol::Chat
}

/// `role`: what this server is in a cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A single box: the API and the engine in one process.
    #[default]
    All,
    /// A cluster's node: the engine, behind the cluster secret.
    Node,
    /// A cluster's stateless API replica.
    Api,
}

/// The shortest cluster secret accepted.
pub const MIN_CLUSTER_SECRET: usize = 32;

/// `log_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Text when stderr is a terminal (someone reads it), JSON otherwise
    /// (a log collector parses it).
    Auto,
    Json,
    Text,
}

impl LogFormat {
    /// Whether the log is JSON, for a stderr that is (or is not) a terminal.
    pub fn is_json(self, stderr_is_terminal: bool) -> bool {
        match self {
            LogFormat::Auto => !stderr_is_terminal,
            LogFormat::Json => true,
            LogFormat::Text => false,
        }
    }
}

/// What happens to a tool the picked upstream cannot carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnsupportedTools {
    /// Left out of the model's tools, and reported.
    #[default]
    Drop,
    /// The request is refused (400, `param` `tools[i]`).
    Reject,
}

/// What the built-in guardrail rules do over one target by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailDefault {
    Off,
    Flag,
    Redact,
    Block,
}

impl GuardrailDefault {
    /// The action of the built-in rules (`None`: off).
    pub fn action(self) -> Option<shellgate_model::guardrail::Action> {
        self.rule_action().map(GuardrailAction::action)
    }

    fn rule_action(self) -> Option<GuardrailAction> {
        match self {
            GuardrailDefault::Off => None,
            GuardrailDefault::Flag => Some(GuardrailAction::Flag),
            GuardrailDefault::Redact => Some(GuardrailAction::Redact),
            GuardrailDefault::Block => Some(GuardrailAction::Block),
        }
    }
}

/// A guardrail rule's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailAction {
    Flag,
    Redact,
    Block,
}

impl GuardrailAction {
    /// The model loop's action.
    pub fn action(self) -> shellgate_model::guardrail::Action {
        use shellgate_model::guardrail::Action;
        match self {
            GuardrailAction::Flag => Action::Flag,
            GuardrailAction::Redact => Action::Redact,
            GuardrailAction::Block => Action::Block,
        }
    }
}

/// What a guardrail rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailTarget {
    /// User messages.
    Input,
    /// Shell output, before the model reads it.
    ToolOutput,
}

/// A size setting (`1t`, `64g`, `512m`, plain bytes), kept as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteSize {
    text: String,
    bytes: u64,
}

impl ByteSize {
    /// The size `text` says, if it says one.
    pub fn parse(text: &str) -> Option<Self> {
        shellgate_sandbox_api::backend::parse_size(text).map(|bytes| Self {
            text: text.to_owned(),
            bytes,
        })
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ByteSize::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a size such as 64g")))
    }
}

/// `sandbox_memory_ceiling`: `auto` or a size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryCeiling {
    /// The host's memory less a tenth (see the engine).
    Auto,
    Size(ByteSize),
}

impl MemoryCeiling {
    /// The ceiling in bytes (`None`: automatic).
    pub fn bytes(&self) -> Option<u64> {
        match self {
            MemoryCeiling::Auto => None,
            MemoryCeiling::Size(size) => Some(size.bytes()),
        }
    }
}

impl Serialize for MemoryCeiling {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MemoryCeiling::Auto => serializer.serialize_str("auto"),
            MemoryCeiling::Size(size) => size.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for MemoryCeiling {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == "auto" {
            return Ok(MemoryCeiling::Auto);
        }
        ByteSize::parse(&text)
            .map(MemoryCeiling::Size)
            .ok_or_else(|| {
                serde::de::Error::custom(format!("{text:?} is not `auto` or a size such as 16g"))
            })
    }
}

/// A setting that must never be shown: `Debug` prints `<hidden>`.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<hidden>"
        })
    }
}

impl Secret {
    /// The value, if set.
    pub fn get(&self) -> Option<&str> {
        (!self.0.is_empty()).then_some(self.0.as_str())
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: default_data_dir(),
            database_url: Secret::default(),
            database_schema: String::new(),
            database_pool_size: 16,
            database_ca_file: String::new(),
            role: Role::All,
            node_id: String::new(),
            node_address: String::new(),
            cluster_secret: Secret::default(),
            node_heartbeat_secs: 2,
            node_lost_after_secs: 15,
            node_answer_timeout_secs: 5,
            max_containers_per_node: 5_000,
            sandbox_uid_base: 3_000_000_000,
            api_keys: String::new(),
            default_expires_minutes: 20,
            max_expires_minutes: 30 * 24 * 60,
            idle_suspend_after_secs: 5 * 60,
            retention_days: 30,
            sweep_interval_secs: 10,
            max_request_bytes: 16 << 20,
            max_upload_bytes: 512 << 20,
            rate_limit_per_minute: 0,
            warm_containers: 2,
            transfer_stall_secs: 60,
            log_format: LogFormat::Auto,
            max_running_containers_per_project: 1000,
            max_memory_per_project: ByteSize {
                text: "1t".to_owned(),
                bytes: 1 << 40,
            },
            max_execs_per_project: 64,
            max_streams_per_process: 32,
            max_streams_per_project: 256,
            max_console_terminals_per_project: 32,
            console_terminal_grace_secs: 60,
            container_cpus: 1.0,
            request_deadline_secs: 600,
            sandbox_memory_ceiling: MemoryCeiling::Auto,
            max_connections: 10_000,
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 30,
            metrics_token: String::new(),
            expose_host_usr_local: false,
            upstream_url: String::new(),
            upstream_api_key: Secret::default(),
            upstream_protocol: default_protocol(),
            upstream_timeout_secs: 120,
            upstream_attempts: 3,
            upstream_turn_timeout_secs: 600,
            response_timeout_secs: 3600,
            max_input_files: 50,
            max_input_file_bytes: 64 << 20,
            upstream_max_answer_bytes: 32 * 1024 * 1024,
            upstream_max_tool_call_bytes: 4 * 1024 * 1024,
            unsupported_tools: UnsupportedTools::Drop,
            upstreams: Vec::new(),
            sandbox_price_per_second: 0.0001,
            guardrail_input_default: GuardrailDefault::Flag,
            guardrail_tool_output_default: GuardrailDefault::Off,
            guardrails: Vec::new(),
            default_image: "debian-12".to_owned(),
            build_default_image: true,
            images_dir: String::new(),
            oneshot_dir: String::new(),
            egress: true,
            egress_allowed_domains: "*".to_owned(),
            egress_allow_any_domain: false,
            egress_private_exceptions: String::new(),
            egress_log_retention_secs: 30 * 86_400,
            egress_dns_server: String::new(),
            egress_trusted_roots: String::new(),
            egress_hosts: Default::default(),
            public_url: String::new(),
            ports_base_domain: "localhost".to_owned(),
            ports_idle_timeout_secs: 300,
            object_store: String::new(),
            s3_endpoint: String::new(),
            s3_region: String::new(),
            s3_access_key_id: String::new(),
            s3_secret_access_key: Secret::default(),
            s3_allow_http: false,
        }
    }
}

/// The entries of a comma-separated setting.
pub fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The default data directory: system-wide for root, per user otherwise.
impl Config {
    /// Opens (creating and migrating) the metadata store these settings
    /// name: Postgres if `database_url` is set, else SQLite in the data
    /// directory.
    pub fn open_store(&self) -> Result<shellgate_store::Store, shellgate_store::StoreError> {
        match self.database_url.get() {
            Some(url) => shellgate_store::Store::open_postgres(&shellgate_store::PostgresOptions {
                url: url.to_owned(),
                schema: (!self.database_schema.is_empty()).then(|| self.database_schema.clone()),
                pool_size: self.database_pool_size.max(1),
                ca_file: (!self.database_ca_file.is_empty())
                    .then(|| PathBuf::from(&self.database_ca_file)),
            }),
            None => shellgate_store::Store::open(&self.sqlite_path()),
        }
    }

    /// A cluster role's settings: a shared store and a long enough secret.
    fn check_cluster(&self) -> Result<(), ConfigError> {
        if self.role == Role::All {
            return Ok(());
        }
        if self.database_url.get().is_none() {
            return Err(ConfigError(
                "role = node or api needs database_url: a cluster's replicas and nodes share one \
                 Postgres store"
                    .into(),
            ));
        }
        let secret = self.cluster_secret.get().unwrap_or_default();
        if secret.len() < MIN_CLUSTER_SECRET {
            return Err(ConfigError(format!(
                "role = node or api needs cluster_secret of at least {MIN_CLUSTER_SECRET} \
                 characters (it is {})",
                secret.len()
            )));
        }
        if self.node_heartbeat_secs == 0 || self.node_lost_after_secs <= self.node_heartbeat_secs {
            return Err(ConfigError(
                "node_lost_after_secs must be longer than node_heartbeat_secs (and that above 0)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// This server's node name: empty on a single box (its containers'
    /// `node_id`), the configured one (or the host name) on a node.
    pub fn node_name(&self) -> String {
        match self.role {
            Role::All | Role::Api => String::new(),
            Role::Node if !self.node_id.is_empty() => self.node_id.clone(),
            Role::Node => std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|name| name.trim().to_owned())
                .ok()
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| "node".to_owned()),
        }
    }

    /// Where API replicas reach this node.
    pub fn node_url(&self) -> String {
        if self.node_address.is_empty() {
            format!("http://{}", self.listen)
        } else {
            self.node_address.trim_end_matches('/').to_owned()
        }
    }

    /// Where the embedded SQLite database lives.
    pub fn sqlite_path(&self) -> PathBuf {
        self.data_dir.join("shellgate.db")
    }
}

pub fn default_data_dir() -> PathBuf {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/lib/shellgate");
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(xdg).join("shellgate");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/share/shellgate")
}

/// `SHELLGATE_*` environment variables that are not settings but are read
/// by shellgate or its tools, so never reported as unknown.
pub const NOT_SETTINGS: &[&str] = &[
    // The command line's own: `--config`, `--data-dir`, the log filter.
    "SHELLGATE_CONFIG",
    "SHELLGATE_DATA_DIR",
    "SHELLGATE_LOG",
    // Clients': the agents SDK packages' server and key.
    "SHELLGATE_BASE_URL",
    "SHELLGATE_API_KEY",
    // Set by the server for programs inside containers (an interpreter
    // kernel's language, E2B's directory watch).
    "SHELLGATE_KERNEL_LANGUAGE",
    "SHELLGATE_WATCH_PATH",
    "SHELLGATE_WATCH_RECURSIVE",
    "SHELLGATE_WATCH_SCRIPT",
    // The test suites' and benchmarks' (and every `SHELLGATE_TEST_*`).
    "SHELLGATE_BIN",
    "SHELLGATE_FUZZ_SECONDS",
    "SHELLGATE_FUZZ_SEED",
    "SHELLGATE_SCREENSHOTS",
    "SHELLGATE_CLUSTER_LOG",
];

/// The prefix of the test suites' own variables (`SHELLGATE_TEST_CLUSTER`,
/// `SHELLGATE_TEST_POSTGRES_URL`, ...): not settings either.
const TEST_PREFIX: &str = "SHELLGATE_TEST_";

/// A `SHELLGATE_*` environment variable that names no setting: ignored,
/// and said at start with the setting it is closest to (a mistyped
/// `SHELLGATE_MAX_CONTAINER` would otherwise change nothing, silently).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    pub name: String,
    /// The variable of the setting closest to it, if one is close.
    pub closest: Option<String>,
}

impl std::fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is not a setting and is ignored", self.name)?;
        match &self.closest {
            Some(closest) => write!(f, "; did you mean {closest}?"),
            None => write!(f, " (docs/operator/configuration.md lists the settings)"),
        }
    }
}

/// The `SHELLGATE_*` names among `names` (an environment's) that are
/// neither a setting nor one of [`NOT_SETTINGS`], in the order given.
pub fn unknown_variables(names: impl IntoIterator<Item = String>) -> Vec<UnknownVariable> {
    let Ok(defaults) = toml::Table::try_from(Config::default()) else {
        return Vec::new();
    };
    names
        .into_iter()
        .filter(|name| {
            name.strip_prefix("SHELLGATE_").is_some_and(|setting| {
                !defaults.contains_key(&setting.to_ascii_lowercase())
                    && !NOT_SETTINGS.contains(&name.as_str())
                    && !name.starts_with(TEST_PREFIX)
            })
        })
        .map(|name| {
            let setting = name
                .strip_prefix("SHELLGATE_")
                .unwrap_or(&name)
                .to_ascii_lowercase();
            let closest = closest(&setting, defaults.keys().map(String::as_str))
                .map(|found| format!("SHELLGATE_{}", found.to_ascii_uppercase()));
            UnknownVariable { name, closest }
        })
        .collect()
}

/// The candidate closest to `typed` if one is close enough to be what was
/// meant: the least edit distance (ties: the first in order), where one
/// name inside the other (`max_container` in `max_containers_per_node`)
/// counts as near whatever the length of the rest, and at most a third of
/// the typed name's length may differ otherwise.
fn closest<'a>(typed: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (typed.chars().count() / 3).max(1);
    candidates
        .map(|candidate| (name_distance(typed, candidate), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// How far apart two names are: their edit distance, with the part their
/// difference in length accounts for halved when one is at least half the
/// other (so a name that is a part of the other is 1 away).
fn name_distance(a: &str, b: &str) -> usize {
    let (n, m) = (a.chars().count(), b.chars().count());
    let length_gap = n.abs_diff(m);
    let distance = edit_distance(a, b);
    if n * 2 < m || m * 2 < n {
        return distance;
    }
    // The edit distance is never less than the difference in length.
    match distance.saturating_sub(length_gap) {
        0 if length_gap > 0 => 1,
        beyond => beyond + length_gap.div_ceil(2),
    }
}

/// Levenshtein's distance: the fewest insertions, deletions and
/// substitutions of one character that turn `a` into `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = Vec::with_capacity(b.len() + 1);
        current.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// A setting that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Config {
    /// The image store's directory, when set apart from the data directory.
    pub fn images_dir(&self) -> Option<PathBuf> {
        (!self.images_dir.is_empty()).then(|| PathBuf::from(&self.images_dir))
    }

    /// Where the command line's one-shot engines live, when set.
    pub fn oneshot_dir(&self) -> Option<PathBuf> {
        (!self.oneshot_dir.is_empty()).then(|| PathBuf::from(&self.oneshot_dir))
    }

    /// Defaults, overlaid with `file` (if any) and the environment.
    pub fn load(
        file: Option<&Path>,
        env: impl Iterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let defaults =
            toml::Table::try_from(Config::default()).map_err(|e| ConfigError(e.to_string()))?;
        let mut table = toml::Table::new();
        if let Some(file) = file {
            let text = std::fs::read_to_string(file)
                .map_err(|e| ConfigError(format!("cannot read config {}: {e}", file.display())))?;
            table = text
                .parse::<toml::Table>()
                .map_err(|e| ConfigError(format!("{}: {e}", file.display())))?;
            // The file is shellgate's own: a key it does not know is a
            // mistake, refused with the setting it is closest to.
            if let Some(key) = table.keys().find(|key| !defaults.contains_key(*key)) {
                let hint = match closest(key, defaults.keys().map(String::as_str)) {
                    Some(setting) => format!("did you mean {setting}?"),
                    None => "docs/operator/configuration.md lists the settings".to_owned(),
                };
                return Err(ConfigError(format!(
                    "{}: {key} is not a setting ({hint})",
                    file.display()
                )));
            }
        }
        for (key, value) in env {
            let Some(name) = key.strip_prefix("SHELLGATE_") else {
                continue;
            };
            let name = name.to_ascii_lowercase();
            // Only settings: other SHELLGATE_* variables (LOG, DATA_DIR of the
            // CLI) are not config keys.
            let Some(default) = defaults.get(&name) else {
                continue;
            };
            let parsed = match default {
                toml::Value::Integer(_) => value
                    .parse::<i64>()
                    .map(toml::Value::Integer)
                    .map_err(|_| ConfigError(format!("{key}={value:?} is not a whole number")))?,
                toml::Value::Float(_) => value
                    .parse::<f64>()
                    .map(toml::Value::Float)
                    .map_err(|_| ConfigError(format!("{key}={value:?} is not a number")))?,
                toml::Value::Boolean(_) => value
                    .parse::<bool>()
                    .map(toml::Value::Boolean)
                    .map_err(|_| ConfigError(format!("{key}={value:?} is not true or false")))?,
                _ => toml::Value::String(value),
            };
            table.insert(name, parsed);
        }
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError(format!("invalid setting: {e}")))
    }

    /// Checks the settings that are not checked by their types.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.container_cpus >= 0.0 && self.container_cpus <= 1024.0) {
            return Err(ConfigError(format!(
                "container_cpus = {} must be between 0 (no ceiling) and 1024",
                self.container_cpus
            )));
        }
        self.egress_org_allowlist()?;
        self.public_base()?;
        self.check_cluster()?;
        let domain = &self.ports_base_domain;
        if domain.is_empty()
            || domain.starts_with('.')
            || domain.ends_with('.')
            || !domain
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        {
            return Err(ConfigError(format!(
                "ports_base_domain = {domain:?} is not a domain such as localhost or ports.example.com"
            )));
        }
        shellgate_egress::policy::Exceptions::parse(&comma_list(&self.egress_private_exceptions))
            .map_err(|e| ConfigError(format!("egress_private_exceptions: {e}")))?;
        if !self.egress_dns_server.is_empty()
            && self.egress_dns_server.parse::<SocketAddr>().is_err()
        {
            return Err(ConfigError(format!(
                "egress_dns_server = {:?} is not an address such as 192.0.2.53:53",
                self.egress_dns_server
            )));
        }
        self.object_location()?;
        self.check_keys()?;
        for (name, value) in [
            ("upstream_timeout_secs", self.upstream_timeout_secs),
            (
                "upstream_turn_timeout_secs",
                self.upstream_turn_timeout_secs,
            ),
            ("upstream_max_answer_bytes", self.upstream_max_answer_bytes),
            ("response_timeout_secs", self.response_timeout_secs),
            (
                "upstream_max_tool_call_bytes",
                self.upstream_max_tool_call_bytes,
            ),
            ("request_deadline_secs", self.request_deadline_secs),
            ("header_read_timeout_secs", self.header_read_timeout_secs),
            ("body_read_timeout_secs", self.body_read_timeout_secs),
            ("node_answer_timeout_secs", self.node_answer_timeout_secs),
            ("max_connections", self.max_connections as u64),
            ("ports_idle_timeout_secs", self.ports_idle_timeout_secs),
            (
                "console_terminal_grace_secs",
                self.console_terminal_grace_secs,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError(format!("{name} must be positive")));
            }
        }
        Ok(())
    }

    /// The configured `public_url` read, if set: (scheme, host[:port],
    /// path prefix without its trailing slash).
    pub fn public_base(&self) -> Result<Option<(String, String, String)>, ConfigError> {
        if self.public_url.is_empty() {
            return Ok(None);
        }
        let bad = || {
            ConfigError(format!(
                "public_url = {:?} is not a URL such as https://sandbox.example.com",
                self.public_url
            ))
        };
        let (scheme, rest) = self.public_url.split_once("://").ok_or_else(bad)?;
        if scheme != "http" && scheme != "https" {
            return Err(bad());
        }
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() || host.contains(['?', '#', '@', ' ']) || path.contains(['?', '#']) {
            return Err(bad());
        }
        let path = path.trim_end_matches('/');
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("/{path}")
        };
        Ok(Some((scheme.to_owned(), host.to_owned(), prefix)))
    }

    /// Where objects live: `None`, the data directory; else the S3 bucket
    /// and how to reach it.
    pub fn object_location(&self) -> Result<Option<(S3Location, S3Settings)>, ConfigError> {
        if self.object_store.is_empty() {
            return Ok(None);
        }
        let location = S3Location::parse(&self.object_store)
            .map_err(|e| ConfigError(format!("object_store: {e}")))?;
        let endpoint = &self.s3_endpoint;
        if !endpoint.is_empty() {
            if endpoint.starts_with("http://") && !self.s3_allow_http {
                return Err(ConfigError(format!(
                    "s3_endpoint = {endpoint:?} is plain http: set s3_allow_http = true \
                     to send the objects and credentials unencrypted"
                )));
            }
            if !endpoint.starts_with("http://") && !endpoint.starts_with("https://") {
                return Err(ConfigError(format!(
                    "s3_endpoint = {endpoint:?} is not a URL such as https://s3.example.com"
                )));
            }
        }
        if self.s3_access_key_id.is_empty() != self.s3_secret_access_key.0.is_empty() {
            return Err(ConfigError(
                "s3_access_key_id and s3_secret_access_key go together: set both or neither"
                    .to_owned(),
            ));
        }
        let set = |value: &str| (!value.is_empty()).then(|| value.to_owned());
        Ok(Some((
            location,
            S3Settings {
                endpoint: set(endpoint),
                region: set(&self.s3_region),
                access_key_id: set(&self.s3_access_key_id),
                secret_access_key: self.s3_secret_access_key.get().map(str::to_owned),
                allow_http: self.s3_allow_http,
            },
        )))
    }

    /// The organization allowlist.
    pub fn egress_org_allowlist(&self) -> Result<shellgate_egress::policy::Allowlist, ConfigError> {
        shellgate_egress::policy::Allowlist::operator(&comma_list(&self.egress_allowed_domains))
            .map_err(|e| ConfigError(format!("egress_allowed_domains: {e}")))
    }

    /// What the operator allows containers' networks: the rule a request's
    /// `network_policy` (and the CLI's `--allow`) is held to.
    pub fn egress_rules(&self) -> Result<shellgate_sandbox_api::network::EgressRules, ConfigError> {
        Ok(shellgate_sandbox_api::network::EgressRules {
            enabled: self.egress,
            allow_any_domain: self.egress_allow_any_domain,
            org_allowlist: self.egress_org_allowlist()?,
        })
    }

    /// The egress proxy's own options (trusted roots, DNS server, fixed
    /// hosts, private exceptions), for `Settings::configure`.
    pub fn proxy_options(&self) -> shellgate_egress::proxy::ProxyOptions {
        shellgate_egress::proxy::ProxyOptions {
            trusted_roots: comma_list(&self.egress_trusted_roots)
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            dns_server: self.egress_dns_server.clone(),
            hosts: self.egress_hosts.clone(),
            private_exceptions: comma_list(&self.egress_private_exceptions),
        }
    }

    /// The CPU ceiling of a container (`None`: none).
    pub fn container_cpu_ceiling(&self) -> Option<f64> {
        (self.container_cpus > 0.0).then_some(self.container_cpus)
    }

    /// Refuses a configured key short enough to guess, naming its project
    /// (never the key).
    fn check_keys(&self) -> Result<(), ConfigError> {
        for (index, (key, project, _)) in self.seeded_keys().iter().enumerate() {
            let length = key.chars().count();
            if length < MIN_KEY_CHARS {
                return Err(ConfigError(format!(
                    "api_keys: key {} (project {project:?}) has {length} characters; a key \
                     needs at least {MIN_KEY_CHARS} (`shellgate keys create` makes one, as \
                     does `openssl rand -hex 24`)",
                    index + 1
                )));
            }
        }
        Ok(())
    }

    /// The seeded keys: (key, project, role).
    pub fn seeded_keys(&self) -> Vec<(String, String, KeyRole)> {
        self.api_keys
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(|entry| {
                let mut parts = entry.splitn(3, ':');
                let key = parts.next().unwrap_or_default().to_owned();
                let project = parts.next().filter(|p| !p.is_empty()).unwrap_or("default");
                let role = match parts.next() {
                    Some("admin") => KeyRole::Admin,
                    _ => KeyRole::Member,
                };
                (key, project.to_owned(), role)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_file_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("shellgate-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("shellgate.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:9999\"\nretention_days = 7\n").unwrap();
        let env = vec![
            ("SHELLGATE_RETENTION_DAYS".to_owned(), "3".to_owned()),
            (
                "SHELLGATE_API_KEYS".to_owned(),
                "k1,k2:team,k3:ops:admin".to_owned(),
            ),
            ("SHELLGATE_LOG".to_owned(), "debug".to_owned()),
            ("HOME".to_owned(), "/x".to_owned()),
        ];
        let config = Config::load(Some(&file), env.into_iter()).unwrap();
        assert_eq!(config.listen.port(), 9999);
        assert_eq!(config.retention_days, 3);
        assert_eq!(config.idle_suspend_after_secs, 300);
        assert_eq!(
            config.seeded_keys(),
            vec![
                ("k1".into(), "default".into(), KeyRole::Member),
                ("k2".into(), "team".into(), KeyRole::Member),
                ("k3".into(), "ops".into(), KeyRole::Admin)
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unknown_shellgate_variable_is_named_with_the_closest_setting() {
        let names = [
            "SHELLGATE_MAX_CONTAINER",
            "SHELLGATE_WARM_CONTAINERS",
            "SHELLGATE_RETENTION_DAY",
            "SHELLGATE_IDLE_SUSPEND_SECS",
            "SHELLGATE_NOTHING_LIKE_IT",
            "SHELLGATE_LOG",
            "SHELLGATE_BIN",
            "SHELLGATE_TEST_CLUSTER",
            "HOME",
        ];
        let unknown = unknown_variables(names.iter().map(|name| name.to_string()));
        let found: Vec<(&str, Option<&str>)> = unknown
            .iter()
            .map(|u| (u.name.as_str(), u.closest.as_deref()))
            .collect();
        assert_eq!(
            found,
            vec![
                (
                    "SHELLGATE_MAX_CONTAINER",
                    Some("SHELLGATE_MAX_CONTAINERS_PER_NODE")
                ),
                ("SHELLGATE_RETENTION_DAY", Some("SHELLGATE_RETENTION_DAYS")),
                (
                    "SHELLGATE_IDLE_SUSPEND_SECS",
                    Some("SHELLGATE_IDLE_SUSPEND_AFTER_SECS")
                ),
                ("SHELLGATE_NOTHING_LIKE_IT", None),
            ]
        );
        assert_eq!(
            unknown[0].to_string(),
            "SHELLGATE_MAX_CONTAINER is not a setting and is ignored; \
             did you mean SHELLGATE_MAX_CONTAINERS_PER_NODE?"
        );
        // The closest by edit distance, a name inside another counting as near.
        let settings = [
            "warm_containers",
            "max_connections",
            "max_containers_per_node",
        ];
        let closest_of = |typed| closest(typed, settings.iter().copied());
        assert_eq!(closest_of("max_container"), Some("max_containers_per_node"));
        assert_eq!(closest_of("warm_containres"), Some("warm_containers"));
        assert_eq!(closest_of("max_conections"), Some("max_connections"));
        assert_eq!(closest_of("log"), None);
    }

    #[test]
    fn an_unknown_key_in_the_config_file_is_refused_naming_the_closest_setting() {
        let dir =
            std::env::temp_dir().join(format!("shellgate-config-unknown-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("shellgate.toml");
        std::fs::write(&file, "retention_days = 7\nwarm_container = 2\n").unwrap();
        let error = Config::load(Some(&file), env(&[])).unwrap_err().to_string();
        assert!(
            error.ends_with("warm_container is not a setting (did you mean warm_containers?)"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An environment of `pairs`, as `Config::load` reads one.
    fn env(pairs: &[(&str, &str)]) -> std::vec::IntoIter<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn object_store_settings_are_read_and_the_secret_never_shows() {
        let config = Config::load(None, env(&[])).unwrap();
        assert!(config.object_location().unwrap().is_none());
        let config = Config::load(
            None,
            env(&[
                ("SHELLGATE_OBJECT_STORE", "s3://blobs/prod"),
                ("SHELLGATE_S3_ENDPOINT", "http://127.0.0.1:9000"),
                ("SHELLGATE_S3_REGION", "eu-west-1"),
                ("SHELLGATE_S3_ACCESS_KEY_ID", "AKIDEXAMPLE"),
                ("SHELLGATE_S3_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"),
                ("SHELLGATE_S3_ALLOW_HTTP", "true"),
            ]),
        )
        .unwrap();
        config.validate().unwrap();
        let (location, settings) = config.object_location().unwrap().unwrap();
        assert_eq!(
            (location.bucket.as_str(), location.prefix.as_str()),
            ("blobs", "prod")
        );
        assert_eq!(settings.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(settings.region.as_deref(), Some("eu-west-1"));
        assert_eq!(settings.secret_access_key.as_deref(), Some("wJalrXUtnFEMI"));
        assert!(settings.allow_http);
        assert!(!format!("{config:?}").contains("wJalrXUtnFEMI"));
        assert!(!format!("{settings:?}").contains("wJalrXUtnFEMI"));
        for (broken, says) in [
            (
                Config {
                    object_store: "bucket/prod".into(),
                    ..Config::default()
                },
                "object_store",
            ),
            (
                Config {
                    s3_allow_http: false,
                    ..config.clone()
                },
                "s3_allow_http",
            ),
            (
                Config {
                    s3_endpoint: "minio:9000".into(),
                    ..config.clone()
                },
                "s3_endpoint",
            ),
            (
                Config {
                    s3_secret_access_key: Secret::default(),
                    ..config.clone()
                },
                "s3_secret_access_key",
            ),
        ] {
            let error = broken.validate().unwrap_err().0;
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn configured_keys_shorter_than_the_minimum_are_refused() {
        let with_keys = |keys: &str| Config {
            api_keys: keys.to_owned(),
            ..Config::default()
        };
        assert!(
            with_keys("sk-0123456789abcd:alpha,sg-0123456789abcdef0123:ops:admin")
                .validate()
                .is_ok()
        );
        for (keys, says) in [
            (
                "sk-short:alpha",
                "key 1 (project \"alpha\") has 8 characters",
            ),
            (
                "sk-0123456789abcd,k2:beta",
                "key 2 (project \"beta\") has 2",
            ),
            (":alpha", "key 1 (project \"alpha\") has 0"),
        ] {
            let error = with_keys(keys).validate().unwrap_err().0;
            assert!(
                error.contains(says) && error.contains("at least 16"),
                "{error}"
            );
            assert!(
                !error.contains("sk-short"),
                "the key itself is never printed: {error}"
            );
        }
    }

    #[test]
    fn bad_settings_are_reported() {
        let env = vec![("SHELLGATE_RETENTION_DAYS".to_owned(), "soon".to_owned())];
        assert!(Config::load(None, env.into_iter()).is_err());
        let env = vec![("SHELLGATE_CONTAINER_CPUS".to_owned(), "2.5".to_owned())];
        let config = Config::load(None, env.into_iter()).unwrap();
        assert_eq!(config.container_cpu_ceiling(), Some(2.5));
        assert!(Config::default().validate().is_ok());
        for (exceptions, valid) in [
            ("mirror.internal, 10.20.0.0/16, fd00:1::/64", true),
            ("10.20.0.0/33", false),
            ("0.0.0.0/0", false),
            ("not a name", false),
        ] {
            let config = Config {
                egress_private_exceptions: exceptions.into(),
                ..Config::default()
            };
            assert_eq!(config.validate().is_ok(), valid, "{exceptions}");
        }
        assert_eq!(Config::default().egress_log_retention_secs, 30 * 86_400);
    }

    #[test]
    fn typed_settings_are_read_and_bad_values_refused_at_load_naming_the_key() {
        let config = Config::load(
            None,
            env(&[
                ("SHELLGATE_UPSTREAM_PROTOCOL", "anthropic"),
                ("SHELLGATE_MAX_MEMORY_PER_PROJECT", "64g"),
                ("SHELLGATE_SANDBOX_MEMORY_CEILING", "16g"),
                ("SHELLGATE_GUARDRAIL_INPUT_DEFAULT", "block"),
                ("SHELLGATE_LOG_FORMAT", "text"),
            ]),
        )
        .unwrap();
        assert_eq!(config.upstream_protocol, Protocol::Anthropic);
        assert_eq!(config.max_memory_per_project.bytes(), 64 << 30);
        assert_eq!(config.sandbox_memory_ceiling.bytes(), Some(16 << 30));
        assert_eq!(
            config.guardrail_input_default.action(),
            Some(shellgate_model::guardrail::Action::Block)
        );
        assert_eq!(config.log_format, LogFormat::Text);
        let defaults = Config::load(None, env(&[])).unwrap();
        assert_eq!(defaults, Config::default());
        assert_eq!(defaults.max_memory_per_project.bytes(), 1 << 40);
        assert_eq!(defaults.sandbox_memory_ceiling.bytes(), None);
        for (key, value) in [
            ("SHELLGATE_UPSTREAM_PROTOCOL", "grpc"),
            ("SHELLGATE_MAX_MEMORY_PER_PROJECT", "lots"),
            ("SHELLGATE_SANDBOX_MEMORY_CEILING", "most"),
            ("SHELLGATE_GUARDRAIL_TOOL_OUTPUT_DEFAULT", "shout"),
            ("SHELLGATE_LOG_FORMAT", "xml"),
        ] {
            let error = Config::load(None, env(&[(key, value)])).unwrap_err().0;
            let name = key.trim_start_matches("SHELLGATE_").to_ascii_lowercase();
            assert!(error.contains(&name), "{key}={value}: {error}");
        }
        // A rule of the file with an unknown action or target, too.
        let dir =
            std::env::temp_dir().join(format!("shellgate-config-rule-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("shellgate.toml");
        std::fs::write(
            &file,
            "[[guardrails]]\npattern = \"x\"\naction = \"shout\"\n",
        )
        .unwrap();
        let error = Config::load(Some(&file), env(&[])).unwrap_err().0;
        assert!(error.contains("action"), "{error}");
        std::fs::write(
            &file,
            "[[upstreams]]\nprefix = \"l\"\nurl = \"http://x\"\nprotocol = \"grpc\"\n",
        )
        .unwrap();
        let error = Config::load(Some(&file), env(&[])).unwrap_err().0;
        assert!(error.contains("protocol"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
