//! shellgate as a cluster (issue 22). A **node** runs the sandbox engine,
//! registers itself in the shared Postgres store and heart-beats; it takes
//! requests only from API replicas, which show the cluster's secret. An
//! **API replica** holds no state of its own: it places each new container
//! on a node with room, routes every request naming a container to that
//! container's node, sends the rest to any live node, and marks silent
//! nodes lost. Quotas, billing and the audit are the store's, written by
//! whichever node runs the container, once.

mod directory;
pub mod node;
mod placement;
pub mod replica;
mod routing;

/// The header a replica shows a node the cluster's secret in.
pub const SECRET_HEADER: &str = "x-shellgate-cluster-secret";

/// Whether `given` is the cluster's secret, compared in constant time.
pub(crate) fn secret_matches(given: &[u8], secret: &str) -> bool {
    let secret = secret.as_bytes();
    if given.len() != secret.len() || secret.is_empty() {
        return false;
    }
    given
        .iter()
        .zip(secret)
        .fold(0u8, |differ, (a, b)| differ | (a ^ b))
        == 0
}

#[cfg(test)]
mod tests {
    use super::secret_matches;

    #[test]
    fn only_the_whole_secret_matches() {
        let secret = "s".repeat(32);
        assert!(secret_matches(secret.as_bytes(), &secret));
        assert!(!secret_matches(&secret.as_bytes()[..31], &secret));
        assert!(!secret_matches(b"", ""));
        assert!(!secret_matches("t".repeat(32).as_bytes(), &secret));
    }
}
