//! Exec credits (the `exec_credits` table): how the nodes of a cluster share
//! one project's concurrent-exec quota (`max_execs_per_project`) without a
//! store write on every exec.
//!
//! A node holds credits for a project, taken from the store in batches
//! (`held` in its row), and spends one per exec it runs; the rows of a
//! project never add up to more than its limit, so however the execs fall
//! across nodes, no more than the limit run at once. Taking is counting and
//! writing in one transaction under the project's lock.
//!
//! Credits a node holds but does not use must not starve another node, so
//! a node that finds none free records a want (`exec_credit_wants`), and
//! every node holding credits it may not be using gives those back when it
//! sees the want. A row is *exact* when its node keeps no spare credits
//! (it gives each back as its exec ends): a project whose credits are all
//! taken and whose other rows are all exact really has its limit running,
//! and only then is an exec refused. While a want is recent, credits are
//! handed out one at a time and rows stay exact; once the contention is
//! over, nodes take batches again.
//!
//! A node's rows are dropped when it starts again or is marked lost: what
//! it ran ended with it.

use crate::connection::Store;
use crate::error::Result;
use crate::sql::Sql;

/// What [`Store::take_exec_credits`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditTake {
    /// `granted` more credits are the node's (at least one). `contended`:
    /// the project ran out of credits lately, so one was granted and the
    /// node's row is exact: it keeps no spare credits until it takes a
    /// batch again.
    Granted { granted: u32, contended: bool },
    /// No credit is free. `settled`: every other node holding credits
    /// keeps none spare, so the project has its limit running (refuse the
    /// exec); otherwise the holders are asked (a want) to give back what
    /// they do not use, and a take a moment later may be granted.
    Exhausted { settled: bool },
}

/// A node's ask for credits (see [`Store::take_exec_credits`]).
#[derive(Debug, Clone, Copy)]
pub struct CreditAsk<'a> {
    pub project: &'a str,
    pub node: &'a str,
    /// What the node holds now.
    pub held: u32,
    /// The most it takes at once.
    pub batch: u32,
    /// The project's limit across every node.
    pub limit: u32,
    pub now: i64,
    /// A want recorded at or after this time makes the project contended.
    pub contended_since: i64,
}

/// Writes node `node`'s row of `project`: `held` credits, `exact` or not
/// (no row when it holds none).
fn write_row(sql: &mut dyn Sql, project: &str, node: &str, held: u32, exact: bool) -> Result<()> {
    if held == 0 {
        sql.execute(
            "DELETE FROM exec_credits WHERE project = ?1 AND node_id = ?2",
            &[&project, &node],
        )?;
    } else {
        sql.execute(
            "INSERT INTO exec_credits (project, node_id, held, exact) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (project, node_id)
             DO UPDATE SET held = excluded.held, exact = excluded.exact
             WHERE exec_credits.held != excluded.held OR exec_credits.exact != excluded.exact",
            &[&project, &node, &held, &exact],
        )?;
    }
    Ok(())
}

impl Store {
    /// Takes up to `ask.batch` more exec credits of its project for its
    /// node, which holds `ask.held` now (its row is set to what it holds
    /// after this take), within the project's `limit` across every node. A
    /// want recorded at or after `contended_since` makes the take one
    /// credit; a take that finds none free records a want at `now`.
    pub fn take_exec_credits(&self, ask: CreditAsk<'_>) -> Result<CreditTake> {
        let CreditAsk {
            project,
            node,
            held,
            batch,
            limit,
            now,
            contended_since,
        } = ask;
        self.transaction(|sql| {
            sql.lock(&format!("exec_credits:{project}"))?;
            let others: u64 = sql.query_one(
                "SELECT CAST(COALESCE(SUM(held), 0) AS BIGINT) FROM exec_credits
                 WHERE project = ?1 AND node_id != ?2",
                &[&project, &node],
                |row| row.get(0),
            )?;
            let free = u64::from(limit).saturating_sub(others.saturating_add(u64::from(held)));
            if free > 0 {
                let contended = sql
                    .query_opt(
                        "SELECT 1 FROM exec_credit_wants WHERE project = ?1 AND wanted_at >= ?2",
                        &[&project, &contended_since],
                        |row| row.get::<i64>(0),
                    )?
                    .is_some();
                let granted = if contended {
                    1
                } else {
                    u32::try_from(free.min(u64::from(batch.max(1)))).unwrap_or(1)
                };
                write_row(sql, project, node, held + granted, contended)?;
                return Ok(CreditTake::Granted { granted, contended });
            }
            // This node keeps nothing spare from now on (it asks because it
            // uses all it holds).
            write_row(sql, project, node, held, true)?;
            // (A refusal at the limit writes nothing it already holds: a
            // row unchanged, a want of the same second.)
            sql.execute(
                "INSERT INTO exec_credit_wants (project, wanted_at) VALUES (?1, ?2)
                 ON CONFLICT (project) DO UPDATE SET wanted_at = excluded.wanted_at
                 WHERE exec_credit_wants.wanted_at < excluded.wanted_at",
                &[&project, &now],
            )?;
            let loose = sql.query_opt(
                "SELECT 1 FROM exec_credits
                 WHERE project = ?1 AND node_id != ?2 AND exact = 0 AND held > 0",
                &[&project, &node],
                |row| row.get::<i64>(0),
            )?;
            Ok(CreditTake::Exhausted {
                settled: loose.is_none(),
            })
        })
    }

    /// Sets what `node` holds of `project`: fewer credits than before (the
    /// spare ones given back), or what it holds again after its rows were
    /// dropped; `exact` when it keeps none spare from now on.
    pub fn set_exec_credits(
        &self,
        project: &str,
        node: &str,
        held: u32,
        exact: bool,
    ) -> Result<()> {
        self.transaction(|sql| {
            sql.lock(&format!("exec_credits:{project}"))?;
            write_row(sql, project, node, held, exact)
        })
    }

    /// The projects of which `node` holds credits it may not be using (its
    /// row is not exact) and another node wanted credits at or after
    /// `since`: those it should give back now.
    pub fn wanted_exec_credits(&self, node: &str, since: i64) -> Result<Vec<String>> {
        self.read(|sql| {
            sql.query(
                "SELECT c.project FROM exec_credits c
                 JOIN exec_credit_wants w ON w.project = c.project
                 WHERE c.node_id = ?1 AND c.exact = 0 AND w.wanted_at >= ?2",
                &[&node, &since],
                |row| row.get(0),
            )
        })
    }

    /// The credits of `project` held by nodes other than `node`.
    pub fn exec_credits_held_elsewhere(&self, project: &str, node: &str) -> Result<u64> {
        self.read(|sql| {
            sql.query_one(
                "SELECT CAST(COALESCE(SUM(held), 0) AS BIGINT) FROM exec_credits
                 WHERE project = ?1 AND node_id != ?2",
                &[&project, &node],
                |row| row.get(0),
            )
        })
    }

    /// Drops every credit `node` holds (it started again, or was lost: its
    /// execs ended with its process). Returns how many.
    pub fn release_exec_credits_of(&self, node: &str) -> Result<u64> {
        self.write(|sql| {
            let held: u64 = sql.query_one(
                "SELECT CAST(COALESCE(SUM(held), 0) AS BIGINT) FROM exec_credits WHERE node_id = ?1",
                &[&node],
                |row| row.get(0),
            )?;
            sql.execute("DELETE FROM exec_credits WHERE node_id = ?1", &[&node])?;
            Ok(held)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::CreditTake::{Exhausted, Granted};
    use super::*;

    const LIMIT: u32 = 10;

    fn ask<'a>(project: &'a str, node: &'a str, held: u32, batch: u32, now: i64) -> CreditAsk<'a> {
        CreditAsk {
            project,
            node,
            held,
            batch,
            limit: LIMIT,
            now,
            contended_since: now - 5,
        }
    }

    fn take(store: &Store, node: &str, held: u32, now: i64) -> CreditTake {
        store
            .take_exec_credits(ask("alpha", node, held, 8, now))
            .unwrap()
    }

    #[test]
    fn batches_never_add_up_past_the_limit_and_a_want_asks_for_spares_back() {
        for store in crate::testing::stores() {
            let store = &*store;
            // n1 takes a batch of 8, n2 the 2 left.
            assert_eq!(
                take(store, "n1", 0, 100),
                Granted {
                    granted: 8,
                    contended: false
                }
            );
            assert_eq!(
                take(store, "n2", 0, 100),
                Granted {
                    granted: 2,
                    contended: false
                }
            );
            // n3 finds none: n1 and n2 may have spares, so not settled,
            // and both are told to give theirs back.
            assert_eq!(take(store, "n3", 0, 100), Exhausted { settled: false });
            assert_eq!(store.wanted_exec_credits("n1", 95).unwrap(), ["alpha"]);
            assert_eq!(store.wanted_exec_credits("n2", 95).unwrap(), ["alpha"]);
            assert!(store.wanted_exec_credits("n1", 101).unwrap().is_empty());
            // n1 uses 3 of its 8: it keeps 3, exact.
            store.set_exec_credits("alpha", "n1", 3, true).unwrap();
            assert!(store.wanted_exec_credits("n1", 95).unwrap().is_empty());
            // While the want is recent, credits go one at a time, exact.
            assert_eq!(
                take(store, "n3", 0, 101),
                Granted {
                    granted: 1,
                    contended: true
                }
            );
            // n2 uses both of its own; n3 takes the rest, one at a time.
            store.set_exec_credits("alpha", "n2", 2, true).unwrap();
            for held in 1..5 {
                assert_eq!(
                    take(store, "n3", held, 102),
                    Granted {
                        granted: 1,
                        contended: true
                    }
                );
            }
            // 3 + 2 + 5: all taken and every holder exact: settled.
            assert_eq!(take(store, "n1", 3, 103), Exhausted { settled: true });
            assert_eq!(store.exec_credits_held_elsewhere("alpha", "n1").unwrap(), 7);
            // Another project counts on its own.
            assert!(matches!(
                store.take_exec_credits(ask("beta", "n1", 0, 8, 103)),
                Ok(Granted { granted: 8, .. })
            ));
            // Long after the last want, a take is a batch again.
            store.set_exec_credits("alpha", "n3", 0, true).unwrap();
            assert_eq!(
                take(store, "n2", 2, 200),
                Granted {
                    granted: 5,
                    contended: false
                }
            );
            // A node that starts again (or is lost) holds nothing.
            assert_eq!(store.release_exec_credits_of("n1").unwrap(), 3 + 8);
            assert_eq!(store.exec_credits_held_elsewhere("alpha", "n1").unwrap(), 7);
            assert_eq!(
                take(store, "n1", 0, 200),
                Granted {
                    granted: 3,
                    contended: false
                }
            );
        }
    }

    #[test]
    fn concurrent_takers_on_many_nodes_never_pass_the_limit() {
        for store in crate::testing::stores() {
            let store = std::sync::Arc::new(store);
            let granted: u32 = std::thread::scope(|scope| {
                let takers: Vec<_> = (0..12)
                    .map(|n| {
                        let store = std::sync::Arc::clone(&store);
                        scope.spawn(move || {
                            let node = format!("n{n}");
                            match store
                                .take_exec_credits(ask("alpha", &node, 0, 3, 1))
                                .unwrap()
                            {
                                Granted { granted, .. } => granted,
                                Exhausted { .. } => 0,
                            }
                        })
                    })
                    .collect();
                takers.into_iter().map(|taker| taker.join().unwrap()).sum()
            });
            assert_eq!(granted, LIMIT);
            assert_eq!(store.exec_credits_held_elsewhere("alpha", "").unwrap(), 10);
        }
    }
}
