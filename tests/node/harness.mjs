// What the Node suites share: a real `shellgate serve` on a free port, and a
// scripted Chat Completions upstream (a test fixture: a model answering by a
// `decide(body)` function, streamed when asked). Not a test file itself
// (`node --test` runs `*.test.mjs`).
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = dirname(fileURLToPath(import.meta.url));
export const root = resolve(here, '..', '..');
export const binary = process.env.SHELLGATE_BIN ?? join(root, 'target', 'debug', 'shellgate');

export function freePort() {
  return new Promise((done) => {
    const probe = createServer();
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

// Starts `shellgate serve` with key `key` and the extra environment `env`,
// in a data dir of its own (named after `name`), and waits until it answers
// `/healthz`. `stop()` ends it and removes its data.
export async function startServer({ key, name, env = {}, worldReadable = false }) {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), `shellgate-node-${name}-`));
  // `worldReadable`: the data dir traversable by every user (0755), as the
  // seeds' suite, whose containers use an image dir outside it, has it.
  if (worldReadable) chmodSync(dataDir, 0o755);
  const server = spawn(binary, ['--data-dir', dataDir, 'serve', '--listen', `127.0.0.1:${port}`], {
    env: {
      PATH: process.env.PATH, SHELLGATE_API_KEYS: key, SHELLGATE_LOG: 'warn',
      SHELLGATE_WARM_CONTAINERS: '1', SHELLGATE_BUILD_DEFAULT_IMAGE: 'false', ...env,
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
  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    async stop() {
      server.kill('SIGTERM');
      await new Promise((r) => server.once('exit', r));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

// A scripted Chat Completions upstream: `decide(body)` says `{ text }` or
// `{ tool: [name, arguments] }`; the answer is a completion, or its chunks
// when the request streams. Its `url` is the base URL shellgate is given.
export async function startScriptedUpstream(decide) {
  const upstream = createHttpServer((request, response) => {
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
  });
  await new Promise((done) => upstream.listen(0, '127.0.0.1', done));
  return {
    url: `http://127.0.0.1:${upstream.address().port}/v1`,
    close: () => upstream.close(),
  };
}
