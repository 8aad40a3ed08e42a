//! The request-parsing surface of the API, without the engine or the store:
//! the same extractors and validation as the real routes, for the fuzzer
//! (`fuzz/`) and tests. Every answer is 200 or an OpenAI error envelope.

use axum::extract::Path;
use axum::routing::post;
use axum::{Json, Router};
use shellgate_wire::{CreateContainer, CreateContainerFileFromId, ExecRequest};

use crate::containers::{run_request, safe_file_name, validate_create};
use crate::error::ApiResult;
use crate::http::{ApiJson, ApiQuery, ListParams};
use crate::Config;

async fn create(ApiJson(body): ApiJson<CreateContainer>) -> ApiResult<Json<&'static str>> {
    validate_create(&Config::default(), &body)?;
    Ok(Json("ok"))
}

async fn exec(
    Path(_id): Path<String>,
    ApiJson(body): ApiJson<ExecRequest>,
) -> ApiResult<Json<&'static str>> {
    run_request(&body)?;
    Ok(Json("ok"))
}

async fn file_from_id(
    Path(_id): Path<String>,
    ApiJson(body): ApiJson<CreateContainerFileFromId>,
) -> Json<String> {
    Json(safe_file_name(&body.file_id))
}

async fn list(ApiQuery(params): ApiQuery<ListParams>) -> ApiResult<Json<&'static str>> {
    params.page()?;
    Ok(Json("ok"))
}

/// Routes that parse and validate requests exactly as the API does.
pub fn router() -> Router {
    Router::new()
        .route("/v1/containers", post(create).get(list))
        .route("/v1/containers/{container_id}/exec", post(exec))
        .route("/v1/containers/{container_id}/files", post(file_from_id))
        .fallback(crate::ops::not_found)
        .method_not_allowed_fallback(crate::ops::method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(
            Config::default().max_request_bytes,
        ))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn status_and_body(request: Request<Body>) -> (u16, serde_json::Value) {
        let response = super::router().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or_default())
    }

    fn post(path: &str, body: &str) -> Request<Body> {
        Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    #[tokio::test]
    async fn hostile_bodies_get_envelopes_not_panics() {
        let deep = format!("{{\"name\":\"x\",\"skills\":[{}]}}", "[".repeat(50_000));
        let cases = [
            post("/v1/containers", ""),
            post("/v1/containers", "\u{0}\u{ff}"),
            post("/v1/containers", &deep),
            post(
                "/v1/containers",
                r#"{"name":"x","expires_after":{"anchor":"last_active_at","minutes":-1}}"#,
            ),
            post(
                "/v1/containers",
                r#"{"name":"x","network_policy":{"type":"allowlist"}}"#,
            ),
            post("/v1/containers/c/exec", r#"{"commands":["\u0000"]}"#),
            post(
                "/v1/containers/c/exec",
                r#"{"commands":["true"],"max_output_length":18446744073709551616}"#,
            ),
            Request::get("/v1/containers?limit=-5&order=%ff")
                .body(Body::empty())
                .unwrap(),
            Request::delete("/v1/containers")
                .body(Body::empty())
                .unwrap(),
        ];
        for request in cases {
            let (status, body) = status_and_body(request).await;
            assert!((400..500).contains(&status), "{status}: {body}");
            for key in ["message", "type", "param", "code"] {
                assert!(body["error"].get(key).is_some(), "{body}");
            }
        }
    }
}
