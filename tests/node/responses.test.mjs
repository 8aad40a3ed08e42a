// The Responses API with the hosted shell tool through the official `openai`
// Node SDK, against a scripted Chat Completions upstream (a test fixture).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const binary = process.env.SHELLGATE_BIN ?? join(root, 'target', 'debug', 'shellgate');
const KEY = 'sk-node-responses';

let server;
let upstream;
let dataDir;
let client;

// The script: "Execute: CMD" → a call of the `shell` tool; a tool result →
// "Done: <result>"; anything else → a greeting. Streams when asked to.
function decide(body) {
  const messages = body.messages ?? [];
  const last = messages[messages.length - 1] ?? {};
  const tools = (body.tools ?? []).map((t) => t.function.name);
  if (last.role === 'tool') return { text: `Done: ${last.content}` };
  const text = typeof last.content === 'string' ? last.content : '';
  if (text.includes('Execute: ') && tools.includes('shell')) {
    return { tool: ['shell', { commands: [text.split('Execute: ')[1].split('\n')[0].trim()] }] };
  }
  return { text: 'Hello from the scripted model.' };
}

function scripted(request, response) {
  let raw = '';
  request.on('data', (chunk) => (raw += chunk));
  request.on('end', () => {
    const body = JSON.parse(raw || '{}');
    const decision = decide(body);
    const call = decision.tool && {
      index: 0, id: 'call_node', type: 'function',
      function: { name: decision.tool[0], arguments: JSON.stringify(decision.tool[1]) },
    };
    if (body.stream) {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      const delta = call ? { tool_calls: [call] } : { content: decision.text };
      for (const chunk of [
        { choices: [{ index: 0, delta }] },
        { choices: [{ index: 0, delta: {}, finish_reason: call ? 'tool_calls' : 'stop' }] },
        { choices: [], usage: { prompt_tokens: 7, completion_tokens: 3 } },
      ]) response.write(`data: ${JSON.stringify(chunk)}\n\n`);
      response.end('data: [DONE]\n\n');
      return;
    }
    const message = { role: 'assistant', content: decision.text ?? null };
    if (call) message.tool_calls = [call];
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({
      choices: [{ index: 0, message, finish_reason: call ? 'tool_calls' : 'stop' }],
      usage: { prompt_tokens: 7, completion_tokens: 3 },
    }));
  });
}

function freePort() {
  return new Promise((done) => {
    const probe = createServer();
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

before(async () => {
  upstream = createHttpServer(scripted);
  await new Promise((done) => upstream.listen(0, '127.0.0.1', done));
  const upstreamUrl = `http://127.0.0.1:${upstream.address().port}/v1`;
  const port = await freePort();
  dataDir = mkdtempSync(join(tmpdir(), 'shellgate-node-responses-'));
  server = spawn(binary, ['--data-dir', dataDir, 'serve', '--listen', `127.0.0.1:${port}`], {
    env: {
      PATH: process.env.PATH, SHELLGATE_API_KEYS: KEY, SHELLGATE_LOG: 'warn',
      SHELLGATE_WARM_CONTAINERS: '1', SHELLGATE_BUILD_DEFAULT_IMAGE: 'false', SHELLGATE_UPSTREAM_URL: upstreamUrl,
    },
    stdio: 'ignore',
  });
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/healthz`)).ok) break;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  client = new OpenAI({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
});

after(async () => {
  server.kill('SIGTERM');
  await new Promise((r) => server.once('exit', r));
  upstream.close();
  rmSync(dataDir, { recursive: true, force: true });
});

test('responses: container_auto runs the model\'s shell call', async () => {
  const response = await client.responses.create({
    model: 'scripted',
    tools: [{ type: 'shell', environment: { type: 'container_auto' } }],
    input: 'Execute: echo from-node && node --version',
  });
  assert.equal(response.status, 'completed');
  assert.deepEqual(response.output.map((i) => i.type), ['shell_call', 'shell_call_output', 'message']);
  const [call, result] = response.output;
  assert.equal(call.environment.type, 'container_reference');
  assert.match(result.output[0].stdout, /^from-node\nv\d+/);
  assert.match(response.output_text, /^Done: /);
  const again = await client.responses.retrieve(response.id);
  assert.equal(again.id, response.id);
});

test('responses: streaming gives the typed events and the final response', async () => {
  const stream = client.responses.stream({
    model: 'scripted',
    tools: [{ type: 'shell', environment: { type: 'container_auto' } }],
    input: 'Execute: echo streamed',
  });
  const kinds = [];
  for await (const event of stream) kinds.push(event.type);
  const final = await stream.finalResponse();
  assert.equal(kinds[0], 'response.created');
  assert.equal(kinds.at(-1), 'response.completed');
  assert.ok(kinds.includes('response.shell_call_output_content.delta'), kinds.join(' '));
  assert.ok(kinds.includes('response.output_text.delta'));
  assert.match(final.output_text, /streamed/);
});

test('responses: the local environment hands the shell call back', async () => {
  const tools = [{ type: 'shell', environment: { type: 'local' } }];
  const response = await client.responses.create({ model: 'scripted', tools, input: 'Execute: pwd' });
  const call = response.output.at(-1);
  assert.equal(call.type, 'shell_call');
  assert.deepEqual(call.action.commands, ['pwd']);
  const follow = await client.responses.create({
    model: 'scripted',
    previous_response_id: response.id,
    tools,
    input: [{
      type: 'shell_call_output', call_id: call.call_id,
      output: [{ stdout: '/home/me\n', stderr: '', outcome: { type: 'exit', exit_code: 0 } }],
    }],
  });
  assert.match(follow.output_text, /home\/me/);
});
