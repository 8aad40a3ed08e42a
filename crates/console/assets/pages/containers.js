// The containers of the project: a live, paged, server-filtered list, and
// the form that creates one.

import * as api from '../api.js';
import { h, fill, route, money, seconds, when, badge, notice, debounce, empty, count } from '../dom.js';

const PAGE = 50;

// Kept while the app runs: coming back to the list finds it as it was left.
const filters = { q: '', status: '', image: '', all: false };
let cursors = []; // the `after` of each page before this one

export function networkText(policy) {
  if (!policy || policy.type === 'disabled') return 'no network';
  const domains = policy.allowed_domains ?? [];
  return domains.length ? domains.join(', ') : 'allowlist (empty)';
}

export function statusBadge(status) {
  return badge(status ?? 'unknown', String(status ?? 'unknown'));
}

export function render(main) {
  const abort = new AbortController();
  const slot = h('div', { class: 'slot' });
  const totalText = h('span', { class: 'muted', 'data-testid': 'total' });
  const tbody = h('tbody');
  const showProject = () => filters.all && api.isAdmin();
  const thead = h('thead');
  const list = h('table', { 'data-testid': 'containers', class: 'list' }, thead, tbody);
  const prev = h('button', { type: 'button', class: 'btn', 'data-testid': 'prev-page', onclick: () => page(-1) }, '← Newer');
  const next = h('button', { type: 'button', class: 'btn', 'data-testid': 'next-page', onclick: () => page(1) }, 'Older →');
  const pageText = h('span', { class: 'muted' });
  let lastId = null;
  let shown = new Set();

  const q = h('input', {
    id: 'filter-q', type: 'search', 'data-testid': 'filter-q', value: filters.q, placeholder: 'id or name',
    oninput: debounce(() => {
      filters.q = q.value.trim();
      cursors = [];
      load();
    }, 250),
  });
  const status = h('select', {
    id: 'filter-status', 'data-testid': 'filter-status',
    onchange: () => {
      filters.status = status.value;
      cursors = [];
      load();
    },
  }, ['', 'running', 'suspended', 'creating'].map((v) => h('option', { value: v, selected: v === filters.status }, v || 'any')));
  const image = h('select', {
    id: 'filter-image', 'data-testid': 'filter-image',
    onchange: () => {
      filters.image = image.value;
      cursors = [];
      load();
    },
  }, h('option', { value: '' }, 'any'));
  const all = api.isAdmin()
    ? h('label', { class: 'check' }, h('input', {
      type: 'checkbox', 'data-testid': 'filter-all', checked: filters.all,
      onchange: (event) => {
        filters.all = event.target.checked;
        cursors = [];
        load();
      },
    }), 'Every project')
    : null;

  const filterBar = h('form', { class: 'filters', role: 'search', onsubmit: (e) => e.preventDefault() },
    h('div', { class: 'field' }, h('label', { for: 'filter-q' }, 'Search'), q),
    h('div', { class: 'field' }, h('label', { for: 'filter-status' }, 'Status'), status),
    h('div', { class: 'field' }, h('label', { for: 'filter-image' }, 'Image'), image),
    all);

  const images = api.get(api.v1('/images'), null, { signal: abort.signal });
  images.catch(() => {});
  const create = createForm(abort.signal, images, () => {
    cursors = [];
    load();
  });

  fill(main,
    h('div', { class: 'page-head' }, h('h1', null, 'Containers'), totalText, h('span', { class: 'spacer' }),
      h('button', { type: 'button', class: 'btn', onclick: () => main.querySelector('#create-name')?.focus() }, 'New container')),
    h('div', { class: 'columns' },
      h('section', { class: 'grow', 'aria-label': 'Container list' },
        filterBar, slot, h('div', { class: 'scroll' }, list),
        h('div', { class: 'pager' }, prev, pageText, next)),
      create));

  function head() {
    fill(thead, h('tr', null, ['Name', showProject() ? 'Project' : null, 'Status', 'Image', 'Memory', 'Created', 'Last used', 'Expires', 'Network', 'Cost']
      .filter(Boolean).map((c) => h('th', { scope: 'col' }, c))));
  }

  function row(c) {
    return h('tr', { dataset: { id: c.id } },
      h('td', null, h('a', {
        href: route('containers', c.id),
        // From the every-project list: the container's page acts for its project.
        onclick: () => {
          if (c.project && c.project !== api.currentProject()) api.chooseProject(c.project);
        },
      }, c.name || c.id), h('div', { class: 'id' }, c.id)),
      showProject() ? h('td', null, c.project) : null,
      h('td', null, statusBadge(c.status)),
      h('td', { class: 'nowrap' }, c.image ?? '—'),
      h('td', null, c.memory_limit ?? '—'),
      h('td', null, when(c.created_at)),
      h('td', null, when(c.last_active_at)),
      h('td', null, when(c.expires_at)),
      h('td', { class: 'net', title: networkText(c.network_policy) }, networkText(c.network_policy)),
      h('td', { class: 'num', title: `${seconds(c.sandbox_seconds)} of sandbox time` }, money(c.cost)));
  }

  async function load() {
    const after = cursors.at(-1);
    try {
      const list = await api.get('/console/api/containers', {
        q: filters.q, status: filters.status, image: filters.image, limit: PAGE, after,
        project: showProject() ? '*' : undefined,
      }, { signal: abort.signal });
      fill(slot);
      head();
      const rows = list.data ?? [];
      shown = new Set(rows.map((c) => c.id));
      fill(tbody, rows.length ? rows.map(row) : empty(10, filters.q || filters.status || filters.image ? 'No container matches.' : 'No containers yet: create one.'));
      lastId = list.last_id ?? rows.at(-1)?.id ?? null;
      totalText.textContent = list.total !== undefined ? `${count(list.total)} in all` : '';
      next.disabled = !list.has_more;
      prev.disabled = cursors.length === 0;
      const start = cursors.length * PAGE;
      pageText.textContent = rows.length ? `${count(start + 1)}–${count(start + rows.length)}` : '';
      // For the page-speed benchmark (BENCHMARKS.md): the list's first render.
      if (!performance.getEntriesByName('console:containers').length) performance.mark('console:containers');
    } catch (error) {
      if (error.name === 'AbortError') return;
      fill(slot, notice(error.message));
    }
  }

  function page(step) {
    if (step > 0 && lastId) cursors.push(lastId);
    if (step < 0) cursors.pop();
    load();
  }

  // Images for the filter and the create form (one request for both).
  images.then((images) => {
    for (const img of images?.data ?? []) {
      image.append(h('option', { value: img.name, selected: img.name === filters.image }, img.name));
    }
  }, () => {});

  const refresh = debounce(load, 250);
  const offs = [
    api.subscribe('container', (data) => {
      // Another project's change matters only when every project is shown
      // (a deleted row of this page is its own project's change).
      if (!showProject() && data.project && data.project !== api.currentProject() && !shown.has(data.id)) return;
      refresh();
    }),
    api.subscribe('open', refresh),
  ];
  // Relative times move on without a request.
  const clock = setInterval(() => {
    for (const t of tbody.querySelectorAll('time')) {
      const unix = Date.parse(t.getAttribute('datetime')) / 1000;
      t.textContent = when(unix).textContent;
    }
  }, 30_000);

  load();
  return () => {
    abort.abort();
    refresh.cancel();
    clearInterval(clock);
    offs.forEach((off) => off());
  };
}

function createForm(signal, imageList, created) {
  const slot = h('div', { class: 'slot' });
  const name = h('input', { id: 'create-name', name: 'name', required: true, 'data-testid': 'create-name', autocomplete: 'off', placeholder: 'my-sandbox' });
  const image = h('select', { id: 'create-image', 'data-testid': 'create-image' }, h('option', { value: '' }, 'server default'));
  const memory = h('select', { id: 'create-memory', 'data-testid': 'create-memory' }, ['1g', '4g', '16g', '64g'].map((m) => h('option', { value: m }, m)));
  const allowlist = h('input', {
    id: 'create-allowlist', 'data-testid': 'create-allowlist', autocomplete: 'off',
    placeholder: 'pypi.org, *.github.com', 'aria-describedby': 'create-allowlist-help',
  });
  const skills = h('fieldset', { class: 'skills', hidden: true }, h('legend', null, 'Skills'));
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'create-submit' }, 'Create container');

  imageList.then((images) => {
    for (const img of images?.data ?? []) {
      image.append(h('option', { value: img.name }, img.default ? `${img.name} (default)` : img.name));
    }
  }, () => {});
  api.get(api.v1('/skills'), { limit: 100 }, { signal }).then((list) => {
    const data = list?.data ?? [];
    if (!data.length) return;
    skills.hidden = false;
    for (const skill of data) {
      skills.append(h('label', { class: 'check', title: skill.description ?? '' },
        h('input', { type: 'checkbox', name: 'skill', value: skill.id, 'data-testid': 'create-skill' }), skill.name));
    }
  }, () => {});

  const form = h('form', {
    class: 'card create', 'aria-labelledby': 'create-title',
    onsubmit: async (event) => {
      event.preventDefault();
      fill(slot);
      const domains = allowlist.value.split(/[\s,]+/).map((d) => d.trim()).filter(Boolean);
      const body = {
        name: name.value.trim(),
        memory_limit: memory.value,
        network_policy: domains.length ? { type: 'allowlist', allowed_domains: domains } : { type: 'disabled' },
      };
      if (image.value) body.image = image.value;
      const picked = [...skills.querySelectorAll('input:checked')].map((i) => ({ type: 'skill_reference', skill_id: i.value }));
      if (picked.length) body.skills = picked;
      submit.disabled = true;
      try {
        const container = await api.post(api.v1('/containers'), body, { signal });
        fill(slot, h('p', { class: 'notice notice-ok', role: 'status', 'data-testid': 'created' },
          'Created ', h('a', { href: route('containers', container.id) }, container.name), '.'));
        name.value = '';
        allowlist.value = '';
        for (const box of skills.querySelectorAll('input:checked')) box.checked = false;
        created(container);
      } catch (error) {
        if (error.name !== 'AbortError') fill(slot, notice(error.message));
      } finally {
        submit.disabled = false;
      }
    },
  },
  h('h2', { id: 'create-title' }, 'New container'),
  h('div', { class: 'field' }, h('label', { for: 'create-name' }, 'Name'), name),
  h('div', { class: 'field' }, h('label', { for: 'create-image' }, 'Image'), image),
  h('div', { class: 'field' }, h('label', { for: 'create-memory' }, 'Memory'), memory),
  h('div', { class: 'field' }, h('label', { for: 'create-allowlist' }, 'Allowed domains'), allowlist,
    h('small', { id: 'create-allowlist-help', class: 'muted' }, 'Comma separated. Empty: no network.')),
  skills,
  slot,
  submit);
  return form;
}
