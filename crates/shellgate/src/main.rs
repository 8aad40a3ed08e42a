//! The `shellgate` command line: runs commands in throwaway sandboxes,
//! manages images, and (re-executed with a hidden argument) acts as the
//! sandbox helper that builds each container.

mod cli;
mod local;
mod oneshot;
mod quote;
mod serving;
mod terminal;

fn main() {
    // The helper must run before anything else starts: no threads, no
    // runtime, nothing but the spec it is sent.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == shellgate_sandbox::helper::HELPER_ARG)
    {
        shellgate_sandbox::helper::helper_main();
    }
    std::process::exit(cli::main());
}
