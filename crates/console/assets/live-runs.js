// "Running now": the exec commands running in a container (the API's exec,
// the hosted shell tools of the Responses and Messages APIs), with their
// output as it comes, over `GET /console/api/containers/{id}/output` (SSE:
// `run`, `output`, `end`, `resync`; the runs already going come first, each
// with its output so far). A run that ended is marked done and leaves once
// the command history shows it. The output is hostile: text nodes only.

import * as api from './api.js';
import { h, fill, badge } from './dom.js';

// The most of a run's output the page keeps (characters; the server keeps
// the last 64 KiB of each run for a watcher arriving late).
export const KEEP = 64 * 1024;
// A done run leaves after this even when the history never shows it (a
// run that failed is not audited; a command spelling a secret is audited
// masked, so its text differs).
const FORGET_MS = 15_000;
// Reconnecting after a dropped stream: this long at first, doubling up to
// RETRY_MAX_MS while it keeps failing.
const RETRY_MS = 2_000;
const RETRY_MAX_MS = 30_000;

// "12 s", "3 min 04 s", "1 h 02 min".
function elapsed(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}

// The block, and its stream (open from the start). `onEnd()`: a run ended
// (the history has a new row coming). `seen(rows)`: the history's newest
// rows were loaded (done runs among them leave). `close()`: stops it all.
export function liveRuns({ id, onEnd = () => {} }) {
  const list = h('div', { class: 'runs' });
  const none = h('p', { class: 'muted runs-none' }, 'No exec commands running.');
  const state = h('span', { class: 'muted runs-state', role: 'status' });
  const element = h('section', { class: 'live live-runs', 'data-testid': 'live-runs', 'aria-labelledby': 'live-runs-title' },
    h('div', { class: 'runs-head' },
      h('h2', { id: 'live-runs-title' }, 'Running now'),
      h('span', { class: 'muted' }, 'exec commands of the API and of hosted shell tools, as they run'),
      h('span', { class: 'spacer' }), state),
    none, list);

  const runs = new Map(); // run id → entry
  let controller = null;
  let retryTimer = null;
  let failures = 0;
  let clock = null;
  let closed = false;

  function tick() {
    const now = Date.now() / 1000;
    let running = 0;
    for (const entry of runs.values()) {
      if (entry.done) continue;
      running += 1;
      entry.time.textContent = elapsed(now - entry.run.started_at);
    }
    if (!running && clock) {
      clearInterval(clock);
      clock = null;
    }
  }

  function changed() {
    none.hidden = runs.size > 0;
    if (!clock && [...runs.values()].some((e) => !e.done)) clock = setInterval(tick, 1000);
  }

  function add(run) {
    const commands = Array.isArray(run.commands) ? run.commands.map(String) : [];
    const known = runs.get(run.id);
    if (known) remove(known);
    const time = h('span', { class: 'run-time' });
    const dropped = h('p', { class: 'muted run-dropped', hidden: true }, `Earlier output not kept (the last ${KEEP / 1024} KiB are shown).`);
    const pre = h('pre', { class: 'output run-output', 'data-testid': 'run-output', tabindex: '0', 'aria-label': 'Output' });
    const status = h('span', { class: 'run-status' }, badge('running', 'running'));
    const el = h('article', { class: 'run', dataset: { runId: run.id, state: 'running' } },
      h('div', { class: 'run-head' },
        h('ol', { class: 'run-commands' }, commands.map((c) => h('li', null, h('code', { class: 'cmd' }, c)))),
        h('span', { class: 'run-meta' }, status, ' ', time)),
      dropped, pre);
    const entry = { run: { ...run, commands }, el, pre, dropped, status, time, size: 0, done: false, forget: null };
    runs.set(run.id, entry);
    list.append(el);
    entry.time.textContent = elapsed(Date.now() / 1000 - run.started_at);
    changed();
  }

  // A piece of output: appended to the run's last piece of the same stream,
  // the oldest text dropped past KEEP.
  function write(entry, stream, text) {
    if (!text) return;
    const kind = stream === 'stderr' ? 'stderr' : 'stdout';
    const pre = entry.pre;
    const follow = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
    const last = pre.lastChild;
    if (last && last.dataset.stream === kind) last.firstChild.appendData(text);
    else pre.append(h('span', { class: kind, dataset: { stream: kind } }, text));
    entry.size += text.length;
    let over = entry.size - KEEP;
    while (over > 0 && pre.firstChild) {
      const node = pre.firstChild.firstChild;
      if (node.length <= over) {
        over -= node.length;
        entry.size -= node.length;
        pre.firstChild.remove();
      } else {
        // Not half a surrogate pair.
        let cut = over;
        const code = node.data.charCodeAt(cut);
        if (code >= 0xdc00 && code <= 0xdfff) cut += 1;
        node.deleteData(0, cut);
        entry.size -= cut;
        over = 0;
      }
      entry.dropped.hidden = false;
    }
    if (follow) pre.scrollTop = pre.scrollHeight;
  }

  function finish(entry) {
    if (entry.done) return;
    entry.done = true;
    entry.el.dataset.state = 'done';
    fill(entry.status, badge('ended', 'muted'));
    entry.time.textContent = `after ${elapsed(Date.now() / 1000 - entry.run.started_at)}`;
    entry.forget = setTimeout(() => remove(entry), FORGET_MS);
    tick();
  }

  function remove(entry) {
    clearTimeout(entry.forget);
    entry.el.remove();
    if (runs.get(entry.run.id) === entry) runs.delete(entry.run.id);
    changed();
  }

  function onEvent(name, data) {
    let event;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
    if (name === 'resync') {
      // Fell behind: start over (the runs going on come again).
      connect();
      return;
    }
    if (!event || typeof event !== 'object') return;
    if (name === 'run') {
      if (typeof event.id === 'string') add(event);
    } else if (name === 'output') {
      const entry = runs.get(event.run_id);
      if (entry && !entry.done) write(entry, event.stream, typeof event.text === 'string' ? event.text : '');
    } else if (name === 'end') {
      const entry = runs.get(event.run_id);
      if (entry) {
        finish(entry);
        onEnd();
      }
    }
  }

  // (Re)opens the stream. A reopened stream tells again every run going
  // on, with its output so far: the runs shown as running are dropped
  // first (those that ended meanwhile are in the history).
  function connect() {
    if (closed) return;
    clearTimeout(retryTimer);
    retryTimer = null;
    controller?.abort();
    const mine = new AbortController();
    controller = mine;
    let ended = false;
    for (const entry of [...runs.values()]) {
      if (!entry.done) {
        remove(entry);
        ended = true;
      }
    }
    if (ended) onEnd();
    state.textContent = '';
    const opened = Date.now();
    // A fetch: it carries an admin's X-Shellgate-Project header (a
    // WebSocket cannot, hence the terminal's ?project=).
    api.stream(`/console/api/containers/${api.enc(id)}/output`, onEvent, mine.signal).then(
      () => retry(mine, opened, null),
      (error) => retry(mine, opened, error),
    );
  }

  function retry(mine, opened, error) {
    if (closed || mine !== controller || error?.name === 'AbortError') return;
    // 401: the app is on its way to sign-in. 404: the container is gone.
    if (error?.status === 401) return;
    if (error?.status === 404) {
      fill(state, 'This container is gone.');
      return;
    }
    // A stream that stayed up a while was fine: start the back-off over.
    failures = Date.now() - opened > 10_000 ? 0 : failures + 1;
    const delay = Math.min(RETRY_MAX_MS, RETRY_MS * 2 ** Math.max(0, failures - 1));
    state.textContent = error ? `${error.message} Reconnecting…` : 'Reconnecting…';
    retryTimer = setTimeout(connect, delay);
  }

  // The app's events stream came back (the server is up again, or it fell
  // behind): a stream of ours waiting to retry goes now.
  const offOpen = api.subscribe('open', () => {
    if (retryTimer) connect();
  });

  // The history's newest rows: a done run whose command is among them
  // (written when it ended, so not before it started) leaves.
  function seen(rows) {
    for (const entry of [...runs.values()]) {
      if (!entry.done) continue;
      const { commands, started_at: started } = entry.run;
      if (rows.some((r) => commands.includes(r.command) && r.created_at >= started)) remove(entry);
    }
  }

  function close() {
    closed = true;
    controller?.abort();
    controller = null;
    clearTimeout(retryTimer);
    clearInterval(clock);
    clock = null;
    for (const entry of runs.values()) clearTimeout(entry.forget);
    offOpen();
  }

  connect();
  return { element, seen, close };
}
