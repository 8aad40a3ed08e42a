//! The fastest honest baseline for a command: `posix_spawn` of `/bin/bash`
//! by absolute path (no PATH search), with the same small environment a
//! container's commands get, stdio on `/dev/null`, reaped with `waitpid`.
//! `std::process::Command` costs more (a PATH search, the whole
//! environment copied, its own bookkeeping); both are reported.

use std::ffi::CString;
use std::time::{Duration, Instant};

/// The environment a container command gets (`helper/init.rs`).
fn container_env() -> Vec<CString> {
    [
        "PATH=/home/user/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/home/user",
        "PIP_BREAK_SYSTEM_PACKAGES=1",
        "NPM_CONFIG_PREFIX=/home/user/.local",
        "USER=user",
        "LOGNAME=user",
        "SHELL=/bin/bash",
        "LANG=C.UTF-8",
        "LC_ALL=C.UTF-8",
        "TERM=dumb",
        "TMPDIR=/tmp",
        "PWD=/mnt/data",
    ]
    .iter()
    .map(|v| CString::new(*v).expect("no NUL"))
    .collect()
}

/// One `posix_spawn` of `/bin/bash -c COMMAND`, waited for.
pub fn spawn_bash(command: &str) -> Duration {
    let program = CString::new("/bin/bash").expect("no NUL");
    let args = [
        CString::new("bash").expect("no NUL"),
        CString::new("-c").expect("no NUL"),
        CString::new(command).expect("no NUL"),
    ];
    let env = container_env();
    let mut argv: Vec<*mut libc::c_char> = args.iter().map(|a| a.as_ptr() as *mut _).collect();
    argv.push(std::ptr::null_mut());
    let mut envp: Vec<*mut libc::c_char> = env.iter().map(|e| e.as_ptr() as *mut _).collect();
    envp.push(std::ptr::null_mut());
    let null = CString::new("/dev/null").expect("no NUL");
    let start = Instant::now();
    // SAFETY: the file actions are initialised before use and destroyed
    // after; every pointer handed to posix_spawn (program, argv, envp, the
    // path) points at a NUL-terminated string that outlives the call, and
    // argv/envp end with a null pointer.
    unsafe {
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawn_file_actions_init(&mut actions);
        for (fd, flags) in [
            (0, libc::O_RDONLY),
            (1, libc::O_WRONLY),
            (2, libc::O_WRONLY),
        ] {
            libc::posix_spawn_file_actions_addopen(&mut actions, fd, null.as_ptr(), flags, 0);
        }
        let mut pid: libc::pid_t = 0;
        let spawned = libc::posix_spawn(
            &mut pid,
            program.as_ptr(),
            &actions,
            std::ptr::null(),
            argv.as_ptr(),
            envp.as_ptr(),
        );
        libc::posix_spawn_file_actions_destroy(&mut actions);
        assert_eq!(spawned, 0, "posix_spawn /bin/bash");
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    start.elapsed()
}
