// Gemini CLI (`@google/gemini-cli`, pinned in package.json) run
// non-interactively (`gemini -p`) with its base URL shellgate's
// (GOOGLE_GEMINI_BASE_URL, a shellgate key as GEMINI_API_KEY), over a
// scripted Chat Completions upstream that has it call its own `write_file`
// tool, then finish: it exits 0 with the file written. Offline: a HOME of
// the test's own whose settings turn telemetry, statistics and update
// checks off.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import { startScriptedUpstream, startServer } from './harness.mjs';

const KEY = 'sk-node-gemini-cli-tests';
const GEMINI = join(dirname(fileURLToPath(import.meta.url)), 'node_modules', '.bin', 'gemini');
const WRITTEN = 'hello from the scripted model\n';

let server;
let upstream;
let home;
let work;

// The script: offered `write_file`, the model writes the file; given the
// tool's result, it says it is done; anything else (the CLI's own side
// requests) gets a plain answer.
function decide(body) {
  const messages = body.messages ?? [];
  const last = messages[messages.length - 1] ?? {};
  const tools = (body.tools ?? []).map((t) => t.function.name);
  if (last.role === 'tool') return { text: 'The file is written.' };
  if (tools.includes('write_file')) {
    return { tool: ['write_file', { file_path: join(work, 'hello.txt'), content: WRITTEN }] };
  }
  return { text: 'Nothing to do.' };
}

before(async () => {
  upstream = await startScriptedUpstream(decide);
  server = await startServer({
    key: KEY, name: 'gemini-cli', env: { SHELLGATE_UPSTREAM_URL: upstream.url },
  });
  home = mkdtempSync(join(tmpdir(), 'shellgate-gemini-cli-home-'));
  work = mkdtempSync(join(tmpdir(), 'shellgate-gemini-cli-work-'));
  mkdirSync(join(home, '.gemini'));
  writeFileSync(join(home, '.gemini', 'settings.json'), JSON.stringify({
    general: { disableAutoUpdate: true, disableUpdateNag: true },
    privacy: { usageStatisticsEnabled: false },
    telemetry: { enabled: false },
    security: { auth: { selectedType: 'gemini-api-key' } },
  }));
});

after(async () => {
  await server.stop();
  upstream.close();
  rmSync(home, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
});

test('gemini cli: a task over shellgate writes its file and exits 0', async () => {
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    GEMINI_API_KEY: KEY,
    GOOGLE_GEMINI_BASE_URL: server.baseURL.replace(/\/v1$/, ''),
    GEMINI_CLI_NO_RELAUNCH: 'true',
    NO_COLOR: '1',
    GEMINI_CLI_TRUST_WORKSPACE: 'true',
    // Anything not shellgate's (an update check, telemetry) fails at once.
    HTTPS_PROXY: 'http://127.0.0.1:9',
    HTTP_PROXY: 'http://127.0.0.1:9',
    NO_PROXY: '127.0.0.1,localhost',
  };
  const { code, stdout, stderr } = await new Promise((done) => {
    execFile(GEMINI, ['-p', 'Write hello.txt', '-m', 'scripted', '--approval-mode', 'yolo'],
      { cwd: work, env, timeout: 240_000 }, (error, stdout, stderr) => done({
        code: error ? (error.code ?? 'killed') : 0, stdout, stderr,
      }));
  });
  assert.equal(code, 0, `exit ${code}\nstdout: ${stdout}\nstderr: ${stderr}`);
  assert.equal(readFileSync(join(work, 'hello.txt'), 'utf8'), WRITTEN, `stdout: ${stdout}\nstderr: ${stderr}`);
  assert.match(stdout, /The file is written\./, `stdout: ${stdout}\nstderr: ${stderr}`);
});
