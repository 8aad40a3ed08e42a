// The project's snapshots (paged, newest first) and the images its
// containers may run, both read through the API (`/v1/snapshots`,
// `/v1/images`). A cluster keeps none: its list is empty.

import * as api from '../api.js';
import { h, fill, route, bytes, when, badge, notice, empty, table } from '../dom.js';

const PAGE = 50;
let cursors = []; // the `after` of each page before this one

export function render(main) {
  const abort = new AbortController();
  const { signal } = abort;
  const slot = h('div', { class: 'slot' });
  const body = h('tbody');
  const prev = h('button', { type: 'button', class: 'btn', 'data-testid': 'prev-page', onclick: () => page(-1) }, '← Newer');
  const next = h('button', { type: 'button', class: 'btn', 'data-testid': 'next-page', onclick: () => page(1) }, 'Older →');
  const imagesSlot = h('div', { 'data-testid': 'images' });
  let lastId = null;

  fill(main,
    h('div', { class: 'page-head' }, h('h1', null, 'Snapshots')),
    slot,
    h('div', { class: 'scroll' }, h('table', { class: 'list', 'data-testid': 'snapshots' },
      h('thead', null, h('tr', null, ['Snapshot', 'Name', 'From container', 'Image', 'Size', 'Frozen', 'Created']
        .map((c) => h('th', { scope: 'col' }, c)))),
      body)),
    h('div', { class: 'pager' }, prev, next),
    h('h2', null, 'Images'),
    imagesSlot);

  function row(snap) {
    return h('tr', { dataset: { id: snap.id } },
      h('td', null, snap.id),
      h('td', null, snap.name),
      // The container may since be deleted: its page then says so.
      h('td', null, h('a', { href: route('containers', snap.container_id) }, snap.container_id)),
      h('td', null, snap.image, snap.image_revision ? h('span', { class: 'muted' }, ` ${snap.image_revision}`) : null),
      h('td', { class: 'num' }, bytes(snap.size_bytes)),
      h('td', { class: 'num' }, `${snap.frozen_ms} ms`),
      h('td', null, when(snap.created_at)));
  }

  async function load() {
    try {
      const list = await api.get(api.v1('/snapshots'), { limit: PAGE, order: 'desc', after: cursors.at(-1) }, { signal });
      const data = list?.data ?? [];
      fill(slot);
      fill(body, data.length ? data.map(row) : empty(7, 'No snapshots yet.'));
      lastId = list?.last_id ?? data.at(-1)?.id ?? null;
      next.disabled = !list?.has_more;
      prev.disabled = cursors.length === 0;
    } catch (error) {
      if (error.name === 'AbortError') return;
      fill(slot, notice(error.message));
      fill(body, empty(7, 'No snapshots shown.'));
      next.disabled = true;
      prev.disabled = cursors.length === 0;
    }
  }

  function page(step) {
    if (step > 0 && lastId) cursors.push(lastId);
    if (step < 0) cursors.pop();
    load();
  }

  async function loadImages() {
    try {
      const list = await api.get(api.v1('/images'), null, { signal });
      const rows = (list?.data ?? []).map((img) => h('tr', { dataset: { id: img.id } },
        h('td', null, img.name, img.default ? [' ', badge('default', 'ok')] : null),
        h('td', { class: 'num' }, bytes(img.size_bytes)),
        h('td', null, Object.entries(img.runtimes ?? {}).map(([name, version]) => `${name} ${version}`).join(', ') || '—'),
        h('td', null, img.source_format ?? '—'),
        h('td', null, when(img.created_at))));
      fill(imagesSlot, table({ class: 'list' }, ['Image', 'Size', 'Runtimes', 'Imported from', 'Installed'],
        rows.length ? rows : [empty(5, 'No images.')]));
    } catch (error) {
      if (error.name !== 'AbortError') fill(imagesSlot, notice(error.message));
    }
  }

  load();
  loadImages();
  return () => abort.abort();
}
