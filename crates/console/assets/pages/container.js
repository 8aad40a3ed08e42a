// One container: its overview, command history and live processes, a
// terminal, its files, its egress log and its skills, as tabs.

import * as api from '../api.js';
import { h, fill, route, bytes, money, seconds, duration, when, badge, notice, debounce, table, empty, count } from '../dom.js';
import { statusBadge } from './containers.js';
import { liveRuns } from '../live-runs.js';

const TABS = [
  ['overview', 'Overview'],
  ['commands', 'Commands'],
  ['terminal', 'Terminal'],
  ['files', 'Files'],
  ['egress', 'Egress'],
  ['skills', 'Skills'],
];

export async function render(main, [id, tab], { rerender }) {
  const abort = new AbortController();
  const base = api.v1(`/containers/${api.enc(id)}`);
  let row;
  try {
    row = await api.get(`/console/api/containers/${api.enc(id)}`, null, { signal: abort.signal });
  } catch (error) {
    if (error.name === 'AbortError') return;
    // An admin's link into another project (a shared URL, a response's
    // container): found across projects, the page switches to its project.
    if (error.status === 404 && api.isAdmin()) {
      const found = await api.get('/console/api/containers', { project: '*', q: id, limit: 5 }, { signal: abort.signal }).catch(() => null);
      const match = found?.data?.find((c) => c.id === id);
      if (match && match.project !== api.currentProject()) {
        api.chooseProject(match.project);
        rerender();
        return;
      }
    }
    fill(main,
      h('p', { class: 'crumbs' }, h('a', { href: '#/containers' }, 'Containers')),
      h('h1', null, error.status === 404 ? 'No such container' : 'Container'),
      notice(error.status === 404 ? `No container ${id} in project ${api.currentProject()}.` : error.message));
    return;
  }

  const title = h('h1', null, row.name || row.id);
  const status = h('span');
  const slot = h('div', { class: 'slot' });
  const del = h('button', {
    type: 'button', class: 'btn btn-danger', 'data-testid': 'delete-container',
    onclick: async () => {
      if (!window.confirm(`Delete container ${row.name || row.id}? Its files go with it.`)) return;
      del.disabled = true;
      try {
        await api.del(base);
        location.hash = '#/containers';
      } catch (error) {
        fill(slot, notice(error.message));
        del.disabled = false;
      }
    },
  }, 'Delete container');

  const tabs = h('div', { role: 'tablist', class: 'tabs', 'aria-label': 'Container views' });
  const panel = h('section', { role: 'tabpanel', class: 'panel', id: 'tab-panel', tabindex: '0' });
  let current = null;
  let close = null;
  const buttons = new Map();
  for (const [name, label] of TABS) {
    const button = h('button', {
      type: 'button', role: 'tab', id: `tab-${name}`, 'data-testid': `tab-${name}`,
      'aria-controls': 'tab-panel', 'aria-selected': 'false',
      onclick: () => select(name, true),
    }, label);
    buttons.set(name, button);
    tabs.append(button);
  }

  function header() {
    fill(status, statusBadge(row.status));
    title.textContent = row.name || row.id;
    document.title = `${row.name || row.id} · shellgate`;
  }

  async function select(name, user) {
    if (!buttons.has(name)) name = 'overview';
    if (current === name) return;
    if (close) {
      try {
        close();
      } catch {}
      close = null;
    }
    current = name;
    for (const [n, b] of buttons) b.setAttribute('aria-selected', String(n === name));
    panel.setAttribute('aria-labelledby', `tab-${name}`);
    if (user) history.replaceState(null, '', route('containers', id, name));
    fill(panel);
    const ctx = { id, base, row: () => row, signal: abort.signal };
    let done;
    if (name === 'overview') done = overview(panel, ctx);
    else if (name === 'commands') done = commands(panel, ctx);
    else if (name === 'terminal') done = (await import('../terminal.js')).render(panel, ctx);
    else if (name === 'files') done = (await import('./files.js')).render(panel, ctx);
    else if (name === 'egress') done = egress(panel, ctx);
    else if (name === 'skills') done = skills(panel, ctx);
    if (current !== name || abort.signal.aborted) {
      if (typeof done === 'function') done();
      return;
    }
    close = typeof done === 'function' ? done : null;
  }

  fill(main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/containers' }, 'Containers'), ' / ', h('span', { class: 'id' }, row.id)),
    h('div', { class: 'page-head' }, title, status, h('span', { class: 'spacer' }), del),
    slot, tabs, panel);
  header();

  // Its row again when it changed (or was deleted: then a 404).
  const reload = debounce(async () => {
    try {
      row = await api.get(`/console/api/containers/${api.enc(id)}`, null, { signal: abort.signal });
    } catch (error) {
      if (error.name === 'AbortError') return;
      if (error.status !== 404) return;
      row = { ...row, status: 'deleted' };
      fill(slot, notice('This container was deleted.', 'warn'));
      del.disabled = true;
    }
    header();
    if (current === 'overview') {
      fill(panel);
      overview(panel, { id, base, row: () => row, signal: abort.signal });
    }
  }, 250);
  const offs = [
    api.subscribe('container', (data) => {
      if (data.id === id || data.container_id === id) reload();
    }),
    api.subscribe('open', reload),
  ];

  await select(tab ?? 'overview', false);
  return () => {
    abort.abort();
    reload.cancel();
    offs.forEach((off) => off());
    if (close) close();
  };
}

// --- overview -------------------------------------------------------------

function overview(panel, { row, base, signal }) {
  const c = row();
  const item = (term, value) => [h('dt', null, term), h('dd', null, value)];
  const policy = c.network_policy ?? { type: 'disabled' };
  const extra = h('div');
  fill(panel, h('dl', { class: 'facts card', 'data-testid': 'overview' },
    item('Id', h('code', null, c.id)),
    item('Status', statusBadge(c.status)),
    item('Image', c.image ?? '—'),
    item('Memory', c.memory_limit ?? '—'),
    item('Created', when(c.created_at)),
    item('Last used', when(c.last_active_at)),
    item('Expires', when(c.expires_at)),
    item('Network', policy.type === 'allowlist'
      ? h('ul', { class: 'plain' }, (policy.allowed_domains ?? []).map((d) => h('li', null, h('code', null, d))))
      : 'disabled (no network)'),
    item('Exposed ports', (c.exposed_ports ?? []).length ? (c.exposed_ports ?? []).map((p) => (typeof p === 'object' ? p.port : p)).join(', ') : 'none'),
    item('Skills', (c.skills ?? []).length ? c.skills.map((s) => (typeof s === 'object' ? s.name : s)).join(', ') : 'none'),
    item('Sandbox time', seconds(c.sandbox_seconds)),
    item('Cost so far', money(c.cost))),
  extra);
  // What only the container object says: secrets whose values are missing.
  api.get(base, null, { signal }).then((full) => {
    if (full?.secrets_missing?.length) {
      fill(extra, notice(`The server restarted since this container's secrets were given: ${full.secrets_missing.join(', ')}. Its network is off until they are supplied again.`, 'warn'));
    }
  }, () => {});
}

// --- commands: the exec commands running now, the processes, the audit -----

function outcomeText(outcome) {
  if (!outcome) return '—';
  if (outcome.type === 'timeout') return badge('timeout', 'timeout');
  const code = outcome.exit_code;
  return badge(`exit ${code}`, code === 0 ? 'ok' : 'fail');
}

function commands(panel, { id, base, signal }) {
  const slot = h('div', { class: 'slot' });
  const procBody = h('tbody');
  const cmdBody = h('tbody');
  const more = h('button', { type: 'button', class: 'btn', 'data-testid': 'commands-more', hidden: true, onclick: () => loadCommands(true) }, 'Older commands');
  const output = h('pre', { class: 'output', 'data-testid': 'live-output', 'aria-live': 'polite', tabindex: '0' });
  const outputTitle = h('h3', null, 'Live output');
  const outputBox = h('section', { class: 'live', hidden: true }, outputTitle, output);
  let lastId = null;
  let watching = null; // AbortController of the output stream
  // The exec commands running now; one that ended leaves once the
  // history (refreshed when it ends) shows it.
  const live = liveRuns({ id, onEnd: () => refresh() });

  const command = h('input', { id: 'run-command', 'data-testid': 'run-command', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'ls -la /mnt/data' });
  const run = h('form', {
    class: 'inline-form',
    onsubmit: async (event) => {
      event.preventDefault();
      fill(slot);
      try {
        const proc = await api.post(`${base}/processes`, { command: command.value });
        command.value = '';
        watch(proc);
        loadProcesses();
      } catch (error) {
        fill(slot, notice(error.message));
      }
    },
  }, h('label', { for: 'run-command' }, 'Run a command'), command,
  h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'run-submit' }, 'Run'));

  fill(panel, run, slot,
    h('h2', null, 'Processes'),
    h('div', { class: 'scroll' }, h('table', { class: 'list', 'data-testid': 'processes' },
      h('thead', null, h('tr', null, ['Process', 'Command', 'Status', 'Started', 'Output', ''].map((c) => h('th', { scope: 'col' }, c)))),
      procBody)),
    outputBox,
    live.element,
    h('h2', null, 'Command history'),
    h('div', { class: 'scroll' }, h('table', { class: 'list', 'data-testid': 'commands' },
      h('thead', null, h('tr', null, ['When', 'Command', 'Outcome', 'Duration', 'Output', 'Response'].map((c) => h('th', { scope: 'col' }, c)))),
      cmdBody)),
    more);

  function watch(proc) {
    watching?.abort();
    watching = new AbortController();
    const mine = watching;
    outputBox.hidden = false;
    fill(outputTitle, 'Live output of ', h('code', null, proc.command), ' ', h('span', { class: 'muted' }, proc.id));
    fill(output);
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder(), pty: new TextDecoder() };
    api.stream(`${base}/processes/${api.enc(proc.id)}/output?stream=true`, (name, data) => {
      let event;
      try {
        event = JSON.parse(data);
      } catch {
        return;
      }
      if (name === 'output') {
        const raw = Uint8Array.from(atob(event.data ?? ''), (ch) => ch.charCodeAt(0));
        let text = (decoders[event.stream] ?? decoders.stdout).decode(raw, { stream: true });
        if (event.stream === 'pty') text = stripAnsi(text);
        output.append(event.stream === 'stderr' ? h('span', { class: 'stderr' }, text) : text);
        output.scrollTop = output.scrollHeight;
      } else if (name === 'dropped') {
        output.append(h('span', { class: 'muted' }, `\n[${bytes(event.bytes)} of output no longer held]\n`));
      } else if (name === 'exit') {
        const code = event.exit_code ?? event.outcome?.exit_code;
        output.append(h('span', { class: 'muted', 'data-testid': 'live-exit' }, `\n[${event.status}${code !== undefined && code !== null ? ` with code ${code}` : ''}]\n`));
        loadProcesses();
      }
    }, mine.signal).catch((error) => {
      if (error.name !== 'AbortError') output.append(h('span', { class: 'stderr' }, `\n[${error.message}]\n`));
    });
  }

  async function loadProcesses() {
    try {
      const list = await api.get(`${base}/processes`, null, { signal });
      const data = (list?.data ?? []).slice().sort((a, b) => b.created_at - a.created_at);
      fill(procBody, data.length ? data.map((p) => h('tr', { dataset: { id: p.id } },
        h('td', null, h('code', null, p.id), p.pty ? h('span', { class: 'muted' }, ' pty') : null),
        h('td', null, h('code', { class: 'cmd' }, p.command)),
        h('td', null, badge(p.status, p.status === 'running' ? 'running' : p.exit_code === 0 ? 'ok' : 'fail'),
          p.exit_code !== null && p.exit_code !== undefined ? ` ${p.exit_code}` : ''),
        h('td', null, when(p.created_at)),
        h('td', { class: 'num' }, bytes(p.output_bytes)),
        h('td', { class: 'actions' },
          h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'watch', onclick: () => watch(p) }, p.status === 'running' ? 'Watch' : 'Output'),
          p.status === 'running' ? h('button', {
            type: 'button', class: 'btn btn-small btn-danger', 'data-testid': 'kill',
            onclick: async () => {
              try {
                await api.del(`${base}/processes/${api.enc(p.id)}`);
              } catch (error) {
                fill(slot, notice(error.message));
              }
              loadProcesses();
            },
          }, 'Kill') : null))) : empty(6, 'No processes.'));
    } catch (error) {
      if (error.name !== 'AbortError') fill(procBody, empty(6, error.message));
    }
  }

  async function loadCommands(older) {
    try {
      const list = await api.get(`${base}/commands`, { limit: 50, order: 'desc', after: older ? lastId : undefined }, { signal });
      const data = list?.data ?? [];
      const rows = data.map((c) => h('tr', { dataset: { id: c.id } },
        h('td', null, when(c.created_at)),
        h('td', null, h('code', { class: 'cmd' }, c.command)),
        h('td', null, outcomeText(c.outcome)),
        h('td', { class: 'num' }, duration(c.duration_ms)),
        h('td', { class: 'num' }, bytes(c.bytes_out)),
        h('td', null, c.response_id ? h('a', { href: route('responses', c.response_id) }, c.response_id) : h('span', { class: 'muted' }, 'exec'))));
      if (older) cmdBody.append(...rows);
      else {
        fill(cmdBody, rows.length ? rows : empty(6, 'No commands yet.'));
        live.seen(data);
      }
      lastId = list?.last_id ?? data.at(-1)?.id ?? lastId;
      more.hidden = !list?.has_more;
    } catch (error) {
      if (error.name !== 'AbortError') fill(cmdBody, empty(6, error.message));
    }
  }

  const refresh = debounce(() => loadCommands(false), 300);
  const off = api.subscribe('command', (data) => {
    if (data.container_id === id) refresh();
  });
  loadProcesses();
  loadCommands(false);
  return () => {
    watching?.abort();
    live.close();
    refresh.cancel();
    off();
  };
}

// Terminal output shown as plain text: escape sequences dropped.
function stripAnsi(text) {
  // CSI, OSC, and two-character escapes.
  // eslint-disable-next-line no-control-regex
  return text.replace(/\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\r(?!\n)/g, '');
}

// --- egress -----------------------------------------------------------------

function egress(panel, { id, base, signal }) {
  const body = h('tbody');
  const note = h('p', { class: 'muted' });
  const more = h('button', { type: 'button', class: 'btn', hidden: true, onclick: () => load(true) }, 'Older entries');
  let lastId = null;
  fill(panel,
    h('p', { class: 'muted' }, 'Every connection and name lookup the container tried, with the proxy\'s verdict.'),
    h('div', { class: 'scroll' }, h('table', { class: 'list', 'data-testid': 'egress' },
      h('thead', null, h('tr', null, ['When', 'Verdict', 'Kind', 'Host', 'Address', 'Reason', 'Sent', 'Received'].map((c) => h('th', { scope: 'col' }, c)))),
      body)),
    more, note);

  function entry(e) {
    const host = e.requested_name ?? e.server_name ?? '—';
    return h('tr', { dataset: { id: e.id, verdict: e.verdict } },
      h('td', null, when(e.created_at)),
      h('td', null, badge(e.verdict, e.verdict === 'allowed' ? 'ok' : e.verdict === 'denied' ? 'fail' : 'muted')),
      h('td', null, e.kind),
      h('td', { class: 'host' }, host, e.server_name && e.server_name !== host ? h('div', { class: 'muted' }, `SNI ${e.server_name}`) : null),
      h('td', null, e.address ? `${e.address}:${e.port}` : e.port ? `:${e.port}` : '—'),
      h('td', { class: 'reason' }, e.reason || ''),
      h('td', { class: 'num' }, bytes(e.bytes_out)),
      h('td', { class: 'num' }, bytes(e.bytes_in)));
  }

  async function load(older) {
    try {
      const page = await api.get(`${base}/egress`, { limit: 100, order: 'desc', after: older ? lastId : undefined }, { signal });
      const data = page?.data ?? [];
      if (older) body.append(...data.map(entry));
      else fill(body, data.length ? data.map(entry) : empty(8, 'No connections yet.'));
      lastId = page?.last_id ?? data.at(-1)?.id ?? lastId;
      more.hidden = !page?.has_more;
      note.textContent = page?.dropped ? `${count(page.dropped)} more events were counted in aggregate (over the log's budget).` : '';
    } catch (error) {
      if (error.name !== 'AbortError') fill(body, empty(8, error.message));
    }
  }
  const refresh = debounce(() => load(false), 300);
  const off = api.subscribe('egress', (data) => {
    if (data.container_id === id) refresh();
  });
  load(false);
  return () => {
    refresh.cancel();
    off();
  };
}

// --- skills -------------------------------------------------------------------

function skills(panel, { base, signal }) {
  const body = h('tbody', null, empty(4, 'Loading…'));
  fill(panel,
    h('p', { class: 'muted' }, 'Skills are mounted read-only at /mnt/skills/<name>.'),
    table({ class: 'list', 'data-testid': 'skills' }, ['Name', 'Description', 'Path', 'Skill'], body));
  api.get(base, null, { signal }).then((c) => {
    const data = c?.skills ?? [];
    fill(body, data.length ? data.map((s) => h('tr', null,
      h('td', null, s.name),
      h('td', null, s.description),
      h('td', null, h('code', null, s.path)),
      h('td', null, s.skill_id ? `${s.skill_id}${s.version ? ` v${s.version}` : ''}` : 'inline'))) : empty(4, 'No skills mounted.'));
  }, (error) => {
    if (error.name !== 'AbortError') fill(body, empty(4, error.message));
  });
}
