// What the Node suites share: a real `shellgate serve` on a free port, and a
// scripted Chat Completions upstream (a test fixture: a model answering by a
// `decide(body)` function, streamed when asked). Not a test file itself
// (`node --test` runs `*.test.mjs`).
//
// With SHELLGATE_TEST_CLUSTER=1 the server is a cluster instead:
// tests/python/cluster.py's three nodes in network namespaces of their own,
// two API replicas, Postgres and S3, with the same settings and keys, and
// the suites run through both replicas (see `startServer`). One cluster is
// up at a time on a machine, so run the files one after another:
// `SHELLGATE_TEST_CLUSTER=1 node --test --test-concurrency=1 tests/node/`.
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync,
} from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import assert from 'node:assert/strict';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = dirname(fileURLToPath(import.meta.url));
export const root = resolve(here, '..', '..');
export const binary = process.env.SHELLGATE_BIN ?? join(root, 'target', 'debug', 'shellgate');
export const clusterMode = process.env.SHELLGATE_TEST_CLUSTER === '1';
// Where the cluster's nodes, each in its network namespace, reach this
// machine's root namespace (cluster.py's GATEWAY, the bridge's address).
const CLUSTER_GATEWAY = '10.77.0.1';

export function freePort() {
  return new Promise((done) => {
    const probe = createServer();
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

// Starts `shellgate serve` with keys `key` and the extra environment `env`
// (`SHELLGATE_*` settings), and waits until it answers `/healthz`. `stop()`
// ends it and removes its data. What a test uses:
//
// - `baseURL`: the API's `/v1` URL. In cluster mode each read names the next
//   replica in turn, so the clients a suite makes alternate between them.
// - `baseURLs`: every replica's `/v1` URL (one, for a single box).
// - `fetch`: `fetch` that sends each request to the next replica in turn
//   (rewriting the origin of a URL naming any replica): given to a client
//   (`new OpenAI({ fetch: server.fetch })`), what one request makes the next
//   reads through the other replica. A single box's is the plain `fetch`.
//
// A single box runs in a data dir of its own (named after `name`);
// `worldReadable`: that dir traversable by every user (0755), as the seeds'
// suite, whose containers use an image dir outside it, has it. A cluster's
// data dirs are cluster.py's, always traversable.
export async function startServer({ key, name, env = {}, worldReadable = false }) {
  if (clusterMode) return startCluster({ key, env });
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), `shellgate-node-${name}-`));
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
  const baseURL = `http://127.0.0.1:${port}/v1`;
  return {
    baseURL,
    baseURLs: [baseURL],
    fetch: (...args) => fetch(...args),
    async stop() {
      server.kill('SIGTERM');
      await new Promise((r) => server.once('exit', r));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

// One cluster at a time per process: a machine has few cluster slots
// (cluster.py's), which the run's other files and lanes take too.
let clusterUp = false;

// The cluster of SHELLGATE_TEST_CLUSTER=1: `python tests/python/cluster.py
// serve` with the settings a single box would get (`env`'s SHELLGATE_X=v as
// {x: v}, the same defaults), the keys for its replicas; it prints the
// replicas' URLs as one JSON line once every part is healthy, and stops
// (everything removed) when its stdin closes.
async function startCluster({ key, env }) {
  if (clusterUp) throw new Error('a cluster is already up in this process: stop() it first');
  clusterUp = true;
  const settings = { warm_containers: '1', build_default_image: 'false',
    // A node is lost after a silence far beyond a loaded machine's stalls:
    // the suites check the API, not the failure detector.
    node_lost_after_secs: '30' };
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith('SHELLGATE_')) throw new Error(`startServer: ${name} is not a setting`);
    settings[name.slice('SHELLGATE_'.length).toLowerCase()] = String(value);
  }
  const child = spawn(join(root, '.venv', 'bin', 'python'),
    [join(root, 'tests', 'python', 'cluster.py'), 'serve', '--settings', JSON.stringify(settings), '--api-keys', key],
    { cwd: root, env: { ...process.env }, stdio: ['pipe', 'pipe', 'pipe'] });
  // Its stdin is how it is told to stop; a write to a gone child is no error.
  child.stdin.on('error', () => {});
  const exited = new Promise((done) => child.once('exit', (code, signal) => done({ code, signal })));
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-8000);
    // Waiting for another run's cluster: said at once, not only at the end.
    if (String(chunk).includes('waiting for')) process.stderr.write(chunk);
  });
  let out = '';
  const line = await new Promise((done, fail) => {
    child.stdout.on('data', (chunk) => {
      out += chunk;
      if (out.includes('\n')) done(out.slice(0, out.indexOf('\n')));
    });
    exited.then(({ code, signal }) => fail(new Error(
      `cluster.py serve exited (${code ?? signal}) before its cluster was up:\n${stderr}`)));
  }).catch((error) => {
    clusterUp = false;
    throw error;
  });
  const announced = JSON.parse(line);
  const origins = announced.replicas;
  let turn = 0;
  const nextOrigin = () => origins[turn++ % origins.length];
  let urls = 0;
  return {
    get baseURL() {
      return `${origins[urls++ % origins.length]}/v1`;
    },
    baseURLs: origins.map((origin) => `${origin}/v1`),
    fetch(input, init) {
      const request = input instanceof Request ? input : null;
      const url = new URL(request ? request.url : String(input));
      if (!origins.includes(url.origin)) return fetch(input, init);
      const next = new URL(url.pathname + url.search, nextOrigin()).href;
      return request ? fetch(new Request(next, request), init) : fetch(next, init);
    },
    // What the cluster made (its logs, while it is up) and how nodes reach us.
    cluster: announced,
    async stop() {
      child.stdin.end();
      const { code, signal } = await exited;
      clusterUp = false;
      if (code !== 0) throw new Error(`cluster.py serve ended with ${code ?? signal}:\n${stderr}`);
    },
  };
}

// A scripted Chat Completions upstream: `decide(body)` says `{ text }` or
// `{ tool: [name, arguments] }`; the answer is a completion, or its chunks
// when the request streams. Its `url` is the base URL shellgate is given: in
// cluster mode the nodes call it from their network namespaces, so it
// listens on every address and is named by the bridge's (the gateway).
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
  await new Promise((done) => upstream.listen(0, clusterMode ? '0.0.0.0' : '127.0.0.1', done));
  return {
    url: `http://${clusterMode ? CLUSTER_GATEWAY : '127.0.0.1'}:${upstream.address().port}/v1`,
    close: () => upstream.close(),
  };
}

// A server for E2B's template API, its default image `name` made here
// before it starts: static busybox with `applets`, util-linux's setpriv (the
// builder runs a step of another user with it), a `/bin/bash` that is
// busybox's shell (what the SDK runs commands with) and `files` (path in
// the image → [text, mode]). The E2B SDK's environment points at it.
// Returns { server, stop } (stop removes the image store too).
export async function startTemplateServer({ key, name, image, applets, files = {} }) {
  const images = mkdtempSync(join(tmpdir(), `shellgate-node-${name}-images-`));
  chmodSync(images, 0o755);
  const work = mkdtempSync(join(tmpdir(), `shellgate-node-${name}-base-`));
  try {
    const rootfs = join(work, 'rootfs');
    mkdirSync(join(rootfs, 'bin'), { recursive: true });
    mkdirSync(join(rootfs, 'etc'));
    copyFileSync('/bin/busybox', join(rootfs, 'bin', 'busybox'));
    chmodSync(join(rootfs, 'bin', 'busybox'), 0o755);
    for (const applet of applets) symlinkSync('busybox', join(rootfs, 'bin', applet));
    const wanted = { '/bin/bash': ['#!/bin/sh\nexec /bin/sh "$@"\n', 0o755], ...files };
    for (const [path, [text, mode]] of Object.entries(wanted)) {
      mkdirSync(dirname(join(rootfs, path)), { recursive: true });
      writeFileSync(join(rootfs, path), text, { mode });
    }
    const linked = spawnSync('ldd', ['/usr/bin/setpriv'], { encoding: 'utf8' });
    assert.equal(linked.status, 0, linked.stderr);
    const paths = ['/usr/bin/setpriv', ...linked.stdout.split(/\s+/).filter((w) => w.startsWith('/'))];
    for (const path of paths) {
      const target = join(rootfs, path);
      mkdirSync(dirname(target), { recursive: true });
      copyFileSync(path, target);
      chmodSync(target, 0o755);
    }
    const tarball = join(work, 'image.tar');
    const tar = spawnSync('tar', ['-cf', tarball, '-C', rootfs, '.'], { encoding: 'utf8' });
    assert.equal(tar.status, 0, tar.stderr);
    const imported = spawnSync(binary, ['--data-dir', images, 'image', 'import', image, tarball], {
      encoding: 'utf8',
    });
    assert.equal(imported.status, 0, imported.stderr);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  const server = await startServer({
    key, name, worldReadable: true,
    env: { SHELLGATE_DEFAULT_IMAGE: image, SHELLGATE_IMAGES_DIR: join(images, 'sandbox', 'images') },
  });
  const base = server.baseURLs[0].replace(/\/v1$/, '');
  process.env.E2B_API_URL = base;
  process.env.E2B_SANDBOX_URL = base;
  delete process.env.E2B_DEBUG;
  return {
    server,
    async stop() {
      await server.stop();
      rmSync(images, { recursive: true, force: true });
    },
  };
}
