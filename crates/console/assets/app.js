// The console's entry: the session, the header, the hash router and the
// live-update stream. Pages live in pages/*.js; each exports
// render(main, params) and may return a cleanup function.

import * as api from './api.js';
import { h, fill } from './dom.js';

const routes = [
  [/^signin$/, () => import('./pages/signin.js'), 'Sign in'],
  [/^containers$/, () => import('./pages/containers.js'), 'Containers'],
  [/^containers\/([^/]+)(?:\/([a-z]+))?$/, () => import('./pages/container.js'), 'Container'],
  [/^responses$/, () => import('./pages/responses.js'), 'Responses'],
  [/^responses\/([^/]+)$/, () => import('./pages/response.js'), 'Response'],
  [/^snapshots$/, () => import('./pages/snapshots.js'), 'Snapshots'],
  [/^usage$/, () => import('./pages/usage.js'), 'Usage'],
  [/^operator$/, () => import('./pages/operator.js'), 'Operator'],
];

const NAV = [
  ['containers', 'Containers'],
  ['responses', 'Responses'],
  ['snapshots', 'Snapshots'],
  ['usage', 'Usage'],
  ['operator', 'Operator', true],
];

const root = document.getElementById('app');
let main;
let header;
let cleanup = null;
let generation = 0;
let afterSignIn = '#/containers';

function currentPath() {
  const hash = location.hash;
  return hash.startsWith('#/') ? hash.slice(2) : '';
}

function layout() {
  const skip = h('a', {
    class: 'skip', href: '#main',
    onclick: (event) => {
      event.preventDefault();
      main.focus();
    },
  }, 'Skip to content');
  header = h('header', { class: 'top' });
  main = h('main', { id: 'main', tabindex: '-1' });
  fill(root, skip, header, main);
}

function renderHeader() {
  if (!api.state.session) {
    fill(header);
    header.hidden = true;
    return;
  }
  header.hidden = false;
  const path = currentPath();
  const links = NAV.filter(([, , admin]) => !admin || api.isAdmin()).map(([target, label]) => {
    const active = path === target || path.startsWith(`${target}/`);
    return h('a', { href: `#/${target}`, 'aria-current': active ? 'page' : null }, label);
  });
  let projectControl;
  if (api.isAdmin() && api.state.projects.length > 1) {
    projectControl = h('label', { class: 'project-switch' },
      h('span', { class: 'visually-hidden' }, 'Project'),
      h('select', {
        'data-testid': 'project-switch',
        onchange: (event) => {
          api.chooseProject(event.target.value);
          renderHeader();
          // A container or response belongs to a project: go to its list.
          const [first] = currentPath().split('/');
          const target = first && first !== 'signin' ? `#/${first}` : '#/containers';
          if (location.hash === target) show();
          else location.hash = target;
        },
      }, api.state.projects.map((p) => h('option', {
        value: p.project, selected: p.project === api.currentProject(),
      }, `${p.project} (${p.containers} containers)`))));
  }
  fill(header,
    h('a', { class: 'brand', href: '#/containers' }, h('span', { class: 'brand-mark', 'aria-hidden': 'true' }, '▍'), 'shellgate'),
    h('nav', { 'aria-label': 'Main' }, links),
    h('div', { class: 'who' },
      h('span', { class: 'project-label' }, 'Project ',
        h('strong', { 'data-testid': 'project' }, api.currentProject())),
      projectControl,
      api.isAdmin() ? h('span', { class: 'badge badge-admin' }, 'admin') : null,
      h('button', { type: 'button', class: 'btn btn-quiet', 'data-testid': 'signout', onclick: signOut }, 'Sign out')));
}

async function loadProjects() {
  try {
    const list = await api.get('/console/api/projects');
    api.state.projects = list?.data ?? [];
  } catch {
    api.state.projects = [];
  }
  if (api.state.project && !api.state.projects.some((p) => p.project === api.state.project)) {
    api.chooseProject(null);
  }
}

async function signOut() {
  try {
    await api.signOut();
  } catch {}
  api.disconnectEvents();
  api.state.projects = [];
  afterSignIn = '#/containers';
  location.hash = '#/signin';
  show();
}

// Called by the sign-in page once a key was accepted.
export async function signedIn() {
  await loadProjects();
  api.connectEvents();
  const target = afterSignIn;
  afterSignIn = '#/containers';
  if (location.hash === target) show();
  else location.hash = target;
}

// Any 401: back to sign-in, and back here after it.
api.setUnauthorizedHandler(() => {
  if (!api.state.session && currentPath() === 'signin') return;
  api.state.session = null;
  api.disconnectEvents();
  if (currentPath() !== 'signin') afterSignIn = location.hash || '#/containers';
  location.hash = '#/signin';
});

async function show({ focus = true } = {}) {
  const mine = ++generation;
  if (cleanup) {
    try {
      cleanup();
    } catch {}
    cleanup = null;
  }
  let path = currentPath();
  if (!api.state.session && path !== 'signin') {
    afterSignIn = path ? `#/${path}` : '#/containers';
    history.replaceState(null, '', '#/signin');
    path = 'signin';
  } else if (api.state.session && (path === 'signin' || path === '')) {
    history.replaceState(null, '', '#/containers');
    path = 'containers';
  }
  renderHeader();
  let match;
  const found = routes.find(([pattern]) => (match = pattern.exec(path)));
  fill(main);
  main.className = path === 'signin' ? 'signin-main' : '';
  if (!found) {
    document.title = 'Not found · shellgate';
    fill(main, h('h1', null, 'Not found'), h('p', null, 'No page here. ', h('a', { href: '#/containers' }, 'Containers')));
    return;
  }
  const [, load, title] = found;
  document.title = `${title} · shellgate`;
  const params = match.slice(1).map((p) => (p === undefined ? undefined : decodeURIComponent(p)));
  const page = await load();
  if (mine !== generation) return;
  const done = await page.render(main, params, { signedIn, rerender: () => show() });
  if (mine !== generation) {
    if (typeof done === 'function') done();
    return;
  }
  cleanup = typeof done === 'function' ? done : null;
  if (focus && path !== 'signin') main.focus({ preventScroll: true });
}

async function start() {
  layout();
  api.restoreProject();
  const session = await api.loadSession();
  if (session) {
    await loadProjects();
    api.connectEvents();
  }
  window.addEventListener('hashchange', () => {
    if (!location.hash.startsWith('#/')) return;
    show();
  });
  await show({ focus: false });
}

start();
