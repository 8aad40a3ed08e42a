// One response, read as its conversation: the input, then the output:
// messages, shell calls with their commands and outputs, tool calls,
// reasoning, and any other item shown as its JSON. Guardrail hits marked.

import * as api from '../api.js';
import { h, fill, route, when, badge, notice, count } from '../dom.js';

const GUARDRAIL = '[PROMPT_INJECTION]';

function text(value) {
  if (value === null || value === undefined) return '';
  return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

function pre(value, cls = 'output') {
  return h('pre', { class: cls }, text(value));
}

function parts(content) {
  if (typeof content === 'string') return [h('div', { class: 'text' }, content)];
  return (content ?? []).map((part) => {
    if (part.type === 'input_text' || part.type === 'output_text' || part.type === 'text') {
      return h('div', { class: 'text' }, part.text ?? '');
    }
    if (part.type === 'refusal') return h('div', { class: 'text refusal' }, h('strong', null, 'Refusal: '), part.refusal ?? '');
    if (part.type === 'input_image') return h('div', { class: 'muted' }, '[an image]');
    if (part.type === 'input_file') return h('div', { class: 'muted' }, `[a file${part.filename ? `: ${part.filename}` : ''}]`);
    return h('div', null, h('span', { class: 'muted' }, part.type ?? 'part'), pre(part));
  });
}

function outcome(o) {
  if (!o) return null;
  if (o.type === 'timeout') return badge('timeout', 'timeout');
  return badge(`exit ${o.exit_code ?? '?'}`, o.exit_code === 0 ? 'ok' : 'fail');
}

function body(item) {
  switch (item.type) {
    case 'message':
      return parts(item.content);
    case 'shell_call': {
      const env = item.environment;
      return [
        env?.type === 'container_reference'
          ? h('p', { class: 'muted' }, 'In container ', h('a', { href: route('containers', env.container_id) }, env.container_id))
          : env ? h('p', { class: 'muted' }, `Environment: ${env.type}`) : null,
        ...(item.action?.commands ?? []).map((c) => h('pre', { class: 'cmd', 'data-testid': 'shell-command' }, h('span', { class: 'prompt', 'aria-hidden': 'true' }, '$ '), c)),
      ];
    }
    case 'shell_call_output':
      return (item.output ?? []).map((r) => h('div', { class: 'result' },
        outcome(r.outcome),
        text(r.stdout) ? pre(r.stdout) : null,
        text(r.stderr) ? h('pre', { class: 'output stderr' }, text(r.stderr)) : null,
        !text(r.stdout) && !text(r.stderr) ? h('p', { class: 'muted' }, 'No output.') : null));
    case 'local_shell_call':
      return [h('pre', { class: 'cmd' }, h('span', { class: 'prompt', 'aria-hidden': 'true' }, '$ '), (item.action?.command ?? []).join(' '))];
    case 'function_call':
    case 'custom_tool_call': {
      let args = item.arguments ?? item.input;
      try {
        args = JSON.stringify(JSON.parse(args), null, 2);
      } catch {}
      return [h('p', null, h('code', null, item.namespace ? `${item.namespace}.${item.name}` : item.name)), pre(args)];
    }
    case 'function_call_output':
    case 'custom_tool_call_output':
    case 'local_shell_call_output':
      return typeof item.output === 'string' || !Array.isArray(item.output) ? [pre(item.output)] : parts(item.output);
    case 'reasoning': {
      const summary = (item.summary ?? []).map((s) => s.text).filter(Boolean);
      return summary.length ? summary.map((s) => h('div', { class: 'text' }, s)) : [h('p', { class: 'muted' }, 'Reasoning (no summary).')];
    }
    case 'code_interpreter_call':
      return [pre(item.code, 'cmd'), ...(item.outputs ?? []).map((o) => (o.type === 'logs' ? pre(o.logs) : h('p', { class: 'muted' }, `[${o.type}]`)))];
    default:
      return [pre(item)];
  }
}

const LABELS = {
  message: null,
  shell_call: 'Shell call',
  shell_call_output: 'Shell output',
  local_shell_call: 'Local shell call',
  local_shell_call_output: 'Local shell output',
  function_call: 'Function call',
  function_call_output: 'Function output',
  custom_tool_call: 'Tool call',
  custom_tool_call_output: 'Tool output',
  reasoning: 'Reasoning',
  code_interpreter_call: 'Code interpreter',
};

export function itemView(item, phase) {
  const kind = String(item.type ?? (item.role ? 'message' : 'item'));
  const label = kind === 'message' ? (item.role ?? 'message') : LABELS[kind] ?? kind;
  const flagged = JSON.stringify(item).includes(GUARDRAIL);
  return h('article', { class: `item item-${kind.replace(/[^a-z_]/g, '')} ${kind === 'message' ? `role-${String(item.role ?? '').replace(/[^a-z]/g, '')}` : ''}`, dataset: { kind, phase } },
    h('header', null,
      h('span', { class: 'kind' }, label),
      item.status && item.status !== 'completed' ? badge(item.status, 'muted') : null,
      flagged ? badge('guardrail hit', 'fail') : null,
      item.call_id ? h('span', { class: 'muted id' }, item.call_id) : null),
    body({ ...item, type: kind }));
}

export async function render(main, [id]) {
  const abort = new AbortController();
  const slot = h('div', { class: 'slot' });
  fill(main, h('p', { class: 'crumbs' }, h('a', { href: '#/responses' }, 'Responses'), ' / ', h('span', { class: 'id' }, id)), slot);
  let response;
  let input = [];
  try {
    [response, input] = await Promise.all([
      api.get(api.v1(`/responses/${api.enc(id)}`), null, { signal: abort.signal }),
      loadInput(id, abort.signal),
    ]);
  } catch (error) {
    if (error.name === 'AbortError') return undefined;
    fill(slot, notice(error.status === 404 ? `No response ${id} in project ${api.currentProject()}.` : error.message));
    return undefined;
  }
  const usage = response.usage ?? {};
  const conversation = h('div', { class: 'conversation', 'data-testid': 'conversation' },
    response.instructions ? h('article', { class: 'item item-instructions', dataset: { kind: 'instructions' } },
      h('header', null, h('span', { class: 'kind' }, 'Instructions')), h('div', { class: 'text' }, text(response.instructions))) : null,
    input.map((item) => itemView(item, 'input')),
    input.length && (response.output ?? []).length ? h('hr', { class: 'turn', 'aria-hidden': 'true' }) : null,
    (response.output ?? []).map((item) => itemView(item, 'output')),
    response.error ? notice(`${response.error.code ?? 'error'}: ${response.error.message ?? ''}`) : null);
  fill(main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/responses' }, 'Responses'), ' / ', h('span', { class: 'id' }, id)),
    h('div', { class: 'page-head' }, h('h1', null, 'Response'), badge(response.status ?? 'unknown', response.status === 'completed' ? 'ok' : response.status === 'failed' ? 'fail' : response.status)),
    h('dl', { class: 'facts facts-row' },
      h('dt', null, 'Id'), h('dd', null, h('code', null, response.id)),
      h('dt', null, 'Model'), h('dd', null, response.model ?? '—'),
      h('dt', null, 'Created'), h('dd', null, when(response.created_at)),
      h('dt', null, 'Tokens'), h('dd', null, `${count(usage.input_tokens)} in, ${count(usage.output_tokens)} out`),
      response.previous_response_id ? [h('dt', null, 'Follows'), h('dd', null, h('a', { href: route('responses', response.previous_response_id) }, response.previous_response_id))] : null),
    conversation);
  return () => abort.abort();
}

async function loadInput(id, signal) {
  const items = [];
  let after;
  for (let page = 0; page < 10; page += 1) {
    const list = await api.get(api.v1(`/responses/${api.enc(id)}/input_items`), { order: 'asc', limit: 100, after }, { signal });
    items.push(...(list?.data ?? []));
    if (!list?.has_more) break;
    after = list.last_id;
  }
  return items;
}
