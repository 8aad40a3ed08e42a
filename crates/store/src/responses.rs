//! Stored responses of the Responses API (the `responses` table) and their
//! conversations (the `response_items` table).
//!
//! A response continuing another (`previous_response_id`) stores only the
//! items its own request and run added, each at its position in the whole
//! conversation, with a link (`parent_id`) to the response it continues: a
//! chain of n responses holds each item once, not the whole conversation
//! again per response (which grew quadratically along a chain). Reading a
//! response's conversation walks the links back in one recursive query.
//!
//! Deleting a response that others continue keeps its items (the row stays
//! as a hidden tombstone, its object and input cleared) while a descendant
//! needs them; deleting the last response of a branch also removes the
//! tombstones above it that nothing continues any more.

use crate::connection::Store;
use crate::error::{Result, StoreError};
use crate::paging::cursor_seq;
use crate::sql::{Row, Sql};
use crate::values::ResponseStatus;

/// A stored response of the Responses API.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseRow {
    pub id: String,
    pub project: String,
    pub created_at: i64,
    pub status: ResponseStatus,
    pub previous_response_id: Option<String>,
    /// The response object, JSON.
    pub body: String,
    /// This request's input items, JSON array.
    pub input_items: String,
    /// Every item of the conversation up to this response's output, JSON
    /// array: what a response continuing from this one starts from. It
    /// begins with the previous response's conversation (the server builds
    /// it so); the store keeps only what follows that.
    pub conversation: String,
}

/// A stored response as the web console lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseSummary {
    pub id: String,
    pub created_at: i64,
    pub status: ResponseStatus,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Its hosted tools' sandbox time (0 without any).
    pub sandbox_seconds: f64,
}

/// How far back a conversation is followed at most: far beyond any real
/// chain, it only stops a corrupt link loop from running forever (a chain
/// cut there fails the read's completeness check).
const MAX_CHAIN: i64 = 1_000_000;

const RESPONSE_COLUMNS: &str =
    "id, project, created_at, status, previous_response_id, body, input_items";

/// A response's row without its conversation (read separately).
fn response_row(row: &Row) -> Result<ResponseRow> {
    Ok(ResponseRow {
        id: row.get(0)?,
        project: row.get(1)?,
        created_at: row.get(2)?,
        status: row.text(3, "responses", "status")?,
        previous_response_id: row.get(4)?,
        body: row.get(5)?,
        input_items: row.get(6)?,
        conversation: String::new(),
    })
}

/// Where a stored response's own items start and end in its conversation,
/// and the response it continues.
struct Link {
    parent: Option<String>,
    conversation_len: usize,
}

fn link(sql: &mut dyn Sql, id: &str) -> Result<Option<Link>> {
    sql.query_opt(
        "SELECT parent_id, conversation_len FROM responses WHERE id = ?1",
        &[&id],
        |row| {
            Ok(Link {
                parent: row.get(0)?,
                conversation_len: row.number(1, "responses", "conversation_len")?,
            })
        },
    )
}

/// The whole conversation of response `id`, a JSON array: its items and
/// every ancestor's, in order. Every position from the first to the
/// conversation's length must be there exactly once, or the chain is
/// broken (a missing link, a loop).
fn conversation(sql: &mut dyn Sql, id: &str) -> Result<String> {
    let Some(head) = link(sql, id)? else {
        return Err(StoreError::BrokenChain { id: id.to_owned() });
    };
    let mut text = String::from("[");
    let mut expected = 0usize;
    sql.each_row(
        "WITH RECURSIVE chain(id, parent, depth) AS (
             SELECT id, parent_id, 0 FROM responses WHERE id = ?1
             UNION ALL
             SELECT r.id, r.parent_id, c.depth + 1 FROM responses r JOIN chain c ON r.id = c.parent
             WHERE c.depth < ?2
         )
         SELECT i.position, i.item FROM chain c JOIN response_items i ON i.response_id = c.id
         ORDER BY i.position",
        &[&id, &MAX_CHAIN],
        &mut |row| {
            let position: usize = row.number(0, "response_items", "position")?;
            if position != expected {
                return Err(StoreError::BrokenChain { id: id.to_owned() });
            }
            if expected > 0 {
                text.push(',');
            }
            text.push_str(&row.get::<String>(1)?);
            expected += 1;
            Ok(())
        },
    )?;
    if expected != head.conversation_len {
        return Err(StoreError::BrokenChain { id: id.to_owned() });
    }
    text.push(']');
    Ok(text)
}

/// Removes a response's row and its own items.
fn remove(sql: &mut dyn Sql, id: &str) -> Result<()> {
    sql.execute("DELETE FROM response_items WHERE response_id = ?1", &[&id])?;
    sql.execute("DELETE FROM responses WHERE id = ?1", &[&id])?;
    sql.execute("DELETE FROM response_nodes WHERE response_id = ?1", &[&id])?;
    Ok(())
}

fn has_descendants(sql: &mut dyn Sql, id: &str) -> Result<bool> {
    Ok(sql
        .query_opt(
            "SELECT 1 FROM responses WHERE parent_id = ?1 LIMIT 1",
            &[&id],
            |_| Ok(()),
        )?
        .is_some())
}

impl Store {
    /// Inserts or replaces a response (its status, body and conversation
    /// change as it runs). Only the items after its previous response's
    /// conversation are stored, when that response is still stored (else
    /// the whole conversation is its own).
    pub fn save_response(&self, row: &ResponseRow) -> Result<()> {
        let items: Vec<serde_json::Value> = serde_json::from_str(&row.conversation)
            .map_err(|_| StoreError::BrokenChain { id: row.id.clone() })?;
        let items: Vec<String> = items.iter().map(serde_json::Value::to_string).collect();
        self.transaction(|sql| {
            // Saves of one response by two servers at once (a run and its
            // cancellation) follow one another.
            sql.lock(&format!("response:{}", row.id))?;
            // The link is made once, when the row is first written: a
            // later save (the same run moving on) continues from the same
            // response.
            let existing = link(sql, &row.id)?;
            // Items others continue from never change under them (only a
            // finished response is continued, and a finished one's items
            // are final; this holds it even for a save that says
            // otherwise).
            if existing.is_some() && has_descendants(sql, &row.id)? {
                sql.execute(
                    "UPDATE responses SET status = ?2, body = ?3 WHERE id = ?1",
                    &[&row.id, &row.status, &row.body],
                )?;
                return Ok(());
            }
            let saved_before = existing.is_some();
            let parent: Option<String> = match existing {
                Some(existing) => existing.parent,
                None => match &row.previous_response_id {
                    Some(previous) => sql.query_opt(
                        "SELECT id FROM responses WHERE id = ?1 AND project = ?2",
                        &[previous, &row.project],
                        |found| found.get::<String>(0),
                    )?,
                    None => None,
                },
            };
            let first_own = match &parent {
                Some(parent) => link(sql, parent)?
                    .map(|parent| parent.conversation_len)
                    .unwrap_or(0),
                None => 0,
            };
            if items.len() < first_own {
                return Err(StoreError::BrokenChain { id: row.id.clone() });
            }
            sql.execute(
                &format!(
                    "INSERT INTO responses ({RESPONSE_COLUMNS}, parent_id, conversation_len)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                     ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body,
                     conversation_len = excluded.conversation_len"
                ),
                &[
                    &row.id,
                    &row.project,
                    &row.created_at,
                    &row.status,
                    &row.previous_response_id,
                    &row.body,
                    &row.input_items,
                    &parent,
                    &items.len(),
                ],
            )?;
            // A response saved before (the same run moving on) has items
            // to replace; a new one has none.
            if saved_before {
                sql.execute(
                    "DELETE FROM response_items WHERE response_id = ?1",
                    &[&row.id],
                )?;
            }
            for (position, item) in items.iter().enumerate().skip(first_own) {
                sql.execute(
                    "INSERT INTO response_items (response_id, position, item) VALUES (?1, ?2, ?3)",
                    &[&row.id, &position, item],
                )?;
            }
            Ok(())
        })
    }

    /// A response of `project`, with its whole conversation.
    pub fn response(&self, project: &str, id: &str) -> Result<Option<ResponseRow>> {
        self.read(|sql| {
            let Some(mut row) = sql.query_opt(
                &format!(
                    "SELECT {RESPONSE_COLUMNS} FROM responses
                     WHERE id = ?1 AND project = ?2 AND deleted = 0"
                ),
                &[&id, &project],
                response_row,
            )?
            else {
                return Ok(None);
            };
            row.conversation = conversation(sql, &row.id)?;
            Ok(Some(row))
        })
    }

    /// A page of `project`'s stored responses, newest first, as the web
    /// console lists them (the numbers read from each stored object in
    /// SQL; no conversation is read).
    pub fn response_summaries(
        &self,
        project: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<ResponseSummary>, bool)> {
        self.read(|sql| {
            let cursor = cursor_seq(sql, "responses", "project", Some(project), after)?;
            let d = sql.dialect();
            let query = format!(
                "SELECT id, created_at, status,
                        COALESCE({model}, ''),
                        COALESCE({input}, 0),
                        COALESCE({output}, 0),
                        COALESCE({seconds}, 0.0)
                 FROM responses
                 WHERE project = ?1 AND deleted = 0 AND (CAST(?2 AS BIGINT) IS NULL OR seq < ?2)
                 ORDER BY seq DESC LIMIT ?3",
                model = d.json_text("body", "model"),
                input = d.json_number("body", &["usage", "input_tokens"], true),
                output = d.json_number("body", &["usage", "output_tokens"], true),
                seconds = d.json_number("body", &["usage", "sandbox_seconds"], false),
            );
            let mut rows = sql.query(
                &query,
                &[&project, &cursor, &(i64::from(limit) + 1)],
                |row| {
                    Ok(ResponseSummary {
                        id: row.get(0)?,
                        created_at: row.get(1)?,
                        status: row.text(2, "responses", "status")?,
                        model: row.get(3)?,
                        input_tokens: row.number(4, "responses", "usage.input_tokens")?,
                        output_tokens: row.number(5, "responses", "usage.output_tokens")?,
                        sandbox_seconds: row.get(6)?,
                    })
                },
            )?;
            let has_more = rows.len() > limit as usize;
            rows.truncate(limit as usize);
            Ok((rows, has_more))
        })
    }

    /// Responses with one of `statuses` (to settle runs a crash
    /// interrupted), with their conversations.
    pub fn responses_with_status(&self, statuses: &[ResponseStatus]) -> Result<Vec<ResponseRow>> {
        self.responses_with_status_on(statuses, None)
    }

    /// Responses with one of `statuses` that cluster node `node` runs (as
    /// `response_nodes` records), or every one (`None`), with their
    /// conversations: a node's own interrupted runs, or a lost node's.
    pub fn responses_with_status_on(
        &self,
        statuses: &[ResponseStatus],
        node: Option<&str>,
    ) -> Result<Vec<ResponseRow>> {
        self.read(|sql| {
            let mut rows = Vec::new();
            for status in statuses {
                rows.extend(sql.query(
                    &format!(
                        "SELECT {RESPONSE_COLUMNS} FROM responses WHERE status = ?1 AND deleted = 0
                         AND (CAST(?2 AS TEXT) IS NULL OR id IN
                             (SELECT response_id FROM response_nodes WHERE node_id = ?2))"
                    ),
                    &[status, &node],
                    response_row,
                )?);
            }
            for row in &mut rows {
                row.conversation = conversation(sql, &row.id)?;
            }
            Ok(rows)
        })
    }

    /// Deletes a response of `project`. One that others continue becomes a
    /// hidden tombstone keeping only its items; one that nothing continues
    /// goes, with the tombstones above it that then serve nothing.
    pub fn delete_response(&self, project: &str, id: &str) -> Result<bool> {
        self.transaction(|sql| {
            sql.lock(&format!("response:{id}"))?;
            let found: Option<Option<String>> = sql.query_opt(
                "SELECT parent_id FROM responses WHERE id = ?1 AND project = ?2 AND deleted = 0",
                &[&id, &project],
                |row| row.get(0),
            )?;
            let Some(mut parent) = found else {
                return Ok(false);
            };
            if has_descendants(sql, id)? {
                sql.execute(
                    "UPDATE responses SET deleted = 1, body = '{}', input_items = '[]' WHERE id = ?1",
                    &[&id],
                )?;
            } else {
                remove(sql, id)?;
                // Each step removes one row: the walk ends.
                while let Some(ancestor) = parent {
                    let tombstone: Option<Option<String>> = sql.query_opt(
                        "SELECT parent_id FROM responses WHERE id = ?1 AND deleted = 1",
                        &[&ancestor],
                        |row| row.get(0),
                    )?;
                    match tombstone {
                        Some(next) if !has_descendants(sql, &ancestor)? => {
                            remove(sql, &ancestor)?;
                            parent = next;
                        }
                        _ => break,
                    }
                }
            }
            Ok(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn saved(
        id: &str,
        project: &str,
        previous: Option<&str>,
        conversation: &[Value],
    ) -> ResponseRow {
        ResponseRow {
            id: id.into(),
            project: project.into(),
            created_at: 1,
            status: ResponseStatus::Completed,
            previous_response_id: previous.map(str::to_owned),
            body: json!({"id": id}).to_string(),
            input_items: "[]".into(),
            conversation: Value::Array(conversation.to_vec()).to_string(),
        }
    }

    fn conversation_of(store: &Store, project: &str, id: &str) -> Vec<Value> {
        let row = store.response(project, id).unwrap().unwrap();
        serde_json::from_str(&row.conversation).unwrap()
    }

    fn item_rows(store: &Store) -> i64 {
        store
            .read(|sql| sql.query_one("SELECT COUNT(*) FROM response_items", &[], |row| row.get(0)))
            .unwrap()
    }

    fn message(text: String) -> Value {
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    }

    /// A chain of `n` responses as the server saves them (queued, in
    /// progress, finished), each adding an input and an output item.
    fn chain(store: &Store, n: usize) -> Vec<Value> {
        let mut conversation = Vec::new();
        for i in 0..n {
            let id = format!("r{i}");
            let previous = (i > 0).then(|| format!("r{}", i - 1));
            conversation.push(message(format!("input {i}")));
            let mut row = saved(&id, "p", previous.as_deref(), &conversation);
            row.status = ResponseStatus::Queued;
            store.save_response(&row).unwrap();
            row.status = ResponseStatus::InProgress;
            store.save_response(&row).unwrap();
            conversation.push(
                json!({"type": "message", "role": "assistant", "id": format!("msg_{i}"),
                "content": [{"type": "output_text", "text": format!("output {i}")}]}),
            );
            store
                .save_response(&saved(&id, "p", previous.as_deref(), &conversation))
                .unwrap();
        }
        conversation
    }

    #[test]
    fn a_chain_stores_each_item_once_and_reads_back_whole() {
        for store in crate::testing::stores() {
            let conversation = chain(&store, 200);
            // Two items a response: linear, not the 40,200 rows of a copy each.
            assert_eq!(item_rows(&store), 400);
            assert_eq!(conversation_of(&store, "p", "r199"), conversation);
            assert_eq!(conversation_of(&store, "p", "r0"), conversation[..2]);
            assert_eq!(conversation_of(&store, "p", "r100"), conversation[..202]);
            // Another project sees none of it.
            assert_eq!(store.response("q", "r199").unwrap(), None);
        }
    }

    #[test]
    fn deleting_inside_a_chain_keeps_what_descendants_need() {
        for store in crate::testing::stores() {
            let conversation = chain(&store, 10);
            assert!(store.delete_response("p", "r5").unwrap());
            // Gone for the API, its items kept for the responses after it.
            assert_eq!(store.response("p", "r5").unwrap(), None);
            assert!(!store.delete_response("p", "r5").unwrap());
            assert_eq!(conversation_of(&store, "p", "r9"), conversation);
            assert_eq!(item_rows(&store), 20);
            // A new branch from a descendant still reads through the tombstone.
            let mut branch = conversation[..14].to_vec();
            branch.push(message("branch".into()));
            store
                .save_response(&saved("b", "p", Some("r6"), &branch))
                .unwrap();
            assert_eq!(conversation_of(&store, "p", "b"), branch);
            // Deleting the descendants from the end: once nothing continues the
            // tombstone, it goes too.
            for id in ["r9", "r8", "r7", "b"] {
                assert!(store.delete_response("p", id).unwrap());
            }
            assert_eq!(item_rows(&store), 14);
            assert!(store.delete_response("p", "r6").unwrap());
            assert_eq!(item_rows(&store), 10);
            assert_eq!(conversation_of(&store, "p", "r4"), conversation[..10]);
        }
    }

    #[test]
    fn a_response_whose_previous_is_gone_or_foreign_keeps_its_whole_conversation() {
        for store in crate::testing::stores() {
            let first = vec![message("a".into()), message("b".into())];
            store.save_response(&saved("a", "p", None, &first)).unwrap();
            store.delete_response("p", "a").unwrap();
            let mut second = first.clone();
            second.push(message("c".into()));
            store
                .save_response(&saved("b", "p", Some("a"), &second))
                .unwrap();
            assert_eq!(conversation_of(&store, "p", "b"), second);
            // Another project's response of the same id is never continued.
            store.save_response(&saved("x", "q", None, &first)).unwrap();
            store
                .save_response(&saved("y", "p", Some("x"), &second))
                .unwrap();
            assert_eq!(conversation_of(&store, "p", "y"), second);
            // A conversation shorter than the one it continues is refused.
            assert!(matches!(
                store.save_response(&saved("z", "p", Some("b"), &first)),
                Err(StoreError::BrokenChain { .. })
            ));
        }
    }

    /// A node's running responses are found by the node that runs them
    /// (a restarted node's own, a lost node's for the replica's sweep).
    #[test]
    fn running_responses_are_found_by_their_node() {
        for store in crate::testing::stores() {
            for (id, status) in [
                ("a", ResponseStatus::InProgress),
                ("b", ResponseStatus::Completed),
            ] {
                let mut row = saved(id, "p", None, &[message(id.into())]);
                row.status = status;
                store.save_response(&row).unwrap();
                store.set_response_node(id, "n1").unwrap();
            }
            let mut elsewhere = saved("c", "p", None, &[message("c".into())]);
            elsewhere.status = ResponseStatus::Queued;
            store.save_response(&elsewhere).unwrap();
            let running = [ResponseStatus::Queued, ResponseStatus::InProgress];
            let on_n1 = store
                .responses_with_status_on(&running, Some("n1"))
                .unwrap();
            assert_eq!(
                on_n1.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
                ["a"]
            );
            assert_eq!(store.responses_with_status(&running).unwrap().len(), 2);
            assert!(store
                .responses_with_status_on(&running, Some("n2"))
                .unwrap()
                .is_empty());
        }
    }

    /// A response read while its run saves it again reads whole (its
    /// length and its items from one snapshot), never as a broken chain.
    #[test]
    fn a_response_read_while_it_is_saved_reads_whole() {
        for store in crate::testing::stores() {
            let store = std::sync::Arc::new(store);
            let mut conversation = vec![message("start".into())];
            store
                .save_response(&saved("r", "p", None, &conversation))
                .unwrap();
            let reader = {
                let store = std::sync::Arc::clone(&store);
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        store.response("p", "r").unwrap().unwrap();
                    }
                })
            };
            for i in 0..200 {
                conversation.push(message(format!("item {i}")));
                store
                    .save_response(&saved("r", "p", None, &conversation))
                    .unwrap();
            }
            reader.join().unwrap();
        }
    }

    #[test]
    fn a_lost_item_is_a_broken_chain_not_a_shorter_conversation() {
        for store in crate::testing::stores() {
            chain(&store, 3);
            store
                .write(|sql| {
                    sql.execute(
                        "DELETE FROM response_items WHERE response_id = 'r1' AND position = 2",
                        &[],
                    )
                })
                .unwrap();
            assert!(matches!(
                store.response("p", "r2"),
                Err(StoreError::BrokenChain { .. })
            ));
        }
    }

    #[test]
    fn the_migration_turns_whole_conversations_into_own_items() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        // The schema as it was just before the migration that made items
        // (later migrations follow it in `Store::setup`).
        let before = crate::migrations::SQLITE_MIGRATIONS
            .iter()
            .position(|m| m.contains("CREATE TABLE response_items"))
            .unwrap();
        for migration in &crate::migrations::SQLITE_MIGRATIONS[..before] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", before as i64)
            .unwrap();
        let (a, b, c, d) = (
            message("a".into()),
            message("b".into()),
            message("c".into()),
            message("d".into()),
        );
        let legacy = [
            ("r1", None, vec![a.clone(), b.clone()]),
            (
                "r2",
                Some("r1"),
                vec![a.clone(), b.clone(), c.clone(), d.clone()],
            ),
            ("r3", Some("gone"), vec![c.clone(), d.clone()]),
            // Claims r1 but does not start with its conversation.
            ("r4", Some("r1"), vec![b.clone(), a.clone(), c.clone()]),
        ];
        {
            let tx = conn.transaction().unwrap();
            for (id, previous, conversation) in &legacy {
                tx.execute(
                    "INSERT INTO responses (id, project, created_at, status, previous_response_id, body, input_items, conversation)
                     VALUES (?1, 'p', 1, 'completed', ?2, '{}', '[]', ?3)",
                    rusqlite::params![id, previous, Value::Array(conversation.clone()).to_string()],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
        let store = Store::from_sqlite_connection(conn).unwrap();
        for (id, _, conversation) in &legacy {
            assert_eq!(&conversation_of(&store, "p", id), conversation, "{id}");
        }
        // r2 keeps only its two new items.
        assert_eq!(item_rows(&store), 2 + 2 + 2 + 3);
    }
}
