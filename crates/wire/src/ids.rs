//! Object ids.

/// A random id: `prefix` and 32 hex digits from the kernel's CSPRNG
/// (`cntr_…`, `resp_…`, `sh_…`): unguessable, so an id is never a way into
/// another project's objects.
pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: getrandom writes at most the given length into the buffer.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n > 0 {
            filled += n as usize;
        }
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}
