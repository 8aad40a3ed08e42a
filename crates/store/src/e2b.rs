//! E2B's sandboxes (the `e2b_sandboxes` table): the record E2B's
//! API keeps beside a container — its access token, metadata, environment,
//! timeout (`end_at`) and pause state, and the create's idempotency key.
//! The row goes with its container (`delete_container`).

use std::collections::BTreeMap;

use crate::connection::Store;
use crate::error::{Result, StoreError};
use crate::sql::StoredText;
use crate::sql::{Row, ToParam};

/// An E2B sandbox's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bSandboxRow {
    /// The container it is (E2B's `sandboxID`).
    pub container_id: String,
    pub project: String,
    /// The `templateID` the create named, as named.
    pub template_id: String,
    pub metadata: BTreeMap<String, String>,
    /// Added to every command and interpreter context it runs.
    pub env_vars: BTreeMap<String, String>,
    /// The `envdAccessToken` its in-sandbox API requires. Kept as it is, not
    /// hashed: `connect` returns it again, to the project's keys only, and it
    /// opens nothing those keys do not open already (like `port_token`).
    pub access_token: String,
    /// At `end_at`: pause (true) or kill (false).
    pub auto_pause: bool,
    /// Paused, it is resumed by the next call of its in-sandbox API
    /// (`autoResume`), not only by `connect`.
    pub auto_resume: bool,
    pub created_at: i64,
    /// When it last started (create or resume).
    pub started_at: i64,
    /// When its timeout ends it (unix seconds).
    pub end_at: i64,
    pub paused: bool,
    pub idempotency_key: Option<String>,
    /// The SHA-256 (hex) of the create's body, to tell a replay from a
    /// different request reusing the key.
    pub request_hash: Option<String>,
    /// Its ports answer anyone (E2B's `allowPublicTraffic`); else only a
    /// request with its traffic access token.
    pub public_traffic: bool,
}

/// A JSON object of strings, as stored.
struct StringMap(BTreeMap<String, String>);

impl StoredText for StringMap {
    fn from_text(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok().map(Self)
    }
}

fn map_text(map: &BTreeMap<String, String>, column: &'static str) -> Result<String> {
    serde_json::to_string(map).map_err(|e| StoreError::Corrupt {
        table: "e2b_sandboxes",
        column,
        value: e.to_string(),
    })
}

pub(crate) const COLUMNS: &str = "container_id, project, template_id, metadata, env_vars, access_token, \
     auto_pause, created_at, started_at, end_at, paused, idempotency_key, request_hash, auto_resume, public_traffic";

pub(crate) fn sandbox_row(row: &Row) -> Result<E2bSandboxRow> {
    Ok(E2bSandboxRow {
        container_id: row.get(0)?,
        project: row.get(1)?,
        template_id: row.get(2)?,
        metadata: row.text::<StringMap>(3, "e2b_sandboxes", "metadata")?.0,
        env_vars: row.text::<StringMap>(4, "e2b_sandboxes", "env_vars")?.0,
        access_token: row.get(5)?,
        auto_pause: row.get(6)?,
        created_at: row.get(7)?,
        started_at: row.get(8)?,
        end_at: row.get(9)?,
        paused: row.get(10)?,
        idempotency_key: row.get(11)?,
        request_hash: row.get(12)?,
        auto_resume: row.get(13)?,
        public_traffic: row.get(14)?,
    })
}

/// What a sandbox listing keeps: every given condition must hold.
#[derive(Debug, Clone, Default)]
pub struct E2bListFilter {
    /// Each `(key, value)` must be in the sandbox's metadata.
    pub metadata: Vec<(String, String)>,
    /// `Some(true)`: only paused ones; `Some(false)`: only running ones.
    pub paused: Option<bool>,
    pub started_after: Option<i64>,
    pub template_id: Option<String>,
    /// At most this many (the caller bounds it).
    pub limit: u32,
    /// After this sandbox of the listing (its id, the previous page's token).
    pub after: Option<String>,
    /// Oldest first (else newest first).
    pub ascending: bool,
}

impl Store {
    /// Records a new sandbox, of a container whose row is written. Its
    /// idempotency key, if any, is taken from an older sandbox of the
    /// project that still holds it (the caller looked for a recent one
    /// first: an older one no longer replays).
    pub fn insert_e2b_sandbox(&self, row: &E2bSandboxRow) -> Result<()> {
        let metadata = map_text(&row.metadata, "metadata")?;
        let env_vars = map_text(&row.env_vars, "env_vars")?;
        self.transaction(|sql| {
            if let Some(key) = &row.idempotency_key {
                sql.execute(
                    "UPDATE e2b_sandboxes SET idempotency_key = NULL WHERE project = ?1 AND idempotency_key = ?2",
                    &[&row.project, key],
                )?;
            }
            sql.execute(
                &format!(
                    "INSERT INTO e2b_sandboxes ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
                ),
                &[
                    &row.container_id,
                    &row.project,
                    &row.template_id,
                    &metadata,
                    &env_vars,
                    &row.access_token,
                    &row.auto_pause,
                    &row.created_at,
                    &row.started_at,
                    &row.end_at,
                    &row.paused,
                    &row.idempotency_key,
                    &row.request_hash,
                    &row.auto_resume,
                    &row.public_traffic,
                ],
            )?;
            // Its container is never idle-expired: marked for the
            // sweeper's expiry index (`sweep.rs`), which leaves it out.
            sql.execute(
                "UPDATE containers SET e2b_sandbox = 1 WHERE id = ?1",
                &[&row.container_id],
            )?;
            Ok(())
        })
    }

    /// A sandbox of `project`.
    pub fn e2b_sandbox(&self, project: &str, id: &str) -> Result<Option<E2bSandboxRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM e2b_sandboxes WHERE container_id = ?1 AND project = ?2"
                ),
                &[&id, &project],
                sandbox_row,
            )
        })
    }

    /// A sandbox whatever its project, for the in-sandbox API's access
    /// check (which compares the project's token, and answers the same 404
    /// for a sandbox that is not there and one whose token is not given).
    pub fn e2b_sandbox_by_id(&self, id: &str) -> Result<Option<E2bSandboxRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {COLUMNS} FROM e2b_sandboxes WHERE container_id = ?1"),
                &[&id],
                sandbox_row,
            )
        })
    }

    /// The project of the sandbox whose access token is `token`, if any: the
    /// access check asks it of a token that is not the named sandbox's.
    pub fn e2b_project_of_access_token(&self, token: &str) -> Result<Option<String>> {
        self.read(|sql| {
            sql.query_opt(
                "SELECT project FROM e2b_sandboxes WHERE access_token = ?1",
                &[&token],
                |row| row.get(0),
            )
        })
    }

    /// The project's sandbox created with idempotency key `key` at or after
    /// `since`.
    pub fn e2b_sandbox_by_idempotency_key(
        &self,
        project: &str,
        key: &str,
        since: i64,
    ) -> Result<Option<E2bSandboxRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM e2b_sandboxes WHERE project = ?1 AND idempotency_key = ?2 AND created_at >= ?3"
                ),
                &[&project, &key, &since],
                sandbox_row,
            )
        })
    }

    /// Every sandbox (for the lifecycle sweeper).
    pub fn all_e2b_sandboxes(&self) -> Result<Vec<E2bSandboxRow>> {
        self.read(|sql| {
            sql.query(
                &format!("SELECT {COLUMNS} FROM e2b_sandboxes"),
                &[],
                sandbox_row,
            )
        })
    }

    /// A page of the project's sandboxes that pass `filter`, in creation
    /// order, and whether more follow.
    pub fn list_e2b_sandboxes(
        &self,
        project: &str,
        filter: &E2bListFilter,
    ) -> Result<(Vec<E2bSandboxRow>, bool)> {
        self.read(|sql| {
            let cursor = match &filter.after {
                Some(after) => Some(
                    sql.query_opt(
                        "SELECT rowid FROM e2b_sandboxes WHERE container_id = ?1 AND project = ?2",
                        &[after, &project],
                        |row| row.get::<i64>(0),
                    )?
                    // A token of another listing, or of a sandbox gone
                    // since: ending the listing silently would look like
                    // its end.
                    .ok_or_else(|| StoreError::UnknownCursor(after.clone()))?,
                ),
                None => None,
            };
            let (comparison, order) = if filter.ascending {
                (">", "ASC")
            } else {
                ("<", "DESC")
            };
            let d = sql.dialect();
            // Only placeholders carry input; the SQL around them is
            // constant.
            let mut query = format!("SELECT {COLUMNS} FROM e2b_sandboxes WHERE project = ?");
            let mut values: Vec<&dyn ToParam> = vec![&project];
            for (key, value) in &filter.metadata {
                query.push_str(" AND ");
                query.push_str(&d.json_has_entry("metadata", "?", "?"));
                values.push(key);
                values.push(value);
            }
            let paused = filter.paused;
            if let Some(paused) = &paused {
                query.push_str(" AND paused = ?");
                values.push(paused);
            }
            if let Some(after) = &filter.started_after {
                query.push_str(" AND started_at >= ?");
                values.push(after);
            }
            if let Some(template) = &filter.template_id {
                query.push_str(" AND template_id = ?");
                values.push(template);
            }
            if let Some(cursor) = &cursor {
                query.push_str(&format!(" AND rowid {comparison} ?"));
                values.push(cursor);
            }
            query.push_str(&format!(" ORDER BY rowid {order} LIMIT ?"));
            let limit = i64::from(filter.limit) + 1;
            values.push(&limit);
            let mut rows = sql.query(&query, &values, sandbox_row)?;
            let has_more = rows.len() > filter.limit as usize;
            rows.truncate(filter.limit as usize);
            Ok((rows, has_more))
        })
    }

    /// Moves a sandbox's timeout.
    pub fn set_e2b_end_at(&self, id: &str, end_at: i64) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                "UPDATE e2b_sandboxes SET end_at = ?2 WHERE container_id = ?1",
                &[&id, &end_at],
            )
        })?;
        Ok(())
    }

    /// Marks a sandbox paused.
    pub fn pause_e2b_sandbox(&self, id: &str) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                "UPDATE e2b_sandboxes SET paused = 1 WHERE container_id = ?1",
                &[&id],
            )
        })?;
        Ok(())
    }

    /// Marks a sandbox running again, started at `now`, ending at `end_at`.
    pub fn resume_e2b_sandbox(&self, id: &str, now: i64, end_at: i64) -> Result<()> {
        self.write(|sql| {
            sql.execute(
                "UPDATE e2b_sandboxes SET paused = 0, started_at = ?2, end_at = ?3 WHERE container_id = ?1",
                &[&id, &now, &end_at],
            )
        })?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sandbox(id: &str, project: &str, metadata: &[(&str, &str)]) -> E2bSandboxRow {
        E2bSandboxRow {
            container_id: id.into(),
            project: project.into(),
            template_id: "base".into(),
            metadata: metadata
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            env_vars: BTreeMap::from([("A".into(), "1".into())]),
            access_token: format!("tok-{id}"),
            auto_pause: false,
            auto_resume: false,
            created_at: 10,
            started_at: 10,
            public_traffic: true,
            end_at: 310,
            paused: false,
            idempotency_key: None,
            request_hash: None,
        }
    }

    #[test]
    fn a_starting_node_reads_only_its_unpaused_sandboxes() -> Result<()> {
        for store in crate::testing::stores() {
            for (id, node) in [("cntr_a", "n1"), ("cntr_p", "n1"), ("cntr_o", "n2")] {
                let mut container = crate::tests::container_row(id, "alpha");
                container.node_id = node.into();
                store.insert_container(&container)?;
                store.insert_e2b_sandbox(&sandbox(id, "alpha", &[]))?;
            }
            store.pause_e2b_sandbox("cntr_p")?;
            let ids = |node: &str| -> Result<Vec<String>> {
                Ok(store
                    .running_e2b_sandboxes_ending(node, i64::MAX)?
                    .into_iter()
                    .map(|row| row.container_id)
                    .collect())
            };
            assert_eq!(ids("n1")?, vec!["cntr_a".to_owned()]);
            assert_eq!(ids("n2")?, vec!["cntr_o".to_owned()]);
            assert!(ids("n3")?.is_empty());
        }
        Ok(())
    }

    #[test]
    fn sandboxes_are_kept_per_project() -> Result<()> {
        for store in crate::testing::stores() {
            let row = sandbox("cntr_a", "alpha", &[("team", "x")]);
            store.insert_e2b_sandbox(&row)?;
            assert_eq!(store.e2b_sandbox("alpha", "cntr_a")?, Some(row.clone()));
            assert_eq!(store.e2b_sandbox("beta", "cntr_a")?, None);
            assert_eq!(store.e2b_sandbox_by_id("cntr_a")?, Some(row));
            assert_eq!(
                store.e2b_project_of_access_token("tok-cntr_a")?.as_deref(),
                Some("alpha")
            );
            assert_eq!(store.e2b_project_of_access_token("tok-other")?, None);
            store.set_e2b_end_at("cntr_a", 999)?;
            store.pause_e2b_sandbox("cntr_a")?;
            let paused = store.e2b_sandbox("alpha", "cntr_a")?.expect("kept");
            assert!(paused.paused);
            assert_eq!(paused.end_at, 999);
            store.resume_e2b_sandbox("cntr_a", 50, 350)?;
            let resumed = store.e2b_sandbox("alpha", "cntr_a")?.expect("kept");
            assert!(!resumed.paused);
            assert_eq!((resumed.started_at, resumed.end_at), (50, 350));
        }
        Ok(())
    }

    #[test]
    fn listings_filter_by_metadata_and_state_and_page() -> Result<()> {
        for store in crate::testing::stores() {
            for (i, team) in ["x", "y", "x", "x"].iter().enumerate() {
                store.insert_e2b_sandbox(&sandbox(
                    &format!("cntr_{i}"),
                    "alpha",
                    &[("team", team)],
                ))?;
            }
            store.insert_e2b_sandbox(&sandbox("cntr_other", "beta", &[("team", "x")]))?;
            store.pause_e2b_sandbox("cntr_3")?;
            let mut filter = E2bListFilter {
                metadata: vec![("team".into(), "x".into())],
                limit: 1,
                ascending: true,
                ..E2bListFilter::default()
            };
            let (first, more) = store.list_e2b_sandboxes("alpha", &filter)?;
            assert_eq!(first[0].container_id, "cntr_0");
            assert!(more);
            filter.after = Some("cntr_0".into());
            filter.limit = 10;
            let (rest, more) = store.list_e2b_sandboxes("alpha", &filter)?;
            let ids: Vec<_> = rest.iter().map(|r| r.container_id.as_str()).collect();
            assert_eq!(ids, ["cntr_2", "cntr_3"]);
            assert!(!more);
            filter.after = None;
            filter.paused = Some(false);
            let (running, _) = store.list_e2b_sandboxes("alpha", &filter)?;
            assert_eq!(running.len(), 2);
            // Another project's sandbox is no cursor here.
            filter.after = Some("cntr_other".into());
            assert!(store.list_e2b_sandboxes("alpha", &filter).is_err());
        }
        Ok(())
    }

    #[test]
    fn an_idempotency_key_replays_only_while_recent() -> Result<()> {
        for store in crate::testing::stores() {
            let mut first = sandbox("cntr_a", "alpha", &[]);
            first.idempotency_key = Some("key-1".into());
            store.insert_e2b_sandbox(&first)?;
            assert!(store
                .e2b_sandbox_by_idempotency_key("alpha", "key-1", 5)?
                .is_some());
            assert!(store
                .e2b_sandbox_by_idempotency_key("beta", "key-1", 5)?
                .is_none());
            assert!(store
                .e2b_sandbox_by_idempotency_key("alpha", "key-1", 11)?
                .is_none());
            // An old holder of the key gives it up to the new sandbox.
            let mut second = sandbox("cntr_b", "alpha", &[]);
            second.idempotency_key = Some("key-1".into());
            second.created_at = 100;
            store.insert_e2b_sandbox(&second)?;
            let holder = store.e2b_sandbox_by_idempotency_key("alpha", "key-1", 0)?;
            assert_eq!(holder.map(|r| r.container_id), Some("cntr_b".into()));
        }
        Ok(())
    }
}
