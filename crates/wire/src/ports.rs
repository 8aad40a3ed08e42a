//! A container's exposed ports: what the container object shows
//! of each port it was created with, reachable through the server.

use serde::{Deserialize, Serialize};

/// Most ports one container may expose.
pub const MAX_EXPOSED_PORTS: usize = 16;

/// Lowest port a container may expose: below it listen only the egress
/// proxy's sockets (no command can bind there).
pub const MIN_EXPOSED_PORT: u16 = 1024;

/// One entry of a container's `exposed_ports`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ExposedPort {
    pub port: u16,
    /// The port by host name: `http://{port}-{container_id}.{ports_base_domain}[:server port]/`
    /// (the whole path is forwarded; `*.localhost` resolves in browsers
    /// without DNS).
    pub url: String,
    /// The port by path: `.../v1/containers/{container_id}/ports/{port}/`
    /// (the prefix is stripped before the request reaches the container).
    pub path_url: String,
}

/// Why an `exposed_ports` list is refused (the API answers 400 naming
/// `exposed_ports`).
pub fn check_exposed_ports(ports: &[u32]) -> Result<Vec<u16>, String> {
    if ports.len() > MAX_EXPOSED_PORTS {
        return Err(format!(
            "at most {MAX_EXPOSED_PORTS} exposed_ports are allowed, not {}",
            ports.len()
        ));
    }
    let mut checked: Vec<u16> = Vec::with_capacity(ports.len());
    for &port in ports {
        let valid = u16::try_from(port).ok().filter(|p| *p >= MIN_EXPOSED_PORT);
        let Some(valid) = valid else {
            return Err(format!(
                "exposed port {port} is not between {MIN_EXPOSED_PORT} and 65535 (ports below \
                 {MIN_EXPOSED_PORT} are privileged: nothing in a container may listen there)"
            ));
        };
        if checked.contains(&valid) {
            return Err(format!("exposed port {port} is listed twice"));
        }
        checked.push(valid);
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_ports_are_unprivileged_unique_and_few() {
        assert_eq!(check_exposed_ports(&[8000, 3000]), Ok(vec![8000, 3000]));
        assert_eq!(check_exposed_ports(&[]), Ok(vec![]));
        assert_eq!(check_exposed_ports(&[1024, 65535]), Ok(vec![1024, 65535]));
        for bad in [&[80][..], &[1023], &[65536], &[0], &[8000, 8000]] {
            assert!(check_exposed_ports(bad).is_err(), "{bad:?}");
        }
        let many: Vec<u32> = (2000..2017).collect();
        assert!(check_exposed_ports(&many).is_err());
        assert!(check_exposed_ports(&many[..16]).is_ok());
    }
}
