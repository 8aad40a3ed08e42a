// Building the DOM without HTML strings: every piece of data reaches the page
// through textContent or setAttribute, never through innerHTML. File names,
// commands, outputs, model text and host names are hostile; this is why.

const SVG = 'http://www.w3.org/2000/svg';

// h('a', {href: '#/x', class: 'btn', onclick: fn, dataset: {id}}, 'text', child, [more])
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// The same for SVG elements (charts).
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

function build(el, attrs, children) {
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith('on') && typeof value === 'function') {
        el.addEventListener(key.slice(2), value);
      } else if (key === 'dataset') {
        for (const [k, v] of Object.entries(value)) if (v !== undefined && v !== null) el.dataset[k] = String(v);
      } else if (key === 'value' && 'value' in el && !(el instanceof SVGElement)) {
        el.value = value;
      } else if (key === 'checked' || key === 'selected' || key === 'disabled' || key === 'hidden') {
        el[key] = Boolean(value);
      } else {
        el.setAttribute(key, value === true ? '' : String(value));
      }
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
  return el;
}

// Replaces an element's children.
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// A link to a hash route made of ids: every part encoded.
export function route(...parts) {
  return '#/' + parts.map((p) => encodeURIComponent(String(p))).join('/');
}

// --- formatting -----------------------------------------------------------

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(Number(n))) return '—';
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 1 : 0)} ${UNITS[unit]}`;
}

export function seconds(n) {
  if (n === null || n === undefined) return '—';
  const v = Number(n);
  if (v < 60) return `${v.toFixed(v < 10 ? 1 : 0)} s`;
  if (v < 3600) return `${(v / 60).toFixed(1)} min`;
  return `${(v / 3600).toFixed(1)} h`;
}

export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  return ms < 1000 ? `${ms} ms` : seconds(ms / 1000);
}

export function money(n) {
  if (n === null || n === undefined) return '—';
  const v = Number(n);
  return v !== 0 && Math.abs(v) < 0.01 ? `$${v.toFixed(4)}` : `$${v.toFixed(2)}`;
}

// One number formatter (Number.toLocaleString builds one per call).
const NUMBER = new Intl.NumberFormat('en');

export function count(n) {
  return n === null || n === undefined ? '—' : NUMBER.format(Number(n));
}

// Unix seconds → a short absolute time (title) and a relative one (text).
// One formatter for every date (Date.toLocaleString builds one per call:
// 150 of them cost a list page ~35 ms).
const FULL_DATE = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

export function when(unix) {
  if (!unix) return h('span', { class: 'muted' }, '—');
  const date = new Date(unix * 1000);
  return h('time', { datetime: date.toISOString(), title: FULL_DATE.format(date) }, ago(unix));
}

export function ago(unix) {
  const delta = Math.round(Date.now() / 1000 - unix);
  const future = delta < 0;
  const d = Math.abs(delta);
  let text;
  if (d < 45) text = `${d}s`;
  else if (d < 3600) text = `${Math.round(d / 60)}m`;
  else if (d < 86400) text = `${Math.round(d / 3600)}h`;
  else text = `${Math.round(d / 86400)}d`;
  return future ? `in ${text}` : `${text} ago`;
}

export function badge(text, kind) {
  return h('span', { class: `badge badge-${kind ?? String(text).replace(/[^a-z_]/gi, '')}` }, text);
}

// A notice (error or success) for the top of a page or form.
export function notice(text, kind = 'error') {
  return h('p', { class: `notice notice-${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
}

// Clears a previous notice in `slot` and shows `error`'s message.
export function showError(slot, error) {
  fill(slot, notice(error?.message ?? String(error)));
}

// Debounces fn by ms.
export function debounce(fn, ms) {
  let timer;
  const run = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  run.cancel = () => clearTimeout(timer);
  return run;
}

// A table: head cells and rows (each an array of cells or a <tr>).
export function table(attrs, head, rows) {
  return h('table', attrs,
    h('thead', null, h('tr', null, head.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', null, rows));
}

export function empty(colspan, text) {
  return h('tr', { class: 'empty' }, h('td', { colspan }, text));
}
