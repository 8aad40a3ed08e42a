//! What the CLI writes depends on who reads it: a person at a terminal gets
//! readable logs and colour, a pipe or a log collector gets JSON lines and
//! no escape codes. This module decides both, once, for every subcommand.

use std::io::IsTerminal;

use shellgate_server::config::LogFormat;

/// Whether colour codes (ANSI escapes) may go to stderr: only to a terminal,
/// and never when `NO_COLOR` is set to anything (<https://no-color.org>).
pub(crate) fn stderr_colours() -> bool {
    colours(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR"),
    )
}

/// [`stderr_colours`] for a stream that is (or is not) a terminal and a
/// `NO_COLOR` value.
fn colours(is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    is_terminal && no_color.is_none_or(|value| value.is_empty())
}

/// Whether stderr is the journal's stream that systemd handed this
/// process: `JOURNAL_STREAM` (`DEVICE:INODE`, set by systemd for a unit
/// whose output goes to the journal) names stderr's own file. Compared, not
/// merely present: a child of such a unit inherits the variable with
/// stderr sent elsewhere.
fn stderr_is_journal(journal_stream: Option<&str>) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Some((device, inode)) = journal_stream.and_then(|value| value.split_once(':')) else {
        return false;
    };
    let (Ok(device), Ok(inode)) = (device.parse::<u64>(), inode.parse::<u64>()) else {
        return false;
    };
    let Ok(stderr) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(stderr)
        .metadata()
        .is_ok_and(|meta| meta.dev() == device && meta.ino() == inode)
}

/// How one run of the CLI logs.
pub(crate) struct Logging {
    /// JSON lines (for collectors) rather than text (for people).
    pub(crate) json: bool,
    /// The filter when `SHELLGATE_LOG` sets none.
    default_filter: &'static str,
}

impl Logging {
    /// `serve`: its progress (the start-up summary, image builds) is worth
    /// reading, so `info` by default; the format is the configuration's,
    /// `auto` meaning text on a terminal or into systemd's journal (which
    /// stamps each line itself and shows it to people: `journalctl`), JSON
    /// elsewhere.
    pub(crate) fn server(format: LogFormat) -> Self {
        let read_by_people = std::io::stderr().is_terminal()
            || stderr_is_journal(std::env::var("JOURNAL_STREAM").ok().as_deref());
        Self {
            json: format.is_json(read_by_people),
            default_filter: "info",
        }
    }

    /// Every other subcommand: a tool whose own output is what matters,
    /// so only warnings and errors, as text.
    pub(crate) fn tool() -> Self {
        Self {
            json: false,
            default_filter: "warn",
        }
    }

    /// Installs the global subscriber, writing to stderr.
    pub(crate) fn init(&self) {
        let filter = tracing_subscriber::EnvFilter::try_from_env("SHELLGATE_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(self.default_filter));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        if self.json {
            builder.json().init();
        } else {
            builder.compact().with_ansi(stderr_colours()).init();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_and_never_when_no_color_is_set() {
        assert!(colours(true, None));
        assert!(!colours(false, None));
        assert!(!colours(true, Some("1".into())));
        assert!(!colours(false, Some("1".into())));
        // An empty NO_COLOR is unset, as no-color.org says.
        assert!(colours(true, Some("".into())));
    }

    #[test]
    fn the_journal_is_stderr_only_when_journal_stream_names_its_file() {
        use std::os::fd::AsFd;
        use std::os::unix::fs::MetadataExt;
        let stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .expect("a copy of stderr");
        let meta = std::fs::File::from(stderr)
            .metadata()
            .expect("stderr's metadata");
        let own = format!("{}:{}", meta.dev(), meta.ino());
        assert!(stderr_is_journal(Some(&own)), "{own} is stderr's own");
        let other = format!("{}:{}", meta.dev(), meta.ino().wrapping_add(1));
        assert!(!stderr_is_journal(Some(&other)), "{other} is another file");
        assert!(!stderr_is_journal(None));
        assert!(!stderr_is_journal(Some("not a stream")));
    }

    #[test]
    fn the_servers_log_is_json_off_a_terminal_unless_text_is_asked_for() {
        assert!(LogFormat::Auto.is_json(false));
        assert!(!LogFormat::Auto.is_json(true));
        assert!(LogFormat::Json.is_json(true));
        assert!(!LogFormat::Text.is_json(false));
    }
}
