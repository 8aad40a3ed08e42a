//! `shellgate snapshot`: a running server's snapshots, through its HTTP
//! API (`/v1/snapshots`, `/v1/containers/{id}/snapshots`) with a project's
//! key. The API, not the store: a snapshot freezes and copies a container
//! the serving process owns, so only that process can take one.

use std::time::Duration;

use anyhow::{Context, Result};
use shellgate_wire::{CreateSnapshot, Deleted, ErrorEnvelope, List, Snapshot};

/// Where the server is and whose snapshots: every `snapshot` command's.
#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// The server's address, e.g. http://127.0.0.1:8080 (a trailing `/v1`
    /// is accepted).
    #[arg(
        long,
        global = true,
        env = "SHELLGATE_BASE_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    base_url: String,
    /// A project's API key (its snapshots are the ones listed, taken and
    /// deleted).
    #[arg(long, global = true, env = "SHELLGATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    #[command(subcommand)]
    command: SnapshotCommand,
}

#[derive(clap::Subcommand)]
enum SnapshotCommand {
    /// List the project's snapshots, oldest first: id, name, the container
    /// it was taken from, size in bytes and creation time (Unix seconds),
    /// tab-separated.
    List,
    /// Take a snapshot of a container (running or suspended) and print it
    /// as `list` does.
    Create {
        /// The container's id.
        container: String,
        /// The snapshot's name (the container's with a suffix when omitted).
        #[arg(long)]
        name: Option<String>,
    },
    /// Delete a snapshot and its files.
    Delete {
        /// The snapshot's id.
        id: String,
    },
}

/// Longest wait for an answer: a snapshot of a big container copies its
/// files before the server answers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// The most snapshots a page asks for (the API's most).
const PAGE: u32 = 100;

pub async fn run(args: SnapshotArgs) -> Result<()> {
    let api = Api::new(&args.base_url, args.api_key)?;
    match args.command {
        SnapshotCommand::List => {
            let mut after: Option<String> = None;
            loop {
                let mut query = vec![("limit", PAGE.to_string()), ("order", "asc".to_owned())];
                if let Some(after) = &after {
                    query.push(("after", after.clone()));
                }
                let page: List<Snapshot> = api
                    .send(api.http.get(api.url("/snapshots")).query(&query))
                    .await?;
                for snapshot in &page.data {
                    println!("{}", line(snapshot));
                }
                if !page.has_more || page.last_id.is_none() {
                    return Ok(());
                }
                after = page.last_id;
            }
        }
        SnapshotCommand::Create { container, name } => {
            let body = CreateSnapshot {
                name,
                ..CreateSnapshot::default()
            };
            let path = format!("/containers/{}/snapshots", segment(&container));
            let snapshot: Snapshot = api.send(api.http.post(api.url(&path)).json(&body)).await?;
            println!("{}", line(&snapshot));
            Ok(())
        }
        SnapshotCommand::Delete { id } => {
            let path = format!("/snapshots/{}", segment(&id));
            let deleted: Deleted = api.send(api.http.delete(api.url(&path))).await?;
            eprintln!("{} deleted", deleted.id);
            Ok(())
        }
    }
}

/// A snapshot as `list` prints it.
fn line(snapshot: &Snapshot) -> String {
    format!(
        "{}\t{}\t{}\t{}\t{}",
        snapshot.id, snapshot.name, snapshot.container_id, snapshot.size_bytes, snapshot.created_at
    )
}

/// An id as one path segment (ids are ASCII words; anything else is
/// escaped so that it cannot reach another route).
fn segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

struct Api {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
}

impl Api {
    fn new(base_url: &str, api_key: Option<String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("cannot make an HTTP client")?;
        let root = base_url.trim_end_matches('/');
        let root = root.strip_suffix("/v1").unwrap_or(root);
        Ok(Self {
            http,
            base: format!("{root}/v1"),
            api_key,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends the request with the key; the answer's body, or the server's
    /// error message with its status.
    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T> {
        let request = match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        };
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.base))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .with_context(|| format!("cannot read the answer of {}", self.base))?;
        if !status.is_success() {
            let message = serde_json::from_str::<ErrorEnvelope>(&body)
                .map(|envelope| envelope.error.message)
                .unwrap_or(body);
            anyhow::bail!("the server answered {status}: {message}");
        }
        serde_json::from_str(&body)
            .with_context(|| format!("the server's answer is not what was expected: {body}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_stays_one_path_segment() {
        assert_eq!(segment("snap_0123abc-x"), "snap_0123abc-x");
        assert_eq!(segment("../keys?a=b"), "%2E%2E%2Fkeys%3Fa%3Db");
    }

    #[test]
    fn the_base_url_may_end_in_v1() {
        for given in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/",
        ] {
            let api = Api::new(given, None).expect("a client");
            assert_eq!(
                api.url("/snapshots"),
                "http://h:1/v1/snapshots",
                "for {given}"
            );
        }
    }
}
