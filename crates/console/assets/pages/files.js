// A container's files: browse directories, download, upload, delete, and
// preview text (first 64 KiB, as text) and images (as a blob URL).

import * as api from '../api.js';
import { h, fill, bytes, when, notice, empty } from '../dom.js';

const PREVIEW_BYTES = 64 * 1024;
const IMAGE_TYPES = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', svg: 'image/svg+xml', ico: 'image/x-icon', bmp: 'image/bmp' };
const START = '/mnt/data';

// The directory each container was last shown at.
const places = new Map();

export function join(dir, name) {
  return dir === '/' ? `/${name}` : `${dir}/${name}`;
}

function parent(path) {
  const cut = path.lastIndexOf('/');
  return cut <= 0 ? '/' : path.slice(0, cut);
}

export function render(panel, { id, base, signal }) {
  let dir = places.get(id) ?? START;
  let objectUrl = null;
  const slot = h('div', { class: 'slot' });
  const crumbs = h('nav', { class: 'path', 'aria-label': 'Directory' });
  const body = h('tbody');
  const preview = h('section', { class: 'preview', 'data-testid': 'preview', 'aria-live': 'polite', hidden: true });
  const upload = h('input', {
    id: 'upload', type: 'file', multiple: true, 'data-testid': 'upload', class: 'visually-hidden',
    onchange: async () => {
      const files = [...upload.files];
      upload.value = '';
      await send(files);
    },
  });
  const folder = h('input', { id: 'mkdir-name', 'data-testid': 'mkdir-name', autocomplete: 'off', placeholder: 'new-folder', required: true });
  const status = h('span', { class: 'muted', role: 'status' });

  fill(panel,
    h('div', { class: 'toolbar' },
      crumbs,
      h('span', { class: 'spacer' }),
      upload, h('label', { class: 'btn btn-primary file-button', for: 'upload' }, 'Upload files'),
      h('form', {
        class: 'inline-form',
        onsubmit: async (event) => {
          event.preventDefault();
          try {
            await api.post(`${base}/fs/mkdir`, { path: join(dir, folder.value.trim()) });
            folder.value = '';
            list();
          } catch (error) {
            fill(slot, notice(error.message));
          }
        },
      }, h('label', { for: 'mkdir-name', class: 'visually-hidden' }, 'New folder name'), folder,
      h('button', { type: 'submit', class: 'btn' }, 'New folder'))),
    status, slot,
    h('div', { class: 'files-layout' },
      h('div', { class: 'scroll grow' }, h('table', { class: 'list', 'data-testid': 'files' },
        h('thead', null, h('tr', null, ['Name', 'Size', 'Modified', 'Mode', ''].map((c) => h('th', { scope: 'col' }, c)))),
        body)),
      preview));

  // Drop files on the panel to upload them.
  panel.addEventListener('dragover', (event) => event.preventDefault());
  panel.addEventListener('drop', (event) => {
    event.preventDefault();
    send([...(event.dataTransfer?.files ?? [])]);
  });

  function path() {
    const parts = dir.split('/').filter(Boolean);
    const links = [h('button', { type: 'button', class: 'link', onclick: () => go('/') }, '/')];
    parts.forEach((part, i) => {
      const target = `/${parts.slice(0, i + 1).join('/')}`;
      if (i > 0) links.push(h('span', { class: 'sep', 'aria-hidden': 'true' }, '/'));
      links.push(i === parts.length - 1
        ? h('span', { 'aria-current': 'location' }, part)
        : h('button', { type: 'button', class: 'link', onclick: () => go(target) }, part));
    });
    fill(crumbs, links);
  }

  function go(target) {
    dir = target;
    places.set(id, dir);
    closePreview();
    list();
  }

  function url(p) {
    return `${base}/fs/content?path=${encodeURIComponent(p)}`;
  }

  function entryRow(e) {
    const isDir = e.type === 'directory';
    const name = isDir
      ? h('button', { type: 'button', class: 'link', 'data-testid': 'open-dir', onclick: () => go(e.path) }, h('span', { class: 'icon', 'aria-hidden': 'true' }, '▸'), e.name, '/')
      : h('button', { type: 'button', class: 'link', 'data-testid': 'open-file', onclick: () => show(e) }, e.name);
    const download = e.type === 'file'
      ? h('a', {
        href: url(e.path), download: e.name, class: 'btn btn-small', 'data-testid': 'download',
        'aria-label': `Download ${e.name}`,
        onclick: (event) => {
          // An admin looking at another project sends its header: fetch it.
          if (!api.state.project) return;
          event.preventDefault();
          fetchDownload(e);
        },
      }, 'Download')
      : null;
    return h('tr', { dataset: { path: e.path, name: e.name } },
      h('td', { class: 'name' }, name, e.type === 'symlink' && e.link_target ? h('span', { class: 'muted' }, ` → ${e.link_target}`) : null),
      h('td', { class: 'num' }, isDir ? '—' : bytes(e.size)),
      h('td', null, when(e.modified_at)),
      h('td', null, h('code', null, e.mode ?? '')),
      h('td', { class: 'actions' }, download,
        h('button', {
          type: 'button', class: 'btn btn-small btn-danger', 'data-testid': 'delete-file', 'aria-label': `Delete ${e.name}`,
          onclick: async () => {
            if (!window.confirm(`Delete ${e.path}${isDir ? ' and everything in it' : ''}?`)) return;
            try {
              await api.del(`${base}/fs`, { path: e.path, recursive: isDir ? 'true' : undefined });
              if (preview.dataset.path === e.path) closePreview();
              list();
            } catch (error) {
              fill(slot, notice(error.message));
            }
          },
        }, 'Delete')));
  }

  async function list() {
    path();
    fill(slot);
    try {
      const listing = await api.get(`${base}/fs/list`, { path: dir }, { signal });
      const data = (listing?.data ?? []).map((e) => ({ ...e, type: e.type ?? e.kind })).sort((a, b) =>
        (b.type === 'directory') - (a.type === 'directory') || a.name.localeCompare(b.name));
      const rows = data.map(entryRow);
      if (dir !== '/') {
        rows.unshift(h('tr', null, h('td', { colspan: 5 },
          h('button', { type: 'button', class: 'link', 'data-testid': 'up', onclick: () => go(parent(dir)) }, '↑ Parent directory'))));
      }
      fill(body, rows.length ? rows : empty(5, 'Empty directory.'));
      const hidden = (listing?.non_utf8_names ?? 0) + (listing?.secret_names ?? 0);
      status.textContent = `${data.length} entries${listing?.truncated ? ' (more not listed)' : ''}${hidden ? `, ${hidden} not shown` : ''}`;
    } catch (error) {
      if (error.name === 'AbortError') return;
      fill(body, empty(5, ''));
      fill(slot, notice(error.message));
    }
  }

  async function send(files) {
    if (!files.length) return;
    fill(slot);
    let done = 0;
    for (const file of files) {
      status.textContent = `Uploading ${file.name} (${done + 1} of ${files.length})…`;
      try {
        await api.request(`${base}/fs/content`, { method: 'PUT', query: { path: join(dir, file.name) }, body: file, signal });
        done += 1;
      } catch (error) {
        if (error.name === 'AbortError') return;
        fill(slot, notice(`${file.name}: ${error.message}`));
      }
    }
    status.textContent = `Uploaded ${done} of ${files.length}.`;
    await list();
  }

  async function fetchDownload(e) {
    try {
      const response = await api.request(url(e.path), { raw: true, signal });
      const blob = await response.blob();
      const link = h('a', { href: URL.createObjectURL(blob), download: e.name, class: 'visually-hidden' });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
    } catch (error) {
      if (error.name !== 'AbortError') fill(slot, notice(error.message));
    }
  }

  function closePreview() {
    preview.hidden = true;
    delete preview.dataset.path;
    fill(preview);
    if (objectUrl) URL.revokeObjectURL(objectUrl);
    objectUrl = null;
  }

  async function show(e) {
    closePreview();
    preview.hidden = false;
    preview.dataset.path = e.path;
    const head = h('div', { class: 'preview-head' },
      h('h3', null, e.name),
      h('button', { type: 'button', class: 'btn btn-small', 'aria-label': 'Close preview', onclick: closePreview }, '×'));
    fill(preview, head, h('p', { class: 'muted' }, 'Loading…'));
    const ext = e.name.includes('.') ? e.name.split('.').pop().toLowerCase() : '';
    try {
      const response = await api.request(url(e.path), { raw: true, signal });
      if (IMAGE_TYPES[ext]) {
        const blob = new Blob([await response.arrayBuffer()], { type: IMAGE_TYPES[ext] });
        objectUrl = URL.createObjectURL(blob);
        fill(preview, head, h('img', { src: objectUrl, alt: `Preview of ${e.name}`, class: 'preview-image' }));
        return;
      }
      // The first 64 KiB, then the rest is not read.
      const reader = response.body.getReader();
      const chunks = [];
      let size = 0;
      while (size < PREVIEW_BYTES) {
        const { value, done } = await reader.read();
        if (done) break;
        chunks.push(value);
        size += value.length;
      }
      const more = size >= PREVIEW_BYTES;
      reader.cancel().catch(() => {});
      const buffer = new Uint8Array(Math.min(size, PREVIEW_BYTES));
      let at = 0;
      for (const chunk of chunks) {
        const part = chunk.subarray(0, buffer.length - at);
        buffer.set(part, at);
        at += part.length;
        if (at >= buffer.length) break;
      }
      if (buffer.includes(0)) {
        fill(preview, head, h('p', { class: 'muted' }, `A binary file (${bytes(e.size)}): download it to look inside.`));
        return;
      }
      const text = new TextDecoder('utf-8', { fatal: false }).decode(buffer);
      fill(preview, head,
        h('pre', { class: 'output', tabindex: '0' }, text),
        more ? h('p', { class: 'muted' }, `The first ${bytes(PREVIEW_BYTES)} of ${bytes(e.size)}.`) : null);
    } catch (error) {
      if (error.name !== 'AbortError') fill(preview, head, notice(error.message));
    }
  }

  list();
  return () => {
    if (objectUrl) URL.revokeObjectURL(objectUrl);
  };
}
