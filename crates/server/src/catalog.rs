//! The model list `GET /v1/models` answers ([`crate::models`]): the
//! models the configured upstreams serve, per route.
//!
//! Each route's upstream is asked its own list (`GET {url}/models`, with
//! its key and headers, as its adapter talks to it); a route keeps the
//! models its prefix routes to it (the default route takes those no prefix
//! claims), so every id listed is one a model API sends where it came
//! from. An upstream that cannot list (an error, a server without the
//! endpoint) contributes its route's prefix as a model id, which routes
//! there (the default route, having no prefix, then contributes nothing).
//! The list is kept for [`FRESH`], asked by one request at a time (others
//! wait for it), and every upstream is asked at once, each within a short
//! deadline; only the adapters hold the keys, and an upstream's error is
//! logged, never answered.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shellgate_model::upstream::{Protocol, RouteInfo, Router, UpstreamModel};
use shellgate_wire::models::Model;

/// How long a model list is answered from the cache.
pub const FRESH: Duration = Duration::from_secs(60);

/// The models of every route, and which routes could not list theirs.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub models: Vec<Model>,
    /// Routes (by prefix; `None`: the default) whose upstream did not list.
    pub unlisted: Vec<Option<String>>,
}

/// The cached listing.
#[derive(Default)]
pub struct Catalog {
    cached: tokio::sync::Mutex<Option<(Instant, Arc<Listing>)>>,
}

impl Catalog {
    /// The listing, from the cache while it is fresh, else asked anew.
    pub async fn listing(&self, router: &Router) -> Arc<Listing> {
        // Held while the upstreams are asked: one request asks, the others
        // wait for its answer instead of asking again.
        let mut cached = self.cached.lock().await;
        if let Some((at, listing)) = cached.as_ref() {
            if at.elapsed() < FRESH {
                return Arc::clone(listing);
            }
        }
        let listing = Arc::new(list(router).await);
        *cached = Some((Instant::now(), Arc::clone(&listing)));
        listing
    }
}

/// Who a model of a route's list is said to belong to, when its upstream
/// does not say.
pub fn owner(protocol: Option<Protocol>) -> &'static str {
    match protocol {
        Some(Protocol::Anthropic) => "anthropic",
        Some(Protocol::Responses) => "openai",
        Some(Protocol::Chat) | None => "shellgate",
    }
}

/// Asks every route's upstream at once, and keeps what each routes.
async fn list(router: &Router) -> Listing {
    let routes = router.routes();
    let mut asked = tokio::task::JoinSet::new();
    for (position, route) in routes.iter().enumerate() {
        let upstream = Arc::clone(&route.upstream);
        asked.spawn(async move { (position, upstream.models().await) });
    }
    let mut answers: Vec<Option<Vec<UpstreamModel>>> = vec![None; routes.len()];
    while let Some(joined) = asked.join_next().await {
        let Ok((position, answer)) = joined else {
            continue;
        };
        let models = match answer {
            Some(Ok(models)) => Some(models),
            Some(Err(error)) => {
                let route = &routes[position];
                tracing::warn!(
                    prefix = route.prefix.as_deref().unwrap_or("(default)"),
                    url = route.url.as_deref().unwrap_or(""),
                    "the upstream did not list its models: {error}"
                );
                None
            }
            None => None,
        };
        if let Some(slot) = answers.get_mut(position) {
            *slot = models;
        }
    }
    merge(router, &routes, answers)
}

/// The listing of `routes`, given what each upstream answered (`None`: it
/// did not list): each keeps the models routed to it, ids once.
fn merge(
    router: &Router,
    routes: &[RouteInfo],
    answers: Vec<Option<Vec<UpstreamModel>>>,
) -> Listing {
    let mut listing = Listing::default();
    let mut seen = HashSet::new();
    for (route, answer) in routes.iter().zip(answers) {
        match answer {
            Some(models) => {
                for model in models {
                    let routed_here = router.prefix_for(&model.id) == route.prefix.as_deref();
                    if routed_here && seen.insert(model.id.clone()) {
                        let owned_by = model
                            .owned_by
                            .clone()
                            .unwrap_or_else(|| owner(route.protocol).to_owned());
                        listing.models.push(Model::new(
                            model.id.clone(),
                            model.created_seconds(),
                            owned_by,
                        ));
                    }
                }
            }
            None => {
                if let Some(prefix) = &route.prefix {
                    if seen.insert(prefix.clone()) {
                        listing
                            .models
                            .push(Model::new(prefix.clone(), 0, owner(route.protocol)));
                    }
                }
                listing.unlisted.push(route.prefix.clone());
            }
        }
    }
    listing
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Listed;

    fn ids(listing: &Listing) -> Vec<&str> {
        listing.models.iter().map(|m| m.id.as_str()).collect()
    }

    #[tokio::test]
    async fn each_route_keeps_the_models_it_serves_and_one_that_cannot_list_gives_its_prefix() {
        let mut router = Router::new(Some(Arc::new(Listed(
            Some(vec!["gpt-4.1", "claude-old", "llama-3"]),
            Protocol::Chat,
        ))));
        router.route(
            "claude",
            Arc::new(Listed(
                Some(vec!["claude-sonnet-4-5", "gpt-4.1"]),
                Protocol::Anthropic,
            )),
        );
        router.route("llama", Arc::new(Listed(None, Protocol::Chat)));
        let listing = list(&router).await;
        // The default's `claude-old` and `llama-3` go to other routes; the
        // Anthropic route's `gpt-4.1` goes to the default.
        assert_eq!(ids(&listing), ["claude-sonnet-4-5", "llama", "gpt-4.1"]);
        assert_eq!(listing.models[0].owned_by, "anthropic");
        assert_eq!(listing.unlisted, [Some("llama".to_owned())]);
        assert!(list(&Router::new(None)).await.models.is_empty());
    }
}
