//! The start-up summary `serve` gives once it listens: where it listens,
//! where the API key is, the data directory, the upstream routes (or that
//! there are none, so the model APIs answer 503) and the default image's
//! status. Printed as a block of text for a person at a terminal, or logged
//! as one structured event for a log collector.
//!
//! It never holds a configured secret: upstream keys are not read, a URL's
//! user name, password and query are cut off, and an API key is shown only
//! when it was just generated (the README promises a first start prints it).
//!
//! Each phase of a start logs its duration as a `start-up phase` event
//! ([`timed`]), what an operator reads when a start is slow.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use shellgate_model::upstream::Protocol;
use shellgate_sandbox_api::image::HOST_IMAGE;

use crate::config::Config;
use crate::state::AppState;

/// Runs one phase of the start-up, then logs how long it took as a
/// `start-up phase` event (what an operator reads when a start is slow).
pub async fn timed<T>(phase: &'static str, work: impl std::future::Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let outcome = work.await;
    let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::info!(phase, millis, "start-up phase");
    outcome
}

/// The name of the file a first start writes its generated key to.
pub const INITIAL_KEY_FILE: &str = "initial-api-key";

/// Where clients' API keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiKeys {
    /// Made by this start (there were none); shown once.
    Generated { key: String, file: PathBuf },
    /// The configuration's `api_keys` (never shown), and how many.
    Configured { count: usize },
    /// Made earlier: by a first start (still in its file) or by
    /// `shellgate keys create` (the store keeps only their hashes).
    Stored { count: u64, file: Option<PathBuf> },
}

/// One upstream route, without its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The model-name prefix (`None`: the default route, every other model).
    pub prefix: Option<String>,
    /// The URL, without credentials or query.
    pub url: String,
    pub protocol: Protocol,
}

/// The default image, as far as a start can tell.
#[derive(Debug, Clone, PartialEq)]
pub enum ImageStatus {
    Ready,
    /// Being built in the background (a fraction done). `previous`: an
    /// earlier build is there (an out-of-date one being rebuilt), which
    /// containers keep using meanwhile; else they use `host`.
    Building {
        progress: f64,
        previous: bool,
    },
    /// A background build failed; containers keep the `previous` build, or
    /// use `host` when there is none.
    Failed {
        message: String,
        previous: bool,
    },
    /// Not there and not being built (containers use `host`).
    Missing,
}

/// What `serve` says once it listens.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub listen: SocketAddr,
    pub api_keys: ApiKeys,
    pub data_dir: PathBuf,
    /// Where blobs live (the object store, described without credentials).
    pub objects: String,
    pub upstreams: Vec<Route>,
    pub default_image: String,
    pub image_status: ImageStatus,
}

/// What the model APIs do without an upstream (the summary says it).
const NO_UPSTREAM: &str =
    "none configured: the model APIs will answer 503 (set upstream_url or [[upstreams]])";

impl Summary {
    /// Gathers the summary of a server opened with `generated_key` (what
    /// [`crate::open`] made, if anything), listening on `listen`.
    pub async fn gather(
        state: &Arc<AppState>,
        listen: SocketAddr,
        generated_key: Option<String>,
    ) -> Self {
        let config = &state.config;
        let key_file = config.server.data_dir.join(INITIAL_KEY_FILE);
        let configured = config.server.seeded_keys().len();
        // The file system is read on a blocking thread, as the store is.
        let engine = Arc::clone(&state.engine);
        let file = key_file.clone();
        let (images, key_file_there) = tokio::task::spawn_blocking(move || {
            let there = std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file());
            (engine.images(), there)
        })
        .await
        .unwrap_or_default();
        let api_keys = match generated_key {
            Some(key) => ApiKeys::Generated {
                key,
                file: key_file,
            },
            None if configured > 0 => ApiKeys::Configured { count: configured },
            None => ApiKeys::Stored {
                count: state.db(|store| store.key_count()).await.unwrap_or(0),
                file: key_file_there.then_some(key_file),
            },
        };
        let build = state
            .default_image_build
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let default_image = config.sandbox.default_image.clone();
        let present = default_image == HOST_IMAGE || images.iter().any(|i| i.name == default_image);
        let image_status = match build {
            Some(build) if build.status == "building" => ImageStatus::Building {
                progress: build.progress,
                previous: present,
            },
            Some(build) if build.status == "failed" => ImageStatus::Failed {
                message: build.message,
                previous: present,
            },
            _ if present => ImageStatus::Ready,
            _ => ImageStatus::Missing,
        };
        Self {
            listen,
            api_keys,
            data_dir: config.server.data_dir.clone(),
            objects: state.objects.describe(),
            upstreams: routes(config),
            default_image,
            image_status,
        }
    }

    /// The summary as lines of text, for a person.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "shellgate is serving on http://{listen} (API base URL http://{listen}/v1)",
            listen = self.listen
        )];
        lines.push(format!("  API key:       {}", self.keys_text()));
        lines.push(format!("  data dir:      {}", self.data_dir.display()));
        lines.push(format!("  objects:       {}", self.objects));
        match self.upstreams.as_slice() {
            [] => lines.push(format!("  upstreams:     {NO_UPSTREAM}")),
            routes => {
                for (i, route) in routes.iter().enumerate() {
                    let label = if i == 0 { "  upstreams:" } else { "" };
                    lines.push(format!("{label:<17}{}", route_text(route)));
                }
            }
        }
        lines.push(format!(
            "  default image: {} ({})",
            self.default_image,
            self.image_text()
        ));
        lines
    }

    /// Logs the summary as one `info` event with a field per part (the
    /// JSON log's form of [`Summary::lines`]).
    pub fn log(&self) {
        let upstreams = if self.upstreams.is_empty() {
            NO_UPSTREAM.to_owned()
        } else {
            self.upstreams
                .iter()
                .map(route_text)
                .collect::<Vec<_>>()
                .join("; ")
        };
        tracing::info!(
            listen = %self.listen,
            api_key = %self.keys_text(),
            data_dir = %self.data_dir.display(),
            objects = %self.objects,
            upstreams = %upstreams,
            default_image = %self.default_image,
            default_image_status = %self.image_text(),
            "shellgate is serving"
        );
    }

    fn keys_text(&self) -> String {
        match &self.api_keys {
            ApiKeys::Generated { key, file } => format!(
                "created {key} for project \"default\" (shown once; also in {})",
                file.display()
            ),
            ApiKeys::Configured { count } => {
                format!("{count} from the configuration (api_keys / SHELLGATE_API_KEYS)")
            }
            ApiKeys::Stored {
                file: Some(file), ..
            } => format!("the first start's key is in {}", file.display()),
            ApiKeys::Stored { count, file: None } => {
                format!("{count} in the store (shellgate keys create --project NAME makes another)")
            }
        }
    }

    fn image_text(&self) -> String {
        match &self.image_status {
            ImageStatus::Ready => "ready".to_owned(),
            ImageStatus::Building { progress, previous } => format!(
                "building, {:.0}%; containers use {} until it is ready",
                progress * 100.0,
                fallback(*previous)
            ),
            ImageStatus::Failed { message, previous } => {
                format!(
                    "build failed, containers use {}: {message}",
                    fallback(*previous)
                )
            }
            ImageStatus::Missing => format!(
                "missing: containers use `host`; `shellgate image build {}` makes it",
                self.default_image
            ),
        }
    }
}

/// What containers use while the default image is not (yet) built:
/// its previous build when there is one, else `host`.
fn fallback(previous: bool) -> &'static str {
    match previous {
        true => "its previous build",
        false => "`host`",
    }
}

/// The configuration's upstream routes, the prefixed ones first (as the
/// router tries them), then the default.
fn routes(config: &Config) -> Vec<Route> {
    let mut routes: Vec<Route> = config
        .model
        .upstreams
        .iter()
        .map(|route| Route {
            prefix: Some(route.prefix.clone()),
            url: without_credentials(&route.url),
            protocol: route.protocol,
        })
        .collect();
    routes.sort_by_key(|route| std::cmp::Reverse(route.prefix.as_ref().map(String::len)));
    if !config.model.upstream_url.is_empty() {
        // What the router picks when no prefix matches.
        routes.push(Route {
            prefix: None,
            url: without_credentials(&config.model.upstream_url),
            protocol: config.model.upstream_protocol,
        });
    }
    routes
}

fn route_text(route: &Route) -> String {
    let protocol = match route.protocol {
        Protocol::Chat => "chat",
        Protocol::Responses => "responses",
        Protocol::Anthropic => "anthropic",
    };
    match &route.prefix {
        Some(prefix) => format!("{prefix}* -> {} ({protocol})", route.url),
        None => format!("(every other model) -> {} ({protocol})", route.url),
    }
}

/// A URL as it may be shown: no `user:password@`, no query or fragment
/// (either may carry a key).
fn without_credentials(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_what_may_hold_a_key() {
        assert_eq!(
            without_credentials("https://user:sk-secret@api.example.com/v1?key=sk-2#x"),
            "https://api.example.com/v1"
        );
        assert_eq!(
            without_credentials("http://127.0.0.1:9000"),
            "http://127.0.0.1:9000"
        );
        assert_eq!(
            without_credentials("http://h/a@b/c"),
            "http://h/a@b/c",
            "an @ in the path is not a credential"
        );
    }

    fn summary(upstreams: Vec<Route>, api_keys: ApiKeys) -> Summary {
        Summary {
            listen: "127.0.0.1:8080".parse().unwrap_or_else(|_| unreachable!()),
            api_keys,
            data_dir: PathBuf::from("/var/lib/shellgate"),
            objects: "s3://blobs/prod at https://minio.internal".to_owned(),
            upstreams,
            default_image: "debian-12".to_owned(),
            image_status: ImageStatus::Building {
                progress: 0.25,
                previous: false,
            },
        }
    }

    #[test]
    fn a_rebuild_says_containers_keep_the_previous_build() {
        let mut rebuilt = summary(Vec::new(), ApiKeys::Configured { count: 1 });
        rebuilt.image_status = ImageStatus::Failed {
            message: "mmdebstrap failed".to_owned(),
            previous: true,
        };
        let text = rebuilt.lines().join("\n");
        assert!(
            text.contains("build failed, containers use its previous build: mmdebstrap failed"),
            "{text}"
        );
        assert!(!text.contains("`host`"), "{text}");
    }

    #[test]
    fn the_summary_names_each_part_and_no_upstream_means_503() {
        let text = summary(Vec::new(), ApiKeys::Configured { count: 2 })
            .lines()
            .join("\n");
        assert!(text.contains("http://127.0.0.1:8080/v1"), "{text}");
        assert!(text.contains("2 from the configuration"), "{text}");
        assert!(text.contains("data dir:      /var/lib/shellgate"), "{text}");
        assert!(
            text.contains("objects:       s3://blobs/prod at https://minio.internal"),
            "{text}"
        );
        assert!(
            text.contains("none configured: the model APIs will answer 503"),
            "{text}"
        );
        assert!(text.contains("debian-12 (building, 25%"), "{text}");
        assert!(text.contains("containers use `host` until"), "{text}");
        let routes = vec![
            Route {
                prefix: Some("claude-".to_owned()),
                url: "https://api.anthropic.com".to_owned(),
                protocol: Protocol::Anthropic,
            },
            Route {
                prefix: None,
                url: "http://127.0.0.1:9000/v1".to_owned(),
                protocol: Protocol::Chat,
            },
        ];
        let text = summary(
            routes,
            ApiKeys::Generated {
                key: "sg-new".to_owned(),
                file: PathBuf::from("/d/initial-api-key"),
            },
        )
        .lines()
        .join("\n");
        assert!(
            text.contains("claude-* -> https://api.anthropic.com (anthropic)"),
            "{text}"
        );
        assert!(
            text.contains("(every other model) -> http://127.0.0.1:9000/v1 (chat)"),
            "{text}"
        );
        assert!(text.contains("created sg-new"), "{text}");
    }
}
