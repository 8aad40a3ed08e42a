// The server, as the app calls it: same origin, the session cookie, the
// CSRF header on every state-changing request, the admin's chosen project,
// and a 401 anywhere sending the app back to sign-in.

export const state = {
  session: null, // {project, role, csrf_token, expires_at}
  project: null, // the project an admin acts on (null: its own)
  projects: [],
};

let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

const PROJECT_KEY = 'shellgate.console.project';

export function restoreProject() {
  try {
    state.project = sessionStorage.getItem(PROJECT_KEY);
  } catch {
    state.project = null;
  }
}

export function chooseProject(name) {
  state.project = name && name !== state.session?.project ? name : null;
  try {
    if (state.project) sessionStorage.setItem(PROJECT_KEY, state.project);
    else sessionStorage.removeItem(PROJECT_KEY);
  } catch {}
}

// The project the pages show.
export function currentProject() {
  return state.project ?? state.session?.project ?? '';
}

export function isAdmin() {
  return state.session?.role === 'admin';
}

// Headers every console API request carries.
export function headers(method = 'GET', extra = {}) {
  const out = { ...extra };
  if (method !== 'GET' && method !== 'HEAD' && state.session) out['X-CSRF-Token'] = state.session.csrf_token;
  if (state.project && isAdmin()) out['X-Shellgate-Project'] = state.project;
  return out;
}

// A request. `body`: an object (sent as JSON), or a Blob/File/ArrayBuffer
// (sent raw). `raw`: give back the Response instead of its JSON.
export async function request(path, { method = 'GET', body, raw = false, signal, query } = {}) {
  let url = path;
  if (query) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') params.set(k, String(v));
    const text = params.toString();
    if (text) url += (url.includes('?') ? '&' : '?') + text;
  }
  const extra = {};
  let payload;
  if (body !== undefined) {
    if (body instanceof Blob || body instanceof ArrayBuffer || ArrayBuffer.isView(body)) {
      payload = body;
      extra['Content-Type'] = 'application/octet-stream';
    } else {
      payload = JSON.stringify(body);
      extra['Content-Type'] = 'application/json';
    }
  }
  let response;
  try {
    response = await fetch(url, { method, body: payload, headers: headers(method, extra), credentials: 'same-origin', signal });
  } catch (error) {
    if (error.name === 'AbortError') throw error;
    throw new ApiError(0, `The server did not answer (${error.message}).`);
  }
  if (response.status === 401 && !path.startsWith('/console/session')) {
    onUnauthorized();
    throw new ApiError(401, 'Your session ended: sign in again.');
  }
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    let parsed;
    try {
      parsed = await response.json();
      if (parsed?.error?.message) message = parsed.error.message;
    } catch {}
    throw new ApiError(response.status, message, parsed);
  }
  if (raw) return response;
  if (response.status === 204) return null;
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path, query, opts) => request(path, { ...opts, query });
export const post = (path, body, opts) => request(path, { ...opts, method: 'POST', body });
export const del = (path, query, opts) => request(path, { ...opts, method: 'DELETE', query });

// The OpenAI-compatible API through the session: `/console/api/v1/...`.
export const v1 = (path) => `/console/api/v1${path}`;
export const enc = encodeURIComponent;

// --- the session ---------------------------------------------------------

export async function loadSession() {
  try {
    state.session = await request('/console/session');
  } catch {
    state.session = null;
  }
  return state.session;
}

export async function signIn(key) {
  state.session = await request('/console/session', { method: 'POST', body: { key } });
  return state.session;
}

export async function signOut() {
  try {
    await request('/console/session', { method: 'DELETE' });
  } finally {
    state.session = null;
    chooseProject(null);
  }
}

// --- server-sent events over fetch ----------------------------------------
// For streams that must carry the project header (EventSource cannot send
// headers). Calls onEvent(name, data) for each event; resolves when the
// stream ends; `signal` stops it.
export async function stream(path, onEvent, signal) {
  const response = await request(path, { raw: true, signal });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let found;
    while ((found = /\r?\n\r?\n/.exec(buffer))) {
      const block = buffer.slice(0, found.index);
      buffer = buffer.slice(found.index + found[0].length);
      let name = 'message';
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'event') name = val;
        else if (field === 'data') data.push(val);
      }
      if (data.length) onEvent(name, data.join('\n'));
    }
  }
}

// --- live updates: /console/api/events -----------------------------------
// One EventSource for the app; pages subscribe to event names.

const listeners = new Map(); // name → Set<fn>
let source = null;

export function subscribe(name, fn) {
  if (!listeners.has(name)) listeners.set(name, new Set());
  listeners.get(name).add(fn);
  return () => listeners.get(name)?.delete(fn);
}

export function connectEvents() {
  if (source) return;
  source = new EventSource('/console/api/events', { withCredentials: true });
  for (const name of ['container', 'command', 'egress', 'response']) {
    source.addEventListener(name, (event) => {
      let data;
      try {
        data = JSON.parse(event.data);
      } catch {
        return;
      }
      for (const fn of listeners.get(name) ?? []) fn(data);
    });
  }
  // Reconnected, or told it fell behind: every page refetches. Not on the
  // first open: the page has just read what it shows (refetching then
  // fetched every list twice on a cold load).
  const resync = () => {
    for (const fn of listeners.get('open') ?? []) fn();
  };
  let opened = false;
  source.addEventListener('open', () => {
    if (opened) resync();
    opened = true;
  });
  source.addEventListener('resync', resync);
  // The browser reconnects by itself after a dropped stream; a refused one
  // (401: the session ended, signed out elsewhere or its key revoked) it
  // gives up on. Then the session is asked: gone → sign-in; still there
  // (the server restarted) → one new stream a little later.
  const mine = source;
  source.addEventListener('error', () => {
    if (mine.readyState !== EventSource.CLOSED || source !== mine) return;
    source = null;
    const again = () => setTimeout(() => {
      if (!source && state.session) connectEvents();
    }, 3000);
    request('/console/session').then(again, (error) => {
      if (error.status !== 401) return again();
      state.session = null;
      onUnauthorized();
      return undefined;
    });
  });
}

export function disconnectEvents() {
  source?.close();
  source = null;
}
