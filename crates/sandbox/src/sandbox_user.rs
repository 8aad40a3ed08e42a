//! Who commands run as inside every container: one unprivileged user, the
//! same in the engine (ids, mounts) and in the images (passwd, sudo).

/// The sandbox user inside every container.
pub const SANDBOX_UID: u32 = 1000;
/// Its name: `user`, as E2B's sandboxes call theirs (code written for E2B
/// assumes it, and `/home/user`).
pub const SANDBOX_USER: &str = "user";
/// Its home directory inside every container (the container's persistent
/// `home` directory of its disk, kept across suspension like `/mnt/data`).
pub const SANDBOX_HOME: &str = "/home/user";
/// A writable, persistent directory the user owns at the root: the default
/// workspace root of the OpenAI Agents SDK's sandboxes (its `Manifest`),
/// which E2B's root-run envd makes and shellgate's unprivileged user could
/// not (the container's `workspace` directory of its disk, like the home).
pub const SANDBOX_WORKSPACE: &str = "/workspace";
