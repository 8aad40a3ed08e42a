//! Server settings: embedded defaults, then a TOML file, then `SHELLGATE_*`
//! environment variables (each setting's upper-case name), then flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
pub use shellgate_model::upstream::Protocol;

mod cluster;
mod console;
mod egress;
mod model;
pub mod reference;
mod sandbox;
mod server;
mod store;

pub use cluster::ClusterSettings;
pub use console::ConsoleSettings;
pub use egress::EgressSettings;
pub use model::ModelSettings;
pub use sandbox::SandboxSettings;
pub use server::ServerSettings;
pub use store::StoreSettings;

/// The fewest characters a configured key (`api_keys`) may have: a key
/// short enough to guess is refused at start. (`shellgate keys create`
/// makes keys of 35.)
pub const MIN_KEY_CHARS: usize = 16;

/// Every setting of `shellgate serve`, grouped by concern. Each group's
/// fields are named as the config file's keys and the environment's
/// variables (`SHELLGATE_` and the name in capitals): the file and the
/// environment are flat, so every name is unique across groups.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Config {
    #[serde(flatten)]
    pub server: ServerSettings,
    #[serde(flatten)]
    pub store: StoreSettings,
    #[serde(flatten)]
    pub cluster: ClusterSettings,
    #[serde(flatten)]
    pub sandbox: SandboxSettings,
    #[serde(flatten)]
    pub console: ConsoleSettings,
    #[serde(flatten)]
    pub model: ModelSettings,
    #[serde(flatten)]
    pub egress: EgressSettings,
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
    /// Text when people read stderr (a terminal, or systemd's journal),
    /// JSON otherwise (a log collector parses it).
    Auto,
    Json,
    Text,
}

impl LogFormat {
    /// Whether the log is JSON, for a stderr that people read (a
    /// terminal, the journal) or not.
    pub fn is_json(self, read_by_people: bool) -> bool {
        match self {
            LogFormat::Auto => !read_by_people,
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

/// The entries of a comma-separated setting.
pub fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

impl Config {
    /// Opens (creating and migrating) the metadata store these settings
    /// name: Postgres if `database_url` is set, else SQLite in the data
    /// directory.
    pub fn open_store(&self) -> Result<shellgate_store::Store, shellgate_store::StoreError> {
        let store = &self.store;
        match self.postgres_options(store.database_pool_size.max(1)) {
            Some(options) => shellgate_store::Store::open_postgres(&options),
            None => shellgate_store::Store::open(&self.sqlite_path()),
        }
    }

    /// A second connection to a cluster's Postgres store, of its own (a
    /// pool of one), for a node's heartbeats: they never wait behind the
    /// requests that hold the store's pool, so a node flooded with work is
    /// not declared lost by the replicas (`None` on SQLite: no cluster).
    pub fn open_liveness_store(
        &self,
    ) -> Result<Option<shellgate_store::Store>, shellgate_store::StoreError> {
        self.postgres_options(1)
            .map(|options| shellgate_store::Store::open_postgres(&options))
            .transpose()
    }

    /// The Postgres store's options with a pool of `pool_size`, if the
    /// settings name one.
    fn postgres_options(&self, pool_size: usize) -> Option<shellgate_store::PostgresOptions> {
        let store = &self.store;
        let url = store.database_url.get()?;
        Some(shellgate_store::PostgresOptions {
            url: url.to_owned(),
            schema: (!store.database_schema.is_empty()).then(|| store.database_schema.clone()),
            pool_size,
            ca_file: (!store.database_ca_file.is_empty())
                .then(|| PathBuf::from(&store.database_ca_file)),
        })
    }

    /// A cluster role's settings: a shared store and a long enough secret.
    fn check_cluster(&self) -> Result<(), ConfigError> {
        let cluster = &self.cluster;
        if cluster.role == Role::All {
            return Ok(());
        }
        if self.store.database_url.get().is_none() {
            return Err(ConfigError(
                "role = node or api needs database_url: a cluster's replicas and nodes share one \
                 Postgres store"
                    .into(),
            ));
        }
        let secret = cluster.cluster_secret.get().unwrap_or_default();
        if secret.len() < MIN_CLUSTER_SECRET {
            return Err(ConfigError(format!(
                "role = node or api needs cluster_secret of at least {MIN_CLUSTER_SECRET} \
                 characters (it is {})",
                secret.len()
            )));
        }
        if cluster.node_heartbeat_secs == 0
            || cluster.node_lost_after_secs <= cluster.node_heartbeat_secs
        {
            return Err(ConfigError(
                "node_lost_after_secs must be longer than node_heartbeat_secs (and that above 0)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Where API replicas reach this node.
    pub fn node_url(&self) -> String {
        let address = &self.cluster.node_address;
        if address.is_empty() {
            format!("http://{}", self.server.listen)
        } else {
            address.trim_end_matches('/').to_owned()
        }
    }

    /// Where the embedded SQLite database lives.
    pub fn sqlite_path(&self) -> PathBuf {
        self.server.data_dir.join("shellgate.db")
    }
}

/// The default data directory: system-wide for root, per user otherwise.
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
    // The build's stamp (crates/shellgate/build.rs), which `cargo run` and
    // `cargo test` also put in the environment of what they start.
    "SHELLGATE_BUILD_COMMIT",
    "SHELLGATE_BUILD_DATE",
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

/// The group `T` of `table`'s settings: its keys taken out of `table` and
/// read (an error names the key).
fn group<T: Default + Serialize + serde::de::DeserializeOwned>(
    table: &mut toml::Table,
) -> Result<T, ConfigError> {
    let keys = toml::Table::try_from(T::default()).map_err(|e| ConfigError(e.to_string()))?;
    let own: toml::Table = keys
        .keys()
        .filter_map(|key| table.remove_entry(key))
        .collect();
    toml::Value::Table(own)
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError(format!("invalid setting: {e}")))
}

/// A setting that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Config {
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
        Config::from_table(table)
    }

    /// The settings of a flat table (the file's keys and the environment's
    /// names), each group read from its own keys.
    fn from_table(mut table: toml::Table) -> Result<Self, ConfigError> {
        let config = Config {
            server: group(&mut table)?,
            store: group(&mut table)?,
            cluster: group(&mut table)?,
            sandbox: group(&mut table)?,
            console: group(&mut table)?,
            model: group(&mut table)?,
            egress: group(&mut table)?,
        };
        match table.keys().next() {
            Some(key) => Err(ConfigError(format!(
                "invalid setting: {key} is not a setting"
            ))),
            None => Ok(config),
        }
    }

    /// Checks the settings that are not checked by their types.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (server, sandbox, model, egress) =
            (&self.server, &self.sandbox, &self.model, &self.egress);
        if !(sandbox.container_cpus >= 0.0 && sandbox.container_cpus <= 1024.0) {
            return Err(ConfigError(format!(
                "container_cpus = {} must be between 0 (no ceiling) and 1024",
                sandbox.container_cpus
            )));
        }
        egress.org_allowlist()?;
        server.public_base()?;
        self.check_cluster()?;
        let domain = &server.ports_base_domain;
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
        shellgate_egress::policy::Exceptions::parse(&comma_list(&egress.egress_private_exceptions))
            .map_err(|e| ConfigError(format!("egress_private_exceptions: {e}")))?;
        if !egress.egress_dns_server.is_empty()
            && egress.egress_dns_server.parse::<SocketAddr>().is_err()
        {
            return Err(ConfigError(format!(
                "egress_dns_server = {:?} is not an address such as 192.0.2.53:53",
                egress.egress_dns_server
            )));
        }
        self.store.object_location()?;
        server.check_keys()?;
        for (name, value) in [
            ("upstream_timeout_secs", model.upstream_timeout_secs),
            (
                "upstream_turn_timeout_secs",
                model.upstream_turn_timeout_secs,
            ),
            ("upstream_max_answer_bytes", model.upstream_max_answer_bytes),
            ("response_timeout_secs", model.response_timeout_secs),
            (
                "gemini_code_execution_timeout_secs",
                model.gemini_code_execution_timeout_secs,
            ),
            (
                "code_execution_cell_timeout_secs",
                model.code_execution_cell_timeout_secs,
            ),
            (
                "code_execution_tool_result_timeout_secs",
                model.code_execution_tool_result_timeout_secs,
            ),
            (
                "upstream_max_tool_call_bytes",
                model.upstream_max_tool_call_bytes,
            ),
            ("request_deadline_secs", sandbox.request_deadline_secs),
            ("header_read_timeout_secs", server.header_read_timeout_secs),
            ("body_read_timeout_secs", server.body_read_timeout_secs),
            (
                "node_answer_timeout_secs",
                self.cluster.node_answer_timeout_secs,
            ),
            ("max_connections", server.max_connections as u64),
            ("ports_idle_timeout_secs", server.ports_idle_timeout_secs),
            (
                "console_terminal_grace_secs",
                self.console.console_terminal_grace_secs,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError(format!("{name} must be positive")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shellgate_store::KeyRole;

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
        assert_eq!(config.server.listen.port(), 9999);
        assert_eq!(config.sandbox.retention_days, 3);
        assert_eq!(config.sandbox.idle_suspend_after_secs, 300);
        assert_eq!(
            config.server.seeded_keys(),
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
        assert!(config.store.object_location().unwrap().is_none());
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
        let (location, settings) = config.store.object_location().unwrap().unwrap();
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
                    store: StoreSettings {
                        object_store: "bucket/prod".into(),
                        ..StoreSettings::default()
                    },
                    ..Config::default()
                },
                "object_store",
            ),
            (
                Config {
                    store: StoreSettings {
                        s3_allow_http: false,
                        ..config.store.clone()
                    },
                    ..config.clone()
                },
                "s3_allow_http",
            ),
            (
                Config {
                    store: StoreSettings {
                        s3_endpoint: "minio:9000".into(),
                        ..config.store.clone()
                    },
                    ..config.clone()
                },
                "s3_endpoint",
            ),
            (
                Config {
                    store: StoreSettings {
                        s3_secret_access_key: Secret::default(),
                        ..config.store.clone()
                    },
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
            server: ServerSettings {
                api_keys: keys.to_owned(),
                ..ServerSettings::default()
            },
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
        assert_eq!(config.sandbox.container_cpu_ceiling(), Some(2.5));
        assert!(Config::default().validate().is_ok());
        for (exceptions, valid) in [
            ("mirror.internal, 10.20.0.0/16, fd00:1::/64", true),
            ("10.20.0.0/33", false),
            ("0.0.0.0/0", false),
            ("not a name", false),
        ] {
            let config = Config {
                egress: EgressSettings {
                    egress_private_exceptions: exceptions.into(),
                    ..EgressSettings::default()
                },
                ..Config::default()
            };
            assert_eq!(config.validate().is_ok(), valid, "{exceptions}");
        }
        assert_eq!(
            Config::default().egress.egress_log_retention_secs,
            30 * 86_400
        );
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
        assert_eq!(config.model.upstream_protocol, Protocol::Anthropic);
        assert_eq!(config.sandbox.max_memory_per_project.bytes(), 64 << 30);
        assert_eq!(
            config.sandbox.sandbox_memory_ceiling.bytes(),
            Some(16 << 30)
        );
        assert_eq!(
            config.model.guardrail_input_default.action(),
            Some(shellgate_model::guardrail::Action::Block)
        );
        assert_eq!(config.server.log_format, LogFormat::Text);
        let defaults = Config::load(None, env(&[])).unwrap();
        assert_eq!(defaults, Config::default());
        assert_eq!(defaults.sandbox.max_memory_per_project.bytes(), 1 << 40);
        assert_eq!(defaults.sandbox.sandbox_memory_ceiling.bytes(), None);
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
