#!/usr/bin/env node
// The web console's page weight and speed (BENCHMARKS.md, "Web console"),
// against one release `shellgate serve` holding real
// containers, in Debian's headless chromium driven by playwright-core
// (tests/node/node_modules; nothing downloaded).
//
// The server gets a fresh data dir and free port; containers are made
// through the API (`POST /v1/containers`, ~8 at once) up to each count of
// --counts (1,000 then 10,000 by default). Idle containers are suspended
// after 1 s (SHELLGATE_IDLE_SUSPEND_AFTER_SECS=1, at the next sweep), so
// they are never all running; a count is measured once none is running.
// At each count, --rounds rounds, each in fresh browser contexts (cold
// HTTP cache, own cookies), the series in a rotated order round by round:
//
//   * console: a blank page of the server's origin (/healthz) signs in
//     (`POST /console/session` by fetch in the page, its bytes counted
//     apart), then navigates to /console#/containers. Time to first render
//     = the app's `console:containers` performance mark (set right after the
//     list's rows are put in the DOM), relative to the navigation's start.
//     Bytes = every response's encodedDataLength (CDP Network.*: headers and
//     body as received, so 304s count their headers), at the first render
//     and once the page is quiet (no request but the SSE stream in flight
//     for --quiet-ms). Then a reload of the same page (warm cache: every
//     file revalidated by ETag, 304), timed and weighed the same way.
//   * raw API in the browser: in a fresh context on the blank page, signed
//     in, `fetch('/v1/containers?limit=50')` with the bearer key and
//     `fetch('/console/api/containers?limit=50')` with the cookie, each
//     timed in the page to the parsed JSON (rotated order).
//   * Node: `fetch` of /v1/containers?limit=50 (kept-alive connection), the
//     console's searches at this size (`q`, `status`, a second page) and the
//     page's other calls (session, projects, images, skills).
//
// While creating, the running containers are counted every 2 s (the
// sweeper has to keep up, or creates get 429 too_many_running_containers,
// which are waited out and retried).
//
// Prints Markdown tables; --json FILE keeps every sample. The data dir is
// removed at the end (server stopped with SIGTERM first); its log (warn and
// above) is kept and its path printed.
//
// Usage: node bench/console.mjs [--counts 1000,10000] [--rounds 15]
//   [--concurrency 8] [--quiet-ms 750] [--json FILE]
// Env: SHELLGATE_BIN (default target/release/shellgate), CHROMIUM (default
// /usr/bin/chromium). Needs root (the server makes sandboxes).
// bench/console.sh installs chromium and playwright-core and builds the
// binary if missing, then runs this.

import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { mkdtempSync, openSync, readFileSync, rmSync, statfsSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir, cpus, totalmem, release, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'tests', 'node', 'package.json'));
const { chromium } = require('playwright-core');

// --- arguments -------------------------------------------------------------

const args = { counts: [1000, 10000], rounds: 15, concurrency: 8, quietMs: 750, json: null };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  const value = () => {
    const v = process.argv[++i];
    if (v === undefined) throw new Error(`${a} needs a value`);
    return v;
  };
  if (a === '--counts') args.counts = value().split(',').map((n) => Number(n.replace(/_/g, '')));
  else if (a === '--rounds') args.rounds = Number(value());
  else if (a === '--concurrency') args.concurrency = Number(value());
  else if (a === '--quiet-ms') args.quietMs = Number(value());
  else if (a === '--json') args.json = value();
  else if (a === '--help' || a === '-h') {
    console.log('node bench/console.mjs [--counts 1000,10000] [--rounds 15] [--concurrency 8] [--quiet-ms 750] [--json FILE]');
    process.exit(0);
  } else throw new Error(`unknown argument ${a}`);
}
if (args.counts.some((n) => !Number.isInteger(n) || n < 1)) throw new Error('--counts: positive integers');
args.counts.sort((a, b) => a - b);

const BINARY = process.env.SHELLGATE_BIN ?? join(root, 'target', 'release', 'shellgate');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const KEY = 'sk-console-bench';
const PAGE = 50;
const LIST = `/v1/containers?limit=${PAGE}`;
const CONSOLE_LIST = `/console/api/containers?limit=${PAGE}`;
// What a container's creation takes on disk here (measured: 2.25 MB).
const DISK_PER_CONTAINER = 2.4e6;

const log = (...m) => console.error(`[${new Date().toISOString().slice(11, 19)}]`, ...m);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --- statistics ---------------------------------------------------------

function quantile(samples, q) {
  const s = [...samples].sort((a, b) => a - b);
  if (!s.length) return NaN;
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return s[lo] + (s[hi] - s[lo]) * (pos - lo);
}
const median = (s) => quantile(s, 0.5);
const p90 = (s) => quantile(s, 0.9);
const ms = (v) => (Number.isFinite(v) ? `${v.toFixed(v < 10 ? 2 : 1)} ms` : '—');
const kb = (b) => (Number.isFinite(b) ? `${(b / 1024).toFixed(1)} KiB` : '—');
const num = (n) => n.toLocaleString('en-US');

// --- the server -----------------------------------------------------------

function freePort() {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.on('error', fail);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

async function startServer() {
  if (!existsSync(BINARY)) throw new Error(`${BINARY} missing: cargo build --release -p shellgate (or bench/console.sh)`);
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'shellgate-console-bench-'));
  const logPath = join(tmpdir(), `shellgate-console-bench-${process.pid}.log`);
  const logFd = openSync(logPath, 'w');
  const env = {
    PATH: process.env.PATH,
    SHELLGATE_API_KEYS: `${KEY}:bench`,
    SHELLGATE_BUILD_DEFAULT_IMAGE: 'false',
    SHELLGATE_IDLE_SUSPEND_AFTER_SECS: '1',
    SHELLGATE_RATE_LIMIT_PER_MINUTE: '0',
    // The default (20 min idle) would delete the first containers before
    // the largest count is measured.
    SHELLGATE_DEFAULT_EXPIRES_MINUTES: '1440',
    SHELLGATE_LOG: 'warn',
    SHELLGATE_LOG_FORMAT: 'text',
  };
  const child = spawn(BINARY, ['--data-dir', dataDir, 'serve', '--listen', `127.0.0.1:${port}`], {
    env, stdio: ['ignore', 'ignore', logFd],
  });
  const exited = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
  const origin = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`server exited (${child.exitCode}); log: ${logPath}`);
    try {
      if ((await fetch(`${origin}/healthz`)).ok) break;
    } catch {}
    if (Date.now() > deadline) throw new Error(`server did not start; log: ${logPath}`);
    await sleep(50);
  }
  return {
    origin, dataDir, logPath, pid: child.pid, env,
    rssKiB() {
      try {
        const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
        return m ? Number(m[1]) : NaN;
      } catch {
        return NaN;
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

// --- the API from Node ----------------------------------------------------

const bearer = { authorization: `Bearer ${KEY}` };

// A console session for Node's calls. Sessions are capped per key (the
// oldest signed out first) and every browser round signs in: on a 401 the
// call signs in again.
function nodeSession(origin) {
  const session = {
    cookie: null,
    async get(path) {
      for (let attempt = 0; ; attempt++) {
        if (!session.cookie) session.cookie = await consoleCookie(origin);
        const t0 = performance.now();
        const r = await fetch(`${origin}${path}`, { headers: { cookie: session.cookie } });
        const body = await r.text();
        const t = performance.now() - t0;
        if (r.status === 401 && attempt === 0) {
          session.cookie = null;
          continue;
        }
        if (!r.ok) throw new Error(`${path}: ${r.status} ${body.slice(0, 300)}`);
        return { ms: t, bytes: Buffer.byteLength(body), json: JSON.parse(body) };
      }
    },
  };
  return session;
}

async function consoleCookie(origin) {
  const r = await fetch(`${origin}/console/session`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key: KEY }),
  });
  if (!r.ok) throw new Error(`sign-in: ${r.status} ${await r.text()}`);
  await r.json();
  return r.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
}

// Creates containers c<from>..c<to>, `concurrency` at a time; a 429 (the
// running-containers limit, should the sweeper lag) waits and retries.
async function createContainers(origin, from, to, concurrency) {
  let next = from;
  let refused = 0;
  const refusals = new Map();
  const failures = [];
  const times = [];
  const started = performance.now();
  let lastReport = started;
  async function one(i) {
    for (let attempt = 0; ; attempt++) {
      const t0 = performance.now();
      let r;
      let text = '';
      try {
        r = await fetch(`${origin}/v1/containers`, {
          method: 'POST', headers: { ...bearer, 'content-type': 'application/json' },
          body: JSON.stringify({ name: `c${i}` }),
        });
        text = await r.text();
      } catch (e) {
        text = String(e);
      }
      if (r?.ok) {
        times.push(performance.now() - t0);
        return;
      }
      if (r?.status === 429) {
        refused++;
        const code = /"code":"([^"]+)"/.exec(text)?.[1] ?? text.slice(0, 100);
        refusals.set(code, (refusals.get(code) ?? 0) + 1);
        await sleep(1000);
        continue;
      }
      failures.push(`c${i}: ${r?.status ?? 'no answer'} ${text.slice(0, 300)}`);
      if (attempt >= 4) throw new Error(`creating c${i} failed 5 times: ${failures.at(-1)}`);
      await sleep(500);
    }
  }
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (;;) {
      const i = next++;
      if (i > to) return;
      await one(i);
      const now = performance.now();
      if (now - lastReport > 15_000) {
        lastReport = now;
        log(`  created ${num(i)} of ${num(to)} (${((times.length / (now - started)) * 1000).toFixed(1)}/s)`);
      }
    }
  }));
  return { seconds: (performance.now() - started) / 1000, times, refused, refusals: Object.fromEntries(refusals), failures };
}

async function countWhere(session, status) {
  return (await session.get(`/console/api/containers?limit=1&status=${status}`)).json.total;
}

// Waits until no container is running or being created (the sweeper
// suspends idle ones), so the measurement sees a quiet server.
async function waitSuspended(session) {
  const t0 = performance.now();
  for (;;) {
    const running = await countWhere(session, 'running');
    const creating = await countWhere(session, 'creating');
    if (running === 0 && creating === 0) return (performance.now() - t0) / 1000;
    if (performance.now() - t0 > 300_000) throw new Error(`still ${running} running, ${creating} creating after 5 min`);
    await sleep(1000);
  }
}

async function timedJson(url, headers) {
  const t0 = performance.now();
  const r = await fetch(url, { headers });
  const body = await r.text();
  const json = JSON.parse(body);
  const t = performance.now() - t0;
  if (!r.ok) throw new Error(`${url}: ${r.status} ${body.slice(0, 300)}`);
  return { ms: t, bytes: Buffer.byteLength(body), json };
}

// --- the browser's network, through CDP --------------------------------

// Every request of a page since the last reset: URL, type, status, bytes
// received (encodedDataLength: headers and body as they came off the wire).
function tracker(cdp) {
  let requests = new Map();
  // Extra info may come before the request it belongs to.
  const early = new Map();
  let lastActivity = performance.now();
  const touch = () => { lastActivity = performance.now(); };
  cdp.on('Network.requestWillBeSent', (e) => {
    touch();
    const previous = requests.get(e.requestId);
    // A redirect reuses the id: the redirect response's bytes stay counted.
    const carried = previous && e.redirectResponse ? previous.bytes + (e.redirectResponse.encodedDataLength ?? 0) : 0;
    requests.set(e.requestId, {
      url: e.request.url, method: e.request.method, type: e.type, status: null, wireStatus: early.get(e.requestId) ?? null, headerBytes: 0,
      dataBytes: 0, finalBytes: null, done: false, failed: false, cached: false, carried,
      get bytes() {
        return this.carried + (this.finalBytes ?? this.headerBytes + this.dataBytes);
      },
    });
  });
  cdp.on('Network.requestServedFromCache', (e) => {
    const r = requests.get(e.requestId);
    if (r) r.cached = true;
  });
  cdp.on('Network.responseReceived', (e) => {
    touch();
    const r = requests.get(e.requestId);
    if (!r) return;
    r.status = e.response.status;
    r.headerBytes = e.response.encodedDataLength ?? 0;
    if (e.response.fromDiskCache || e.response.fromPrefetchCache) r.cached = true;
  });
  // The status on the wire: a revalidated navigation is reported as the
  // cached 200 by responseReceived, as the 304 it was here.
  cdp.on('Network.responseReceivedExtraInfo', (e) => {
    const r = requests.get(e.requestId);
    if (r) r.wireStatus = e.statusCode;
    else early.set(e.requestId, e.statusCode);
  });
  cdp.on('Network.dataReceived', (e) => {
    touch();
    const r = requests.get(e.requestId);
    if (r) r.dataBytes += e.encodedDataLength ?? 0;
  });
  cdp.on('Network.loadingFinished', (e) => {
    touch();
    const r = requests.get(e.requestId);
    if (!r) return;
    r.finalBytes = e.encodedDataLength;
    r.done = true;
  });
  cdp.on('Network.loadingFailed', (e) => {
    touch();
    const r = requests.get(e.requestId);
    if (!r) return;
    r.failed = true;
    r.done = true;
    r.error = e.errorText;
  });
  return {
    reset() {
      requests = new Map();
      touch();
    },
    // What was received so far, by kind.
    snapshot() {
      const rows = [...requests.values()].map((r) => {
        const path = new URL(r.url).pathname;
        const kind = path === '/console' || path === '/console/' || path.startsWith('/console/assets/') ? 'app' : 'data';
        return {
          path: path + new URL(r.url).search, kind, type: r.type, status: r.wireStatus ?? r.status, bytes: r.bytes,
          done: r.done, failed: r.failed, cached: r.cached, error: r.error,
        };
      });
      const sum = (f) => rows.filter(f).reduce((a, r) => a + r.bytes, 0);
      return {
        rows,
        app: sum((r) => r.kind === 'app'),
        data: sum((r) => r.kind === 'data'),
        total: sum(() => true),
        requests: rows.length,
        notModified: rows.filter((r) => r.status === 304).length,
        listCalls: rows.filter((r) => r.path.startsWith('/console/api/containers?')).length,
      };
    },
    // Resolves once nothing but an event stream has been in flight, and
    // nothing arrived, for `quietMs` (at most `maxMs`).
    async quiet(quietMs, maxMs = 10_000) {
      const t0 = performance.now();
      for (;;) {
        const busy = [...requests.values()].some((r) => !r.done && r.type !== 'EventSource');
        const now = performance.now();
        if (!busy && now - lastActivity >= quietMs) return;
        if (now - t0 > maxMs) return;
        await sleep(25);
      }
    },
  };
}

// --- measurements in the browser -----------------------------------------

async function freshPage(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') page.problems.push(`console.${m.type()}: ${m.text()}`);
  });
  return { context, page };
}

function signInInPage(page) {
  return page.evaluate(async (key) => {
    const r = await fetch('/console/session', {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key }),
      credentials: 'same-origin',
    });
    if (!r.ok) throw new Error(`sign-in ${r.status}`);
    return (await r.json()).project;
  }, KEY);
}

// After a navigation: waits for the list's first render and reads what the
// page measured.
async function firstRender(page) {
  await page.waitForFunction(() => performance.getEntriesByName('console:containers').length > 0,
    null, { polling: 'raf', timeout: 120_000 });
  return page.evaluate(() => {
    const mark = performance.getEntriesByName('console:containers')[0];
    const nav = performance.getEntriesByType('navigation')[0];
    const resources = performance.getEntriesByType('resource');
    const lists = resources.filter((e) => e.name.includes('/console/api/containers?'));
    const first = lists[0];
    const path = (e) => new URL(e.name).pathname;
    const assets = resources.filter((e) => path(e).startsWith('/console/assets/') && e.responseEnd <= mark.startTime);
    const session = resources.find((e) => path(e) === '/console/session');
    const projects = resources.find((e) => path(e) === '/console/api/projects');
    return {
      assetsEnd: Math.max(...assets.map((e) => e.responseEnd)),
      sessionStart: session?.startTime ?? NaN,
      sessionEnd: session?.responseEnd ?? NaN,
      projectsStart: projects?.startTime ?? NaN,
      projectsEnd: projects?.responseEnd ?? NaN,
      ms: mark.startTime,
      rows: document.querySelectorAll('[data-testid=containers] tr[data-id]').length,
      total: document.querySelector('[data-testid=total]')?.textContent ?? '',
      htmlEnd: nav?.responseEnd ?? NaN,
      domContentLoaded: nav?.domContentLoadedEventEnd ?? NaN,
      listStart: first?.startTime ?? NaN,
      listEnd: first?.responseEnd ?? NaN,
      listTransfer: first?.transferSize ?? NaN,
    };
  });
}

async function consoleRound(browser, origin) {
  const { context, page } = await freshPage(browser);
  try {
    const cdp = await context.newCDPSession(page);
    await cdp.send('Network.enable');
    // The cache is the context's own (empty); this only makes sure.
    await cdp.send('Network.setCacheDisabled', { cacheDisabled: false });
    const net = tracker(cdp);
    await page.goto(`${origin}/healthz`);
    net.reset();
    await signInInPage(page);
    await net.quiet(0, 5_000);
    const signIn = net.snapshot();

    net.reset();
    await page.goto(`${origin}/console#/containers`, { waitUntil: 'commit' });
    const cold = await firstRender(page);
    cold.bytesAtRender = net.snapshot();
    await net.quiet(args.quietMs);
    cold.bytes = net.snapshot();

    net.reset();
    await page.reload({ waitUntil: 'commit' });
    const warm = await firstRender(page);
    warm.bytesAtRender = net.snapshot();
    await net.quiet(args.quietMs);
    warm.bytes = net.snapshot();
    return { signIn, cold, warm, problems: page.problems };
  } finally {
    await context.close();
  }
}

async function rawRound(browser, origin, round) {
  const { context, page } = await freshPage(browser);
  try {
    await page.goto(`${origin}/healthz`);
    await signInInPage(page);
    const order = round % 2 ? ['console', 'api'] : ['api', 'console'];
    const out = {};
    for (const which of order) {
      out[which] = await page.evaluate(async ({ which, key, LIST, CONSOLE_LIST }) => {
        const t0 = performance.now();
        const r = which === 'api'
          ? await fetch(LIST, { headers: { authorization: `Bearer ${key}` } })
          : await fetch(CONSOLE_LIST, { credentials: 'same-origin' });
        const json = await r.json();
        const t = performance.now() - t0;
        if (!r.ok) throw new Error(`${which}: ${r.status}`);
        return { ms: t, rows: json.data.length };
      }, { which, key: KEY, LIST, CONSOLE_LIST });
    }
    out.problems = page.problems;
    return out;
  } finally {
    await context.close();
  }
}

async function nodeRound(origin, session, count) {
  // The kept-alive connection may have been closed while idle: reopen it
  // untimed, as the browser's page load did for the in-page fetches.
  await (await fetch(`${origin}/healthz`)).text();
  const api = await timedJson(`${origin}${LIST}`, bearer);
  // Signed in afresh (untimed) if a browser round's sign-in pushed this
  // session out.
  await session.get('/console/session');
  const list = await session.get(CONSOLE_LIST);
  // Searches of the console at this size: a name (substring, matches a
  // handful), a status (every row), the second page.
  const name = `c${Math.max(1, Math.floor(count * 0.73))}`;
  const search = await session.get(`${CONSOLE_LIST}&q=${name}`);
  const status = await session.get(`${CONSOLE_LIST}&status=suspended`);
  const second = await session.get(`${CONSOLE_LIST}&after=${encodeURIComponent(list.json.last_id)}`);
  // The page's other calls before its list.
  const sessionCall = await session.get('/console/session');
  const projects = await session.get('/console/api/projects');
  const images = await session.get('/console/api/v1/images');
  const skills = await session.get('/console/api/v1/skills?limit=100');
  return {
    api: { ms: api.ms, bytes: api.bytes },
    list: { ms: list.ms, bytes: list.bytes, total: list.json.total },
    search: { ms: search.ms, q: name, found: search.json.total },
    status: { ms: status.ms, found: status.json.total },
    second: { ms: second.ms, rows: second.json.data.length },
    session: { ms: sessionCall.ms },
    projects: { ms: projects.ms },
    images: { ms: images.ms },
    skills: { ms: skills.ms },
  };
}

async function measure(browser, server, session, count) {
  const rounds = [];
  // One unmeasured round of each series first (the server's and the
  // browser's first-time costs).
  await consoleRound(browser, server.origin);
  await rawRound(browser, server.origin, 0);
  await nodeRound(server.origin, session, count);
  for (let i = 0; i < args.rounds; i++) {
    const series = ['console', 'raw', 'node'];
    // Rotated round by round: no series always runs first.
    const order = series.slice(i % 3).concat(series.slice(0, i % 3));
    const round = { order };
    for (const s of order) {
      if (s === 'console') round.console = await consoleRound(browser, server.origin);
      else if (s === 'raw') round.raw = await rawRound(browser, server.origin, i);
      else round.node = await nodeRound(server.origin, session, count);
    }
    rounds.push(round);
    if (round.console.cold.rows !== PAGE && round.console.cold.rows !== Math.min(PAGE, count)) {
      log(`  round ${i + 1}: the list showed ${round.console.cold.rows} rows at its first render`);
    }
  }
  return rounds;
}

// --- report -----------------------------------------------------------------

function summarize(count, rounds, extra) {
  const pick = (f) => rounds.map(f);
  const cold = pick((r) => r.console.cold.ms);
  const warm = pick((r) => r.console.warm.ms);
  const apiBrowser = pick((r) => r.raw.api.ms);
  const listBrowser = pick((r) => r.raw.console.ms);
  const apiNode = pick((r) => r.node.api.ms);
  const ratios = pick((r) => r.console.cold.ms / r.raw.api.ms);
  return {
    count, extra,
    time: {
      cold, warm, apiBrowser, listBrowser, apiNode, ratios,
      htmlEnd: pick((r) => r.console.cold.htmlEnd),
      assetsEnd: pick((r) => r.console.cold.assetsEnd),
      sessionStart: pick((r) => r.console.cold.sessionStart),
      sessionEnd: pick((r) => r.console.cold.sessionEnd),
      projectsStart: pick((r) => r.console.cold.projectsStart),
      projectsEnd: pick((r) => r.console.cold.projectsEnd),
      domContentLoaded: pick((r) => r.console.cold.domContentLoaded),
      warmListStart: pick((r) => r.console.warm.listStart),
      warmListEnd: pick((r) => r.console.warm.listEnd),
      listStart: pick((r) => r.console.cold.listStart),
      listEnd: pick((r) => r.console.cold.listEnd),
      listNode: pick((r) => r.node.list.ms),
      search: pick((r) => r.node.search.ms),
      status: pick((r) => r.node.status.ms),
      second: pick((r) => r.node.second.ms),
      sessionNode: pick((r) => r.node.session.ms),
      projectsNode: pick((r) => r.node.projects.ms),
      imagesNode: pick((r) => r.node.images.ms),
      skillsNode: pick((r) => r.node.skills.ms),
    },
    bytes: {
      signIn: pick((r) => r.console.signIn.total),
      coldAtRender: pick((r) => r.console.cold.bytesAtRender),
      cold: pick((r) => r.console.cold.bytes),
      warm: pick((r) => r.console.warm.bytes),
      apiJson: rounds[0].node.api.bytes,
      listJson: rounds[0].node.list.bytes,
    },
    problems: [...new Set(rounds.flatMap((r) => [...r.console.problems, ...r.raw.problems]))],
  };
}

function tables(results, meta) {
  const out = [];
  const counts = results.map((r) => num(r.count));
  const head = (first) => {
    out.push(`| ${first} | ${counts.map((c) => `${c} containers: median | p90`).join(' | ')} |`);
    out.push(`|---|${counts.map(() => '---:|---:').join('|')}|`);
  };
  const row = (label, f, fmt) => {
    out.push(`| ${label} | ${results.map((r) => {
      const s = f(r);
      return `${fmt(median(s))} | ${fmt(p90(s))}`;
    }).join(' | ')} |`);
  };
  out.push(`### Time to first render of the containers list (${meta.rounds} rounds)`, '');
  head('from navigation start to the rows in the DOM');
  row('console, cold (fresh context, signed in)', (r) => r.time.cold, ms);
  row('console, warm reload (ETag, 304s)', (r) => r.time.warm, ms);
  row('baseline: `fetch(/v1/containers?limit=50)` in the browser', (r) => r.time.apiBrowser, ms);
  row('`fetch(/console/api/containers?limit=50)` in the browser', (r) => r.time.listBrowser, ms);
  row('Node `fetch` of /v1/containers?limit=50', (r) => r.time.apiNode, ms);
  row('**ratio, console cold / raw API fetch in the browser**', (r) => r.time.ratios, (v) => `${v.toFixed(1)}×`);
  out.push('');
  out.push('Where the cold first render\'s time goes (medians, ms from navigation start):', '');
  out.push(`| | ${counts.join(' | ')} |`, `|---|${counts.map(() => '---:').join('|')}|`);
  out.push(`| HTML received | ${results.map((r) => median(r.time.htmlEnd).toFixed(1)).join(' | ')} |`);
  out.push(`| JS modules and CSS received (the last of them) | ${results.map((r) => median(r.time.assetsEnd).toFixed(1)).join(' | ')} |`);
  out.push(`| DOMContentLoaded (modules run) | ${results.map((r) => median(r.time.domContentLoaded).toFixed(1)).join(' | ')} |`);
  out.push(`| \`GET /console/session\` sent / answered | ${results.map((r) => `${median(r.time.sessionStart).toFixed(1)} / ${median(r.time.sessionEnd).toFixed(1)}`).join(' | ')} |`);
  out.push(`| \`GET /console/api/projects\` sent / answered | ${results.map((r) => `${median(r.time.projectsStart).toFixed(1)} / ${median(r.time.projectsEnd).toFixed(1)}`).join(' | ')} |`);
  out.push(`| list request sent (the page rendered, its first load) | ${results.map((r) => median(r.time.listStart).toFixed(1)).join(' | ')} |`);
  out.push(`| list response received | ${results.map((r) => median(r.time.listEnd).toFixed(1)).join(' | ')} |`);
  out.push(`| rows in the DOM (the mark) | ${results.map((r) => median(r.time.cold).toFixed(1)).join(' | ')} |`);
  out.push('');
  out.push('The console\'s calls at this size, from Node, signed in, kept-alive (medians, ms):', '');
  out.push(`| | ${counts.join(' | ')} |`, `|---|${counts.map(() => '---:').join('|')}|`);
  out.push(`| first page (\`limit=50\`, with \`total\`) | ${results.map((r) => median(r.time.listNode).toFixed(2)).join(' | ')} |`);
  out.push(`| second page (\`after=\`) | ${results.map((r) => median(r.time.second).toFixed(2)).join(' | ')} |`);
  out.push(`| search by name (\`q=\`, substring) | ${results.map((r) => median(r.time.search).toFixed(2)).join(' | ')} |`);
  out.push(`| filter \`status=suspended\` (every row matches) | ${results.map((r) => median(r.time.status).toFixed(2)).join(' | ')} |`);
  out.push(`| \`GET /console/session\` | ${results.map((r) => median(r.time.sessionNode).toFixed(2)).join(' | ')} |`);
  out.push(`| \`GET /console/api/projects\` (counts every project's containers) | ${results.map((r) => median(r.time.projectsNode).toFixed(2)).join(' | ')} |`);
  out.push(`| \`GET /console/api/v1/images\` | ${results.map((r) => median(r.time.imagesNode).toFixed(2)).join(' | ')} |`);
  out.push(`| \`GET /console/api/v1/skills?limit=100\` | ${results.map((r) => median(r.time.skillsNode).toFixed(2)).join(' | ')} |`);
  out.push('');
  out.push(`### Bytes per first page load (${meta.rounds} rounds, medians)`, '');
  out.push(`| received (headers + bodies, as on the wire) | ${counts.join(' | ')} |`, `|---|${counts.map(() => '---:').join('|')}|`);
  const b = (label, f) => out.push(`| ${label} | ${results.map((r) => f(r)).join(' | ')} |`);
  b('sign-in (`POST /console/session`)', (r) => kb(median(r.bytes.signIn)));
  b('cold load: app files (HTML, JS modules, CSS)', (r) => kb(median(r.bytes.cold.map((x) => x.app))));
  b('cold load: data (session, projects, list, images, skills, events)', (r) => kb(median(r.bytes.cold.map((x) => x.data))));
  b('**cold load: total**', (r) => `**${kb(median(r.bytes.cold.map((x) => x.total)))}**`);
  b('cold load: requests (of which list calls)', (r) => `${median(r.bytes.cold.map((x) => x.requests))} (${median(r.bytes.cold.map((x) => x.listCalls))})`);
  b('cold loads that fetched the list twice', (r) => `${r.bytes.cold.filter((x) => x.listCalls > 1).length} of ${r.bytes.cold.length}`);
  b('cold load: total at the first render', (r) => kb(median(r.bytes.coldAtRender.map((x) => x.total))));
  b('warm reload: app files (304s)', (r) => kb(median(r.bytes.warm.map((x) => x.app))));
  b('warm reload: data', (r) => kb(median(r.bytes.warm.map((x) => x.data))));
  b('**warm reload: total**', (r) => `**${kb(median(r.bytes.warm.map((x) => x.total)))}**`);
  b('warm reload: requests (304s)', (r) => `${median(r.bytes.warm.map((x) => x.requests))} (${median(r.bytes.warm.map((x) => x.notModified))})`);
  b('one page of `/v1/containers?limit=50` (body)', (r) => kb(r.bytes.apiJson));
  b('one page of `/console/api/containers?limit=50` (body)', (r) => kb(r.bytes.listJson));
  return out.join('\n');
}

function composition(snapshot) {
  const lines = ['| request | status | bytes |', '|---|---:|---:|'];
  for (const r of snapshot.rows) lines.push(`| \`${r.path}\`${r.type === 'EventSource' ? ' (SSE, so far)' : ''} | ${r.status ?? '—'} | ${num(r.bytes)} |`);
  return lines.join('\n');
}

// --- main -------------------------------------------------------------------

async function main() {
  const need = Math.max(...args.counts) * DISK_PER_CONTAINER;
  const fs = statfsSync(tmpdir());
  const free = fs.bavail * fs.bsize;
  log(`disk: ${(free / 1e9).toFixed(1)} GB free in ${tmpdir()}, ~${(need / 1e9).toFixed(1)} GB needed for ${num(Math.max(...args.counts))} containers`);
  if (free < need * 1.2) throw new Error(`not enough disk in ${tmpdir()}: ${(free / 1e9).toFixed(1)} GB free, ~${(need / 1e9).toFixed(1)} GB needed`);

  const server = await startServer();
  log(`server ${BINARY} pid ${server.pid} at ${server.origin}, data ${server.dataDir}, log ${server.logPath}`);
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    // Playwright gives each launch a fresh temporary --user-data-dir.
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const meta = {
    date: new Date().toISOString(), rounds: args.rounds, concurrency: args.concurrency,
    chromium: browser.version(), node: process.version, cpus: cpus().length, cpuModel: cpus()[0]?.model,
    memGiB: Math.round(totalmem() / 2 ** 30), kernel: release(), binary: BINARY,
  };
  const results = [];
  const creates = [];
  let exitError = null;
  try {
    const session = nodeSession(server.origin);
    let have = 0;
    for (const count of args.counts) {
      const before = statfsSync(server.dataDir);
      log(`creating c${have + 1}..c${count} (${args.concurrency} at once)`);
      // How many are running meanwhile (the sweeper suspends the idle
      // ones), sampled every 2 s.
      let sampling = true;
      let maxRunning = 0;
      const sampler = (async () => {
        while (sampling) {
          try {
            maxRunning = Math.max(maxRunning, await countWhere(session, 'running'));
          } catch {}
          await sleep(2000);
        }
      })();
      const made = await createContainers(server.origin, have + 1, count, args.concurrency);
      sampling = false;
      await sampler;
      const after = statfsSync(server.dataDir);
      const diskBytes = (before.bavail - after.bavail) * after.bsize;
      have = count;
      const settle = await waitSuspended(session);
      const total = await countWhere(session, 'suspended');
      const create = {
        count, seconds: made.seconds, perSecond: made.times.length / made.seconds,
        medianMs: median(made.times), p90Ms: p90(made.times), refused429: made.refused, refusals: made.refusals,
        failures: made.failures, diskPerContainerMB: diskBytes / made.times.length / 1e6, suspendWaitS: settle,
        suspended: total, rssKiB: server.rssKiB(), maxRunning,
      };
      creates.push(create);
      log(`  ${num(made.times.length)} created in ${made.seconds.toFixed(1)} s (${create.perSecond.toFixed(1)}/s, ${create.diskPerContainerMB.toFixed(2)} MB each), `
        + `${made.refused} refused (429), ${made.failures.length} failed; at most ${num(maxRunning)} running at once (sampled); all suspended ${settle.toFixed(1)} s later; ${num(total)} suspended; server RSS ${(create.rssKiB / 1024).toFixed(0)} MiB`);
      log(`measuring at ${num(count)} containers, ${args.rounds} rounds`);
      const loadBefore = loadavg()[0];
      const rounds = await measure(browser, server, session, count);
      const summary = summarize(count, rounds, create);
      summary.load = [loadBefore, loadavg()[0]];
      summary.rounds = rounds;
      summary.composition = { cold: rounds[0].console.cold.bytes, warm: rounds[0].console.warm.bytes };
      summary.rssAfterKiB = server.rssKiB();
      results.push(summary);
      log(`  console cold ${ms(median(summary.time.cold))}, raw API ${ms(median(summary.time.apiBrowser))}, ratio ${median(summary.time.ratios).toFixed(1)}×`);
    }
  } catch (e) {
    exitError = e;
  } finally {
    await browser.close().catch(() => {});
    log('stopping the server (SIGTERM) and removing its data dir');
    await server.stop();
    log('stopped and removed');
  }
  if (!results.length) throw exitError;
  if (exitError) log(`stopped early (the tables hold the counts measured before): ${exitError.stack}`);

  const logText = readFileSync(server.logPath, 'utf8');
  const logLines = logText.split('\n').filter(Boolean);
  const md = [];
  md.push(`Web console, ${meta.date.slice(0, 10)}: ${meta.cpus} × ${meta.cpuModel}, ${meta.memGiB} GiB, kernel ${meta.kernel}; chromium ${meta.chromium} (headless), Node ${meta.node}; ${BINARY}.`, '');
  md.push('| creating containers | ' + creates.map((c) => num(c.count)).join(' | ') + ' |', `|---|${creates.map(() => '---:').join('|')}|`);
  md.push(`| containers made (this step) | ${creates.map((c, i) => num(c.count - (i ? creates[i - 1].count : 0))).join(' | ')} |`);
  md.push(`| time, ${args.concurrency} at once | ${creates.map((c) => `${c.seconds.toFixed(1)} s (${c.perSecond.toFixed(1)}/s)`).join(' | ')} |`);
  md.push(`| one create, median / p90 | ${creates.map((c) => `${c.medianMs.toFixed(0)} / ${c.p90Ms.toFixed(0)} ms`).join(' | ')} |`);
  md.push(`| most running at once while creating (sampled every 2 s) | ${creates.map((c) => num(c.maxRunning)).join(' | ')} |`);
  md.push(`| disk per container | ${creates.map((c) => `${c.diskPerContainerMB.toFixed(2)} MB`).join(' | ')} |`);
  md.push(`| 429s (retried), failures | ${creates.map((c) => `${c.refused429}${c.refused429 ? ` (${Object.entries(c.refusals).map(([k, v]) => `${k} ×${v}`).join(', ')})` : ''}, ${c.failures.length}`).join(' | ')} |`);
  md.push(`| load average (1 min) before / after measuring | ${results.map((r) => `${r.load[0].toFixed(1)} / ${r.load[1].toFixed(1)}`).join(' | ')} |`);
  md.push(`| server RSS after creating / after measuring | ${results.map((r) => `${(r.extra.rssKiB / 1024).toFixed(0)} / ${(r.rssAfterKiB / 1024).toFixed(0)} MiB`).join(' | ')} |`);
  md.push('');
  md.push(tables(results, meta));
  md.push('');
  md.push(`First cold load at ${num(results.at(-1).count)} containers, request by request:`, '');
  md.push(composition(results.at(-1).composition.cold));
  md.push('');
  md.push(`Its warm reload:`, '');
  md.push(composition(results.at(-1).composition.warm));
  md.push('');
  for (const r of results) {
    if (r.problems.length) md.push(`Browser errors/warnings at ${num(r.count)}: ${r.problems.slice(0, 10).map((p) => `\`${p}\``).join('; ')}`);
    else md.push(`No page error or console error/warning at ${num(r.count)} containers.`);
    const failures = r.extra.failures;
    if (failures.length) md.push(`Create failures (retried) up to ${num(r.count)}: ${failures.slice(0, 5).join('; ')}`);
  }
  md.push(`Server log (warn and above): ${logLines.length} lines${logLines.length ? `; first: \`${logLines.slice(0, 5).join('` `')}\`` : ''} (${server.logPath}).`);
  console.log(md.join('\n'));
  if (args.json) {
    writeFileSync(args.json, JSON.stringify({ meta, creates, results, log: logLines.slice(0, 200) }, null, 1));
    log(`samples in ${args.json}`);
  }
  if (exitError) process.exitCode = 1;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
