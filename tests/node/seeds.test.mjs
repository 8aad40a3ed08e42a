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
import { join } from 'node:path';
import OpenAI from 'openai';

import { binary, here, startScriptedUpstream, startServer } from './harness.mjs';

// The cached debian-12 build (shared with the Rust image test and the
// Python suites): built once per machine, a no-op when up to date, rebuilt
// when the recipe changed.
const imageCache = process.env.SHELLGATE_TEST_IMAGE_CACHE ?? '/var/cache/shellgate-test/images-data';
const KEY = 'sk-node-seeds-project';

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

// Runs an example as a program of its own (an ES module resolving `openai`
// from this directory's node_modules); its standard output. Not spawnSync:
// the scripted upstream answering it runs in this process's event loop. In
// cluster mode each example goes through the next replica (`baseURL`).
async function runExample(code) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], {
    cwd: here,
    env: { PATH: process.env.PATH, OPENAI_BASE_URL: server.baseURL, OPENAI_API_KEY: KEY },
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
  upstream = await startScriptedUpstream(decide);
  server = await startServer({
    key: KEY, name: 'seeds', worldReadable: true,
    env: {
      SHELLGATE_WARM_CONTAINERS: '0', SHELLGATE_UPSTREAM_URL: upstream.url,
      SHELLGATE_DEFAULT_IMAGE: 'debian-12', SHELLGATE_IMAGES_DIR: join(imageCache, 'sandbox', 'images'),
    },
  });
  // Each request through the next replica in cluster mode (harness.mjs).
  client = new OpenAI({ apiKey: KEY, baseURL: server.baseURL, fetch: server.fetch, maxRetries: 0 });
});

after(async () => {
  await server?.stop();
  upstream?.close();
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
