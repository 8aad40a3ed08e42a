// The provider's own logic against a fake of shellgate's HTTP API (a `fetch`
// replacement): container settings, the exec stream reassembled across a broken
// stream, the interactive flow, ports, and what a serialized state holds.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Manifest } from '@openai/agents-core/sandbox';
import { ShellgateSandboxClient } from '../src/index.mjs';

const SECRET = 'sk-very-secret';

function fakeShellgate() {
  const fake = { made: 0, containers: new Map(), processes: new Map(), streams: 0, breakFirstStream: false, files: new Map() };
  fake.onStart = () => {};
  fake.onStdin = () => {};
  const json = (status, body) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
  const error = (status, code) => json(status, { error: { message: code, type: 'invalid_request_error', param: null, code } });
  const view = (p) => ({
    id: p.id, status: p.status, exit_code: p.exitCode, output_bytes: p.output.reduce((s, [, d]) => s + d.length, 0),
    outcome: p.status === 'timeout' ? { type: 'timeout' } : p.exitCode == null ? null : { type: 'exit', exit_code: p.exitCode },
  });
  const chunksAfter = (p, after) => {
    const out = []; let offset = 0;
    for (const [stream, data] of p.output) {
      if (offset + data.length > after) out.push({ stream, offset, data: Buffer.from(data).toString('base64') });
      offset += data.length;
    }
    return out;
  };
  fake.fetch = async (url, init) => {
    const u = new URL(url);
    assert.equal(init.headers.Authorization, `Bearer ${SECRET}`);
    const parts = u.pathname.split('/').filter(Boolean);
    if (parts.length === 2 && init.method === 'POST') {
      const body = JSON.parse(init.body);
      const id = `cntr_${++fake.made}`;
      const ports = body.exposed_ports ?? [];
      fake.containers.set(id, { id, status: 'running', body, port_token: ports.length ? 'tok/1' : null,
        exposed_ports: ports.map((port) => ({ port, url: `http://${port}-${id}.localhost:8080/` })) });
      return json(201, fake.containers.get(id));
    }
    const container = fake.containers.get(parts[2]);
    if (!container) return error(404, 'container_not_found');
    if (parts.length === 3) {
      if (init.method === 'DELETE') { fake.containers.delete(parts[2]); return json(200, { deleted: true }); }
      return json(200, container);
    }
    if (parts[3] === 'fs') {
      const path = u.searchParams.get('path');
      if (init.method === 'PUT') { fake.files.set(path, new Uint8Array(init.body)); return json(200, { path }); }
      if (parts[4] === 'mkdir') return json(200, { path: JSON.parse(init.body).path });
      if (parts[4] === 'content') return fake.files.has(path) ? new Response(fake.files.get(path)) : error(404, 'file_not_found');
      return error(404, 'unknown_url');
    }
    if (parts.length === 4 && init.method === 'POST') {
      const body = JSON.parse(init.body);
      const p = { id: `proc_${fake.processes.size + 1}`, body, output: [], status: 'running', exitCode: null };
      fake.processes.set(p.id, p);
      fake.onStart(p);
      return json(201, view(p));
    }
    const p = fake.processes.get(parts[4]);
    if (parts.length === 5 && init.method === 'DELETE') { if (p.status === 'running') p.status = 'killed'; return json(200, view(p)); }
    if (parts[5] === 'stdin') {
      if (p.status !== 'running') return error(409, 'process_exited');
      fake.onStdin(p, new TextDecoder().decode(init.body));
      return new Response(null, { status: 204 });
    }
    const after = Number(u.searchParams.get('after') ?? 0);
    if (u.searchParams.get('stream') === 'true') {
      fake.streams++;
      const broken = fake.breakFirstStream && fake.streams === 1;
      let chunks = chunksAfter(p, after);
      if (broken) chunks = chunks.slice(0, 1);
      let text = chunks.map((c) => `event: output\ndata: ${JSON.stringify(c)}\n\n`).join('');
      if (!broken) text += `event: exit\ndata: ${JSON.stringify(view(p))}\n\n`;
      return new Response(text, { headers: { 'content-type': 'text/event-stream' } });
    }
    const all = chunksAfter(p, after);
    return json(200, { chunks: all, next_offset: view(p).output_bytes, dropped_bytes: 0, process: view(p) });
  };
  return fake;
}

function clientFor(fake, options = {}) {
  return new ShellgateSandboxClient({ baseUrl: 'http://shellgate.test/v1', apiKey: SECRET, fetch: fake.fetch, ...options });
}

test('create sends the settings, materialises the manifest in /mnt/data, and the state holds no key', async () => {
  const fake = fakeShellgate();
  const client = clientFor(fake, { memoryLimit: '4g', networkPolicy: ['pypi.org'], exposedPorts: [8000], expiresAfterMinutes: 20 });
  const session = await client.create({ manifest: new Manifest({ entries: { 'a/b.txt': { type: 'file', content: 'hi' } } }) });
  const body = fake.containers.get('cntr_1').body;
  assert.equal(body.memory_limit, '4g');
  assert.deepEqual(body.network_policy, { type: 'allowlist', allowed_domains: ['pypi.org'] });
  assert.deepEqual(body.exposed_ports, [8000]);
  assert.deepEqual(body.expires_after, { anchor: 'last_active_at', minutes: 20 });
  assert.equal(new TextDecoder().decode(fake.files.get('/mnt/data/a/b.txt')), 'hi');
  const payload = await client.serializeSessionState(session.state);
  assert.ok(!JSON.stringify(payload).includes(SECRET));
  const state = await client.deserializeSessionState(JSON.parse(JSON.stringify(payload)));
  assert.equal(state.containerId, 'cntr_1');
  assert.throws(() => session.resolvePath('../../etc/passwd'), /escapes the workspace/);
});

test('a one-shot command reads its whole output across a broken stream, without repeats', async () => {
  const fake = fakeShellgate();
  const big = 'x'.repeat(100_000);
  fake.onStart = (p) => { p.output = [['stdout', 'one\n'], ['stderr', 'warn\n'], ['stdout', big]]; p.status = 'exited'; p.exitCode = 3; };
  fake.breakFirstStream = true;
  const session = await clientFor(fake).create();
  const result = await session.run(['sh', '-c', "echo 'a b'"]);
  assert.equal(new TextDecoder().decode(result.stdout), `one\n${big}`);
  assert.equal(new TextDecoder().decode(result.stderr), 'warn\n');
  assert.equal(result.exitCode, 3);
  assert.equal(fake.streams, 2);
});

test('exec_command with tty and write_stdin drive an interactive process', async () => {
  const fake = fakeShellgate();
  fake.onStart = (p) => p.output.push(['pty', '>>> ']);
  fake.onStdin = (p, data) => {
    if (data === 'print(6 * 7)\n') p.output.push(['pty', 'print(6 * 7)\r\n42\r\n>>> ']);
    if (data === 'exit()\n') { p.status = 'exited'; p.exitCode = 0; }
  };
  const session = await clientFor(fake).create();
  const started = await session.execCommand({ cmd: 'python3 -q', tty: true, yieldTimeMs: 300 });
  const id = Number(/session ID (\d+)/.exec(started)[1]);
  assert.deepEqual(fake.processes.get('proc_1').body.pty, { cols: 80, rows: 24, term: 'xterm-256color' });
  const answer = await session.writeStdin({ sessionId: id, chars: 'print(6 * 7)\n', yieldTimeMs: 300 });
  assert.match(answer, /42/);
  assert.doesNotMatch(answer, />>> [\s\S]*>>> [\s\S]*>>> /);
  const done = await session.writeStdin({ sessionId: id, chars: 'exit()\n', yieldTimeMs: 5000 });
  assert.match(done, /Process exited with code 0/);
  assert.match(await session.writeStdin({ sessionId: id, chars: 'x' }), /session not found/);
});

test('an exposed port resolves to the host route with the port token', async () => {
  const fake = fakeShellgate();
  const session = await clientFor(fake, { exposedPorts: [8000] }).create();
  const endpoint = await session.resolveExposedPort(8000);
  assert.deepEqual(endpoint, { host: '8000-cntr_1.localhost', port: 8080, tls: false, query: 'shellgate_port_token=tok%2F1' });
  await assert.rejects(session.resolveExposedPort(9000), /not configured/);
});

test('resume reattaches a live container and replaces a deleted one; delete is idempotent', async () => {
  const fake = fakeShellgate();
  const client = clientFor(fake, { memoryLimit: '16g' });
  const session = await client.create();
  assert.equal((await client.resume(session.state)).state.containerId, 'cntr_1');
  await client.delete(session.state);
  await client.delete(session.state);
  const replaced = await client.resume(session.state);
  assert.equal(replaced.state.containerId, 'cntr_2');
  assert.equal(fake.containers.get('cntr_2').body.memory_limit, '16g');
});

test('resume fails, replacing nothing, when the server cannot say whether the container exists', async () => {
  const fake = fakeShellgate();
  const client = clientFor(fake);
  const session = await client.create();
  const unavailable = async (url, init) => (init.method === 'GET' ? new Response('busy', { status: 503 }) : fake.fetch(url, init));
  const flaky = clientFor(fake, { fetch: unavailable });
  await assert.rejects(flaky.resume(session.state), /HTTP 503/);
  assert.deepEqual([...fake.containers.keys()], ['cntr_1']);
});
