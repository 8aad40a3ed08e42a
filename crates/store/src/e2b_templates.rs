//! E2B's templates (the `e2b_templates` table): a project's template by
//! name, its latest build (id, status, the build's steps as the server
//! serialized them, why it failed) and the size of the image it made
//! (`layer_bytes`). A build's log is its image build's (`image_builds`).
//! A name is one template of its project: building the name again keeps
//! its `template_id` and gives it a new build.

use crate::connection::Store;
use crate::error::Result;
use crate::sql::Row;

/// A template build's status, as E2B names them.
pub const TEMPLATE_WAITING: &str = "waiting";
pub const TEMPLATE_BUILDING: &str = "building";
pub const TEMPLATE_READY: &str = "ready";
pub const TEMPLATE_ERROR: &str = "error";

/// A project's template and its latest build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bTemplateRow {
    pub template_id: String,
    pub project: String,
    /// The name it was built under (E2B's alias): unique in its project.
    pub name: String,
    pub build_id: String,
    /// `waiting`, `building`, `ready` or `error`.
    pub status: String,
    /// The build's steps, start and ready commands (JSON the server writes
    /// and reads; `{}` before the build is started).
    pub spec: String,
    /// Why the build failed.
    pub reason: Option<String>,
    /// The step that failed (E2B's `step`, its 1-based index).
    pub failed_step: Option<String>,
    /// Bytes of the image the last good build made.
    pub layer_bytes: i64,
    /// The secret the upload URLs of its COPY files carry.
    pub upload_token: String,
    pub created_at: i64,
    pub updated_at: i64,
}

const COLUMNS: &str = "template_id, project, name, build_id, status, spec, reason, failed_step, \
     layer_bytes, upload_token, created_at, updated_at";

fn template_row(row: &Row) -> Result<E2bTemplateRow> {
    Ok(E2bTemplateRow {
        template_id: row.get(0)?,
        project: row.get(1)?,
        name: row.get(2)?,
        build_id: row.get(3)?,
        status: row.get(4)?,
        spec: row.get(5)?,
        reason: row.get(6)?,
        failed_step: row.get(7)?,
        layer_bytes: row.get(8)?,
        upload_token: row.get(9)?,
        created_at: row.get(10)?,
        updated_at: row.get(11)?,
    })
}

impl Store {
    /// Records a new build of `row.name`: a new template, or a new build of
    /// the project's template of that name (its id kept, its status back to
    /// `waiting`). Answers the row as stored.
    pub fn begin_e2b_template_build(&self, row: &E2bTemplateRow) -> Result<E2bTemplateRow> {
        self.transaction(|sql| {
            let existing = sql.query_opt(
                &format!("SELECT {COLUMNS} FROM e2b_templates WHERE project = ?1 AND name = ?2"),
                &[&row.project, &row.name],
                template_row,
            )?;
            if let Some(existing) = existing {
                sql.execute(
                    "DELETE FROM e2b_template_logs WHERE build_id = ?1",
                    &[&existing.build_id],
                )?;
                sql.execute(
                    "UPDATE e2b_templates SET build_id = ?2, status = ?3, spec = '{}', reason = NULL, \
                     failed_step = NULL, upload_token = ?4, updated_at = ?5, node_id = '' \
                     WHERE template_id = ?1",
                    &[
                        &existing.template_id,
                        &row.build_id,
                        &row.status,
                        &row.upload_token,
                        &row.updated_at,
                    ],
                )?;
                return Ok(E2bTemplateRow {
                    build_id: row.build_id.clone(),
                    status: row.status.clone(),
                    spec: "{}".into(),
                    reason: None,
                    failed_step: None,
                    upload_token: row.upload_token.clone(),
                    updated_at: row.updated_at,
                    ..existing
                });
            }
            sql.execute(
                &format!(
                    "INSERT INTO e2b_templates ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
                ),
                &[
                    &row.template_id,
                    &row.project,
                    &row.name,
                    &row.build_id,
                    &row.status,
                    &row.spec,
                    &row.reason,
                    &row.failed_step,
                    &row.layer_bytes,
                    &row.upload_token,
                    &row.created_at,
                    &row.updated_at,
                ],
            )?;
            Ok(row.clone())
        })
    }

    /// The project's template whose id or name is `key`.
    pub fn e2b_template(&self, project: &str, key: &str) -> Result<Option<E2bTemplateRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM e2b_templates WHERE project = ?1 AND (template_id = ?2 OR name = ?2)"
                ),
                &[&project, &key],
                template_row,
            )
        })
    }

    /// A template whatever its project (an upload, authorised by the
    /// template's upload token rather than a key).
    pub fn e2b_template_by_id(&self, template_id: &str) -> Result<Option<E2bTemplateRow>> {
        self.read(|sql| {
            sql.query_opt(
                &format!("SELECT {COLUMNS} FROM e2b_templates WHERE template_id = ?1"),
                &[&template_id],
                template_row,
            )
        })
    }

    /// The project's templates, oldest first.
    pub fn e2b_templates(&self, project: &str) -> Result<Vec<E2bTemplateRow>> {
        self.read(|sql| {
            sql.query(
                &format!(
                    "SELECT {COLUMNS} FROM e2b_templates WHERE project = ?1 ORDER BY created_at, template_id"
                ),
                &[&project],
                template_row,
            )
        })
    }

    /// Starts build `build_id` of a template on node `node_id` (empty on
    /// a single box): `building`, with its spec. A build that is no longer
    /// the template's latest, or was started already, is left alone:
    /// whether it was started.
    pub fn start_e2b_template_build(
        &self,
        template_id: &str,
        build_id: &str,
        spec: &str,
        node_id: &str,
        now: i64,
    ) -> Result<bool> {
        self.write(|sql| {
            let changed = sql.execute(
                "UPDATE e2b_templates SET status = 'building', spec = ?3, node_id = ?4, \
                 updated_at = ?5 WHERE template_id = ?1 AND build_id = ?2 AND status = 'waiting'",
                &[&template_id, &build_id, &spec, &node_id, &now],
            )?;
            Ok(changed > 0)
        })
    }

    /// Ends build `build_id` of a template: `ready` with its image's size,
    /// or `error` with the reason and the failed step.
    pub fn finish_e2b_template_build(
        &self,
        template_id: &str,
        build_id: &str,
        outcome: std::result::Result<i64, (String, Option<String>)>,
        now: i64,
    ) -> Result<bool> {
        self.write(|sql| {
            let changed = match &outcome {
                Ok(bytes) => sql.execute(
                    "UPDATE e2b_templates SET status = 'ready', layer_bytes = ?3, reason = NULL, \
                     failed_step = NULL, updated_at = ?4 WHERE template_id = ?1 AND build_id = ?2",
                    &[&template_id, &build_id, bytes, &now],
                )?,
                Err((reason, step)) => sql.execute(
                    "UPDATE e2b_templates SET status = 'error', reason = ?3, failed_step = ?4, \
                     updated_at = ?5 WHERE template_id = ?1 AND build_id = ?2",
                    &[&template_id, &build_id, reason, step, &now],
                )?,
            };
            Ok(changed > 0)
        })
    }

    /// Marks the builds node `node_id` was running as failed with `reason`
    /// (it stopped mid-build), and on a single box (`node_id` empty) the
    /// ones waiting for their start too (a cluster's waiting build is no
    /// node's: any may start it): their ids, `(template_id, build_id)`.
    pub fn fail_unfinished_e2b_template_builds(
        &self,
        node_id: &str,
        reason: &str,
        now: i64,
    ) -> Result<Vec<(String, String)>> {
        self.transaction(|sql| fail_builds_on_node(sql, node_id, reason, now))
    }

    /// Removes a template and its build's log: whether it was there.
    pub fn delete_e2b_template(&self, project: &str, template_id: &str) -> Result<bool> {
        self.transaction(|sql| {
            sql.execute(
                "DELETE FROM e2b_template_logs WHERE build_id IN \
                 (SELECT build_id FROM e2b_templates WHERE project = ?1 AND template_id = ?2)",
                &[&project, &template_id],
            )?;
            let removed = sql.execute(
                "DELETE FROM e2b_templates WHERE project = ?1 AND template_id = ?2",
                &[&project, &template_id],
            )?;
            Ok(removed > 0)
        })
    }
}

/// Fails the builds node `node_id` was running with `reason`, in the
/// caller's transaction (its restart's, or its loss's), and on a single
/// box (`node_id` empty) those waiting too: their ids.
pub(crate) fn fail_builds_on_node(
    sql: &mut dyn crate::sql::Sql,
    node_id: &str,
    reason: &str,
    now: i64,
) -> Result<Vec<(String, String)>> {
    let statuses = if node_id.is_empty() {
        "'waiting', 'building'"
    } else {
        "'building'"
    };
    let unfinished = sql.query(
        &format!(
            "SELECT template_id, build_id FROM e2b_templates \
             WHERE node_id = ?1 AND status IN ({statuses})"
        ),
        &[&node_id],
        |row| Ok((row.get::<String>(0)?, row.get::<String>(1)?)),
    )?;
    sql.execute(
        &format!(
            "UPDATE e2b_templates SET status = 'error', reason = ?2, failed_step = NULL, \
             updated_at = ?3 WHERE node_id = ?1 AND status IN ({statuses})"
        ),
        &[&node_id, &reason, &now],
    )?;
    Ok(unfinished)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, name: &str, build: &str) -> E2bTemplateRow {
        E2bTemplateRow {
            template_id: id.into(),
            project: "p".into(),
            name: name.into(),
            build_id: build.into(),
            status: TEMPLATE_WAITING.into(),
            spec: "{}".into(),
            reason: None,
            failed_step: None,
            layer_bytes: 0,
            upload_token: format!("tok-{build}"),
            created_at: 1,
            updated_at: 1,
        }
    }

    #[test]
    fn a_name_keeps_its_id_across_builds_and_unfinished_builds_fail() {
        for store in crate::testing::stores() {
            one_store(&store);
        }
    }

    fn one_store(store: &Store) {
        let first = store
            .begin_e2b_template_build(&row("t1", "app", "b1"))
            .expect("first build");
        assert_eq!(first.template_id, "t1");
        assert!(store
            .finish_e2b_template_build("t1", "b1", Ok(42), 2)
            .expect("finish"));
        let again = store
            .begin_e2b_template_build(&row("t2", "app", "b2"))
            .expect("second build");
        assert_eq!(
            (again.template_id.as_str(), again.build_id.as_str()),
            ("t1", "b2"),
            "{again:?}"
        );
        // The first build's late outcome no longer touches the template.
        assert!(!store
            .finish_e2b_template_build("t1", "b1", Err(("late".into(), None)), 3)
            .expect("late finish"));
        let by_name = store
            .e2b_template("p", "app")
            .expect("read")
            .expect("found");
        assert_eq!(by_name.layer_bytes, 42, "{by_name:?}");
        assert!(store.e2b_template("other", "app").expect("read").is_none());
        let failed = store
            .fail_unfinished_e2b_template_builds("", "stopped", 4)
            .expect("fail unfinished");
        assert_eq!(failed, vec![("t1".to_owned(), "b2".to_owned())]);
        let after = store.e2b_template("p", "t1").expect("read").expect("found");
        assert_eq!(
            (after.status.as_str(), after.reason.as_deref()),
            (TEMPLATE_ERROR, Some("stopped")),
            "{after:?}"
        );
        assert!(store.delete_e2b_template("p", "t1").expect("delete"));
        assert!(store.e2b_templates("p").expect("list").is_empty());
    }

    #[test]
    fn a_clusters_node_fails_only_the_builds_it_ran() {
        for store in crate::testing::stores() {
            store
                .begin_e2b_template_build(&row("t1", "on-n1", "b1"))
                .expect("begin");
            store
                .begin_e2b_template_build(&row("t2", "on-n2", "b2"))
                .expect("begin");
            store
                .begin_e2b_template_build(&row("t3", "waiting", "b3"))
                .expect("begin");
            assert!(store
                .start_e2b_template_build("t1", "b1", "{}", "n1", 2)
                .expect("start"));
            assert!(
                !store
                    .start_e2b_template_build("t1", "b1", "{}", "n2", 2)
                    .expect("start again"),
                "a build starts once"
            );
            assert!(store
                .start_e2b_template_build("t2", "b2", "{}", "n2", 2)
                .expect("start"));
            let failed = store
                .fail_unfinished_e2b_template_builds("n1", "n1 stopped", 3)
                .expect("fail n1's");
            assert_eq!(failed, vec![("t1".to_owned(), "b1".to_owned())]);
            let status = |id: &str| {
                let row = store.e2b_template("p", id).expect("read").expect("found");
                (row.status, row.reason)
            };
            assert_eq!(
                status("t1"),
                (TEMPLATE_ERROR.into(), Some("n1 stopped".into()))
            );
            assert_eq!(
                status("t2"),
                (TEMPLATE_BUILDING.into(), None),
                "another node's"
            );
            assert_eq!(
                status("t3"),
                (TEMPLATE_WAITING.into(), None),
                "any node may start it"
            );
            // Built again: waiting, no node's until started.
            store
                .begin_e2b_template_build(&row("t9", "on-n1", "b4"))
                .expect("again");
            assert!(store
                .fail_unfinished_e2b_template_builds("n1", "n1 stopped", 5)
                .expect("fail n1's")
                .is_empty());
        }
    }
}
