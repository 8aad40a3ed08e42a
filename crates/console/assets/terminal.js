// The terminal tab: xterm.js (vendored, unmodified, loaded on demand) on a
// PTY process, over the process WebSocket: binary frames are the
// terminal's bytes both ways, text frames resizes (ours) and exit/error
// (the server's). The server ends a console terminal a short grace after
// its last viewer left, so this tab remembers its terminal (per tab, in
// sessionStorage) and attaches to it again when the page is reloaded.

import * as api from './api.js';
import { h, fill, notice, when, empty } from './dom.js';

const XTERM = './vendor/xterm/xterm.mjs';
const FIT = './vendor/xterm-addon-fit/addon-fit.mjs';
const CSS = '/console/assets/vendor/xterm/xterm.css';
// The longest a terminal may run through /v1 (its timeout_ms bound for
// a process with a pty).
const TIMEOUT_MS = 3_600_000;

let loaded = null;
function loadXterm() {
  if (!document.querySelector('link[data-xterm]')) {
    document.head.append(h('link', { rel: 'stylesheet', href: CSS, 'data-xterm': '' }));
  }
  loaded ??= Promise.all([import(XTERM), import(FIT)]);
  return loaded;
}

// xterm.js sizes and colours its rows with <style> elements it writes at
// run time; the page's CSP (style-src 'self') ignores those. Their text is
// mirrored into constructed style sheets, which CSP allows (only this
// library's own rules, in its own box).
function mirrorStyles(box) {
  const sheets = new Map(); // <style> → [CSSStyleSheet, text]
  const sync = () => {
    for (const el of box.querySelectorAll('style')) {
      let entry = sheets.get(el);
      if (!entry) {
        entry = [new CSSStyleSheet(), null];
        sheets.set(el, entry);
      }
      if (entry[1] !== el.textContent) {
        entry[1] = el.textContent;
        entry[0].replaceSync(entry[1]);
      }
    }
    for (const el of [...sheets.keys()]) if (!box.contains(el)) sheets.delete(el);
    const ours = new Set([...sheets.values()].map(([sheet]) => sheet));
    const others = document.adoptedStyleSheets.filter((sheet) => !sheet.xtermMirror);
    for (const sheet of ours) sheet.xtermMirror = true;
    document.adoptedStyleSheets = [...others, ...ours];
  };
  const observer = new MutationObserver(sync);
  observer.observe(box, { subtree: true, childList: true, characterData: true });
  sync();
  return () => {
    observer.disconnect();
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((sheet) => !sheet.xtermMirror);
  };
}

export function render(panel, { id, base, signal }) {
  const slot = h('div', { class: 'slot' });
  const state = h('span', { class: 'muted', role: 'status', 'data-testid': 'terminal-status' }, 'Not started.');
  const box = h('div', { class: 'term-box', 'data-testid': 'terminal' });
  const start = h('button', { type: 'button', class: 'btn btn-primary', 'data-testid': 'terminal-start', onclick: () => open(null) }, 'Start terminal');
  // Ends the shell (SIGHUP, as closing a terminal window does); leaving the
  // tab only detaches (the server ends the shell shortly after, unless
  // this tab or another attaches again).
  const end = h('button', {
    type: 'button', class: 'btn btn-danger', 'data-testid': 'terminal-end', hidden: true,
    onclick: () => {
      if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: 'signal', signal: 'SIGHUP' }));
    },
  }, 'End shell');
  const attachBody = h('tbody');
  const attach = h('details', { class: 'attach' }, h('summary', null, 'Running terminals'),
    h('table', { class: 'list' }, h('thead', null, h('tr', null, ['Process', 'Command', 'Started', ''].map((c) => h('th', { scope: 'col' }, c)))), attachBody));
  fill(panel,
    h('div', { class: 'toolbar' }, start, end, state, h('span', { class: 'spacer' }),
      h('span', { class: 'muted' }, 'bash -l as the sandbox user; ends after an hour, or soon after no tab shows it.')),
    slot, box, attach);

  let term = null;
  let fit = null;
  let socket = null;
  let unmirror = null;
  let observer = null;
  let disposed = false;
  // This tab's terminal of this container, kept across reloads.
  const remembered = `shellgate.terminal.${id}`;
  const remember = (proc) => {
    try {
      if (proc) sessionStorage.setItem(remembered, proc);
      else sessionStorage.removeItem(remembered);
    } catch {}
  };
  const recalled = () => {
    try {
      return sessionStorage.getItem(remembered);
    } catch {
      return null;
    }
  };

  // The container's running terminals (listed to attach to), or null.
  async function listRunning() {
    try {
      const list = await api.get(`${base}/processes`, null, { signal });
      const ptys = (list?.data ?? []).filter((p) => p.pty && p.status === 'running');
      fill(attachBody, ptys.length ? ptys.map((p) => h('tr', null,
        h('td', null, h('code', null, p.id)),
        h('td', null, h('code', null, p.command)),
        h('td', null, when(p.created_at)),
        h('td', null, h('button', { type: 'button', class: 'btn btn-small', onclick: () => open(p) }, 'Attach')))) : empty(4, 'None.'));
      return ptys;
    } catch (error) {
      if (error.name !== 'AbortError') fill(attachBody, empty(4, error.message));
      return null;
    }
  }

  // Attaches again to the terminal this tab had open, if it still runs.
  async function resume() {
    const ptys = await listRunning();
    const mine = recalled();
    if (!mine || !ptys || disposed) return;
    const proc = ptys.find((p) => p.id === mine);
    if (proc) open(proc);
    else remember(null);
  }

  function teardown() {
    if (socket) {
      socket.onclose = null;
      socket.close();
      socket = null;
    }
    observer?.disconnect();
    observer = null;
    term?.dispose();
    term = null;
    unmirror?.();
    unmirror = null;
  }

  async function open(existing) {
    fill(slot);
    start.disabled = true;
    state.textContent = 'Loading the terminal…';
    try {
      const [{ Terminal }, { FitAddon }] = await loadXterm();
      if (disposed) return;
      teardown();
      fill(box);
      delete box.dataset.process;
      unmirror = mirrorStyles(box);
      term = new Terminal({
        cursorBlink: true, convertEol: false, scrollback: 5000, fontSize: 14, lineHeight: 1.2,
        fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
        theme: { background: '#0f1419', foreground: '#e6e1cf', cursor: '#f29718' },
      });
      fit = new FitAddon();
      term.loadAddon(fit);
      term.open(box);
      fit.fit();
      let proc = existing;
      if (!proc) {
        state.textContent = 'Starting bash…';
        proc = await api.post(`${base}/processes`, {
          command: 'bash -l', pty: { cols: term.cols, rows: term.rows }, timeout_ms: TIMEOUT_MS,
        }, { signal });
      }
      connect(proc);
    } catch (error) {
      if (error.name === 'AbortError') return;
      fill(slot, notice(error.message));
      state.textContent = 'Not started.';
      start.disabled = false;
    }
  }

  function connect(proc) {
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    let url = `${scheme}//${location.host}${base}/processes/${api.enc(proc.id)}/ws`;
    // A WebSocket carries no custom header: an admin's project goes in the query.
    if (api.state.project && api.isAdmin()) url += `?project=${encodeURIComponent(api.state.project)}`;
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    socket = ws;
    const encoder = new TextEncoder();
    const sendResize = () => {
      if (ws.readyState === WebSocket.OPEN && term) ws.send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
    };
    ws.onopen = () => {
      state.textContent = `Connected to ${proc.id}.`;
      start.hidden = true;
      end.hidden = false;
      // Measured again once the page settled (fonts, layout).
      requestAnimationFrame(() => {
        try {
          fit?.fit();
        } catch {}
      });
      box.dataset.process = proc.id;
      remember(proc.id);
      sendResize();
      term.focus();
    };
    ws.onmessage = (event) => {
      if (typeof event.data !== 'string') {
        term?.write(new Uint8Array(event.data));
        return;
      }
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      if (message.type === 'exit') {
        const p = message.process ?? {};
        const code = p.exit_code ?? p.outcome?.exit_code;
        term?.write(`\r\n\x1b[2m[${p.status ?? 'exited'}${code !== undefined && code !== null ? ` with code ${code}` : ''}]\x1b[0m\r\n`);
        state.textContent = 'The shell ended.';
        remember(null);
      } else if (message.type === 'error') {
        fill(slot, notice(message.message ?? 'The terminal reported an error.'));
      } else if (message.type === 'dropped') {
        term?.write(`\r\n\x1b[2m[${message.bytes} bytes of output no longer held]\x1b[0m\r\n`);
      }
    };
    ws.onclose = (event) => {
      if (socket !== ws) return;
      socket = null;
      if (!box.dataset.process || box.dataset.process !== proc.id) {
        fill(slot, notice(`The terminal could not connect to ${proc.id}${event.code === 1006 ? ' (the server refused the connection)' : ''}.`));
      }
      if (!state.textContent.startsWith('The shell ended')) state.textContent = 'Disconnected.';
      start.disabled = false;
      start.hidden = false;
      end.hidden = true;
      start.textContent = 'Start a new terminal';
      listRunning();
    };
    term.onData((data) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data));
    });
    term.onBinary((data) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(Uint8Array.from(data, (c) => c.charCodeAt(0)));
    });
    term.onResize(sendResize);
    observer = new ResizeObserver(() => {
      try {
        fit?.fit();
      } catch {}
    });
    observer.observe(box);
  }

  resume();
  return () => {
    disposed = true;
    teardown();
  };
}
