use std::collections::BTreeSet;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use tower::ServiceExt;

/// Every `(method, path)` the router serves: its recorded paths, each
/// probed with every method (a method it does not serve is a 405 from
/// the router itself, before any handler or authentication).
async fn served() -> BTreeSet<(String, String)> {
    let routes = crate::routes::served_routes(crate::fuzzing::state().unwrap());
    let mut served = BTreeSet::new();
    for path in &routes.paths {
        let concrete: Vec<&str> = path
            .split('/')
            .map(|segment| {
                if segment.starts_with('{') {
                    "x"
                } else {
                    segment
                }
            })
            .collect();
        let mut any = false;
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
            Method::TRACE,
        ] {
            let request = Request::builder()
                .method(method.clone())
                .uri(concrete.join("/"))
                .body(Body::empty())
                .unwrap();
            let status = routes
                .router
                .clone()
                .oneshot(request)
                .await
                .unwrap()
                .status();
            if status != StatusCode::METHOD_NOT_ALLOWED {
                // A catch-all `{*rest}` is the document's `{rest}`.
                let documented = path.replace("{*", "{");
                served.insert((method.as_str().to_ascii_lowercase(), documented));
                any = true;
            }
        }
        assert!(any, "{path} is recorded but no method reaches it");
    }
    served
}

fn documented(document: &serde_json::Value) -> BTreeSet<(String, String)> {
    let mut documented = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert((method.clone(), path.clone()));
        }
    }
    documented
}

#[tokio::test]
async fn every_route_served_is_documented_and_nothing_else() {
    let document = serde_json::to_value(super::document()).unwrap();
    let served = served().await;
    // The /api/v1 paths are the /v1 ones again (the document names
    // them once, with a second server): each must be served both ways.
    let (aliases, served): (BTreeSet<_>, BTreeSet<_>) = served
        .into_iter()
        .partition(|(_, path)| path.starts_with(crate::routes::OPENROUTER_PREFIX));
    let unaliased: BTreeSet<_> = aliases
        .iter()
        .map(|(method, path)| {
            let rest = &path[crate::routes::OPENROUTER_PREFIX.len()..];
            (method.clone(), format!("/v1{rest}"))
        })
        .collect();
    let v1: BTreeSet<_> = served
        .iter()
        .filter(|(_, path)| path.starts_with("/v1/"))
        .cloned()
        .collect();
    assert_eq!(unaliased, v1, "the /api/v1 routes are not the /v1 ones");
    assert!(document["servers"][1]["url"]
        .as_str()
        .is_some_and(|url| url.ends_with("/api")));
    let documented = documented(&document);
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not documented: {undocumented:?}; documented but not served: {unserved:?}"
    );
}

/// Every `$ref` in `value`, with where it is.
fn references(value: &serde_json::Value, at: String, found: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("$ref", serde_json::Value::String(target)) => {
                        found.push((target.clone(), at.clone()))
                    }
                    _ => references(inner, format!("{at}/{key}"), found),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                references(item, format!("{at}/{index}"), found);
            }
        }
        _ => {}
    }
}

#[test]
fn every_reference_resolves_and_no_two_schemas_share_a_name() {
    let (document, collisions) = super::build();
    assert!(
        collisions.is_empty(),
        "schemas sharing a name: {collisions:?}"
    );
    let document = serde_json::to_value(document).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    let mut found = Vec::new();
    references(&document, String::new(), &mut found);
    assert!(found.len() > 40, "{found:?}");
    for (target, at) in found {
        let pointer = target.strip_prefix('#').unwrap();
        assert!(
            document.pointer(pointer).is_some(),
            "{target} (at {at}) does not resolve"
        );
    }
}

#[tokio::test]
async fn the_served_document_is_the_generated_one() {
    let request = Request::get("/openapi.json").body(Body::empty()).unwrap();
    let response = crate::fuzzing::router()
        .unwrap()
        .oneshot(request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let served: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(served, serde_json::to_value(super::document()).unwrap());
    // The wire types' fields are there, from their derives.
    let container = &served["components"]["schemas"]["Container"]["properties"];
    for field in ["id", "network_policy", "memory_limit", "secrets_missing"] {
        assert!(container.get(field).is_some(), "Container.{field} missing");
    }
    // The limits the exec body's descriptions state are the engine's.
    use shellgate_sandbox_api::backend::limits;
    let exec = &served["components"]["schemas"]["ExecRequest"]["properties"];
    let described = |field: &str| exec[field]["description"].as_str().unwrap().to_owned();
    assert!(described("commands").contains(&limits::MAX_COMMANDS.to_string()));
    for limit in [limits::MAX_TIMEOUT_MS, limits::DEFAULT_TIMEOUT_MS] {
        assert!(described("timeout_ms").contains(&limit.to_string()));
    }
    for limit in [limits::MAX_OUTPUT_LENGTH, limits::DEFAULT_MAX_OUTPUT_LENGTH] {
        assert!(described("max_output_length").contains(&limit.to_string()));
    }
}
