//! The `shellgate` command line: runs commands in throwaway sandboxes,
//! manages images, and (re-executed with a hidden argument) acts as the
//! sandbox helper that builds each container.

mod backup;
mod cli;
mod image_build;
mod local;
mod oneshot;
mod quote;
mod serving;
mod snapshot;
mod terminal;

fn main() {
    abort_on_panic();
    // The helper and the zygote must run before anything else starts: no
    // threads, no runtime, nothing but what they are sent.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == shellgate_sandbox::helper::HELPER_ARG)
    {
        shellgate_sandbox::helper::helper_main();
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == shellgate_sandbox::zygote::ZYGOTE_ARG)
    {
        shellgate_sandbox::zygote::zygote_main();
    }
    std::process::exit(cli::main());
}

/// A panic ends the process, wherever it happens and in every build:
/// release builds are compiled with `panic = "abort"`, and the dev profile
/// unwinds (so the binary and the test builds, which always unwind, share
/// their compiled dependencies), so this hook ends a dev build the same
/// way, after the usual report.
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}
