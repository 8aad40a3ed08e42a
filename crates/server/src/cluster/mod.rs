//! shellgate as a cluster. A **node** runs the sandbox engine,
//! registers itself in the shared Postgres store and heart-beats; it takes
//! requests only from API replicas forwarding tenants' requests and from
//! the cluster's operator, each showing the cluster's secret in a header
//! of its own (`FORWARD_HEADER`, `SECRET_HEADER`). An
//! **API replica** holds no state of its own: it places each new container
//! on a node with room, routes every request naming a container to that
//! container's node, sends the rest to any live node, and marks silent
//! nodes lost. Quotas, billing and the audit are the store's, written by
//! whichever node runs the container, once.

mod directory;
mod liveness;
pub mod node;
mod placement;
pub mod replica;
mod routing;

/// The header the cluster's operator shows a node the cluster's secret in
/// (`shellgate drain`, a health probe, a benchmark straight to a node):
/// every route of the node, its own (`/internal/...`, `/metrics`)
/// included.
pub const SECRET_HEADER: &str = "x-shellgate-cluster-secret";

/// The header a replica shows a node the cluster's secret in when it
/// forwards a tenant's request: the node serves it the API alone, never
/// its own routes, however the path is spelled. It is the only credential
/// a replica's forwarding writes, so a request it forwards can never pass
/// for the operator's (a replica holds the secret: the wall is against a
/// replica's mistakes, not a replica taken over).
pub const FORWARD_HEADER: &str = "x-shellgate-cluster-forward";

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
