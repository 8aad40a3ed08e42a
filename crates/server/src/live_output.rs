//! [`LiveOutput`]: the output of the exec commands running now, as it
//! comes, for the console's container page. Every exec (the API's `exec`,
//! the hosted shell tools of the Responses and Messages APIs) runs with a
//! tap ([`LiveOutput::tap`]) between the engine and wherever its output
//! was going: the tap keeps the last [`TAIL_BYTES`] of each run's output
//! (piece by piece, so a late watcher still tells stdout from stderr) and
//! tells the container's watchers of each piece, and the run is
//! forgotten when it ends. (Processes keep their own output; the audit
//! keeps every command once it ended.)
//!
//! Bounded: a run keeps at most [`TAIL_BYTES`]; a watcher that falls more
//! than [`EVENTS`] pieces behind is told to start over (`Lagged`), never
//! waited for: the commands' speed never depends on who watches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use shellgate_sandbox_api::backend::{DeltaSink, OutputDelta, StreamKind};
use shellgate_wire::console::{LiveRun, LiveRunEvent, LiveRunOutput};
use tokio::sync::broadcast;

/// The most of a run's output kept for a watcher arriving late.
pub(crate) const TAIL_BYTES: usize = 64 * 1024;
/// Pieces held for a container's watchers.
const EVENTS: usize = 256;

/// One running exec.
struct Run {
    run: LiveRun,
    /// Its latest output, piece by piece (each with its command and
    /// stream), at most `TAIL_BYTES` of text together (the oldest piece cut
    /// at a character).
    tail: std::collections::VecDeque<LiveRunOutput>,
    /// The text bytes in `tail`.
    tail_bytes: usize,
}

impl Run {
    fn keep(&mut self, piece: LiveRunOutput) {
        self.tail_bytes += piece.text.len();
        self.tail.push_back(piece);
        while self.tail_bytes > TAIL_BYTES {
            let excess = self.tail_bytes - TAIL_BYTES;
            let Some(oldest) = self.tail.front_mut() else {
                break;
            };
            if oldest.text.len() <= excess {
                self.tail_bytes -= oldest.text.len();
                self.tail.pop_front();
            } else {
                let mut cut = excess;
                while !oldest.text.is_char_boundary(cut) {
                    cut += 1;
                }
                oldest.text.drain(..cut);
                self.tail_bytes -= cut;
            }
        }
    }
}

/// A container's running execs and its watchers' channel, made when the
/// first watcher comes (an exec nobody watches allocates no channel).
#[derive(Default)]
struct ContainerRuns {
    runs: Vec<Run>,
    events: Option<broadcast::Sender<Arc<LiveRunEvent>>>,
}

impl ContainerRuns {
    /// Tells the watchers, if there are any (`event` is made only then).
    fn tell(&self, event: impl FnOnce() -> LiveRunEvent) {
        if let Some(events) = self.events.as_ref().filter(|e| e.receiver_count() > 0) {
            let _ = events.send(Arc::new(event()));
        }
    }

    fn subscribe(&mut self) -> broadcast::Receiver<Arc<LiveRunEvent>> {
        self.events
            .get_or_insert_with(|| broadcast::channel(EVENTS).0)
            .subscribe()
    }

    /// Nothing runs and nobody watches: the entry can go.
    fn idle(&self) -> bool {
        self.runs.is_empty() && self.events.as_ref().is_none_or(|e| e.receiver_count() == 0)
    }
}

/// The running execs of every container.
#[derive(Default)]
pub(crate) struct LiveOutput {
    containers: Mutex<HashMap<String, ContainerRuns>>,
}

/// A run's registration: forwards its output (see [`Tap::forward`]), and
/// ends it (for its watchers) when dropped.
pub(crate) struct Tap {
    live: Arc<LiveOutput>,
    container: String,
    id: String,
    deltas: tokio::sync::mpsc::UnboundedReceiver<OutputDelta>,
    onward: Option<DeltaSink>,
}

impl Tap {
    /// Forwards every piece of output the engine sends, until it dropped
    /// its sink (the run returned), so that whatever follows the run (an
    /// `exec.completed` event) comes after its output. Run beside the run
    /// in the same task (`tokio::join!`), not as a task of its own: a
    /// command that prints nothing then costs no task, and no hand-off
    /// between tasks at its end.
    pub(crate) async fn forward(&mut self) {
        while let Some(delta) = self.deltas.recv().await {
            self.live.append(&self.container, &self.id, &delta);
            if let Some(onward) = &self.onward {
                let _ = onward.send(delta);
            }
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.live.end(&self.container, &self.id);
    }
}

/// A watcher of a container's runs: the runs going on when it started
/// watching, with their output so far, and every event after that.
pub(crate) struct Watch {
    pub(crate) running: Vec<(LiveRun, Vec<LiveRunOutput>)>,
    pub(crate) events: broadcast::Receiver<Arc<LiveRunEvent>>,
}

impl LiveOutput {
    fn containers(&self) -> std::sync::MutexGuard<'_, HashMap<String, ContainerRuns>> {
        self.containers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers an exec of `commands` in `container`: returns the sink to
    /// run it with (what it receives also goes on to `onward`) and the tap
    /// to finish when the run returned.
    ///
    /// A command that spells a secret's value out is shown masked by
    /// `masker` (the container's), as the audit keeps it; the output comes
    /// from the engine masked already.
    pub(crate) fn tap(
        self: &Arc<Self>,
        container: &str,
        commands: &[String],
        masker: Option<&shellgate_egress::secrets::Masker>,
        onward: Option<DeltaSink>,
    ) -> (DeltaSink, Tap) {
        let run = LiveRun {
            id: shellgate_wire::new_id("run_"),
            container_id: container.to_owned(),
            commands: commands
                .iter()
                .map(|command| match masker {
                    Some(masker) => masker.mask_str(command),
                    None => command.clone(),
                })
                .collect(),
            started_at: crate::time::now(),
        };
        let id = run.id.clone();
        {
            let mut containers = self.containers();
            let entry = containers.entry(container.to_owned()).or_default();
            entry.tell(|| LiveRunEvent::Started(run.clone()));
            entry.runs.push(Run {
                run,
                tail: Default::default(),
                tail_bytes: 0,
            });
        }
        let (sink, deltas) = tokio::sync::mpsc::unbounded_channel::<OutputDelta>();
        let tap = Tap {
            live: Arc::clone(self),
            container: container.to_owned(),
            id,
            deltas,
            onward,
        };
        (sink, tap)
    }

    fn append(&self, container: &str, id: &str, delta: &OutputDelta) {
        let mut containers = self.containers();
        let Some(entry) = containers.get_mut(container) else {
            return;
        };
        let piece = LiveRunOutput {
            run_id: id.to_owned(),
            command: delta.command,
            stream: match delta.stream {
                StreamKind::Stdout => "stdout",
                StreamKind::Stderr => "stderr",
            },
            text: delta.text.clone(),
        };
        entry.tell(|| LiveRunEvent::Output(piece.clone()));
        if let Some(run) = entry.runs.iter_mut().find(|r| r.run.id == id) {
            run.keep(piece);
        }
    }

    fn end(&self, container: &str, id: &str) {
        let mut containers = self.containers();
        let Some(entry) = containers.get_mut(container) else {
            return;
        };
        entry.runs.retain(|r| r.run.id != id);
        entry.tell(|| LiveRunEvent::Ended {
            run_id: id.to_owned(),
        });
        if entry.idle() {
            containers.remove(container);
        }
    }

    /// Starts watching `container`'s runs (the snapshot and the
    /// subscription taken together: nothing is missed or told twice).
    pub(crate) fn watch(&self, container: &str) -> Watch {
        let mut containers = self.containers();
        let entry = containers.entry(container.to_owned()).or_default();
        Watch {
            running: entry
                .runs
                .iter()
                .map(|r| (r.run.clone(), r.tail.iter().cloned().collect()))
                .collect(),
            events: entry.subscribe(),
        }
    }

    /// Forgets a container nobody watches and nothing runs in (a watcher
    /// that left).
    pub(crate) fn unwatch(&self, container: &str) {
        let mut containers = self.containers();
        if containers.get(container).is_some_and(ContainerRuns::idle) {
            containers.remove(container);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str) -> OutputDelta {
        OutputDelta {
            command: 0,
            stream: StreamKind::Stdout,
            text: text.to_owned(),
        }
    }

    #[tokio::test]
    async fn a_watcher_sees_runs_start_their_output_and_their_end_and_output_goes_on() {
        let live = Arc::new(LiveOutput::default());
        let mut early = live.watch("c1");
        let (onward, mut received) = tokio::sync::mpsc::unbounded_channel();
        let (sink, mut tap) = live.tap("c1", &["echo hi".to_owned()], None, Some(onward));
        let run = async {
            sink.send(delta("hi\n")).unwrap();
            sink.send(OutputDelta {
                command: 0,
                stream: StreamKind::Stderr,
                text: "oops\n".to_owned(),
            })
            .unwrap();
            // A watcher arriving now gets the output so far, streams apart
            // (once the tap, running beside, passed both on).
            let first = received.recv().await.unwrap();
            assert_eq!(first.text, "hi\n");
            assert_eq!(received.recv().await.unwrap().text, "oops\n");
            let late = live.watch("c1");
            drop(sink);
            late
        };
        let (late, ()) = tokio::join!(run, tap.forward());
        assert_eq!(late.running.len(), 1);
        let pieces: Vec<_> = late.running[0]
            .1
            .iter()
            .map(|p| (p.stream, p.text.as_str()))
            .collect();
        assert_eq!(pieces, [("stdout", "hi\n"), ("stderr", "oops\n")]);
        drop(tap);
        let mut seen = Vec::new();
        while let Ok(event) = early.events.try_recv() {
            seen.push(event);
        }
        assert!(matches!(*seen[0], LiveRunEvent::Started(_)));
        assert!(matches!(&*seen[1], LiveRunEvent::Output(o) if o.text == "hi\n"));
        assert!(matches!(&*seen[2], LiveRunEvent::Output(o) if o.stream == "stderr"));
        assert!(matches!(*seen[3], LiveRunEvent::Ended { .. }));
        assert!(live.watch("c1").running.is_empty());
    }

    #[tokio::test]
    async fn a_command_that_spells_a_secret_out_is_shown_masked() {
        use shellgate_egress::secrets::{DomainSecret, Masker, SecretValue};
        let value = "sk-live-real-secret-value-4242";
        let masker = Masker::new(&[DomainSecret {
            domain: "api.example.com".into(),
            name: "TOKEN".into(),
            placeholder: "[TOKEN]".into(),
            value: Some(SecretValue::new(value)),
            ..DomainSecret::default()
        }])
        .unwrap();
        let live = Arc::new(LiveOutput::default());
        let (sink, tap) = live.tap(
            "c1",
            &[format!("curl -H 'x: {value}' x")],
            Some(&masker),
            None,
        );
        let watch = live.watch("c1");
        assert_eq!(watch.running[0].0.commands, ["curl -H 'x: [TOKEN]' x"]);
        drop(sink);
        let mut tap = tap;
        tap.forward().await;
    }

    #[tokio::test]
    async fn a_runs_tail_is_bounded_and_cut_at_a_character() {
        let live = Arc::new(LiveOutput::default());
        let (sink, tap) = live.tap("c1", &["yes".to_owned()], None, None);
        let piece = "é".repeat(1000);
        for _ in 0..100 {
            sink.send(delta(&piece)).unwrap();
        }
        drop(sink);
        let mut tap = tap;
        tap.forward().await;
        let watch = live.watch("c1");
        let tail: String = watch.running[0].1.iter().map(|p| p.text.as_str()).collect();
        assert!(tail.len() <= TAIL_BYTES && tail.len() > TAIL_BYTES - 4);
        assert!(tail.chars().all(|c| c == 'é'));
        drop(tap);
        assert!(live.watch("c1").running.is_empty());
    }
}
