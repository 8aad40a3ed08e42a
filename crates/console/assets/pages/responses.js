// The project's stored responses: model, status, tokens, sandbox time, cost.

import * as api from '../api.js';
import { h, fill, route, money, seconds, when, badge, notice, debounce, empty, count } from '../dom.js';

const PAGE = 50;
let cursors = [];

export function render(main) {
  const abort = new AbortController();
  const slot = h('div', { class: 'slot' });
  const body = h('tbody');
  const prev = h('button', { type: 'button', class: 'btn', onclick: () => page(-1) }, '← Newer');
  const next = h('button', { type: 'button', class: 'btn', 'data-testid': 'next-page', onclick: () => page(1) }, 'Older →');
  let lastId = null;
  let withContainer = false;
  const head = h('thead');

  fill(main,
    h('div', { class: 'page-head' }, h('h1', null, 'Responses')),
    slot,
    h('div', { class: 'scroll' }, h('table', { class: 'list', 'data-testid': 'responses' }, head, body)),
    h('div', { class: 'pager' }, prev, next));

  function row(r) {
    return h('tr', { dataset: { id: r.id } },
      h('td', null, h('a', { href: route('responses', r.id) }, r.id)),
      h('td', null, r.model ?? '—'),
      h('td', null, badge(r.status ?? 'unknown', r.status === 'completed' ? 'ok' : r.status === 'failed' ? 'fail' : r.status)),
      h('td', null, when(r.created_at)),
      h('td', { class: 'num' }, count(r.input_tokens)),
      h('td', { class: 'num' }, count(r.output_tokens)),
      h('td', { class: 'num' }, seconds(r.sandbox_seconds)),
      h('td', { class: 'num' }, money(r.cost)),
      withContainer ? h('td', null, r.container_id ? h('a', { href: route('containers', r.container_id) }, r.container_id) : h('span', { class: 'muted' }, '—')) : null);
  }

  async function load() {
    try {
      const list = await api.get('/console/api/responses', { limit: PAGE, after: cursors.at(-1) }, { signal: abort.signal });
      const data = list?.data ?? [];
      withContainer = data.some((r) => r.container_id);
      fill(head, h('tr', null, ['Response', 'Model', 'Status', 'Created', 'Input tokens', 'Output tokens', 'Sandbox time', 'Cost', withContainer ? 'Container' : null]
        .filter(Boolean).map((c) => h('th', { scope: 'col' }, c))));
      fill(slot);
      fill(body, data.length ? data.map(row) : empty(9, 'No responses yet.'));
      lastId = list?.last_id ?? data.at(-1)?.id ?? null;
      next.disabled = !list?.has_more;
      prev.disabled = cursors.length === 0;
    } catch (error) {
      if (error.name !== 'AbortError') fill(slot, notice(error.message));
    }
  }

  function page(step) {
    if (step > 0 && lastId) cursors.push(lastId);
    if (step < 0) cursors.pop();
    load();
  }

  const refresh = debounce(() => {
    if (cursors.length === 0) load();
  }, 300);
  const off = api.subscribe('response', refresh);
  load();
  return () => {
    abort.abort();
    refresh.cancel();
    off();
  };
}
