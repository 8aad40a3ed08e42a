//! `GET /v1/models` and `GET /v1/models/{model}`: the models the
//! configured upstreams serve, per route (listed and cached by
//! [`crate::catalog`]), in OpenAI's list shape; in Anthropic's (paged by
//! `after_id`/`before_id`/`limit`, errors in its envelope) to a client
//! that sends `anthropic-version`, as every Anthropic SDK does.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use shellgate_wire::models::{
    AnthropicModel, AnthropicModelList, AnthropicModelsQuery, Model, ModelList,
};

use crate::catalog::owner;
use crate::error::{ApiError, ApiResult};
use crate::http::Project;
use crate::state::AppState;
use shellgate_wire::ErrorCode;

/// Whether a request is an Anthropic client's.
fn anthropic(headers: &HeaderMap) -> bool {
    headers.contains_key("anthropic-version")
}

/// Most models in one of Anthropic's pages.
const MAX_ANTHROPIC_PAGE: usize = 1000;
/// Models in one of Anthropic's pages when the client does not say.
const DEFAULT_ANTHROPIC_PAGE: usize = 20;

/// `GET /v1/models`.
pub async fn list_models(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    project: Result<Project, ApiError>,
    Query(query): Query<AnthropicModelsQuery>,
) -> Response {
    let answer = async {
        project?;
        let listing = state.models.listing(&state.upstreams).await;
        if anthropic(&headers) {
            Ok(Json(anthropic_page(&listing.models, &query)?).into_response())
        } else {
            Ok(Json(ModelList::new(listing.models.clone())).into_response())
        }
    }
    .await;
    answer.unwrap_or_else(|e| render(e, &headers))
}

/// An error in the envelope of the client's dialect.
fn render(error: ApiError, headers: &HeaderMap) -> Response {
    if anthropic(headers) {
        error.render(crate::error::Dialect::Anthropic)
    } else {
        error.into_response()
    }
}

/// One of Anthropic's pages of `models`: `limit` of them after `after_id`,
/// or the last `limit` before `before_id`.
fn anthropic_page(models: &[Model], query: &AnthropicModelsQuery) -> ApiResult<AnthropicModelList> {
    let limit = match &query.limit {
        None => DEFAULT_ANTHROPIC_PAGE,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_ANTHROPIC_PAGE).contains(n))
            .ok_or_else(|| {
                ApiError::invalid(
                    "limit",
                    format!("limit must be a whole number from 1 to {MAX_ANTHROPIC_PAGE}"),
                )
            })?,
    };
    let position = |id: &str, param: &str| {
        models
            .iter()
            .position(|model| model.id == id)
            .ok_or_else(|| ApiError::invalid(param, format!("No model with id '{id}'.")))
    };
    let (start, end) = match (&query.after_id, &query.before_id) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "before_id",
                "after_id and before_id cannot both be given",
            ))
        }
        (Some(after), None) => {
            let start = position(after, "after_id")? + 1;
            (start, (start + limit).min(models.len()))
        }
        (None, Some(before)) => {
            let end = position(before, "before_id")?;
            (end.saturating_sub(limit), end)
        }
        (None, None) => (0, limit.min(models.len())),
    };
    // Before `before_id`, more lie before the page; otherwise after it.
    let has_more = if query.before_id.is_some() {
        start > 0
    } else {
        end < models.len()
    };
    let page = models[start..end]
        .iter()
        .map(AnthropicModel::from)
        .collect();
    Ok(AnthropicModelList::page(page, has_more))
}

/// `GET /v1/models/{model}`, in the client's dialect.
pub async fn retrieve_model(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    project: Result<Project, ApiError>,
    Path(id): Path<String>,
) -> Response {
    let answer = async {
        project?;
        find_model(&state, id).await
    }
    .await;
    match answer {
        Ok(model) if anthropic(&headers) => Json(AnthropicModel::from(&model)).into_response(),
        Ok(model) => Json(model).into_response(),
        Err(e) => render(e, &headers),
    }
}

/// A listed model; or, for a route whose upstream could not list, any
/// model that route serves (it may well exist).
async fn find_model(state: &AppState, id: String) -> ApiResult<Model> {
    let listing = state.models.listing(&state.upstreams).await;
    if let Some(model) = listing.models.iter().find(|model| model.id == id) {
        return Ok(model.clone());
    }
    let route = state.upstreams.prefix_for(&id).map(str::to_owned);
    if state.upstreams.pick(&id).is_ok() && listing.unlisted.contains(&route) {
        let protocol = state.upstreams.pick(&id).ok().and_then(|u| u.protocol());
        return Ok(Model::new(id, 0, owner(protocol)));
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

    #[test]
    fn anthropics_pages_go_after_and_before_an_id() {
        use shellgate_wire::models::{AnthropicModelsQuery, Model};
        let models: Vec<Model> = ["a", "b", "c"]
            .iter()
            .map(|id| Model::new(*id, 0, "shellgate"))
            .collect();
        let query =
            |limit: Option<&str>, after: Option<&str>, before: Option<&str>| AnthropicModelsQuery {
                limit: limit.map(str::to_owned),
                after_id: after.map(str::to_owned),
                before_id: before.map(str::to_owned),
            };
        let ids = |page: &shellgate_wire::models::AnthropicModelList| {
            page.data.iter().map(|m| m.id.clone()).collect::<Vec<_>>()
        };
        let first = super::anthropic_page(&models, &query(Some("2"), None, None)).unwrap();
        assert_eq!(
            (ids(&first), first.has_more),
            (vec!["a".into(), "b".into()], true)
        );
        assert_eq!(first.first_id.as_deref(), Some("a"));
        assert_eq!(first.last_id.as_deref(), Some("b"));
        let next = super::anthropic_page(&models, &query(Some("2"), Some("b"), None)).unwrap();
        assert_eq!((ids(&next), next.has_more), (vec!["c".into()], false));
        let back = super::anthropic_page(&models, &query(Some("1"), None, Some("c"))).unwrap();
        assert_eq!((ids(&back), back.has_more), (vec!["b".into()], true));
        assert_eq!(back.data[0].created_at, "1970-01-01T00:00:00Z");
        assert!(super::anthropic_page(&models, &query(Some("0"), None, None)).is_err());
        assert!(super::anthropic_page(&models, &query(None, Some("z"), None)).is_err());
    }
}
