// The operator's view (admin keys): server health, images and the default
// image's build, and API keys (created, shown once, listed, revoked).

import * as api from '../api.js';
import { h, fill, bytes, when, badge, notice, table, empty, count } from '../dom.js';

export function render(main) {
  const abort = new AbortController();
  const { signal } = abort;
  if (!api.isAdmin()) {
    fill(main, h('h1', null, 'Operator'), notice('Only an admin key sees this page.'));
    return undefined;
  }
  const health = h('section', { class: 'card wide', 'data-testid': 'health', 'aria-labelledby': 'health-title' }, h('h2', { id: 'health-title' }, 'Server'));
  const images = h('section', { class: 'card wide', 'data-testid': 'images', 'aria-labelledby': 'images-title' }, h('h2', { id: 'images-title' }, 'Images'));
  const keys = h('section', { class: 'card wide', 'data-testid': 'keys', 'aria-labelledby': 'keys-title' }, h('h2', { id: 'keys-title' }, 'API keys'));
  const healthBody = h('div');
  const imagesBody = h('div');
  const keysBody = h('div');
  health.append(healthBody);
  images.append(imagesBody);
  keys.append(keyForm(), keysBody);
  fill(main, h('div', { class: 'page-head' }, h('h1', null, 'Operator')), h('div', { class: 'grid2' }, health, images, keys));

  let building = null; // timer while the default image builds

  async function loadHealth() {
    try {
      const data = await api.get('/console/api/operator/health', null, { signal });
      const img = data.default_image ?? {};
      const engine = data.engine ?? {};
      fill(healthBody,
        h('dl', { class: 'facts' },
          h('dt', null, 'Version'), h('dd', null, data.version ?? '—'),
          h('dt', null, 'Engine'), h('dd', null, badge(engine.state ?? 'unknown', engine.state === 'ready' || engine.state === 'ok' ? 'ok' : 'fail')),
          h('dt', null, 'cgroup mode'), h('dd', null, engine.cgroup_mode ?? '—'),
          h('dt', null, 'Containers'), h('dd', null, Array.isArray(engine.containers)
            ? (engine.containers.length ? engine.containers.map((c) => `${count(c.count)} ${c.status}`).join(', ') : 'none')
            : count(engine.containers)),
          engine.egress === undefined ? null : [h('dt', null, 'Egress'), h('dd', null, engine.egress ? 'on (through the egress proxy)' : 'off: containers have no network')],
          h('dt', null, 'Default image'), h('dd', { 'data-testid': 'default-image' }, img.name ?? '—', ' ',
            badge(img.state ?? 'unknown', img.state === 'ready' ? 'ok' : img.state === 'failed' || img.state === 'missing' ? 'fail' : 'running'),
            img.progress ? h('div', { class: 'muted progress-text', 'data-testid': 'build-progress' }, img.progress) : null)),
        (data.warnings ?? []).length
          ? h('ul', { class: 'warnings', 'data-testid': 'warnings' }, data.warnings.map((w) => h('li', null, w)))
          : h('p', { class: 'muted' }, 'No warnings.'));
      build.disabled = img.state === 'building';
      build.textContent = img.state === 'building' ? 'Building…' : img.state === 'ready' ? 'Rebuild default image' : 'Build default image';
      // While it builds, its progress is read again every two seconds (the
      // events stream has no build event); it stops when the build does.
      clearTimeout(building);
      building = img.state === 'building' ? setTimeout(() => {
        loadHealth();
        loadImages();
      }, 2000) : null;
    } catch (error) {
      if (error.name !== 'AbortError') fill(healthBody, notice(error.message));
    }
  }

  const buildSlot = h('div', { class: 'slot' });
  const build = h('button', {
    type: 'button', class: 'btn btn-primary', 'data-testid': 'build-image',
    onclick: async () => {
      build.disabled = true;
      fill(buildSlot);
      try {
        await api.post('/console/api/operator/images/default/build');
        fill(buildSlot, notice('The build started.', 'ok'));
      } catch (error) {
        fill(buildSlot, notice(error.message));
      }
      loadHealth();
    },
  }, 'Build default image');

  async function loadImages() {
    try {
      const list = await api.get(api.v1('/images'), null, { signal });
      fill(imagesBody,
        h('div', { class: 'toolbar' }, build, buildSlot),
        table({ class: 'list' }, ['Name', 'Size', 'Installed', 'Runtimes'],
          (list?.data ?? []).length ? list.data.map((img) => h('tr', { dataset: { id: img.name } },
            h('td', null, img.name, img.default ? [' ', badge('default', 'ok')] : null),
            h('td', { class: 'num' }, img.size_bytes === null || img.size_bytes === undefined ? 'host /usr' : bytes(img.size_bytes)),
            h('td', null, when(img.created_at)),
            h('td', null, Object.entries(img.runtimes ?? {}).map(([k, v]) => h('span', { class: 'chip' }, `${k} ${v}`))))) : empty(4, 'No images.')));
    } catch (error) {
      if (error.name !== 'AbortError') fill(imagesBody, notice(error.message));
    }
  }

  function keyForm() {
    const slot = h('div', { class: 'slot' });
    const project = h('input', { id: 'key-project', required: true, autocomplete: 'off', value: api.currentProject(), 'data-testid': 'key-project' });
    const role = h('select', { id: 'key-role', 'data-testid': 'key-role' }, h('option', { value: 'member' }, 'member'), h('option', { value: 'admin' }, 'admin'));
    return h('form', {
      class: 'inline-form',
      onsubmit: async (event) => {
        event.preventDefault();
        fill(slot);
        try {
          const created = await api.post('/console/api/operator/keys', { project: project.value.trim(), role: role.value }, { signal });
          const secret = h('code', { class: 'secret', 'data-testid': 'new-key' }, created.key);
          const copy = h('button', {
            type: 'button', class: 'btn btn-small',
            onclick: async () => {
              try {
                await navigator.clipboard.writeText(created.key);
                copy.textContent = 'Copied';
              } catch {
                window.getSelection()?.selectAllChildren(secret);
              }
            },
          }, 'Copy');
          fill(slot, h('div', { class: 'notice notice-ok', role: 'status' },
            h('p', null, `Key ${created.id} for project ${project.value.trim()}: shown this once, keep it now.`),
            h('p', null, secret, ' ', copy)));
          loadKeys();
        } catch (error) {
          if (error.name !== 'AbortError') fill(slot, notice(error.message));
        }
      },
    },
    h('div', { class: 'field' }, h('label', { for: 'key-project' }, 'Project'), project),
    h('div', { class: 'field' }, h('label', { for: 'key-role' }, 'Role'), role),
    h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'key-create' }, 'Create key'),
    slot);
  }

  async function loadKeys() {
    try {
      const list = await api.get('/console/api/operator/keys', null, { signal });
      const data = list?.data ?? [];
      fill(keysBody, table({ class: 'list' }, ['Key', 'Project', 'Role', 'Created', 'Revoked', ''],
        data.length ? data.map((k) => h('tr', { dataset: { id: k.id } },
          h('td', null, h('code', null, k.id)),
          h('td', null, k.project),
          h('td', null, badge(k.role, k.role === 'admin' ? 'admin' : 'muted')),
          h('td', null, when(k.created_at)),
          h('td', null, k.revoked_at ? when(k.revoked_at) : '—'),
          h('td', { class: 'actions' }, k.revoked_at ? null : h('button', {
            type: 'button', class: 'btn btn-small btn-danger', 'data-testid': 'revoke-key',
            onclick: async () => {
              if (!window.confirm(`Revoke ${k.id}? Its sessions end and requests with it are refused.`)) return;
              try {
                await api.del(`/console/api/operator/keys/${api.enc(k.id)}`);
              } catch (error) {
                fill(keysBody, notice(error.message));
                return;
              }
              loadKeys();
            },
          }, 'Revoke')))) : empty(6, 'No keys.')));
    } catch (error) {
      if (error.name !== 'AbortError') fill(keysBody, notice(error.message));
    }
  }

  loadHealth();
  loadImages();
  loadKeys();
  return () => {
    abort.abort();
    clearTimeout(building);
  };
}
