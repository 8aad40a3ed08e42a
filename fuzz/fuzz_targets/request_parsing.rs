//! Request handling never panics, and every refusal is an OpenAI envelope.
//!
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run request_parsing` (from the repository
//! root). The first byte picks a route; the rest is the body or query. The
//! requests go through the server's real router (authentication, extractors,
//! validation, the store), over a backend that holds no containers.
#![no_main]

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime"))
}

fn router() -> axum::Router {
    static ROUTER: OnceLock<axum::Router> = OnceLock::new();
    ROUTER.get_or_init(|| shellgate_server::fuzzing::router().expect("fuzzing state")).clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let request = match selector % 5 {
        0 => json_post("/v1/containers", rest),
        1 => json_post("/v1/containers/cntr_x/exec", rest),
        2 => json_post("/v1/containers/cntr_x/files", rest),
        3 => {
            let query: String = text.chars().filter(|c| !c.is_whitespace() && *c != '#').collect();
            authorized(Request::get(format!("/v1/containers?{query}"))).body(Body::empty())
        }
        _ => authorized(Request::post("/v1/containers")).header("content-type", "text/plain").body(Body::from(rest.to_vec())),
    };
    let Ok(request) = request else { return };
    let response = runtime().block_on(router().oneshot(request)).expect("infallible");
    let status = response.status().as_u16();
    assert!([200, 400, 404, 405, 409, 413, 415, 429].contains(&status), "unexpected status {status}");
    let body = runtime().block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).expect("body");
    if status != 200 {
        let value: serde_json::Value = serde_json::from_slice(&body).expect("an error envelope is JSON");
        for key in ["message", "type", "param", "code"] {
            assert!(value["error"].get(key).is_some(), "envelope without {key}: {value}");
        }
    }
    // The engine's own parsers of untrusted bytes.
    let _ = shellgate_sandbox::protocol::Request::decode(rest);
    let _ = shellgate_sandbox::files::relative_path(&text);
});

fn authorized(builder: axum::http::request::Builder) -> axum::http::request::Builder {
    builder.header("authorization", format!("Bearer {}", shellgate_server::fuzzing::KEY))
}

fn json_post(path: &str, body: &[u8]) -> Result<Request<Body>, axum::http::Error> {
    authorized(Request::post(path)).header("content-type", "application/json").body(Body::from(body.to_vec()))
}
