//! E2B's REST control plane: sandboxes created, listed, inspected, timed,
//! paused, resumed and killed, each a shellgate container.

/// The control plane's routes, beside the API's.
pub(crate) fn routes(table: crate::RouteTable) -> crate::RouteTable {
    table
}
