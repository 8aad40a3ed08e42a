//! Leases (the `leases` table): a count of things a project holds open
//! somewhere in the cluster (today: the console's live streams), bounded
//! across every node and replica. A lease is taken by counting and
//! inserting in one transaction under the project's lock, so two nodes
//! opening the last slot at once cannot both get it; it is given back when
//! the thing closes, and every lease of a node is dropped when that node
//! starts again or is marked lost (what it held ended with it).

use crate::connection::Store;
use crate::error::Result;

impl Store {
    /// Takes lease `id` of `kind` for `project`, held on `node`, if the
    /// project holds fewer than `limit` of that kind; false if it holds
    /// them all.
    pub fn take_lease(
        &self,
        id: &str,
        kind: &str,
        project: &str,
        node: &str,
        limit: u32,
        now: i64,
    ) -> Result<bool> {
        self.transaction(|sql| {
            sql.lock(&format!("lease:{kind}:{project}"))?;
            let held: u32 = sql.query_one(
                "SELECT COUNT(*) FROM leases WHERE kind = ?1 AND project = ?2",
                &[&kind, &project],
                |row| row.get(0),
            )?;
            if held >= limit {
                return Ok(false);
            }
            sql.execute(
                "INSERT INTO leases (id, kind, project, node_id, taken_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                &[&id, &kind, &project, &node, &now],
            )?;
            Ok(true)
        })
    }

    /// Gives lease `id` back (a lease already gone is no error).
    pub fn release_lease(&self, id: &str) -> Result<()> {
        self.write(|sql| {
            sql.execute("DELETE FROM leases WHERE id = ?1", &[&id])?;
            Ok(())
        })
    }

    /// Drops every lease held on `node` (it started again, or was lost:
    /// what it held open ended with its process). Returns how many.
    pub fn release_leases_of(&self, node: &str) -> Result<u64> {
        self.write(|sql| {
            let dropped = sql.execute("DELETE FROM leases WHERE node_id = ?1", &[&node])?;
            Ok(dropped as u64)
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_project_holds_at_most_its_limit_across_nodes_until_released() {
        for store in crate::testing::stores() {
            assert!(store
                .take_lease("l1", "stream", "alpha", "n1", 2, 1)
                .unwrap());
            assert!(store
                .take_lease("l2", "stream", "alpha", "n2", 2, 1)
                .unwrap());
            assert!(!store
                .take_lease("l3", "stream", "alpha", "n1", 2, 1)
                .unwrap());
            // Another project, or another kind, counts on its own.
            assert!(store
                .take_lease("l4", "stream", "beta", "n1", 2, 1)
                .unwrap());
            assert!(store
                .take_lease("l5", "other", "alpha", "n1", 2, 1)
                .unwrap());
            store.release_lease("l2").unwrap();
            store.release_lease("l2").unwrap();
            assert!(store
                .take_lease("l6", "stream", "alpha", "n2", 2, 1)
                .unwrap());
            // A node that starts again holds nothing.
            assert_eq!(store.release_leases_of("n1").unwrap(), 3);
            assert!(store
                .take_lease("l7", "stream", "alpha", "n3", 2, 1)
                .unwrap());
            assert!(!store
                .take_lease("l8", "stream", "alpha", "n3", 2, 1)
                .unwrap());
        }
    }

    #[test]
    fn concurrent_takers_never_pass_the_limit() {
        for store in crate::testing::stores() {
            let store = std::sync::Arc::new(store);
            let taken: usize = std::thread::scope(|scope| {
                let takers: Vec<_> = (0..12)
                    .map(|n| {
                        let store = std::sync::Arc::clone(&store);
                        scope.spawn(move || {
                            store
                                .take_lease(&format!("l{n}"), "stream", "alpha", "n1", 5, 1)
                                .unwrap()
                        })
                    })
                    .collect();
                takers
                    .into_iter()
                    .map(|taker| usize::from(taker.join().unwrap()))
                    .sum()
            });
            assert_eq!(taken, 5);
        }
    }
}
