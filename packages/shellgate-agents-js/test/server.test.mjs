// The provider against a real `shellgate serve` (the repository's Node harness): a
// SandboxAgent run with the SDK's own ScriptedModel through its own tools (exec,
// tty, write_stdin), files written and read back, and a workspace persisted from one
// container and hydrated into another. Skipped while the server lacks the processes,
// files-by-path and archive routes it needs (an older shellgate answers them 404 `unknown_url`).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run, setTracingDisabled } from '@openai/agents-core';
import { Manifest, SandboxAgent } from '@openai/agents-core/sandbox';
import { ScriptedModel, functionCall, assistantMessage, modelResponder } from '@openai/agents-core/testing';
import { startServer } from '../../../tests/node/harness.mjs';
import { ShellgateSandboxClient, snapshotIdIn } from '../src/index.mjs';

const KEY = 'sk-agents-js-project';
let server;
let missing = [];
setTracingDisabled(true);

async function serves(path) {
  const response = await fetch(`${server.root}${path}`, { headers: { Authorization: `Bearer ${KEY}` } });
  if (response.status !== 404) return true;
  return (await response.json())?.error?.code !== 'unknown_url';
}

before(async () => {
  // The SDK's runs snapshot their workspace where this says, not in $HOME.
  process.env.OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR = mkdtempSync(join(tmpdir(), 'shellgate-agents-js-runs-'));
  server = await startServer({ key: `${KEY}:agents`, name: 'agents-js' });
  server.root = server.baseURL.replace(/\/v1$/, '');
  for (const path of ['/v1/containers/cntr_none/processes', '/v1/containers/cntr_none/fs/stat?path=/mnt/data',
    '/v1/containers/cntr_none/fs/archive?path=/mnt/data']) {
    if (!(await serves(path))) missing.push(path);
  }
});
after(async () => {
  await server?.stop();
  rmSync(process.env.OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR, { recursive: true, force: true });
});

const client = () => new ShellgateSandboxClient({ baseUrl: server.root, apiKey: KEY });

function toolOutput(call, callId) {
  const item = call.request.input.find((i) => i.type === 'function_call_result' && i.callId === callId);
  assert.ok(item, `no output of ${callId}`);
  return typeof item.output === 'string' ? item.output : item.output?.text ?? JSON.stringify(item.output);
}

test('a SandboxAgent runs exec, a tty and a python3 REPL in a shellgate container', async (t) => {
  if (missing.length) return t.skip(`this shellgate does not serve ${missing.join(', ')}`);
  const sessionIdOf = (call) => Number(/session ID (\d+)/.exec(toolOutput(call, 'repl'))[1]);
  const model = new ScriptedModel([
    [functionCall('exec_command', { cmd: 'cat notes/hello.txt; pwd' }, { callId: 'plain' })],
    [functionCall('exec_command', { cmd: 'tty', tty: true }, { callId: 'tty' })],
    // Nothing waits on time for the REPL: input written before it is ready
    // waits in its terminal, and the last yield ends at its exit.
    [functionCall('exec_command', { cmd: 'python3 -q', tty: true, yield_time_ms: 250 }, { callId: 'repl' })],
    modelResponder((call) => [functionCall('write_stdin', { session_id: sessionIdOf(call), chars: 'x = 6 * 7\n', yield_time_ms: 250 }, { callId: 'assign' })]),
    modelResponder((call) => [functionCall('write_stdin', { session_id: sessionIdOf(call), chars: 'print(x); exit()\n', yield_time_ms: 30000 }, { callId: 'answer' })]),
    [assistantMessage('done')],
  ]);
  const agent = new SandboxAgent({
    name: 'shellgate',
    instructions: 'Use the shell.',
    model,
    defaultManifest: new Manifest({ entries: { 'notes/hello.txt': { type: 'file', content: 'hello from the manifest\n' } } }),
  });
  const result = await run(agent, 'go', { sandbox: { client: client() } });
  assert.equal(result.finalOutput, 'done');
  const calls = model.calls;
  assert.match(toolOutput(calls[1], 'plain'), /hello from the manifest[\s\S]*\/mnt\/data/);
  assert.match(toolOutput(calls[2], 'tty'), /\/dev\/pts\//);
  assert.match(toolOutput(calls[3], 'repl'), /Process running with session ID/);
  assert.match(toolOutput(calls[4], 'assign'), /Process running with session ID/);
  assert.match(toolOutput(calls[5], 'answer'), /Process exited with code 0/);
  assert.match(toolOutput(calls[5], 'answer'), /\n42\r?\n/);
});

test('files round trip byte-exact, and a persisted workspace hydrates a new container', async (t) => {
  if (missing.length) return t.skip(`this shellgate does not serve ${missing.join(', ')}`);
  const blob = new Uint8Array(randomBytes(3 * 1024 * 1024));
  const sandbox = client();
  const first = await sandbox.create();
  let second;
  try {
    await first.writeFile('deep/blob.bin', blob);
    assert.deepEqual(await first.readFile({ path: 'deep/blob.bin' }), blob);
    assert.deepEqual((await first.listDir({ path: 'deep' })).map((e) => e.name), ['blob.bin']);
    const archive = await first.persistWorkspace();
    second = await sandbox.create();
    assert.notEqual(second.state.containerId, first.state.containerId);
    await second.hydrateWorkspace(archive);
    assert.deepEqual(await second.readFile({ path: 'deep/blob.bin' }), blob);
  } finally {
    await first.delete();
    await second?.delete();
  }
});

test('a serialized state with a local snapshot resumes into a new container once the old is deleted', async (t) => {
  if (missing.length) return t.skip(`this shellgate does not serve ${missing.join(', ')}`);
  const sandbox = client();
  const snapshot = { type: 'local', baseDir: mkdtempSync(join(tmpdir(), 'shellgate-agents-js-')) };
  const first = await sandbox.create({ snapshot, manifest: new Manifest({ entries: { 'seed.txt': { type: 'file', content: 'seeded\n' } } }) });
  await first.run(['sh', '-c', 'echo made-by-a-command > made.txt']);
  const payload = JSON.parse(JSON.stringify(await sandbox.serializeSessionState(first.state)));
  assert.ok(!JSON.stringify(payload).includes(KEY));
  await first.delete();
  const second = await sandbox.resume(await sandbox.deserializeSessionState(payload));
  try {
    assert.notEqual(second.state.containerId, first.state.containerId);
    assert.equal(new TextDecoder().decode(await second.readFile({ path: 'made.txt' })), 'made-by-a-command\n');
    assert.equal(new TextDecoder().decode(await second.readFile({ path: 'seed.txt' })), 'seeded\n');
  } finally {
    await second.delete();
    rmSync(snapshot.baseDir, { recursive: true, force: true });
  }
});

test('a workspace persisted as a native snapshot makes the new container from it', async (t) => {
  if (missing.length) return t.skip(`this shellgate does not serve ${missing.join(', ')}`);
  if (!(await serves('/v1/snapshots'))) return t.skip('this shellgate keeps no snapshots');
  const sandbox = new ShellgateSandboxClient({ baseUrl: server.root, apiKey: KEY, workspacePersistence: 'snapshot' });
  const snapshot = { type: 'local', baseDir: mkdtempSync(join(tmpdir(), 'shellgate-agents-js-')) };
  const first = await sandbox.create({ snapshot, manifest: new Manifest({ entries: { 'seed.txt': { type: 'file', content: 'seeded\n' } } }) });
  // Outside the workspace too: a snapshot holds every file of the container.
  await first.run(['sh', '-c', 'echo made-by-a-command > made.txt && echo home > ~/outside.txt']);
  const payload = JSON.parse(JSON.stringify(await sandbox.serializeSessionState(first.state)));
  // Only the snapshot's id is stored: its files stay on the server.
  const stored = readdirSync(snapshot.baseDir).map((name) => readFileSync(join(snapshot.baseDir, name)));
  assert.equal(stored.length, 1);
  const snapshotId = snapshotIdIn(new Uint8Array(stored[0]));
  assert.ok(snapshotId, `not a snapshot reference: ${stored[0].subarray(0, 40)}`);
  const headers = { Authorization: `Bearer ${KEY}` };
  const listed = await fetch(`${server.root}/v1/snapshots/${snapshotId}`, { headers });
  assert.equal(listed.status, 200, await listed.text());
  await first.delete();
  const second = await sandbox.resume(await sandbox.deserializeSessionState(payload));
  try {
    assert.notEqual(second.state.containerId, first.state.containerId);
    assert.equal(new TextDecoder().decode(await second.readFile({ path: 'made.txt' })), 'made-by-a-command\n');
    assert.equal(new TextDecoder().decode(await second.readFile({ path: 'seed.txt' })), 'seeded\n');
    const outside = await second.run(['sh', '-c', 'cat ~/outside.txt']);
    assert.equal(new TextDecoder().decode(outside.stdout), 'home\n');
  } finally {
    await second.delete();
    await fetch(`${server.root}/v1/snapshots/${snapshotId}`, { method: 'DELETE', headers });
    rmSync(snapshot.baseDir, { recursive: true, force: true });
  }
});

test('workspacePersistence is tar or snapshot', async () => {
  const sandbox = new ShellgateSandboxClient({ baseUrl: server.root, apiKey: KEY, workspacePersistence: 'zip' });
  await assert.rejects(sandbox.create({}), /workspacePersistence must be 'tar' or 'snapshot'/);
});
