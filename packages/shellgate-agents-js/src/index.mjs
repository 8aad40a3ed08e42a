/**
 * @shellgate/agents: a shellgate server as the sandbox of the OpenAI Agents SDK for
 * JavaScript (`@openai/agents-core`'s `sandbox` interface, which is structural: a client
 * with `create`/`resume`/`delete`, a session with the methods the runtime and the
 * built-in capabilities call).
 *
 * One container per session, driven through shellgate's HTTP API:
 * processes (exec, and the interactive `exec_command`/`write_stdin` tools, with a PTY
 * when `tty` is asked for), files by path, the workspace as a tar stream, and exposed
 * ports. The workspace is `/mnt/data`, the one directory the container's user owns.
 */

import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { applyDiff } from '@openai/agents-core';
import { Manifest } from '@openai/agents-core/sandbox';

export const BACKEND_ID = 'shellgate';
export const WORKSPACE_ROOT = '/mnt/data';
const SDK_DEFAULT_ROOT = '/workspace';
const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';
// api.md §1: a process's timeout is at most 5 minutes; an output long poll waits at
// most 30 s; the SDK keeps at most 64 interactive processes.
const PROCESS_TIMEOUT_MS_MAX = 300_000;
const EXEC_DEFAULT_TIMEOUT_MS = 120_000;
const OUTPUT_WAIT_MS_MAX = 30_000;
const PTY_PROCESSES_MAX = 64;
const DEFAULT_EXEC_YIELD_TIME_MS = 10_000;
const DEFAULT_WRITE_STDIN_YIELD_TIME_MS = 250;
const KILLED_EXIT_CODE = 128 + 9;
const APPROX_BYTES_PER_TOKEN = 4;

/** The server answered with an error (OpenAI's envelope `{"error": {...}}`). */
export class ShellgateApiError extends Error {
  constructor({ status, operation, message, code, param }) {
    super(`${operation}: HTTP ${status}: ${message || 'error'}`);
    this.name = 'ShellgateApiError';
    this.status = status;
    this.operation = operation;
    this.code = code ?? null;
    this.param = param ?? null;
  }

  /** The server does not serve this route at all (an older shellgate). */
  get unknownRoute() {
    return this.status === 404 && this.code === 'unknown_url';
  }
}

/** `http://h:8080`, `http://h:8080/` and `http://h:8080/v1` all name the server. */
export function normalizeBaseUrl(baseUrl) {
  let root = String(baseUrl).trim().replace(/\/+$/, '');
  if (root.endsWith('/v1')) root = root.slice(0, -3);
  return root;
}

function errorFrom(status, text, operation) {
  let body = {};
  try {
    body = JSON.parse(text)?.error ?? {};
  } catch {
    body = { message: text.slice(0, 2000) };
  }
  return new ShellgateApiError({
    status,
    operation,
    message: typeof body.message === 'string' ? body.message : '',
    code: typeof body.code === 'string' ? body.code : null,
    param: typeof body.param === 'string' ? body.param : null,
  });
}

/** One server, one API key; `fetch` may be replaced (a test's fake server). */
class ShellgateHttp {
  constructor({ baseUrl, apiKey, fetch: fetchImpl }) {
    this.baseUrl = normalizeBaseUrl(baseUrl);
    this.apiKey = apiKey;
    this.fetch = fetchImpl ?? globalThis.fetch;
  }

  url(path, params) {
    const url = new URL(this.baseUrl + path);
    for (const [key, value] of params ?? []) url.searchParams.append(key, String(value));
    return url;
  }

  async request(method, path, { operation, params, json, body, contentType, signal } = {}) {
    const headers = { 'User-Agent': 'shellgate-agents-js/0.1.0' };
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
    let payload = body;
    if (json !== undefined) {
      headers['Content-Type'] = 'application/json';
      payload = JSON.stringify(json);
    } else if (contentType) {
      headers['Content-Type'] = contentType;
    }
    const response = await this.fetch(this.url(path, params), {
      method,
      headers,
      body: payload,
      signal,
      ...(payload instanceof ReadableStream ? { duplex: 'half' } : {}),
    });
    if (response.status >= 400) {
      throw errorFrom(response.status, await response.text(), operation);
    }
    return response;
  }

  async json(method, path, options) {
    const response = await this.request(method, path, options);
    return await response.json();
  }
}

/** The events of a `text/event-stream` body as they arrive. */
async function* serverSentEvents(response) {
  const decoder = new TextDecoder();
  let buffer = '';
  let event = '';
  let data = [];
  const reader = response.body.getReader();
  try {
    while (true) {
      const { value, done } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      let newline;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
        if (line === '') {
          if (data.length || event) yield { event: event || 'message', data: data.join('\n') };
          event = '';
          data = [];
        } else if (!line.startsWith(':')) {
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? '' : line.slice(colon + 1);
          if (value.startsWith(' ')) value = value.slice(1);
          if (field === 'event') event = value;
          else if (field === 'data') data.push(value);
        }
      }
      if (done) break;
    }
  } finally {
    reader.releaseLock();
  }
  if (data.length) yield { event: event || 'message', data: data.join('\n') };
}

function shellQuote(text) {
  return /^[A-Za-z0-9_\-+=/.,:@%]+$/.test(text) ? text : `'${text.replaceAll("'", `'"'"'`)}'`;
}

function exitCodeOf(process) {
  if (typeof process.exit_code === 'number') return process.exit_code;
  if (typeof process.outcome?.exit_code === 'number') return process.outcome.exit_code;
  return KILLED_EXIT_CODE;
}

function timedOut(process) {
  return process.status === 'timeout' || process.outcome?.type === 'timeout';
}

function concat(chunks) {
  const total = chunks.reduce((sum, chunk) => sum + chunk.byteLength, 0);
  const out = new Uint8Array(total);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.byteLength;
  }
  return out;
}

function toBytes(data) {
  if (typeof data === 'string') return new TextEncoder().encode(data);
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  throw new TypeError('expected a string, an ArrayBuffer or a Uint8Array');
}

function formatExecResponse({ output, wallTimeSeconds, exitCode, sessionId, originalTokenCount }) {
  const lines = [
    `Chunk ID: ${crypto.randomUUID().replaceAll('-', '').slice(0, 6)}`,
    `Wall time: ${wallTimeSeconds.toFixed(4)} seconds`,
  ];
  if (typeof sessionId === 'number') lines.push(`Process running with session ID ${sessionId}`);
  else if (typeof exitCode === 'number') lines.push(`Process exited with code ${exitCode}`);
  if (typeof originalTokenCount === 'number') lines.push(`Original token count: ${originalTokenCount}`);
  lines.push('Output:', output);
  return lines.join('\n');
}

/** The SDK's own rule (`maxOutputTokens` of about 4 bytes each), head and tail kept. */
function truncateOutput(text, maxOutputTokens) {
  if (maxOutputTokens == null) return { text };
  const bytes = new TextEncoder().encode(text);
  const budget = Math.max(0, maxOutputTokens) * APPROX_BYTES_PER_TOKEN;
  if (bytes.byteLength <= budget) return { text };
  const originalTokenCount = Math.ceil(bytes.byteLength / APPROX_BYTES_PER_TOKEN);
  const half = Math.floor(budget / 2);
  const decoder = new TextDecoder();
  const head = decoder.decode(bytes.slice(0, half));
  const tail = decoder.decode(bytes.slice(bytes.byteLength - (budget - half)));
  const dropped = Math.ceil((bytes.byteLength - budget) / APPROX_BYTES_PER_TOKEN);
  return { text: `${head}...${dropped} tokens truncated...${tail}`, originalTokenCount };
}

function workspaceManifest(manifest) {
  const given = manifest instanceof Manifest ? manifest : new Manifest(manifest ?? {});
  if (given.root !== SDK_DEFAULT_ROOT) return given;
  // The SDK's default root cannot exist in a shellgate container: its user may
  // write only /mnt/data and /tmp.
  return new Manifest({
    root: WORKSPACE_ROOT,
    entries: given.entries,
    environment: given.environment,
    users: given.users,
    groups: given.groups,
    extraPathGrants: given.extraPathGrants,
  });
}

/** Where the SDK keeps local snapshots when a spec names no directory (its own
 * rule on Linux: `OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR`, else the XDG state dir). */
function defaultSnapshotDir() {
  const configured = process.env.OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR?.trim();
  if (configured) return configured;
  const stateHome = process.env.XDG_STATE_HOME?.trim();
  const base = stateHome?.startsWith('/') ? stateHome : homedir() ? join(homedir(), '.local', 'state') : tmpdir();
  return join(base, 'openai-agents-js', 'sandbox-snapshots');
}

/** One shellgate container as a sandbox session. */
export class ShellgateSandboxSession {
  constructor({ state, apiKey, fetch: fetchImpl }) {
    this.state = state;
    this.api = new ShellgateHttp({ baseUrl: state.baseUrl, apiKey, fetch: fetchImpl });
    this.interactive = new Map();
  }

  containerPath(rest = '') {
    return `/v1/containers/${this.state.containerId}${rest}`;
  }

  /** An absolute container path for a workspace-relative (or absolute) one. */
  resolvePath(path = '.') {
    const root = this.state.manifest.root;
    const joined = path.startsWith('/') ? path : `${root}/${path}`;
    const parts = [];
    for (const part of joined.split('/')) {
      if (part === '' || part === '.') continue;
      if (part === '..') parts.pop();
      else parts.push(part);
    }
    const resolved = `/${parts.join('/')}`;
    const grants = (this.state.manifest.extraPathGrants ?? []).map((grant) => grant.path);
    const allowed = [root, ...grants].some(
      (prefix) => resolved === prefix || resolved.startsWith(`${prefix.replace(/\/$/, '')}/`),
    );
    if (!allowed) throw new Error(`path escapes the workspace: ${path}`);
    return resolved;
  }

  supportsPty() {
    return true;
  }

  async start() {
    if (this.state.workspaceReady) return;
    await this.applyManifest(this.state.manifest);
    this.state.workspaceReady = true;
  }

  /** Whether the container exists: a suspended one counts (shellgate wakes it). */
  async running() {
    try {
      const container = await this.api.json('GET', this.containerPath(), { operation: 'retrieve container' });
      return ['running', 'suspended', 'creating'].includes(container.status);
    } catch {
      return false;
    }
  }

  /** Whether the container is still there to reattach to: `false` only when the
   * server says it is gone (404); a server that cannot answer throws, so that a
   * resume does not replace a container that may well be alive. */
  async containerExists() {
    if (!this.state.containerId) return false;
    try {
      const container = await this.api.json('GET', this.containerPath(), { operation: 'retrieve container' });
      return ['running', 'suspended', 'creating'].includes(container.status);
    } catch (error) {
      if (error instanceof ShellgateApiError && error.status === 404) return false;
      throw error;
    }
  }

  // -- processes ------------------------------------------------------------------

  async startProcess(command, { tty, timeoutMs }) {
    const environment = this.state.environment ?? {};
    const body = {
      command,
      stdin: tty,
      timeout_ms: Math.max(1, Math.min(PROCESS_TIMEOUT_MS_MAX, Math.floor(timeoutMs))),
    };
    if (tty) body.pty = { cols: 80, rows: 24, term: 'xterm-256color' };
    if (Object.keys(environment).length) body.env = environment;
    return await this.api.json('POST', this.containerPath('/processes'), {
      operation: 'start process',
      json: body,
    });
  }

  async killProcess(processId) {
    try {
      await this.api.request('DELETE', this.containerPath(`/processes/${processId}`), {
        operation: 'kill process',
      });
    } catch (error) {
      if (!(error instanceof ShellgateApiError) || ![404, 409].includes(error.status)) throw error;
    }
  }

  /** Every byte a process writes, from its SSE stream until its exit (reattached
   * from the last offset when the stream breaks). */
  async readWholeOutput(processId) {
    const stdout = [];
    const stderr = [];
    let offset = 0;
    let stalls = 0;
    while (true) {
      const before = offset;
      try {
        const response = await this.api.request('GET', this.containerPath(`/processes/${processId}/output`), {
          operation: 'process output',
          params: [['stream', 'true'], ['after', offset]],
        });
        for await (const event of serverSentEvents(response)) {
          if (event.event === 'output') {
            const chunk = JSON.parse(event.data);
            const data = Buffer.from(chunk.data, 'base64');
            const skip = Math.max(0, offset - chunk.offset);
            const fresh = new Uint8Array(data.subarray(skip));
            (chunk.stream === 'stderr' ? stderr : stdout).push(fresh);
            offset = Math.max(offset, chunk.offset + data.byteLength);
          } else if (event.event === 'dropped') {
            throw new Error(`shellgate dropped ${JSON.parse(event.data).bytes} bytes of output`);
          } else if (event.event === 'exit') {
            return { stdout: concat(stdout), stderr: concat(stderr), process: JSON.parse(event.data) };
          }
        }
      } catch (error) {
        if (error instanceof ShellgateApiError || String(error.message).includes('dropped')) throw error;
      }
      stalls = offset === before ? stalls + 1 : 0;
      if (stalls > 5) throw new Error('shellgate: the output stream ended without the process exit');
    }
  }

  /** A one-shot command, buffered whole (what the SDK's helpers use). */
  async run(argv, { timeoutMs = EXEC_DEFAULT_TIMEOUT_MS } = {}) {
    const process = await this.startProcess(`exec ${argv.map(shellQuote).join(' ')}`, {
      tty: false,
      timeoutMs,
    });
    try {
      const result = await this.readWholeOutput(process.id);
      if (timedOut(result.process)) throw new Error(`command timed out after ${timeoutMs} ms`);
      return { stdout: result.stdout, stderr: result.stderr, exitCode: exitCodeOf(result.process) };
    } catch (error) {
      await this.killProcess(process.id).catch(() => {});
      throw error;
    }
  }

  commandFor(args) {
    const workdir = args.workdir ? this.resolvePath(args.workdir) : this.state.manifest.root;
    const shell = args.shell ?? 'sh';
    const flag = args.login ?? true ? '-lc' : '-c';
    const script = `cd ${shellQuote(workdir)} || exit\n${args.cmd}`;
    return `exec ${shellQuote(shell)} ${flag} ${shellQuote(script)}`;
  }

  async exec(args) {
    if (args.runAs) throw new Error('shellgate sessions run commands as the container user only');
    const started = Date.now();
    const tty = args.tty ?? false;
    // At the SDK's cap, the least recently used ends before a new one starts: the
    // server keeps as many live processes per container (64) and refuses one more.
    await this.pruneIfFull();
    const process = await this.startProcess(this.commandFor(args), { tty, timeoutMs: PROCESS_TIMEOUT_MS_MAX });
    const entry = { processId: process.id, tty, offset: 0, ended: false, exitCode: null, lastUsed: Date.now() };
    const collected = await this.collect(entry, args.yieldTimeMs ?? DEFAULT_EXEC_YIELD_TIME_MS);
    const output = truncateOutput(collected.text, args.maxOutputTokens);
    const result = {
      output: output.text,
      stdout: collected.stdout,
      stderr: collected.stderr,
      wallTimeSeconds: (Date.now() - started) / 1000,
      originalTokenCount: output.originalTokenCount,
    };
    if (entry.ended) return { ...result, exitCode: entry.exitCode };
    return { ...result, sessionId: this.register(entry) };
  }

  async execCommand(args) {
    return formatExecResponse(await this.exec(args));
  }

  async pruneIfFull() {
    if (this.interactive.size < PTY_PROCESSES_MAX) return;
    const [oldestId, oldest] = [...this.interactive.entries()].sort((a, b) => a[1].lastUsed - b[1].lastUsed)[0];
    this.interactive.delete(oldestId);
    await this.killProcess(oldest.processId).catch(() => {});
  }

  register(entry) {
    let id;
    do id = 1000 + Math.floor(Math.random() * 99_000);
    while (this.interactive.has(id));
    this.interactive.set(id, entry);
    return id;
  }

  async writeStdin(args) {
    const started = Date.now();
    const entry = this.interactive.get(args.sessionId);
    if (!entry) {
      return formatExecResponse({
        output: `write_stdin failed: session not found: ${args.sessionId}`,
        wallTimeSeconds: 0,
        exitCode: 1,
      });
    }
    const chars = args.chars ?? '';
    if (chars) {
      if (!entry.tty) {
        return formatExecResponse({
          output: 'stdin is not available for this process. Start the command with `tty=true` in `exec_command` before using `write_stdin`.',
          wallTimeSeconds: 0,
          exitCode: 1,
        });
      }
      try {
        await this.api.request('POST', this.containerPath(`/processes/${entry.processId}/stdin`), {
          operation: 'write stdin',
          body: new TextEncoder().encode(chars),
          contentType: 'application/octet-stream',
        });
      } catch (error) {
        // It exited meanwhile: the output below says so.
        if (!(error instanceof ShellgateApiError) || error.status !== 409) throw error;
      }
    }
    const yieldMs = Math.max(chars ? 250 : 5000, args.yieldTimeMs ?? DEFAULT_WRITE_STDIN_YIELD_TIME_MS);
    const collected = await this.collect(entry, yieldMs);
    entry.lastUsed = Date.now();
    const output = truncateOutput(collected.text, args.maxOutputTokens);
    if (entry.ended) this.interactive.delete(args.sessionId);
    return formatExecResponse({
      output: output.text,
      wallTimeSeconds: (Date.now() - started) / 1000,
      originalTokenCount: output.originalTokenCount,
      ...(entry.ended ? { exitCode: entry.exitCode } : { sessionId: args.sessionId }),
    });
  }

  /** Output long-polled until the process ends or the yield time passes. */
  async collect(entry, yieldTimeMs) {
    const deadline = Date.now() + Math.max(250, Math.min(30_000, yieldTimeMs));
    const stdout = [];
    const stderr = [];
    const all = [];
    while (!entry.ended) {
      const waitMs = Math.max(0, Math.min(OUTPUT_WAIT_MS_MAX, deadline - Date.now()));
      const output = await this.api.json('GET', this.containerPath(`/processes/${entry.processId}/output`), {
        operation: 'process output',
        params: [['after', entry.offset], ['wait_ms', waitMs]],
      });
      for (const chunk of output.chunks ?? []) {
        const data = Buffer.from(chunk.data, 'base64');
        const fresh = new Uint8Array(data.subarray(Math.max(0, entry.offset - chunk.offset)));
        (chunk.stream === 'stderr' ? stderr : stdout).push(fresh);
        all.push(fresh);
        entry.offset = Math.max(entry.offset, chunk.offset + data.byteLength);
      }
      entry.offset = Math.max(entry.offset, output.next_offset ?? 0);
      if (output.dropped_bytes) all.unshift(new TextEncoder().encode(`[${output.dropped_bytes} bytes of output dropped]\n`));
      if (output.process.status !== 'running' && entry.offset >= (output.process.output_bytes ?? 0)) {
        entry.ended = true;
        entry.exitCode = exitCodeOf(output.process);
      }
      if (Date.now() >= deadline) break;
    }
    const decoder = new TextDecoder();
    return {
      text: decoder.decode(concat(all)),
      stdout: decoder.decode(concat(stdout)),
      stderr: decoder.decode(concat(stderr)),
    };
  }

  // -- files ----------------------------------------------------------------------

  async readFile(args) {
    const path = this.resolvePath(args.path);
    const response = await this.api.request('GET', this.containerPath('/fs/content'), {
      operation: 'read file',
      params: [['path', path]],
    });
    const bytes = new Uint8Array(await response.arrayBuffer());
    return typeof args.maxBytes === 'number' ? bytes.subarray(0, args.maxBytes) : bytes;
  }

  async writeFile(path, content) {
    await this.api.request('PUT', this.containerPath('/fs/content'), {
      operation: 'write file',
      params: [['path', this.resolvePath(path)], ['parents', 'true']],
      body: toBytes(content),
      contentType: 'application/octet-stream',
    });
  }

  async stat(path) {
    try {
      return await this.api.json('GET', this.containerPath('/fs/stat'), {
        operation: 'stat',
        params: [['path', this.resolvePath(path)]],
      });
    } catch (error) {
      if (error instanceof ShellgateApiError && error.status === 404) return null;
      throw error;
    }
  }

  async pathExists(path) {
    return (await this.stat(path)) !== null;
  }

  async directoryExists(path) {
    return (await this.stat(path))?.type === 'directory';
  }

  async listDir(args) {
    const path = this.resolvePath(args.path);
    const listing = await this.api.json('GET', this.containerPath('/fs/list'), {
      operation: 'list directory',
      params: [['path', path], ['depth', 1]],
    });
    return listing.data.map((entry) => ({
      name: entry.name,
      path: `${args.path.replace(/\/$/, '')}/${entry.name}`.replace(/^\.\//, ''),
      type: entry.type === 'directory' ? 'dir' : entry.type === 'file' ? 'file' : 'other',
    }));
  }

  async mkdir(path) {
    await this.api.request('POST', this.containerPath('/fs/mkdir'), {
      operation: 'make directory',
      json: { path: this.resolvePath(path), parents: true },
    });
  }

  async remove(path) {
    await this.api.request('DELETE', this.containerPath('/fs'), {
      operation: 'remove',
      params: [['path', this.resolvePath(path)], ['recursive', 'false']],
    });
  }

  createEditor() {
    const session = this;
    const read = async (path) => new TextDecoder().decode(await session.readFile({ path }));
    return {
      async createFile(operation) {
        await session.writeFile(operation.path, applyDiff('', operation.diff, 'create'));
        return { status: 'completed', output: `Created ${operation.path}` };
      },
      async updateFile(operation) {
        const updated = applyDiff(await read(operation.path), operation.diff);
        const target = operation.moveTo ?? operation.path;
        await session.writeFile(target, updated);
        if (operation.moveTo && operation.moveTo !== operation.path) await session.remove(operation.path);
        return { status: 'completed', output: `Updated ${target}` };
      },
      async deleteFile(operation) {
        await session.remove(operation.path);
        return { status: 'completed', output: `Deleted ${operation.path}` };
      },
    };
  }

  async materializeEntry({ path, entry }) {
    await this.materialize(path, entry);
  }

  async materialize(path, entry) {
    if (entry.type === 'dir') {
      await this.mkdir(path);
      for (const [name, child] of Object.entries(entry.children ?? {})) {
        await this.materialize(`${path}/${name}`, child);
      }
    } else if (entry.type === 'file') {
      await this.writeFile(path, entry.content);
    } else {
      throw new Error(`shellgate sessions cannot materialize ${entry.type} entries yet`);
    }
  }

  async applyManifest(manifest) {
    for (const [path, entry] of Object.entries(manifest.entries ?? {})) {
      await this.materialize(path, entry);
    }
    this.state.environment = { ...(this.state.environment ?? {}), ...(await manifest.resolveEnvironment()) };
  }

  // -- the workspace as a tar stream ------------------------------------------------

  async persistWorkspace() {
    const params = [['path', this.state.manifest.root]];
    for (const excluded of this.state.manifest.ephemeralPersistencePaths?.() ?? []) {
      params.push(['exclude', excluded]);
    }
    const response = await this.api.request('GET', this.containerPath('/fs/archive'), {
      operation: 'export workspace',
      params,
    });
    return new Uint8Array(await response.arrayBuffer());
  }

  async hydrateWorkspace(data) {
    await this.api.request('POST', this.containerPath('/fs/archive'), {
      operation: 'import workspace',
      params: [['path', this.state.manifest.root]],
      body: toBytes(data),
      contentType: 'application/x-tar',
    });
  }

  // -- ports ----------------------------------------------------------------------

  async resolveExposedPort(port) {
    const configured = this.state.configuredExposedPorts ?? [];
    if (!configured.includes(port)) throw new Error(`port ${port} is not configured for host exposure`);
    const container = await this.api.json('GET', this.containerPath(), { operation: 'retrieve container' });
    const exposed = (container.exposed_ports ?? []).find((item) => item.port === port);
    if (!exposed || !container.port_token) throw new Error(`port ${port} could not be resolved for host exposure`);
    const url = new URL(exposed.url);
    const tls = url.protocol === 'https:';
    const endpoint = {
      host: url.hostname,
      port: url.port ? Number(url.port) : tls ? 443 : 80,
      tls,
      query: new URLSearchParams({ shellgate_port_token: container.port_token }).toString(),
    };
    this.state.exposedPorts = { ...(this.state.exposedPorts ?? {}), [String(port)]: endpoint };
    return endpoint;
  }

  // -- lifecycle ------------------------------------------------------------------

  async terminateInteractive() {
    const entries = [...this.interactive.values()];
    this.interactive.clear();
    await Promise.all(entries.filter((e) => !e.ended).map((e) => this.killProcess(e.processId).catch(() => {})));
  }

  async stop() {
    await this.terminateInteractive();
  }

  async shutdown() {
    await this.terminateInteractive();
  }

  async close() {
    await this.terminateInteractive();
  }

  /** Deletes the container (and its files); one already gone is not an error. */
  async delete() {
    await this.terminateInteractive();
    try {
      await this.api.request('DELETE', this.containerPath(), { operation: 'delete container' });
    } catch (error) {
      if (!(error instanceof ShellgateApiError) || error.status !== 404) throw error;
    }
  }
}

/** What a workspace saved as a native snapshot is: these bytes, then the snapshot's
 * id as JSON (a tar archive never starts with them; the Python provider's form). */
const SNAPSHOT_REF_MAGIC = new TextEncoder().encode('SHELLGATE_CONTAINER_SNAPSHOT_V1\n');

/** The snapshot id that saved workspace bytes name, or `null` for a tar archive. */
export function snapshotIdIn(data) {
  const bytes = toBytes(data);
  if (bytes.length < SNAPSHOT_REF_MAGIC.length) return null;
  for (let i = 0; i < SNAPSHOT_REF_MAGIC.length; i += 1) {
    if (bytes[i] !== SNAPSHOT_REF_MAGIC[i]) return null;
  }
  try {
    const reference = JSON.parse(new TextDecoder().decode(bytes.subarray(SNAPSHOT_REF_MAGIC.length)));
    return typeof reference?.snapshot_id === 'string' && reference.snapshot_id ? reference.snapshot_id : null;
  } catch {
    return null;
  }
}

/**
 * Makes, reattaches and deletes shellgate containers. Options (constructor defaults,
 * overridden by a run's `options`): `baseUrl` (`SHELLGATE_BASE_URL`, else
 * `http://127.0.0.1:8080`), `apiKey` (`SHELLGATE_API_KEY`; never serialized), `image`,
 * `memoryLimit`, `networkPolicy` (allowed domains), `exposedPorts`,
 * `expiresAfterMinutes`, `name`, `fetch` (a replacement `fetch`),
 * `workspacePersistence`: how a snapshot spec saves the workspace: `'tar'` (the
 * default) stores a tar archive of it; `'snapshot'` takes a shellgate snapshot of
 * the container (all its files, kept on the server: `/v1/snapshots`) and stores only
 * its id, and a resume whose container is gone makes the new one from it. The server
 * keeps those snapshots until they are deleted (`DELETE /v1/snapshots/{id}`), within
 * the project's snapshot quota. A server that keeps no snapshots (a cluster: 501) and
 * a manifest with paths left out of persistence fall back to the tar archive.
 */
export class ShellgateSandboxClient {
  backendId = BACKEND_ID;
  supportsDefaultOptions = true;

  constructor(options = {}) {
    this.options = options;
  }

  resolved(options = {}) {
    const merged = { ...this.options, ...options };
    return {
      ...merged,
      baseUrl: merged.baseUrl ?? process.env.SHELLGATE_BASE_URL ?? DEFAULT_BASE_URL,
      apiKey: merged.apiKey ?? process.env.SHELLGATE_API_KEY,
    };
  }

  async createContainer(settings, { baseUrl, apiKey, fetch: fetchImpl }) {
    const body = { name: settings.name ?? `agents-${crypto.randomUUID().slice(0, 12)}` };
    if (settings.image) body.image = settings.image;
    if (settings.memoryLimit) body.memory_limit = settings.memoryLimit;
    if (settings.networkPolicy) body.network_policy = { type: 'allowlist', allowed_domains: [...settings.networkPolicy] };
    if (settings.expiresAfterMinutes) body.expires_after = { anchor: 'last_active_at', minutes: settings.expiresAfterMinutes };
    if (settings.exposedPorts?.length) body.exposed_ports = [...settings.exposedPorts];
    if (settings.snapshotId) body.snapshot_id = settings.snapshotId;
    const api = new ShellgateHttp({ baseUrl, apiKey, fetch: fetchImpl });
    return await api.json('POST', '/v1/containers', { operation: 'create container', json: body });
  }

  async create(args = {}, manifestOptions) {
    const isManifest = args instanceof Manifest;
    const options = this.resolved(isManifest ? manifestOptions : args.options);
    const manifest = workspaceManifest(isManifest ? args : args.manifest);
    const settings = {
      image: options.image,
      memoryLimit: options.memoryLimit,
      networkPolicy: options.networkPolicy,
      expiresAfterMinutes: options.expiresAfterMinutes,
      exposedPorts: options.exposedPorts ?? [],
      name: options.name,
      workspacePersistence: options.workspacePersistence ?? 'tar',
    };
    if (!['tar', 'snapshot'].includes(settings.workspacePersistence)) {
      throw new Error(`workspacePersistence must be 'tar' or 'snapshot', not ${JSON.stringify(settings.workspacePersistence)}`);
    }
    const container = await this.createContainer(settings, options);
    const session = new ShellgateSandboxSession({
      state: {
        snapshotSpec: (isManifest ? undefined : args.snapshot) ?? options.snapshot ?? null,
        snapshot: null,
        manifest,
        baseUrl: normalizeBaseUrl(options.baseUrl),
        containerId: container.id,
        settings,
        configuredExposedPorts: settings.exposedPorts,
        environment: await manifest.resolveEnvironment(),
        workspaceReady: false,
      },
      apiKey: options.apiKey,
      fetch: options.fetch,
    });
    await session.start();
    return session;
  }

  /** Reattaches to the container (running or suspended); a deleted one is
   * replaced by a new container with the same settings and the manifest again. */
  async resume(state, resumeOptions = {}) {
    const options = this.resolved(resumeOptions.clientOptions);
    const session = new ShellgateSandboxSession({ state, apiKey: options.apiKey, fetch: options.fetch });
    if (await session.containerExists()) return session;
    const archive = await this.loadSnapshot(state, options);
    const snapshotId = archive ? snapshotIdIn(archive) : null;
    const container = await this.createContainer(
      { ...(state.settings ?? {}), snapshotId },
      { ...options, baseUrl: state.baseUrl },
    );
    state.containerId = container.id;
    state.workspaceReady = false;
    if (snapshotId) {
      // The container was made from the snapshot: every file as it was.
      state.workspaceReady = true;
    } else if (archive) {
      // The snapshot holds the workspace as it was, manifest files included.
      await session.hydrateWorkspace(archive);
      state.workspaceReady = true;
    } else {
      await session.start();
    }
    return session;
  }

  /** The workspace, saved where the snapshot spec says (`{type: 'local', baseDir}`
   * or `{type: 'remote', store}`), for a resume whose container is gone. */
  async saveSnapshot(state, options) {
    const spec = state.snapshotSpec ?? options.snapshot;
    if (!spec || spec.type === 'noop') return null;
    const session = new ShellgateSandboxSession({ state, apiKey: options.apiKey, fetch: options.fetch });
    const data = (await this.nativeSnapshot(session, state)) ?? (await session.persistWorkspace());
    const id = state.snapshot?.id ?? crypto.randomUUID();
    if (spec.type === 'local') {
      const baseDir = spec.baseDir ?? defaultSnapshotDir();
      await mkdir(baseDir, { recursive: true });
      const path = join(baseDir, `${id}.tar`);
      await writeFile(`${path}.tmp`, data);
      await rename(`${path}.tmp`, path);
      return { type: 'local', id, path };
    }
    if (spec.type === 'remote' && spec.store) {
      const saved = await spec.store.save({ id, data });
      return { type: 'remote', id: saved.id };
    }
    throw new Error(`shellgate sessions cannot save a ${spec.type} snapshot`);
  }

  /** With `workspacePersistence: 'snapshot'`, a shellgate snapshot of the container
   * as the reference bytes a snapshot spec stores; `null` where a tar archive is
   * what to store (a tar session, paths left out of persistence, or a server that
   * keeps no snapshots). */
  async nativeSnapshot(session, state) {
    if ((state.settings?.workspacePersistence ?? 'tar') !== 'snapshot') return null;
    if ([...(state.manifest.ephemeralPersistencePaths?.() ?? [])].length) return null;
    let snapshot;
    try {
      snapshot = await session.api.json('POST', session.containerPath('/snapshots'), {
        operation: 'snapshot container',
        json: { name: `agents-${String(state.containerId).slice(-12)}` },
      });
    } catch (error) {
      if (error instanceof ShellgateApiError && error.status === 501) return null;
      throw error;
    }
    const reference = new TextEncoder().encode(JSON.stringify({ snapshot_id: snapshot.id }));
    const data = new Uint8Array(SNAPSHOT_REF_MAGIC.length + reference.length);
    data.set(SNAPSHOT_REF_MAGIC, 0);
    data.set(reference, SNAPSHOT_REF_MAGIC.length);
    return data;
  }

  async loadSnapshot(state, options) {
    const snapshot = state.snapshot;
    if (!snapshot) return null;
    if (snapshot.type === 'local') return new Uint8Array(await readFile(snapshot.path));
    const spec = state.snapshotSpec ?? options.snapshot;
    if (snapshot.type === 'remote' && spec?.store) return (await spec.store.load({ id: snapshot.id })).data;
    return null;
  }

  async delete(state) {
    const options = this.resolved();
    await new ShellgateSandboxSession({ state, apiKey: options.apiKey, fetch: options.fetch }).delete();
  }

  async serializeSessionState(state) {
    if (state.snapshotSpec ?? this.options.snapshot) {
      state.snapshot = await this.saveSnapshot(state, this.resolved());
    }
    return {
      snapshot: state.snapshot ?? null,
      snapshotSpec: state.snapshotSpec?.type === 'local' ? state.snapshotSpec : null,
      manifest: {
        root: state.manifest.root,
        entries: state.manifest.entries,
        environment: state.environment ?? {},
      },
      baseUrl: state.baseUrl,
      containerId: state.containerId,
      settings: state.settings ?? {},
      configuredExposedPorts: state.configuredExposedPorts ?? [],
      workspaceReady: Boolean(state.workspaceReady),
    };
  }

  async deserializeSessionState(payload) {
    const manifest = new Manifest({ root: payload.manifest.root, entries: payload.manifest.entries });
    return {
      snapshot: payload.snapshot ?? null,
      snapshotSpec: payload.snapshotSpec ?? this.options.snapshot ?? null,
      manifest,
      baseUrl: payload.baseUrl,
      containerId: payload.containerId,
      settings: payload.settings ?? {},
      configuredExposedPorts: payload.configuredExposedPorts ?? [],
      environment: payload.manifest.environment ?? {},
      workspaceReady: Boolean(payload.workspaceReady),
    };
  }
}
