//! Where state lives beyond the process: the metadata store (SQLite or
//! Postgres) and the object store for blobs (the data directory or S3).

use serde::{Deserialize, Serialize};
use shellgate_objects::{S3Location, S3Settings};

use super::{ConfigError, Secret};

/// The metadata store and the object store.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
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

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            database_url: Secret::default(),
            database_schema: String::new(),
            database_pool_size: 16,
            database_ca_file: String::new(),
            object_store: String::new(),
            s3_endpoint: String::new(),
            s3_region: String::new(),
            s3_access_key_id: String::new(),
            s3_secret_access_key: Secret::default(),
            s3_allow_http: false,
        }
    }
}

impl StoreSettings {
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
}
