//! Which ports of a sandbox are its own API rather than the container's:
//! E2B's in-sandbox ports (envd's, the code interpreter's) of an E2B
//! sandbox, which E2B's older SDKs reach by host name
//! (`{port}-{id}.{domain}`). Below both the host-name router (`ports`),
//! which asks, and E2B's handlers (`e2b`), which serve them.

use axum::http::HeaderValue;

use crate::state::AppState;

/// The header naming the port an in-sandbox request is for.
pub const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";
/// envd's port.
pub const ENVD_PORT: u16 = 49983;
/// The code interpreter's port.
pub const INTERPRETER_PORT: u16 = 49999;

/// The headers naming an E2B sandbox's in-sandbox port.
pub(crate) struct InSandboxPort {
    pub(crate) id: HeaderValue,
    pub(crate) port: HeaderValue,
}

/// Whether `port` of container `id`, reached by host name
/// (`{port}-{id}.{domain}`), is E2B's in-sandbox API (envd's or the code
/// interpreter's port of an E2B sandbox), and the headers that name it so.
pub(crate) async fn in_sandbox_port(
    state: &AppState,
    id: &str,
    port: &str,
) -> Option<InSandboxPort> {
    let number = port.parse::<u16>().ok()?;
    if number != ENVD_PORT && number != INTERPRETER_PORT {
        return None;
    }
    let e2b = state.e2b_access.get(id).is_some() || {
        let key = id.to_owned();
        matches!(
            state.db(move |s| s.e2b_sandbox_by_id(&key)).await,
            Ok(Some(_))
        )
    };
    if !e2b {
        return None;
    }
    Some(InSandboxPort {
        id: HeaderValue::from_str(id).ok()?,
        port: HeaderValue::from(number),
    })
}
