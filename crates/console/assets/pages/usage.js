// Usage: sandbox time and cost per day and per container, tokens per model
// (every model API's calls), all over the chosen period and adding up to its
// totals, and quota use against the project's limits.

import * as api from '../api.js';
import { h, fill, money, seconds, bytes, count, notice, debounce, table, empty } from '../dom.js';
import { columns, bars } from '../charts.js';

let days = 30;
let metric = 'sandbox_seconds';

const METRICS = {
  sandbox_seconds: ['Sandbox time', seconds],
  cost: ['Cost', money],
};

export function render(main) {
  const abort = new AbortController();
  const slot = h('div', { class: 'slot' });
  const dayChart = h('div', { class: 'chart-box' });
  const containerChart = h('div', { class: 'chart-box' });
  const models = h('div');
  const quota = h('div', { class: 'quota', 'data-testid': 'quota' });
  const totals = h('p', { class: 'totals' });
  let data = null;

  const range = h('select', {
    id: 'usage-days',
    onchange: () => {
      days = Number(range.value);
      load();
    },
  }, [7, 30, 90].map((d) => h('option', { value: d, selected: d === days }, `${d} days`)));
  const which = h('select', {
    id: 'usage-metric',
    onchange: () => {
      metric = which.value;
      draw();
    },
  }, Object.entries(METRICS).map(([k, [label]]) => h('option', { value: k, selected: k === metric }, label)));

  fill(main,
    h('div', { class: 'page-head' }, h('h1', null, 'Usage'), h('span', { class: 'spacer' }),
      h('div', { class: 'field inline' }, h('label', { for: 'usage-metric' }, 'Show'), which),
      h('div', { class: 'field inline' }, h('label', { for: 'usage-days' }, 'Over'), range)),
    slot, totals,
    h('div', { class: 'grid2' },
      h('section', { class: 'card wide' }, h('h2', null, 'Per day'), dayChart),
      h('section', { class: 'card' }, h('h2', null, 'Per container'), containerChart),
      h('section', { class: 'card' }, h('h2', null, 'Quota'), quota),
      h('section', { class: 'card wide' }, h('h2', null, 'Tokens per model'), models)));

  function draw() {
    if (!data) return;
    const [label, exact] = METRICS[metric];
    // Sandbox time is charted in the unit its largest day reads best in.
    let format = exact;
    let per = 1;
    if (metric === 'sandbox_seconds') {
      const most = Math.max(0, ...(data.days ?? []).map((d) => Number(d.sandbox_seconds ?? 0)));
      const [unit, size] = most >= 7200 ? ['h', 3600] : most >= 120 ? ['min', 60] : ['s', 1];
      per = size;
      format = (v) => `${Number((v).toFixed(2))} ${unit}`;
    }
    const dayData = (data.days ?? []).map((d) => ({
      label: d.date, value: Number(d[metric] ?? 0) / per,
      title: `${d.date}: ${seconds(d.sandbox_seconds)}, ${money(d.cost)}`,
    }));
    // Drawn at the box's own width: text at its real size.
    const width = Math.max(360, Math.round(dayChart.clientWidth || 720));
    fill(dayChart, columns(dayData, {
      testid: 'chart-days', label: `${label} per day`, format, tick: (l) => String(l).slice(5), width, height: 240,
    }));
    const barWidth = Math.max(320, Math.round(containerChart.clientWidth || 560));
    // The first 14 containers, and every other one together in a last bar,
    // so the bars add up to the period's total.
    const ranked = (data.containers ?? []).slice().sort((a, b) => (b[metric] ?? 0) - (a[metric] ?? 0));
    const shown = ranked.length > 15 ? ranked.slice(0, 14) : ranked;
    const rest = ranked.slice(shown.length);
    const other = data.other_containers ?? { containers: 0, sandbox_seconds: 0, cost: 0 };
    const others = {
      containers: rest.length + Number(other.containers ?? 0),
      sandbox_seconds: rest.reduce((acc, c) => acc + Number(c.sandbox_seconds ?? 0), Number(other.sandbox_seconds ?? 0)),
      cost: rest.reduce((acc, c) => acc + Number(c.cost ?? 0), Number(other.cost ?? 0)),
    };
    const containerLabel = (c) => c.name || (c.container_id ? `${c.container_id} (deleted)` : '(before per-container records)');
    const containerBars = shown.map((c) => ({
      label: containerLabel(c), value: Number(c[metric] ?? 0),
      title: `${c.name || ''} ${c.container_id}: ${seconds(c.sandbox_seconds)}, ${money(c.cost)}`,
    }));
    if (others.containers > 0) {
      containerBars.push({
        label: `${count(others.containers)} others`, value: Number(others[metric] ?? 0),
        title: `${count(others.containers)} other containers: ${seconds(others.sandbox_seconds)}, ${money(others.cost)}`,
      });
    }
    fill(containerChart, containerBars.length
      ? bars(containerBars, { testid: 'chart-containers', label: `${label} per container`, format: exact, width: barWidth })
      : [bars([], { testid: 'chart-containers', label: `${label} per container`, format: exact, width: barWidth }), h('p', { class: 'muted' }, 'No container used sandbox time in this period.')]);
    fill(totals, `${seconds(data.sandbox_seconds ?? 0)} of sandbox time, ${money(data.cost ?? 0)}, `,
      `${count(data.input_tokens ?? 0)} input and ${count(data.output_tokens ?? 0)} output tokens over ${days} days`,
      data.price_per_second ? ` (at ${money(data.price_per_second)} a second)` : '', '.');
  }

  function drawModels() {
    const list = data.models ?? [];
    const max = Math.max(1, ...list.map((m) => (m.input_tokens ?? 0) + (m.output_tokens ?? 0)));
    fill(models, h('p', { class: 'legend muted' }, h('span', { class: 'key key-in' }), 'input ', h('span', { class: 'key key-out' }), 'output'), table({ class: 'list', 'data-testid': 'models' }, ['Model', 'Calls', 'Input tokens', 'Output tokens', ''],
      list.length ? list.map((m) => {
        const total = (m.input_tokens ?? 0) + (m.output_tokens ?? 0);
        const meter = h('span', { class: 'hbar', 'aria-hidden': 'true' },
          h('span', { class: 'hbar-in' }), h('span', { class: 'hbar-out' }));
        // Widths are set through the CSSOM (CSP allows it; style="" it does not).
        meter.firstChild.style.width = `${(100 * (m.input_tokens ?? 0)) / max}%`;
        meter.lastChild.style.width = `${(100 * (m.output_tokens ?? 0)) / max}%`;
        return h('tr', null, h('td', null, m.model || '(before per-model records)'), h('td', { class: 'num' }, count(m.responses)),
          h('td', { class: 'num' }, count(m.input_tokens)), h('td', { class: 'num' }, count(m.output_tokens)),
          h('td', { class: 'bar-cell', title: `${count(total)} tokens` }, meter));
      }) : empty(5, 'No model calls in this period.')));
  }

  function drawQuota() {
    const q = data.quota ?? {};
    const rows = [
      ['Running containers', q.running_containers, count],
      ['Memory', q.memory_bytes, bytes],
      ['Concurrent commands', q.concurrent_execs, count],
    ];
    fill(quota, rows.filter(([, v]) => v).map(([label, v, format]) => {
      const limit = v.limit ?? 0;
      const meterId = `quota-${label.replace(/\W/g, '').toLowerCase()}`;
      return h('div', { class: 'meter-row' },
        h('label', { for: meterId }, label),
        h('meter', { id: meterId, min: 0, max: limit || 1, value: v.used ?? 0, high: (limit || 1) * 0.8, optimum: 0 }),
        h('span', { class: 'num' }, `${format(v.used)} of ${limit ? format(limit) : 'no limit'}`));
    }));
  }

  async function load() {
    try {
      // Names for the ranked containers (usage gives ids): those of the
      // newest page of the list, one request.
      const [usage, recent] = await Promise.all([
        api.get('/console/api/usage', { days }, { signal: abort.signal }),
        api.get('/console/api/containers', { limit: 50 }, { signal: abort.signal }).catch(() => null),
      ]);
      const names = new Map((recent?.data ?? []).map((c) => [c.id, c.name]));
      for (const c of usage.containers ?? []) c.name ??= names.get(c.container_id);
      data = usage;
      fill(slot);
      draw();
      drawModels();
      drawQuota();
    } catch (error) {
      if (error.name !== 'AbortError') fill(slot, notice(error.message));
    }
  }
  const refresh = debounce(load, 1000);
  const offs = [api.subscribe('response', refresh), api.subscribe('container', refresh), api.subscribe('open', refresh)];
  const resized = debounce(draw, 150);
  window.addEventListener('resize', resized);
  load();
  return () => {
    abort.abort();
    refresh.cancel();
    resized.cancel();
    window.removeEventListener('resize', resized);
    offs.forEach((off) => off());
  };
}
