// The install line the README gives, run as written: the package is not on npm, so
// the README (and docs/guide/agents-sdk.md) say to install it from a clone of the
// repository beside the project. The line runs in a fresh project next to a
// `shellgate` folder that is this repository, and the installed copy (not the source
// tree) then runs a SandboxAgent against a real `shellgate serve`.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer } from '../../../tests/node/harness.mjs';

const REPOSITORY = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const KEY = 'sk-agents-js-install';
let server;
let scratch;

// The README's `npm install` lines (in its shell blocks).
function installLines() {
  const readme = readFileSync(join(REPOSITORY, 'packages', 'shellgate-agents-js', 'README.md'), 'utf8');
  return readme.split('\n').map((line) => line.trim()).filter((line) => line.startsWith('npm install '));
}

const AGENT_RUN = `
import { run, setTracingDisabled } from '@openai/agents';
import { SandboxAgent } from '@openai/agents/sandbox';
import { ScriptedModel, functionCall, assistantMessage } from '@openai/agents-core/testing';
import { ShellgateSandboxClient } from '@shellgate/agents';

setTracingDisabled(true);
console.log('imported from', import.meta.resolve('@shellgate/agents'));
const model = new ScriptedModel([
  [functionCall('exec_command', { cmd: 'echo installed; pwd' }, { callId: 'echo' })],
  [assistantMessage('done')],
]);
const agent = new SandboxAgent({ name: 'installed', instructions: 'Use the shell.', model });
const client = new ShellgateSandboxClient({ baseUrl: process.argv[2], apiKey: process.argv[3] });
const result = await run(agent, 'go', { sandbox: { client } });
console.log('final output:', result.finalOutput);
const output = model.calls[1].request.input.find((i) => i.type === 'function_call_result' && i.callId === 'echo');
const value = output?.output;
console.log('tool output:', typeof value === 'string' ? value : value?.text ?? JSON.stringify(value));
`;

before(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'shellgate-agents-js-install-'));
  server = await startServer({ key: `${KEY}:install`, name: 'agents-js-install' });
  server.root = server.baseURL.replace(/\/v1$/, '');
});
after(async () => {
  await server?.stop();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

test('the README names its install line', () => {
  const lines = installLines();
  assert.ok(lines.length > 0, 'no `npm install` line in the README');
  for (const line of lines) assert.match(line, /\.\.\/shellgate\/packages\/shellgate-agents-js/, line);
});

test('the README\'s npm install gives a working provider', { timeout: 900_000 }, async () => {
  // The clone beside the project, and the project itself (npm makes its package.json).
  symlinkSync(REPOSITORY, join(scratch, 'shellgate'));
  const project = join(scratch, 'project');
  mkdirSync(project);
  for (const line of installLines()) {
    const installed = spawnSync('bash', ['-c', line], { cwd: project, encoding: 'utf8', timeout: 900_000 });
    assert.equal(installed.status, 0, `${line}\n${installed.stdout}\n${installed.stderr}`);
  }
  writeFileSync(join(project, 'run-agent.mjs'), AGENT_RUN);
  let output;
  try {
    output = execFileSync('node', ['run-agent.mjs', server.root, KEY], { cwd: project, encoding: 'utf8', timeout: 300_000 });
  } catch (error) {
    assert.fail(`the agent's run failed: ${error.stdout}\n${error.stderr}`);
  }
  // A copy in the project's node_modules, not a link to the source tree.
  const copy = realpathSync(join(project, 'node_modules', '@shellgate', 'agents'));
  assert.ok(copy.startsWith(realpathSync(project)), `@shellgate/agents resolves to ${copy}\n${output}`);
  assert.match(output, /final output: done/, output);
  assert.match(output, /tool output: [\s\S]*installed\n\/mnt\/data/, output);
});
