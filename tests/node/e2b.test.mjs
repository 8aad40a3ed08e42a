// E2B's JavaScript SDKs, unmodified (npm `e2b` and `@e2b/code-interpreter`,
// pinned in package.json), against a real `shellgate serve`: pointed at it by
// the two environment variables a user sets (E2B_API_URL, E2B_SANDBOX_URL)
// and a shellgate key of E2B's shape.
import { test, before, beforeEach, after } from 'node:test';
import assert from 'node:assert/strict';
import { CommandExitError, FilesystemEventType, Sandbox, SandboxError } from 'e2b';
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter';

import { startServer } from './harness.mjs';

const KEY = `e2b_${'c3'.repeat(20)}`;
const OTHER_KEY = `e2b_${'d4'.repeat(20)}`;

let server;
const made = [];

// Waits until `check()` is truthy (an event seen, output arrived): the wait is
// as short as the machine allows, and the limit only bounds a failure.
async function until(check, what, limitMs = 30_000) {
  const deadline = Date.now() + limitMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`never: ${what}`);
}

async function create(Class = Sandbox, opts = {}) {
  const sandbox = await Class.create({ timeoutMs: 300_000, ...opts });
  made.push(sandbox);
  return sandbox;
}

async function listIds(opts = {}) {
  const paginator = Sandbox.list(opts);
  const ids = [];
  while (paginator.hasNext) ids.push(...(await paginator.nextItems()).map((s) => s.sandboxId));
  return ids;
}

before(async () => {
  server = await startServer({ key: `${KEY}:alpha,${OTHER_KEY}:beta`, name: 'e2b' });
  process.env.E2B_API_KEY = KEY;
  delete process.env.E2B_DEBUG;
});

// The server's root as the API and as the one in-sandbox URL (sandboxes
// are named by header). In cluster mode two replicas: each test makes its
// sandboxes through one and works in them through the other, the next test
// the other way round.
let turn = 0;
beforeEach(() => {
  const roots = server.baseURLs.map((url) => url.replace(/\/v1$/, ''));
  process.env.E2B_API_URL = roots[turn % roots.length];
  process.env.E2B_SANDBOX_URL = roots[(turn + 1) % roots.length];
  turn += 1;
});

after(async () => {
  for (const sandbox of made) await sandbox.kill().catch(() => {});
  await server.stop();
});

test('commands: output, callbacks, exit codes, the E2B user and home', async () => {
  const sandbox = await create();
  const stdout = [];
  const stderr = [];
  const result = await sandbox.commands.run('echo out; echo err >&2; whoami; pwd; echo $HOME', {
    onStdout: (data) => stdout.push(data),
    onStderr: (data) => stderr.push(data),
  });
  assert.equal(result.exitCode, 0);
  assert.equal(result.stdout, 'out\nuser\n/home/user\n/home/user\n');
  assert.equal(result.stderr, 'err\n');
  assert.equal(stdout.join(''), result.stdout);
  assert.equal(stderr.join(''), 'err\n');
  const envs = await sandbox.commands.run('echo $GREETING; pwd', { envs: { GREETING: 'hi' }, cwd: '/tmp' });
  assert.equal(envs.stdout, 'hi\n/tmp\n');
  await assert.rejects(sandbox.commands.run('echo partial; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, String(e));
    assert.equal(e.exitCode, 3);
    assert.equal(e.stdout, 'partial\n');
    return true;
  });
  // `sudo` explains itself, but runs a command aimed at `user` itself.
  await assert.rejects(sandbox.commands.run('sudo id'), (e) => {
    assert.equal(e.exitCode, 1);
    assert.match(e.stderr, /the sandbox user has no privileges; sudo is not available/);
    return true;
  });
  assert.equal((await sandbox.commands.run('sudo -u user -- whoami')).stdout, 'user\n');
});

test('commands: background, stdin, list, kill', async () => {
  const sandbox = await create();
  const sleeper = await sandbox.commands.run('sleep 600', { background: true });
  assert.ok(sleeper.pid > 0);
  await until(async () => (await sandbox.commands.list()).some((p) => p.pid === sleeper.pid), 'listed');
  assert.equal(await sandbox.commands.kill(sleeper.pid), true);
  await assert.rejects(sleeper.wait());
  await until(async () => !(await sandbox.commands.list()).some((p) => p.pid === sleeper.pid), 'gone');

  let echoed = '';
  const cat = await sandbox.commands.run('cat', {
    background: true,
    stdin: true,
    onStdout: (data) => (echoed += data),
  });
  await sandbox.commands.sendStdin(cat.pid, 'typed\n');
  await until(() => echoed === 'typed\n', 'the echo');
  await sandbox.commands.closeStdin(cat.pid);
  const done = await cat.wait();
  assert.equal(done.exitCode, 0);
  assert.equal(done.stdout, 'typed\n');
});

test('commands: a sandbox killed while a command runs is reported killed, as E2B reports it', async () => {
  const sandbox = await create();
  const sleeper = await sandbox.commands.run('sleep 60', { background: true });
  await sandbox.kill();
  const error = await sleeper.wait().then(
    () => assert.fail('the command ended as if its sandbox had not gone'),
    (e) => e,
  );
  assert.ok(error instanceof SandboxError, String(error));
  assert.match(error.message, /sandbox was killed or reached its end of life/);
});

test('metrics: samples of the sandbox\'s own memory and disk, in a window', async () => {
  const sandbox = await create();
  await sandbox.files.write('/home/user/blob.bin', new Uint8Array(4 << 20));
  let latest;
  await until(async () => {
    const metrics = await sandbox.getMetrics();
    latest = metrics[metrics.length - 1];
    return latest && latest.diskUsed >= 4 << 20;
  }, 'a sample counting the file');
  assert.ok(latest.cpuCount >= 1);
  assert.ok(latest.cpuUsedPct >= 0 && latest.cpuUsedPct <= 100);
  assert.ok(latest.memUsed > 0 && latest.memUsed <= latest.memTotal);
  assert.ok(latest.diskUsed < latest.diskTotal);
  assert.ok(latest.timestamp instanceof Date);
  const dayAgo = new Date(Date.now() - 86_400_000);
  assert.deepEqual(await Sandbox.getMetrics(sandbox.sandboxId, { start: dayAgo, end: new Date(dayAgo.getTime() + 1000) }), []);
});

test('pty: create, input, resize', async () => {
  const sandbox = await create();
  const decoder = new TextDecoder();
  let screen = '';
  const terminal = await sandbox.pty.create({
    cols: 80,
    rows: 24,
    onData: (data) => (screen += decoder.decode(data, { stream: true })),
  });
  // Resized once the shell shows its prompt, as a person would: bash's
  // readline reads the window size and writes it back as it prepares each
  // prompt, so a resize landing between the two would be undone by the
  // shell itself.
  await until(() => screen.includes('$ '), "the shell's prompt");
  await sandbox.pty.resize(terminal.pid, { cols: 100, rows: 30 });
  await sandbox.pty.sendInput(terminal.pid, new TextEncoder().encode('tty; stty size; exit\n'));
  const done = await terminal.wait();
  assert.equal(done.exitCode, 0);
  assert.match(screen, /\/dev\/pts\/\d+/);
  assert.match(screen, /30 100/);
});

test('files: write, read, list, makeDir, rename, remove, watchDir', async () => {
  const sandbox = await create();
  await sandbox.files.makeDir('/home/user/watched');
  const events = [];
  const watcher = await sandbox.files.watchDir('/home/user/watched', (event) => events.push(event));
  const info = await sandbox.files.write('/home/user/watched/a.txt', 'hello from node\n');
  assert.equal(info.path, '/home/user/watched/a.txt');
  await until(
    () => events.some((e) => e.name === 'a.txt' && [FilesystemEventType.CREATE, FilesystemEventType.WRITE].includes(e.type)),
    'a watch event for a.txt',
  );
  await watcher.stop();
  assert.equal(await sandbox.files.read('/home/user/watched/a.txt'), 'hello from node\n');
  const bytes = await sandbox.files.read('/home/user/watched/a.txt', { format: 'bytes' });
  assert.equal(Buffer.from(bytes).toString(), 'hello from node\n');
  // A relative path is the user's home's.
  await sandbox.files.write('relative.txt', 'rel\n');
  assert.equal((await sandbox.commands.run('cat /home/user/relative.txt')).stdout, 'rel\n');

  assert.equal(await sandbox.files.makeDir('/home/user/d/e'), true);
  assert.equal(await sandbox.files.makeDir('/home/user/d/e'), false);
  const moved = await sandbox.files.rename('/home/user/watched/a.txt', '/home/user/d/b.txt');
  assert.equal(moved.path, '/home/user/d/b.txt');
  const listed = await sandbox.files.list('/home/user/d');
  assert.deepEqual(listed.map((e) => [e.name, e.type]).sort(), [['b.txt', 'file'], ['e', 'dir']]);
  assert.equal(await sandbox.files.exists('/home/user/watched/a.txt'), false);
  await sandbox.files.remove('/home/user/d');
  assert.equal(await sandbox.files.exists('/home/user/d'), false);
  await assert.rejects(sandbox.files.read('/home/user/d/b.txt'));
});

test('lifecycle: setTimeout, list with metadata, pause and connect, kill', async () => {
  const run = `${process.pid}-${Date.now()}`;
  const sandbox = await create(Sandbox, { metadata: { suite: 'node', run } });
  const other = await create(Sandbox, { metadata: { suite: 'node', run: `${run}-other` } });
  const before = (await sandbox.getInfo()).endAt;
  await sandbox.setTimeout(600_000);
  assert.ok((await sandbox.getInfo()).endAt > before);

  assert.deepEqual(await listIds({ query: { metadata: { suite: 'node', run } } }), [sandbox.sandboxId]);
  // Another project sees none of them.
  assert.deepEqual(await listIds({ apiKey: OTHER_KEY, query: { metadata: { suite: 'node' } } }), []);

  await sandbox.files.write('/home/user/kept.txt', 'kept across pause\n');
  assert.equal(await sandbox.pause(), true);
  assert.deepEqual(await listIds({ query: { metadata: { run }, state: ['paused'] } }), [sandbox.sandboxId]);
  const resumed = await Sandbox.connect(sandbox.sandboxId);
  assert.equal(await resumed.files.read('/home/user/kept.txt'), 'kept across pause\n');
  assert.equal((await resumed.commands.run('echo awake')).stdout, 'awake\n');

  assert.equal(await other.kill(), true);
  assert.equal(await other.isRunning(), false);
  await assert.rejects(Sandbox.connect(other.sandboxId));
  assert.deepEqual(await listIds({ query: { metadata: { run: `${run}-other` } } }), []);
});

test('code interpreter: runCode keeps state, returns results and errors', async () => {
  const sandbox = await create(CodeInterpreter);
  const sum = await sandbox.runCode('1+1');
  assert.equal(sum.results[0].text, '2');
  assert.equal(sum.error, undefined);
  await sandbox.runCode('x = 41\nimport math');
  const state = await sandbox.runCode('print("seen"); x + 1');
  assert.equal(state.results[0].text, '42');
  assert.deepEqual(state.logs.stdout, ['seen\n']);
  const failed = await sandbox.runCode('raise ValueError("boom")');
  assert.equal(failed.error.name, 'ValueError');
  assert.equal(failed.error.value, 'boom');
  assert.match(failed.error.traceback, /ValueError/);
  // The context survived the error.
  assert.equal((await sandbox.runCode('math.floor(x / 2)')).results[0].text, '20');
});

test('code interpreter: an indented cell, a string result, a JavaScript context keeping its state', async () => {
  const sandbox = await create(CodeInterpreter);
  // E2B's own tests indent every cell; a str's text is the string itself.
  let execution = await sandbox.runCode(`
    def twice(x):
        return x * 2
    twice(21)
  `);
  assert.equal(execution.error, undefined, JSON.stringify(execution.error));
  assert.equal(execution.text, '42');
  assert.equal((await sandbox.runCode("'bar'")).text, 'bar');
  execution = await sandbox.runCode('!echo from a shell escape');
  assert.deepEqual(execution.logs.stdout, ['from a shell escape\n'], JSON.stringify(execution));
  const context = await sandbox.createCodeContext({ language: 'js' });
  assert.equal(context.language, 'javascript');
  execution = await sandbox.runCode("const base = 40\nconsole.log('adding')\nbase + 2", { context });
  assert.equal(execution.error, undefined, JSON.stringify(execution.error));
  assert.equal(execution.text, '42');
  assert.deepEqual(execution.logs.stdout, ['adding\n']);
  execution = await sandbox.runCode('await Promise.resolve(base + 1)', { context });
  assert.equal(execution.text, '41', JSON.stringify(execution));
  execution = await sandbox.runCode("throw new TypeError('no')", { context });
  assert.equal(execution.error.name, 'TypeError', JSON.stringify(execution));
  assert.equal((await sandbox.runCode('base', { context })).text, '40');
});

test('code interpreter: contexts open with the traffic token the SDK sends, never the id alone', async () => {
  const sandbox = await create(CodeInterpreter);
  // Its contexts calls carry E2B-Traffic-Access-Token and no access token.
  assert.ok(sandbox.trafficAccessToken);
  const context = await sandbox.createCodeContext({ cwd: '/tmp' });
  assert.equal(context.cwd, '/tmp');
  assert.equal((await sandbox.runCode('y = 6\ny * 7', { context })).results[0].text, '42');
  assert.ok((await sandbox.listCodeContexts()).some((c) => c.id === context.id));
  // The sandbox id alone opens nothing (E2B's envelope), and changes nothing.
  const bare = await fetch(`${process.env.E2B_SANDBOX_URL}/contexts/${context.id}/restart`, {
    method: 'POST',
    headers: { 'E2b-Sandbox-Id': sandbox.sandboxId, 'E2b-Sandbox-Port': '49999' },
  });
  assert.equal(bare.status, 401);
  assert.equal((await bare.json()).code, 401);
  assert.equal((await sandbox.runCode('y', { context })).results[0].text, '6');
  await sandbox.restartCodeContext(context);
  assert.equal((await sandbox.runCode("'y' in globals()", { context })).results[0].text, 'False');
  await sandbox.removeCodeContext(context);
  assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === context.id));
});
