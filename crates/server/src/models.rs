//! `GET /v1/models` and `GET /v1/models/{model}`: the models the
//! configured upstreams serve, per route (listed and cached by
//! [`crate::catalog`]), in OpenAI's list shape.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use shellgate_wire::models::{Model, ModelList};

use crate::catalog::owner;
use crate::error::{ApiError, ApiResult};
use crate::http::Project;
use crate::state::AppState;
use shellgate_wire::ErrorCode;

/// `GET /v1/models`.
pub async fn list_models(
    State(state): State<Arc<AppState>>,
    _project: Project,
) -> ApiResult<Json<ModelList>> {
    let listing = state.models.listing(&state.upstreams).await;
    Ok(Json(ModelList::new(listing.models.clone())))
}

/// `GET /v1/models/{model}`: a listed model; or, for a route whose upstream
/// could not list, any model that route serves (it may well exist).
pub async fn retrieve_model(
    State(state): State<Arc<AppState>>,
    _project: Project,
    Path(id): Path<String>,
) -> ApiResult<Json<Model>> {
    let listing = state.models.listing(&state.upstreams).await;
    if let Some(model) = listing.models.iter().find(|model| model.id == id) {
        return Ok(Json(model.clone()));
    }
    let route = state.upstreams.prefix_for(&id).map(str::to_owned);
    if state.upstreams.pick(&id).is_ok() && listing.unlisted.contains(&route) {
        let protocol = state.upstreams.pick(&id).ok().and_then(|u| u.protocol());
        return Ok(Json(Model::new(id, 0, owner(protocol))));
    }
    Err(ApiError::of(
        ErrorCode::ModelNotFound,
        format!("The model '{id}' does not exist or you do not have access to it."),
    )
    .with_param("model"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shellgate_model::upstream::{Protocol, Router};

    use crate::testing::Listed;

    #[tokio::test]
    async fn the_models_api_lists_and_retrieves_under_both_prefixes() {
        let mut router = Router::new(Some(Arc::new(Listed(
            Some(vec!["gpt-4.1"]),
            Protocol::Chat,
        ))));
        router.route("local", Arc::new(Listed(None, Protocol::Chat)));
        let harness = crate::testing::Harness::new().with_upstreams(router);
        for prefix in ["/v1", "/api/v1"] {
            let list = harness.get(&format!("{prefix}/models")).await;
            assert_eq!(
                list.ok(),
                &serde_json::json!({"object": "list", "data": [
                    {"id": "local", "object": "model", "created": 0, "owned_by": "shellgate"},
                    {"id": "gpt-4.1", "object": "model", "created": 0, "owned_by": "shellgate"},
                ]})
            );
        }
        assert_eq!(
            harness.get("/v1/models/gpt-4.1").await.ok()["id"],
            "gpt-4.1"
        );
        // The route that could not list serves any model of its prefix.
        assert_eq!(
            harness.get("/v1/models/local-7b").await.ok()["id"],
            "local-7b"
        );
        let missing = harness.get("/v1/models/gpt-9").await;
        assert_eq!(missing.error(404)["code"], "model_not_found");
        let anonymous = harness
            .call(None, axum::http::Method::GET, "/v1/models", None)
            .await;
        anonymous.error(401);
    }
}
