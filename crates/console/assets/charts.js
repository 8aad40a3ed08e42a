// SVG bar charts, built with createElementNS (labels through textContent).
// Sized by their viewBox; colours and fonts come from app.css.

import { s } from './dom.js';

// A round tick step (1, 2 or 5 times a power of ten) giving about four
// ticks up to `value`, and the axis top it makes.
function niceAxis(value) {
  if (!(value > 0)) return { step: 0.25, max: 1 };
  const rough = value / 4;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough);
  return { step, max: step * Math.ceil(value / step - 1e-9) };
}

// Vertical bars over a category axis (days). data: [{label, value, title}].
export function columns(data, { format = String, testid, label, width = 720, height = 240, tick = (l) => l }) {
  const m = { top: 12, right: 8, bottom: 30, left: 64 };
  const plotW = width - m.left - m.right;
  const plotH = height - m.top - m.bottom;
  const { step, max } = niceAxis(Math.max(0, ...data.map((d) => d.value)));
  const svg = s('svg', {
    class: 'chart', viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': label, 'data-testid': testid,
    preserveAspectRatio: 'xMidYMid meet',
  }, s('title', null, label));
  for (let tick = 0; tick <= max + step / 2; tick += step) {
    const y = m.top + plotH - (plotH * tick) / max;
    svg.append(
      s('line', { class: 'grid', x1: m.left, x2: width - m.right, y1: y, y2: y }),
      s('text', { class: 'axis', x: m.left - 6, y: y + 4, 'text-anchor': 'end' }, format(Number(tick.toPrecision(12)))));
  }
  const band = plotW / Math.max(1, data.length);
  const every = Math.max(1, Math.ceil(data.length / 10));
  data.forEach((d, i) => {
    const barH = (plotH * Math.max(0, d.value)) / max;
    const x = m.left + i * band + band * 0.15;
    const rect = s('rect', {
      class: 'bar', x: x.toFixed(1), y: (m.top + plotH - barH).toFixed(1),
      width: Math.max(1, band * 0.7).toFixed(1), height: Math.max(d.value > 0 ? 1 : 0, barH).toFixed(1),
      dataset: { label: d.label, value: d.value },
    }, s('title', null, d.title ?? `${d.label}: ${format(d.value)}`));
    svg.append(rect);
    if (i % every === 0) {
      svg.append(s('text', { class: 'axis', x: (m.left + i * band + band / 2).toFixed(1), y: height - 10, 'text-anchor': 'middle' }, tick(d.label)));
    }
  });
  svg.append(s('line', { class: 'baseline', x1: m.left, x2: width - m.right, y1: m.top + plotH, y2: m.top + plotH }));
  return svg;
}

// Horizontal bars, one row per item (containers, models). data: [{label, value, title}].
export function bars(data, { format = String, testid, label, width = 720, row = 26 }) {
  const m = { top: 6, right: 80, bottom: 6, left: Math.min(200, Math.round(width * 0.32)) };
  const height = m.top + m.bottom + Math.max(1, data.length) * row;
  const plotW = width - m.left - m.right;
  const max = Math.max(0, ...data.map((d) => d.value)) || 1;
  const svg = s('svg', {
    class: 'chart', viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': label, 'data-testid': testid,
    preserveAspectRatio: 'xMidYMid meet',
  }, s('title', null, label));
  data.forEach((d, i) => {
    const y = m.top + i * row;
    const w = (plotW * Math.max(0, d.value)) / max;
    const fit = Math.max(8, Math.floor((m.left - 12) / 7.6));
    const name = d.label.length > fit ? `${d.label.slice(0, fit - 1)}…` : d.label;
    svg.append(
      s('text', { class: 'label', x: m.left - 8, y: y + row / 2 + 4, 'text-anchor': 'end' }, name, s('title', null, d.label)),
      s('rect', {
        class: 'bar', x: m.left, y: y + 4, width: Math.max(d.value > 0 ? 1 : 0, w).toFixed(1), height: row - 8,
        dataset: { label: d.label, value: d.value },
      }, s('title', null, d.title ?? `${d.label}: ${format(d.value)}`)),
      s('text', { class: 'value', x: m.left + w + 6, y: y + row / 2 + 4 }, format(d.value)));
  });
  return svg;
}
