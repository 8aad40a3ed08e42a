// The web console in a real headless browser: Debian's chromium
// (apt, /usr/bin/chromium; nothing downloaded at test time), driven by
// playwright-core, against a real `shellgate serve` with a scripted model
// upstream. Each test signs in with a key in a fresh browser context and
// waits for what the page shows, never for a time. Screenshots of each page
// go to docs/console/ (docs/guide/console.md shows them).
import { test, before, beforeEach, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

import { here, root, startScriptedUpstream, startServer } from './harness.mjs';

const ADMIN = 'sk-console-admin';
const MEMBER = 'sk-console-member';
// An admin key of project `alpha`, a member key of project `beta`: the
// admin sees both projects, the member its own.
const KEYS = `${ADMIN}:alpha:admin,${MEMBER}:beta`;
// Hostile text: were it parsed as HTML, its handler would set window.__xss.
const XSS = '<img src=x onerror=window.__xss=1>';
const SHOTS = join(root, 'docs', 'console');
// The parent domain the console and the containers' ports share in the
// cookie-tossing test: browsers resolve every *.localhost name to this
// machine, and count it a registrable domain (a page of one subdomain may
// set a cookie for all of them).
const PARENT = 'example.localhost';
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

let server;
let upstream;
let origin;
let browser;

// The scripted model: "Execute: CMD" → a call of the shell tool; a tool
// result → "Done: <its first command's stdout>" (the model's text then
// carries whatever the command printed).
function decide(body) {
  const messages = body.messages ?? [];
  const last = messages[messages.length - 1] ?? {};
  const tools = (body.tools ?? []).map((t) => t.function.name);
  if (last.role === 'tool') {
    let stdout = last.content;
    try {
      stdout = JSON.parse(last.content)[0].stdout.trim();
    } catch {}
    return { text: `Done: ${stdout}` };
  }
  const text = typeof last.content === 'string' ? last.content : '';
  if (text.includes('Execute: ') && tools.includes('shell')) {
    return { tool: ['shell', { commands: [text.split('Execute: ')[1].split('\n')[0].trim()] }] };
  }
  return { text: 'Hello from the scripted model.' };
}

before(async () => {
  upstream = await startScriptedUpstream(decide);
  server = await startServer({
    key: KEYS, name: 'console',
    env: { SHELLGATE_UPSTREAM_URL: upstream.url, SHELLGATE_PORTS_BASE_DOMAIN: PARENT },
  });
  mkdirSync(SHOTS, { recursive: true });
  // Playwright starts the browser with a fresh temporary profile
  // (--user-data-dir) of its own each launch.
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

// The console's origin: in cluster mode each test's is the next replica
// (harness.mjs), and what the test sets up through the API (`api`, each
// call through the next replica) the page shows through either.
beforeEach(() => {
  origin = server.baseURL.replace(/\/v1$/, '');
});

after(async () => {
  await browser?.close();
  await server?.stop();
  upstream?.close();
});

// The API as a client calls it (setup the console then shows).
async function api(key, method, path, body) {
  const response = await server.fetch(`${origin}/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  assert.ok(response.ok, `${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

// A fresh browser context (its own cookies) on a 1280x800 page, watching
// for page errors.
async function open() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, acceptDownloads: true });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (error) => page.errors.push(error.message));
  page.on('dialog', (dialog) => dialog.accept());
  return page;
}

async function signIn(page, key, at = origin) {
  await page.goto(`${at}/console`);
  await page.locator('[data-testid=signin-key]').fill(key);
  await page.locator('[data-testid=signin-submit]').click();
  // Signed in, or refused: a refusal fails with the page's own words
  // rather than a timeout that says nothing of why.
  const refused = page.locator('[data-testid=signin-error] *');
  await page.locator('[data-testid=signout]').or(refused).first().waitFor();
  if (await refused.count()) assert.fail(`sign-in refused: ${await refused.first().textContent()}`);
}

// The README's screenshots: taken (and docs/console rewritten) only when
// asked, `SHELLGATE_SCREENSHOTS=1`, so a test run leaves the tree as it was.
async function shot(page, name) {
  if (process.env.SHELLGATE_SCREENSHOTS !== '1') return;
  await page.screenshot({ path: join(SHOTS, `${name}.png`) });
}

// Nothing hostile ran, and the page raised no error.
async function inert(page) {
  assert.equal(await page.evaluate(() => window.__xss), undefined, 'hostile text ran as HTML');
  assert.deepEqual(page.errors, []);
}

async function done(page) {
  await inert(page);
  await page.context().close();
}

test('console: /console cannot be framed and runs only its own scripts', async () => {
  for (const path of ['/console', '/console/assets/app.js', '/console/api/projects']) {
    const response = await server.fetch(`${origin}${path}`);
    assert.equal(response.headers.get('x-frame-options'), 'DENY', path);
    assert.match(response.headers.get('content-security-policy') ?? '', /frame-ancestors 'none'/, path);
  }
  const page = (await server.fetch(`${origin}/console`)).headers.get('content-security-policy');
  assert.match(page, /script-src 'self'(;|$)/);
  assert.doesNotMatch(page, /unsafe-inline|unsafe-eval/);
  // A page of another origin framing the console gets nothing in its frame.
  const other = await open();
  await other.setContent(`<iframe src="${origin}/console"></iframe>`);
  const frame = other.frames().find((f) => f !== other.mainFrame());
  const framed = await frame?.evaluate(() => document.querySelector('[data-testid=signin-key]') !== null).catch(() => false);
  assert.notEqual(framed, true, 'the console rendered inside a frame');
  await other.context().close();
});

test('console: the vendored xterm.js is the pinned npm package, byte for byte', () => {
  const pkg = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'));
  const vendor = join(root, 'crates', 'console', 'assets', 'vendor');
  const pairs = [
    ['@xterm/xterm', 'lib/xterm.mjs', 'xterm/xterm.mjs'],
    ['@xterm/xterm', 'css/xterm.css', 'xterm/xterm.css'],
    ['@xterm/xterm', 'LICENSE', 'xterm/LICENSE'],
    ['@xterm/addon-fit', 'lib/addon-fit.mjs', 'xterm-addon-fit/addon-fit.mjs'],
    ['@xterm/addon-fit', 'LICENSE', 'xterm-addon-fit/LICENSE'],
  ];
  for (const [name, from, to] of pairs) {
    const installed = join(here, 'node_modules', name);
    const version = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')).version;
    assert.equal(version, pkg.devDependencies[name], `${name}: installed ${version}, pinned ${pkg.devDependencies[name]}`);
    assert.ok(readFileSync(join(installed, from)).equals(readFileSync(join(vendor, to))), `${to} differs from ${name}@${version} ${from}`);
    const recorded = readFileSync(join(vendor, to.split('/')[0], 'VERSION.txt'), 'utf8');
    assert.ok(recorded.includes(`${name} ${version}`), `VERSION.txt names ${name} ${version}`);
  }
});

test('console: a wrong key is refused, a key signs in, and signing out ends the session', async () => {
  const page = await open();
  await page.goto(`${origin}/console`);
  await page.locator('[data-testid=signin-key]').waitFor();
  await shot(page, 'signin');
  await page.locator('[data-testid=signin-key]').fill('sk-not-a-key');
  await page.locator('[data-testid=signin-submit]').click();
  await page.locator('[data-testid=signin-error]', { hasText: 'not accepted' }).waitFor();
  await page.locator('[data-testid=signin-key]').fill(MEMBER);
  await page.locator('[data-testid=signin-submit]').click();
  await page.locator('[data-testid=project]', { hasText: 'beta' }).waitFor();
  const cookies = await page.context().cookies();
  assert.ok(cookies.length > 0 && cookies.every((c) => c.httpOnly && c.sameSite === 'Strict'), JSON.stringify(cookies));
  const cookie = cookies.map((c) => `${c.name}=${c.value}`).join('; ');
  assert.equal((await server.fetch(`${origin}/console/session`, { headers: { cookie } })).status, 200);
  await page.locator('[data-testid=signout]').click();
  await page.locator('[data-testid=signin-key]').waitFor();
  // The cookie, kept by a thief, opens nothing any more.
  assert.equal((await server.fetch(`${origin}/console/session`, { headers: { cookie } })).status, 401);
  assert.equal((await server.fetch(`${origin}/console/api/containers`, { headers: { cookie } })).status, 401);
  // A reload stays signed out.
  await page.reload();
  await page.locator('[data-testid=signin-key]').waitFor();
  await done(page);
});

test('console: a container created in the form shows in the live list', async () => {
  const page = await open();
  await signIn(page, MEMBER);
  await page.locator('[data-testid=containers]').waitFor();
  await page.locator('[data-testid=create-name]').fill('console-made');
  await page.locator('[data-testid=create-memory]').selectOption('4g');
  await page.locator('[data-testid=create-allowlist]').fill('example.org, pypi.org');
  await page.locator('[data-testid=create-submit]').click();
  const row = page.locator('[data-testid=containers] tr[data-id]', { hasText: 'console-made' });
  await row.waitFor();
  const id = await row.getAttribute('data-id');
  const made = await api(MEMBER, 'GET', `/containers/${id}`);
  assert.equal(made.memory_limit, '4g');
  assert.deepEqual(made.network_policy.allowed_domains, ['example.org', 'pypi.org']);
  // Made elsewhere (the API): the open list shows it too, told by the events stream.
  await api(MEMBER, 'POST', '/containers', { name: 'data-pipeline', network_policy: { type: 'allowlist', allowed_domains: ['pypi.org', 'files.pythonhosted.org'] } });
  await api(MEMBER, 'POST', '/containers', { name: 'scratch', memory_limit: '16g' });
  const other = await api(MEMBER, 'POST', '/containers', { name: 'made-by-the-api' });
  await page.locator(`[data-testid=containers] tr[data-id="${other.id}"]`).waitFor();
  // Filtered on the server.
  await page.locator('[data-testid=filter-q]').fill('console-made');
  await page.locator(`[data-testid=containers] tr[data-id="${other.id}"]`).waitFor({ state: 'detached' });
  await page.locator('[data-testid=filter-q]').fill('');
  await page.locator(`[data-testid=containers] tr[data-id="${other.id}"]`).waitFor();
  // The status filter, on the server too (suspended: none of these).
  await page.locator('[data-testid=filter-status]').selectOption('suspended');
  await page.locator(`[data-testid=containers] tr[data-id="${other.id}"]`).waitFor({ state: 'detached' });
  await page.locator('[data-testid=filter-status]').selectOption('');
  await page.locator(`[data-testid=containers] tr[data-id="${other.id}"]`).waitFor();
  await page.locator('[data-testid=filter-q]').blur();
  await shot(page, 'containers');
  // Deleted from its page: gone from the list.
  await page.goto(`${origin}/console#/containers/${other.id}`);
  await page.locator('[data-testid=delete-container]').click();
  await page.locator('[data-testid=containers]').waitFor();
  await page.locator(`[data-testid=containers] tr[data-id="${other.id}"]`).waitFor({ state: 'detached' });
  await done(page);
});

test('console: a command typed in the terminal runs and its output shows', async () => {
  const container = await api(MEMBER, 'POST', '/containers', { name: 'console-terminal' });
  const page = await open();
  await signIn(page, MEMBER);
  await page.goto(`${origin}/console#/containers/${container.id}`);
  await page.locator('[data-testid=tab-terminal]').click();
  await page.locator('[data-testid=terminal-start]').click();
  const rows = page.locator('[data-testid=terminal] .xterm-rows');
  await page.locator('[data-testid=terminal-status]', { hasText: 'Connected' }).waitFor();
  await rows.filter({ hasText: /\$\s*$/m }).waitFor();
  await page.locator('[data-testid=terminal]').click();
  await page.keyboard.type('echo "sum: $((6 * 7))"; printf "%s\\n" \'' + XSS + '\'\n');
  await rows.filter({ hasText: 'sum: 42' }).waitFor();
  await rows.filter({ hasText: `${XSS}` }).waitFor();
  await shot(page, 'container-terminal');
  await page.keyboard.type('exit\n');
  await page.locator('[data-testid=terminal-status]', { hasText: 'ended' }).waitFor();
  await done(page);
});

test('console: a reloaded page attaches again to its terminal, which kept its shell', async () => {
  const container = await api(MEMBER, 'POST', '/containers', { name: 'console-reattach' });
  const page = await open();
  await signIn(page, MEMBER);
  await page.goto(`${origin}/console#/containers/${container.id}`);
  await page.locator('[data-testid=tab-terminal]').click();
  await page.locator('[data-testid=terminal-start]').click();
  const status = page.locator('[data-testid=terminal-status]', { hasText: 'Connected' });
  await status.waitFor();
  const first = await page.locator('[data-testid=terminal]').getAttribute('data-process');
  const rows = page.locator('[data-testid=terminal] .xterm-rows');
  await rows.filter({ hasText: /\$\s*$/m }).waitFor();
  await page.locator('[data-testid=terminal]').click();
  await page.keyboard.type('MARK=kept-$((6 * 7))\n');
  // The reload closes the page's socket: the server keeps the shell for
  // its grace, and the page attaches to the same one again by itself.
  await page.reload();
  await status.waitFor();
  assert.equal(await page.locator('[data-testid=terminal]').getAttribute('data-process'), first);
  await page.locator('[data-testid=terminal]').click();
  await page.keyboard.type('echo "mark: $MARK"\n');
  await rows.filter({ hasText: 'mark: kept-42' }).waitFor();
  await page.keyboard.type('exit\n');
  await page.locator('[data-testid=terminal-status]', { hasText: 'ended' }).waitFor();
  // A shell that ended is not attached to again.
  await page.reload();
  await page.locator('[data-testid=terminal-start]').waitFor();
  assert.equal(await page.locator('[data-testid=terminal-status]').textContent(), 'Not started.');
  await done(page);
});

test('console: files upload, list, preview and download; a hostile file name stays text', async () => {
  const container = await api(MEMBER, 'POST', '/containers', { name: 'console-files' });
  const page = await open();
  await signIn(page, MEMBER);
  await page.goto(`${origin}/console#/containers/${container.id}/files`);
  await page.locator('[data-testid=files]').waitFor();
  const name = `${XSS}.txt`;
  const body = `first line ${XSS}\nsecond line\n`;
  await page.locator('[data-testid=upload]').setInputFiles([
    { name, mimeType: 'text/plain', buffer: Buffer.from(body) },
    { name: 'notes.md', mimeType: 'text/markdown', buffer: Buffer.from('# notes\n') },
  ]);
  const row = page.locator(`[data-testid=files] tr[data-path="/mnt/data/${name}"]`);
  await row.waitFor();
  assert.equal(await row.locator('[data-testid=open-file]').textContent(), name);
  // What the container holds is what was uploaded.
  const listed = await api(MEMBER, 'GET', `/containers/${container.id}/fs/list?path=/mnt/data`);
  assert.ok(listed.data.some((e) => e.name === name), JSON.stringify(listed.data));
  // Preview: the text, as text.
  await row.locator('[data-testid=open-file]').click();
  await page.locator('[data-testid=preview] pre', { hasText: 'second line' }).waitFor();
  assert.equal(await page.locator('[data-testid=preview] pre').textContent(), body);
  await shot(page, 'container-files');
  // Download: the same bytes.
  const [download] = await Promise.all([page.waitForEvent('download'), row.locator('a[data-testid=download]').click()]);
  assert.equal(download.suggestedFilename().includes('.txt'), true);
  const saved = await download.path();
  assert.equal(readFileSync(saved, 'utf8'), body);
  // Delete.
  const notes = page.locator('[data-testid=files] tr[data-path="/mnt/data/notes.md"]');
  await notes.locator('[data-testid=delete-file]').click();
  await notes.waitFor({ state: 'detached' });
  await done(page);
});

test('console: a command\'s live output and its history show hostile output as text', async () => {
  const container = await api(MEMBER, 'POST', '/containers', { name: 'console-commands' });
  await api(MEMBER, 'POST', `/containers/${container.id}/exec`, { commands: [`echo '${XSS}'`] });
  const page = await open();
  await signIn(page, MEMBER);
  await page.goto(`${origin}/console#/containers/${container.id}/commands`);
  await page.locator('[data-testid=commands] tr[data-id]', { hasText: XSS }).waitFor();
  await page.locator('[data-testid=run-command]').fill(`for i in 1 2 3; do echo "tick $i"; done; echo '${XSS}' >&2`);
  await page.locator('[data-testid=run-submit]').click();
  const live = page.locator('[data-testid=live-output]');
  await live.filter({ hasText: 'tick 3' }).waitFor();
  await page.locator('[data-testid=live-exit]').waitFor();
  // stdout in order; stderr (its own stream, so anywhere around it) as text.
  assert.match(await live.textContent(), /tick 1\ntick 2\ntick 3\n/);
  assert.equal(await live.locator('.stderr').first().textContent(), `${XSS}\n`);
  await done(page);
});

// An exec through the API that prints, then waits for /mnt/data/<go>
// (made by another exec) before its last line; not awaited: it returns
// when it ended.
function waitingExec(key, id, first, go, last) {
  return api(key, 'POST', `/containers/${id}/exec`, {
    commands: [`${first}; while [ ! -e /mnt/data/${go} ]; do sleep 0.05; done; ${last}`],
    timeout_ms: 60_000,
  });
}

test('console: an exec command running through the API shows live, then leaves for the history', async () => {
  const container = await api(MEMBER, 'POST', '/containers', { name: 'console-live-runs' });
  const page = await open();
  await signIn(page, MEMBER);
  await page.goto(`${origin}/console#/containers/${container.id}/commands`);
  const block = page.locator('[data-testid=live-runs]');
  await block.waitFor();
  const running = waitingExec(MEMBER, container.id, 'echo live-marker-1; echo live-err-1 >&2', 'go', 'echo after-go');
  // Its output while it runs (whether the stream saw it start or found it going).
  const run = block.locator('[data-run-id]', { has: page.locator('[data-testid=run-output]', { hasText: 'live-marker-1' }) });
  await run.waitFor();
  const output = run.locator('[data-testid=run-output]');
  await output.locator('.stderr', { hasText: 'live-err-1' }).waitFor();
  const runId = await run.getAttribute('data-run-id');
  assert.match(runId, /^run_/);
  assert.equal(await run.getAttribute('data-state'), 'running');
  assert.match(await run.locator('.run-commands').textContent(), /echo live-marker-1; echo live-err-1 >&2; while/);
  assert.equal(await output.locator('.stdout').first().textContent(), 'live-marker-1\n');
  assert.doesNotMatch(await output.textContent(), /after-go/);
  // Its elapsed time counts.
  await run.locator('.run-time', { hasText: /^[1-9]\d* s$/ }).waitFor();
  await shot(page, 'container-commands');
  // Still running, so not in the history yet.
  assert.equal(await page.locator('[data-testid=commands] tr[data-id]', { hasText: 'live-marker-1' }).count(), 0);
  // Let it go: its last line comes (caught by an observer of the block,
  // as the DOM changes: the run leaves soon after), then it ends, leaves
  // the block, and is history.
  await block.evaluate((el, id) => {
    new MutationObserver(() => {
      if (el.querySelector(`[data-run-id="${id}"] [data-testid=run-output]`)?.textContent.includes('after-go')) window.sawLast = true;
    }).observe(el, { subtree: true, childList: true, characterData: true });
  }, runId);
  await api(MEMBER, 'POST', `/containers/${container.id}/exec`, { commands: ['touch /mnt/data/go'] });
  await page.waitForFunction(() => window.sawLast === true);
  const result = await running;
  assert.match(result.output[0].stdout, /live-marker-1\nafter-go\n/);
  await block.locator(`[data-run-id="${runId}"]`).waitFor({ state: 'detached' });
  await page.locator('[data-testid=commands] tr[data-id]', { hasText: 'live-marker-1' }).waitFor();
  await block.locator('.runs-none').waitFor();
  await done(page);
});

test('console: a running command\'s hostile output stays text, and the page keeps only its last 64 KiB', async () => {
  const container = await api(MEMBER, 'POST', '/containers', { name: 'console-live-xss' });
  const page = await open();
  await signIn(page, MEMBER);
  await page.goto(`${origin}/console#/containers/${container.id}/commands`);
  await page.locator('[data-testid=live-runs]').waitFor();
  // 96 KiB of output first (the exec streams up to its max_output_length,
  // 64 KiB, of a command), then the markup, on both streams.
  const running = api(MEMBER, 'POST', `/containers/${container.id}/exec`, {
    commands: [
      'head -c 98304 /dev/zero | tr "\\0" x; echo',
      `printf '%s\\n' '${XSS}'; printf '%s\\n' '${XSS}' >&2; while [ ! -e /mnt/data/go ]; do sleep 0.05; done`,
    ],
    max_output_length: 65536,
    timeout_ms: 60_000,
  });
  const run = page.locator('[data-testid=live-runs] [data-run-id]', { hasText: 'printf' });
  const output = run.locator('[data-testid=run-output]');
  await output.locator('.stderr', { hasText: XSS }).waitFor();
  await output.locator('.stdout', { hasText: XSS }).waitFor();
  assert.equal(await output.locator('.stderr').last().textContent(), `${XSS}\n`);
  assert.ok((await output.locator('.stdout').last().textContent()).endsWith(`${XSS}\n`));
  assert.equal(await run.locator('img').count(), 0);
  assert.match(await run.locator('.run-commands').textContent(), /<img src=x onerror=window.__xss=1>/);
  // The oldest output went; the page says so.
  const kept = await output.evaluate((el) => el.textContent.length);
  assert.ok(kept > 60_000 && kept <= 64 * 1024, `${kept} characters kept`);
  assert.equal(await run.locator('.run-dropped').isVisible(), true);
  await inert(page);
  await api(MEMBER, 'POST', `/containers/${container.id}/exec`, { commands: ['touch /mnt/data/go'] });
  await running;
  await run.waitFor({ state: 'detached' });
  await done(page);
});

test('console: an admin acting for another project sees its running commands', async () => {
  const beta = await api(MEMBER, 'POST', '/containers', { name: 'console-live-admin' });
  const admin = await open();
  await signIn(admin, ADMIN);
  await admin.locator('[data-testid=project-switch]').selectOption('beta');
  await admin.locator('[data-testid=project]', { hasText: 'beta' }).waitFor();
  await admin.goto(`${origin}/console#/containers/${beta.id}/commands`);
  await admin.locator('[data-testid=live-runs]').waitFor();
  const running = waitingExec(MEMBER, beta.id, 'echo admin-sees-this', 'go', 'true');
  await admin.locator('[data-testid=live-runs] [data-testid=run-output]', { hasText: 'admin-sees-this' }).waitFor();
  await api(MEMBER, 'POST', `/containers/${beta.id}/exec`, { commands: ['touch /mnt/data/go'] });
  await running;
  await admin.locator('[data-testid=commands] tr[data-id]', { hasText: 'admin-sees-this' }).waitFor();
  await admin.locator('[data-testid=live-runs] [data-run-id]').first().waitFor({ state: 'detached' });
  await done(admin);
});

test('console: a denied connection shows in the egress log, a hostile host name as text', async () => {
  const container = await api(MEMBER, 'POST', '/containers', {
    name: 'console-egress', network_policy: { type: 'allowlist', allowed_domains: ['example.org'] },
  });
  const page = await open();
  await signIn(page, MEMBER);
  await page.goto(`${origin}/console#/containers/${container.id}/egress`);
  await page.locator('[data-testid=egress]').waitFor();
  // Run while the page is open: the rows arrive over the events stream.
  // The proxy checks a name before it looks it up, and names a host it
  // refuses in its reason: a Host header of markup reaches the log as is.
  await api(MEMBER, 'POST', `/containers/${container.id}/exec`, {
    commands: [
      'curl -sS --max-time 20 https://denied.example.net/ 2>&1; true',
      `curl -sS --max-time 20 -H 'Host: ${XSS}' http://denied.example.net/ 2>&1; true`,
    ],
    timeout_ms: 60_000,
  });
  const denied = page.locator('[data-testid=egress] tr[data-verdict=denied]', { hasText: 'denied.example.net' });
  await denied.first().waitFor();
  assert.match(await denied.first().textContent(), /denied\.example\.net is not in this container's allowlist/);
  const hostile = page.locator('[data-testid=egress] tr[data-verdict=denied] .reason', { hasText: XSS });
  await hostile.first().waitFor();
  await shot(page, 'egress');
  await done(page);
});

test('console: a response opens as its conversation, with its shell call, hostile text inert', async () => {
  const response = await api(MEMBER, 'POST', '/responses', {
    model: 'scripted',
    tools: [{ type: 'shell', environment: { type: 'container_auto' } }],
    input: `Execute: echo '${XSS}'`,
  });
  assert.equal(response.status, 'completed');
  const page = await open();
  await signIn(page, MEMBER);
  await page.goto(`${origin}/console#/responses`);
  await page.locator(`[data-testid=responses] tr[data-id="${response.id}"] a`).first().click();
  const conversation = page.locator('[data-testid=conversation]');
  await conversation.waitFor();
  await conversation.locator('[data-kind=shell_call] [data-testid=shell-command]', { hasText: `echo '${XSS}'` }).waitFor();
  await conversation.locator('[data-kind=shell_call_output]', { hasText: XSS }).waitFor();
  await conversation.locator('[data-kind=message][data-phase=output]', { hasText: `Done: ${XSS}` }).waitFor();
  await conversation.locator('[data-kind=message][data-phase=input]', { hasText: 'Execute:' }).waitFor();
  await shot(page, 'response');
  await done(page);
});

test('console: usage is drawn as bar charts', async () => {
  const container = await api(MEMBER, 'POST', '/containers', { name: 'console-usage' });
  await api(MEMBER, 'POST', `/containers/${container.id}/exec`, { commands: ['echo busy'] });
  const page = await open();
  await signIn(page, MEMBER);
  await page.goto(`${origin}/console#/usage`);
  const days = page.locator('svg[data-testid=chart-days]');
  await days.waitFor();
  assert.ok(await days.locator('rect.bar').count() >= 1);
  // Today's bar has height: the command above used sandbox time.
  await page.waitForFunction(() => [...document.querySelectorAll('svg[data-testid=chart-days] rect.bar')]
    .some((bar) => Number(bar.getAttribute('height')) > 0));
  await page.locator('svg[data-testid=chart-containers] rect.bar').first().waitFor();
  await page.locator('[data-testid=quota] meter').first().waitFor();
  await page.locator('[data-testid=models]').waitFor();
  await shot(page, 'usage');
  await done(page);
});

test('console: an admin key sees two projects and the operator page; a member key sees one', async () => {
  const alpha = await api(ADMIN, 'POST', '/containers', { name: 'alpha-only' });
  const beta = await api(MEMBER, 'POST', '/containers', { name: 'beta-only' });
  const admin = await open();
  await signIn(admin, ADMIN);
  await admin.locator('[data-testid=project]', { hasText: 'alpha' }).waitFor();
  const options = admin.locator('[data-testid=project-switch] option');
  assert.deepEqual((await options.allTextContents()).map((t) => t.split(' ')[0]).sort(), ['alpha', 'beta']);
  await admin.locator(`[data-testid=containers] tr[data-id="${alpha.id}"]`).waitFor();
  await admin.locator('[data-testid=project-switch]').selectOption('beta');
  await admin.locator('[data-testid=project]', { hasText: 'beta' }).waitFor();
  await admin.locator(`[data-testid=containers] tr[data-id="${beta.id}"]`).waitFor();
  await admin.locator(`[data-testid=containers] tr[data-id="${alpha.id}"]`).waitFor({ state: 'detached' });
  // The admin acts on beta: its container page opens.
  await admin.goto(`${origin}/console#/containers/${beta.id}`);
  await admin.locator('[data-testid=tab-overview][aria-selected=true]').waitFor();
  await admin.goto(`${origin}/console#/operator`);
  await admin.locator('[data-testid=health] dl').waitFor();
  await admin.locator('[data-testid=keys] tr[data-id]').first().waitFor();
  await admin.locator('[data-testid=images]').waitFor();
  await shot(admin, 'operator');
  await done(admin);

  const member = await open();
  await signIn(member, MEMBER);
  await member.locator('[data-testid=project]', { hasText: 'beta' }).waitFor();
  assert.equal(await member.locator('[data-testid=project-switch]').count(), 0);
  await member.locator(`[data-testid=containers] tr[data-id="${beta.id}"]`).waitFor();
  assert.equal(await member.locator(`[data-testid=containers] tr[data-id="${alpha.id}"]`).count(), 0);
  assert.equal(await member.locator('nav a[href="#/operator"]').count(), 0);
  // Another project's container id in the URL: not found.
  await member.goto(`${origin}/console#/containers/${alpha.id}`);
  await member.locator('h1', { hasText: 'No such container' }).waitFor();
  await done(member);
});

test('console: a state-changing call without the session\'s CSRF token is refused', async () => {
  const page = await open();
  await signIn(page, MEMBER);
  const statuses = await page.evaluate(async () => {
    const post = (headers) => fetch('/console/api/v1/containers', {
      method: 'POST', credentials: 'same-origin',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ name: 'csrf-probe' }),
    }).then((r) => r.status);
    const session = await (await fetch('/console/session')).json();
    return {
      none: await post({}),
      wrong: await post({ 'X-CSRF-Token': 'not-the-token' }),
      right: await post({ 'X-CSRF-Token': session.csrf_token }),
    };
  });
  assert.equal(statuses.none, 403);
  assert.equal(statuses.wrong, 403);
  assert.equal(statuses.right, 200);
  await done(page);
});

test('console: a key made on the operator page is shown once, and revoking it ends its sessions', async () => {
  const admin = await open();
  await signIn(admin, ADMIN);
  await admin.goto(`${origin}/console#/operator`);
  await admin.locator('[data-testid=key-project]').fill('gamma');
  await admin.locator('[data-testid=key-create]').click();
  const key = (await admin.locator('[data-testid=new-key]').textContent()).trim();
  assert.match(key, /^\S{20,}$/);
  const user = await open();
  await signIn(user, key);
  await user.locator('[data-testid=project]', { hasText: 'gamma' }).waitFor();
  // Revoked: the open console goes back to sign-in, and the key signs in no more.
  const row = admin.locator('[data-testid=keys] tr[data-id]', { hasText: 'gamma' });
  await row.locator('[data-testid=revoke-key]').click();
  await row.locator('[data-testid=revoke-key]').waitFor({ state: 'detached' });
  await user.locator('[data-testid=signin-key]').waitFor();
  await user.locator('[data-testid=signin-key]').fill(key);
  await user.locator('[data-testid=signin-submit]').click();
  await user.locator('[data-testid=signin-error]', { hasText: 'not accepted' }).waitFor();
  await done(user);
  await done(admin);
});

// A container's page that tosses a console session of its own project (the
// cookie's name and value given) onto every host of the parent domain: by
// `Set-Cookie` with `Domain=` on each path the console uses, and by script.
const TOSSING_APP = String.raw`
import http.server, json, sys
port, name, value, parent = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
names = sorted({name, "shellgate_console", "__Host-shellgate_console", "__Secure-shellgate_console"})
paths = ["/", "/console", "/console/session", "/console/api", "/console/api/v1"]
tossed = [f"{n}={value}; Domain={parent}; Path={p}" + extra for n in names for p in paths for extra in ("", "; Secure")]
page = "<!doctype html><title>a page</title><script>for (const c of " + json.dumps(tossed) + ") document.cookie = c; document.title = 'tossed';</script>"
class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        body = page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        for cookie in tossed:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Handler).serve_forever()
`;

test('console: a container page of a sibling host cannot plant its session in the console', { timeout: 180_000 }, async () => {
  // The console and the ports on hosts of one parent domain.
  const port = new URL(origin).port;
  const consoleOrigin = `http://console.${PARENT}:${port}`;
  // Another project's session (the admin's own, alpha), whose cookie its
  // container's page then tosses at every host of the parent domain.
  const attacker = await open();
  await signIn(attacker, ADMIN, consoleOrigin);
  const [session] = await attacker.context().cookies(`${consoleOrigin}/console/api/`);
  assert.ok(session, 'the attacker has a session cookie');
  const container = await api(ADMIN, 'POST', '/containers', { name: 'tossing-page', exposed_ports: [8000] });
  await api(ADMIN, 'POST', `/containers/${container.id}/exec`, {
    commands: [
      `cat > /tmp/toss.py <<'EOF'\n${TOSSING_APP}\nEOF`,
      `nohup python3 /tmp/toss.py 8000 '${session.name}' '${session.value}' ${PARENT} >/tmp/toss.log 2>&1 &`,
    ],
  });
  const pathForm = `${origin}/v1/containers/${container.id}/ports/8000/`;
  for (;;) {
    const answer = await server.fetch(pathForm, { headers: { authorization: `Bearer ${ADMIN}` } });
    if (answer.status === 200) break;
    // 502 until the app listens.
    assert.equal(answer.status, 502, await answer.text());
    await new Promise((r) => setTimeout(r, 50));
  }
  await attacker.context().close();

  // The victim signs in to the console (project beta), opens the page the
  // attacker linked, and comes back to make a container.
  const victim = await open();
  await signIn(victim, MEMBER, consoleOrigin);
  await victim.locator('[data-testid=project]', { hasText: 'beta' }).waitFor();
  const link = `http://8000-${container.id}.${PARENT}:${port}/?shellgate_port_token=${container.port_token}`;
  await victim.goto(link);
  await victim.waitForFunction(() => document.title === 'tossed');
  await victim.goto(`${consoleOrigin}/console`);
  await victim.locator('[data-testid=containers]').waitFor();
  await victim.locator('[data-testid=create-name]').fill('victims-own');
  await victim.locator('[data-testid=create-submit]').click();
  // Made in the victim's project, not the attacker's (looked for in both
  // until it is made).
  const madeIn = async (key) => (await api(key, 'GET', '/containers?limit=100')).data.some((c) => c.name === 'victims-own');
  for (;;) {
    const [inBeta, inAlpha] = [await madeIn(MEMBER), await madeIn(ADMIN)];
    assert.equal(inAlpha, false, 'the victim\'s container was made in the attacker\'s project');
    if (inBeta) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  await victim.locator('[data-testid=containers] tr[data-id]', { hasText: 'victims-own' }).waitFor();
  await victim.locator('[data-testid=project]', { hasText: 'beta' }).waitFor();
  // The console's cookie stayed the console host's own, alone.
  const cookies = await victim.context().cookies(`${consoleOrigin}/console/api/v1/containers`);
  const sessions = cookies.filter((c) => c.name === session.name);
  assert.equal(sessions.length, 1, JSON.stringify(cookies));
  assert.notEqual(sessions[0].value, session.value);
  await done(victim);
});

test('console: the containers list pages on the server', async () => {
  // A project of its own (the admin acts for it): 52 containers, pages of 50.
  const ids = [];
  for (let i = 0; i < 52; i += 1) ids.push((await api(ADMIN, 'POST', '/containers', { name: `bulk-${i}` })).id);
  const page = await open();
  await signIn(page, ADMIN);
  await page.locator('[data-testid=filter-q]').fill('bulk-');
  const rows = page.locator('[data-testid=containers] tr[data-id]');
  // Newest first: the last made heads the first page.
  await page.locator(`[data-testid=containers] tr[data-id="${ids[51]}"]`).waitFor();
  await page.locator('[data-testid=total]', { hasText: '52 in all' }).waitFor();
  assert.equal(await rows.count(), 50);
  await page.locator('[data-testid=next-page]').click();
  await page.locator(`[data-testid=containers] tr[data-id="${ids[0]}"]`).waitFor();
  assert.deepEqual(await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.id)), [ids[1], ids[0]]);
  assert.equal(await page.locator('[data-testid=next-page]').isDisabled(), true);
  await page.locator('[data-testid=prev-page]').click();
  await page.locator(`[data-testid=containers] tr[data-id="${ids[51]}"]`).waitFor();
  assert.equal(await rows.count(), 50);
  await done(page);
});

test('console: the snapshots page lists the project\'s snapshots, a hostile name as text, and the images', async () => {
  const container = await api(MEMBER, 'POST', '/containers', { name: 'console-snapshots' });
  // A cluster keeps its snapshots in the object store: the same page.
  const snap = await api(MEMBER, 'POST', `/containers/${container.id}/snapshots`, { name: XSS });
  const page = await open();
  await signIn(page, MEMBER);
  await page.locator('nav a[href="#/snapshots"]').click();
  const row = page.locator(`[data-testid=snapshots] tr[data-id="${snap.id}"]`);
  await row.waitFor();
  const cells = await row.locator('td').allTextContents();
  assert.equal(cells[1], XSS, `the row shows ${JSON.stringify(cells)}`);
  assert.equal(cells[2], container.id, `the row shows ${JSON.stringify(cells)}`);
  assert.equal(await row.locator(`a[href="#/containers/${container.id}"]`).count(), 1);
  // The image the container runs is among those listed.
  await page.locator(`[data-testid=images] tr[data-id="${container.image}"]`).waitFor();
  await api(MEMBER, 'DELETE', `/containers/${container.id}`);
  await done(page);
});
