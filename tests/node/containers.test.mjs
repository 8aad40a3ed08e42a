// The official `openai` Node SDK against a real `shellgate serve`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';

import { startServer } from './harness.mjs';

const KEY = 'sk-node-test-project';

let server;
let client;

before(async () => {
  server = await startServer({ key: KEY, name: 'containers' });
  // Each request through the next replica in cluster mode (harness.mjs).
  client = new OpenAI({ apiKey: KEY, baseURL: server.baseURL, fetch: server.fetch, maxRetries: 0 });
});

after(() => server.stop());

test('containers: create, retrieve, list with pagination, delete', async () => {
  const created = await client.containers.create({ name: 'node-sdk', memory_limit: '4g' });
  assert.match(created.id, /^cntr_/);
  assert.equal(created.status, 'running');
  assert.equal(created.memory_limit, '4g');
  assert.equal((await client.containers.retrieve(created.id)).name, 'node-sdk');
  const extra = [];
  for (let i = 0; i < 25; i++) extra.push((await client.containers.create({ name: 'node-page' })).id);
  const seen = [];
  for await (const c of client.containers.list({ name: 'node-page', limit: 7 })) seen.push(c.id);
  assert.deepEqual(new Set(seen), new Set(extra));
  assert.equal(seen.length, 25);
  await client.containers.delete(created.id);
  await assert.rejects(client.containers.retrieve(created.id), OpenAI.NotFoundError);
});

test('files in and out of a container, and direct exec', async () => {
  const container = await client.containers.create({ name: 'node-files' });
  const uploaded = await client.containers.files.create(container.id, {
    file: await toFile(Buffer.from('from node'), 'hello.txt'),
  });
  assert.equal(uploaded.path, '/mnt/data/hello.txt');
  assert.equal(uploaded.source, 'user');
  const result = await client.post(`/containers/${container.id}/exec`, {
    body: { commands: ['cat hello.txt', 'echo made > made.txt'] },
  });
  assert.equal(result.type, 'shell_call_output');
  assert.equal(result.output[0].stdout, 'from node');
  const files = [];
  for await (const f of client.containers.files.list(container.id)) files.push(f);
  const made = files.find((f) => f.path === '/mnt/data/made.txt');
  assert.equal(made.source, 'assistant');
  const content = await client.containers.files.content.retrieve(made.id, { container_id: container.id });
  assert.equal(await content.text(), 'made\n');
  await client.containers.files.delete(uploaded.id, { container_id: container.id });
  await client.containers.delete(container.id);
});

test('errors arrive as the SDK error classes with OpenAI fields', async () => {
  const error = await client.containers.create({ name: 'x', memory_limit: '3g' }).catch((e) => e);
  assert.ok(error instanceof OpenAI.BadRequestError);
  assert.equal(error.param, 'memory_limit');
  assert.equal(error.type, 'invalid_request_error');
  // Twice: in cluster mode, once through each replica.
  const wrong = new OpenAI({ apiKey: 'wrong', baseURL: client.baseURL, fetch: server.fetch, maxRetries: 0 });
  await assert.rejects(wrong.containers.list(), OpenAI.AuthenticationError);
  await assert.rejects(wrong.containers.list(), OpenAI.AuthenticationError);
});
