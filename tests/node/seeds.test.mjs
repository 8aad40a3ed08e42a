// The Node examples of OpenAI's shell-tool guide (the seeds: its Spanish and
// Japanese editions, whose code is the same), run verbatim as programs of
// their own with the official `openai` SDK against a real `shellgate serve`
// in the `debian-12` image. Only what points them at shellgate differs: the
// SDK reads OPENAI_BASE_URL and OPENAI_API_KEY; and the follow-up example's
// placeholder ids become the first turn's real ones (or, for
// `container_auto`, its environment does). The Python and curl ones are
// tests/python/test_seeds.py.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const binary = process.env.SHELLGATE_BIN ?? join(root, 'target', 'debug', 'shellgate');
// The cached debian-12 build (shared with the Rust image test and the
// Python suites): built once per machine, a no-op when up to date, rebuilt
// when the recipe changed.
const imageCache = process.env.SHELLGATE_TEST_IMAGE_CACHE ?? '/var/cache/shellgate-test/images-data';
const KEY = 'sk-node-seeds';

// seeds/000 (and 001): "container_auto", JavaScript.
const FIRST = `import OpenAI from "openai";
const client = new OpenAI();
const response = await client.responses.create({
model: "gpt-6-astra",
tools: [{ type: "shell", environment: { type: "container_auto" } }],
input: [
{
type: "message",
role: "user",
content: [
{
type: "input_text",
text: "Execute: ls -lah /mnt/data && python --version && node --version",
},
],
},
],
tool_choice: "auto",
});
console.log(response.output_text);
`;

// seeds/000 (and 001): continuing the work with previous_response_id.
const FOLLOW_UP = `import OpenAI from "openai";
const client = new OpenAI();
const response = await client.responses.create({
model: "gpt-6-astra",
previous_response_id:
"resp_2a8e5c9174d63b0f18a4c572de9f64a1b3c76d508e12f9ab47",
tools: [
{
type: "shell",
environment: {
type: "container_reference",
container_id: "cntr_f19c2b51e4a06793d82d54a7be0fc9154d3361ab28ce7f6041",
},
},
],
input: "Read /mnt/data/top5.csv and report the top candidate.",
});
console.log(response.output_text);
`;

const PLACEHOLDER_RESPONSE = 'resp_2a8e5c9174d63b0f18a4c572de9f64a1b3c76d508e12f9ab47';
const PLACEHOLDER_CONTAINER = 'cntr_f19c2b51e4a06793d82d54a7be0fc9154d3361ab28ce7f6041';
const TOP5 = 'candidate,score\nada,97\nbob,91\ncy,88\n';

// The follow-up with the first turn's ids; without a container id, with
// container_auto in place of its container_reference.
function continuing(responseId, containerId) {
  const text = FOLLOW_UP.replace(PLACEHOLDER_RESPONSE, responseId);
  if (containerId) return text.replace(PLACEHOLDER_CONTAINER, containerId);
  const auto = text
    .replace(`container_id: "${PLACEHOLDER_CONTAINER}",\n`, '')
    .replace('type: "container_reference",', 'type: "container_auto",');
  assert.ok(!auto.includes('container_reference') && auto.includes('container_auto'), auto);
  return auto;
}

let server;
let upstream;
let dataDir;
let baseURL;
let client;

// The script: "Execute: CMD" → a shell call of CMD; "Read /mnt/data/FILE
// ..." → a shell call of `cat` on it; a tool result → "Done: <result>".
function decide(body) {
  const messages = body.messages ?? [];
  const last = messages[messages.length - 1] ?? {};
  const tools = (body.tools ?? []).map((t) => t.function.name);
  if (last.role === 'tool') return { text: `Done: ${last.content}` };
  const text = typeof last.content === 'string'
    ? last.content
    : (last.content ?? []).map((part) => part.text ?? '').join(' ');
  if (text.includes('Execute: ') && tools.includes('shell')) {
    return { tool: ['shell', { commands: [text.split('Execute: ')[1].split('\n')[0].trim()] }] };
  }
  if (text.startsWith('Read /mnt/data/') && tools.includes('shell')) {
    return { tool: ['shell', { commands: [`cat ${text.split(' ')[1]}`] }] };
  }
  return { text: 'Hello from the scripted model.' };
}

function scripted(request, response) {
  let raw = '';
  request.on('data', (chunk) => (raw += chunk));
  request.on('end', () => {
    const decision = decide(JSON.parse(raw || '{}'));
    const message = { role: 'assistant', content: decision.text ?? null };
    if (decision.tool) {
      message.tool_calls = [{
        id: 'call_seeds', type: 'function',
        function: { name: decision.tool[0], arguments: JSON.stringify(decision.tool[1]) },
      }];
    }
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({
      choices: [{ index: 0, message, finish_reason: decision.tool ? 'tool_calls' : 'stop' }],
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

// Runs an example as a program of its own (an ES module resolving `openai`
// from this directory's node_modules); its standard output. Not spawnSync:
// the scripted upstream answering it runs in this process's event loop.
async function runExample(code) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], {
    cwd: here,
    env: { PATH: process.env.PATH, OPENAI_BASE_URL: baseURL, OPENAI_API_KEY: KEY },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const status = await new Promise((done) => child.once('close', done));
  assert.equal(status, 0, stderr);
  return stdout;
}

// The command's result as the scripted model quoted it in its answer.
function modelSaw(printed) {
  assert.match(printed, /^Done: /);
  const entries = JSON.parse(printed.slice('Done: '.length));
  assert.equal(entries.length, 1, printed);
  return entries[0];
}

before(async () => {
  const built = spawnSync(binary, ['--data-dir', imageCache, 'image', 'build', 'debian-12'], {
    encoding: 'utf8', timeout: 3_600_000,
  });
  assert.equal(built.status, 0, (built.stderr ?? '').slice(-3000));
  upstream = createHttpServer(scripted);
  await new Promise((done) => upstream.listen(0, '127.0.0.1', done));
  const upstreamUrl = `http://127.0.0.1:${upstream.address().port}/v1`;
  const port = await freePort();
  dataDir = mkdtempSync(join(tmpdir(), 'shellgate-node-seeds-'));
  chmodSync(dataDir, 0o755);
  server = spawn(binary, ['--data-dir', dataDir, 'serve', '--listen', `127.0.0.1:${port}`], {
    env: {
      PATH: process.env.PATH, SHELLGATE_API_KEYS: KEY, SHELLGATE_LOG: 'warn',
      SHELLGATE_WARM_CONTAINERS: '0', SHELLGATE_BUILD_DEFAULT_IMAGE: 'false', SHELLGATE_UPSTREAM_URL: upstreamUrl,
      SHELLGATE_DEFAULT_IMAGE: 'debian-12', SHELLGATE_IMAGES_DIR: join(imageCache, 'sandbox', 'images'),
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
  baseURL = `http://127.0.0.1:${port}/v1`;
  client = new OpenAI({ apiKey: KEY, baseURL, maxRetries: 0 });
});

after(async () => {
  server?.kill('SIGTERM');
  if (server) await new Promise((r) => server.once('exit', r));
  upstream?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

test('seeds: the first example exits 0 and prints the Python and Node versions', async () => {
  const entry = modelSaw(await runExample(FIRST));
  assert.deepEqual(entry.outcome, { type: 'exit', exit_code: 0 });
  assert.match(entry.stdout, /^total /);
  assert.match(entry.stdout, /\nPython 3\.11\.\d+\nv22\.\d+\.\d+\n$/);
});

async function firstTurnWritesTop5() {
  const first = await client.responses.create({
    model: 'gpt-6-astra',
    tools: [{ type: 'shell', environment: { type: 'container_auto' } }],
    input: String.raw`Execute: printf 'candidate,score\nada,97\nbob,91\ncy,88\n' > /mnt/data/top5.csv && echo written`,
  });
  const result = first.output.find((item) => item.type === 'shell_call_output');
  assert.equal(result.output[0].stdout, 'written\n');
  const call = first.output.find((item) => item.type === 'shell_call');
  return { id: first.id, container: call.environment.container_id };
}

for (const kind of ['container_reference', 'container_auto']) {
  test(`seeds: the follow-up example (${kind}) reads the file the first turn wrote`, async () => {
    const first = await firstTurnWritesTop5();
    const printed = await runExample(continuing(first.id, kind === 'container_reference' ? first.container : null));
    assert.deepEqual(modelSaw(printed), { outcome: { type: 'exit', exit_code: 0 }, stderr: '', stdout: TOP5 });
  });
}
