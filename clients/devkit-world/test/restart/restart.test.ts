// A crash test: the worlds server is killed with SIGKILL in the middle of the DevKit suite's
// addition workload, started again on the same port and data, and every run must still
// complete with the right output, with no message dead-lettered.
//
// `scripts/devkit-suite restart [hybrid|postgres]` (at the repository root) builds the package
// and runs this file. It reads:
//
//   WORLDS_BIN                    the worlds binary (an absolute path)
//   WORLDS_RESTART_DIR            an empty directory: the world's data goes in its `world/`
//                                 (hybrid storage), the processes' output in `*.log`
//   WORLDS_RESTART_PERSISTENCE    `hybrid` (the default) or `postgres`
//   WORLDS_RESTART_DATABASE_ARGS  with `postgres`: the arguments that name the database, split
//                                 on spaces, e.g. `--database-url postgres://... --schema s1`
//   WORLDS_RESTART_WAIT_SECONDS   how long the runs may take after the restart (default 60)
//
// The app is the DevKit's own test server (`@workflow/world-testing`'s `server.mjs`), started
// the way the suite starts it, with this package's build as its World. It stays up for the
// whole test: while the worlds server is down, its handlers fail and answer 500 (or the server
// cannot be reached at all), and the restarted server delivers those messages again.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, type WriteStream } from 'node:fs';
import { createRequire } from 'node:module';
import { type AddressInfo, createServer } from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { hydrateWorkflowReturnValue } from '@workflow/core/serialization';
import { afterAll, expect, test } from 'vitest';

const BEFORE_KILL = 20;
const AFTER_RESTART = 10;
/** Run i adds (i, ADDEND): its output is known. */
const ADDEND = 1000;
const DELIVERY_WORKFLOW = 'worlds.devkit.deliver';

const world = fileURLToPath(new URL('../../dist/index.js', import.meta.url));
const packageDir = fileURLToPath(new URL('../..', import.meta.url));
const bin = process.env.WORLDS_BIN;
const dir = process.env.WORLDS_RESTART_DIR;
const persistence = process.env.WORLDS_RESTART_PERSISTENCE?.trim() || 'hybrid';
const databaseArgs = (process.env.WORLDS_RESTART_DATABASE_ARGS ?? '').split(/\s+/).filter(Boolean);
const waitSeconds = Number(process.env.WORLDS_RESTART_WAIT_SECONDS || 60);

const missing = (['WORLDS_BIN', 'WORLDS_RESTART_DIR'] as const).filter((name) => !process.env[name]);

/** Every process this file started, stopped in afterAll: the app first, so that the
 * server's deliveries in flight fail at once and it stops quickly. */
const processes = new Map<ChildProcess, 'app' | 'server'>();
const logs = new Set<WriteStream>();

afterAll(async () => {
  const running = [...processes];
  await Promise.all(running.filter(([, kind]) => kind === 'app').map(([proc]) => stop(proc)));
  await Promise.all(running.filter(([, kind]) => kind === 'server').map(([proc]) => stop(proc)));
  await Promise.all(
    [...logs].map((log) => new Promise<void>((resolve) => log.end(() => resolve())))
  );
}, 30_000);

if (missing.length > 0) {
  test.skip(`the crash test needs a worlds binary and a directory (${missing.join(', ')} not set): run scripts/devkit-suite restart`, () => {});
} else if (persistence !== 'hybrid' && persistence !== 'postgres') {
  throw new Error(`WORLDS_RESTART_PERSISTENCE=${persistence}: expected hybrid or postgres`);
} else if (persistence === 'postgres' && databaseArgs.length === 0) {
  throw new Error(
    'WORLDS_RESTART_PERSISTENCE=postgres needs WORLDS_RESTART_DATABASE_ARGS (e.g. "--database-url postgres://... --schema devkit_restart")'
  );
} else if (!existsSync(world)) {
  throw new Error(`${world} does not exist: run \`npm run build\` first`);
} else {
  test(
    `a SIGKILL of the worlds server mid-workload loses no run and no message (${persistence})`,
    { timeout: (waitSeconds + 120) * 1000 },
    () => crashTest(bin as string, dir as string)
  );
}

async function crashTest(bin: string, dir: string): Promise<void> {
  const t0 = Date.now();
  const elapsed = () => `${((Date.now() - t0) / 1000).toFixed(1)} s`;
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const secret = `whsec_${randomBytes(32).toString('base64')}`;

  // (1) The worlds server, on a fresh world: it creates an admin key and prints it.
  const first = await startWorlds(bin, dir, port, secret, 'server-1');
  if (!first.key) {
    throw new Error(`the first start printed no admin key (is ${dir} really fresh?); see ${first.log}`);
  }
  const key = first.key;
  const worldsUrl = `http://127.0.0.1:${port}`;
  console.log(`[restart] worlds serve (${persistence}) on ${worldsUrl} after ${elapsed()}`);

  // (2) The DevKit's test app, for the whole test.
  const app = await startApp(dir, {
    WORLDS_URL: worldsUrl,
    WORLDS_API_KEY: key,
    WORLDS_DELIVERY_SECRET: secret,
  });
  const appUrl = `http://localhost:${app.port}`;
  console.log(`[restart] app on ${appUrl} after ${elapsed()}`);

  // (3) Runs, then the kill while they are in flight.
  const expected = new Map<string, number>();
  const invoke = async (i: number) => {
    const runId = await invokeAddition(appUrl, i, ADDEND);
    expected.set(runId, i + ADDEND);
    return runId;
  };
  const before = await Promise.all(
    Array.from({ length: BEFORE_KILL }, (_, i) => invoke(i + 1))
  );
  // The kill comes as soon as one run is seen completed: a few are done, most are not, and
  // deliveries are in the middle of the app's handlers.
  const firstDone = await firstCompleted(appUrl, before, 20_000);
  const killedAt = Date.now();
  first.proc.kill('SIGKILL');
  await exited(first.proc);
  console.log(
    `[restart] ${BEFORE_KILL} runs started, worlds serve killed (SIGKILL) after ${elapsed()}` +
      (firstDone ? `, once ${firstDone} completed` : ', before any run was seen completed')
  );
  await sleep(1000);

  // (4) The same server again: same port, same data, same secret; the key is kept.
  const second = await startWorlds(bin, dir, port, secret, 'server-2');
  expect(second.key, 'the second start created a new key: the first one was lost').toBeUndefined();
  console.log(`[restart] worlds serve started again after ${elapsed()}`);
  const after = await Promise.all(
    Array.from({ length: AFTER_RESTART }, (_, i) => invoke(BEFORE_KILL + i + 1))
  );
  console.log(`[restart] ${AFTER_RESTART} more runs started after ${elapsed()}`);
  const all = [...before, ...after];

  // (5) Every run completes with its sum, read through the app (the World's runs.get).
  const seen = await waitForRuns(appUrl, all, expected, waitSeconds * 1000);
  const wrong = all.filter((id) => !isRight(seen.get(id), expected.get(id)));
  console.log(
    `[restart] ${all.length - wrong.length}/${all.length} runs completed right after ${elapsed()}`
  );

  // What the server says about the runs started before the kill: how many were finished.
  const api = worldsApi(worldsUrl, key);
  const unfinishedAtKill: string[] = [];
  for (const id of before) {
    const run = await api.get<ServerRun>(`/v1/runs/${encodeURIComponent(id)}`).catch(() => undefined);
    if (!run?.completed_at || run.completed_at > killedAt) unfinishedAtKill.push(id);
  }
  console.log(
    `[restart] at the kill, ${BEFORE_KILL - unfinishedAtKill.length}/${BEFORE_KILL} of the first runs had finished`
  );

  // (6) No message lost: every delivery run finished, none failed (a dead letter).
  const deliveries = await settledDeliveries(api, 30_000);
  const byStatus = new Map<string, number>();
  for (const run of deliveries) byStatus.set(run.status, (byStatus.get(run.status) ?? 0) + 1);
  const crossed = deliveries.filter(
    (run) => run.created_at < killedAt && (!run.completed_at || run.completed_at > killedAt)
  );
  console.log(
    `[restart] delivery runs (${DELIVERY_WORKFLOW}) by status: ${[...byStatus].map(([s, n]) => `${s} ${n}`).join(', ')}; ` +
      `${crossed.length} were queued before the kill and finished after it`
  );
  const failed = await api.list('/v1/runs', `workflow=${DELIVERY_WORKFLOW}&status=failed&resolve=all`);
  const unfinished = deliveries.filter((run) => !isTerminal(run.status));

  const problems: string[] = [];
  if (wrong.length > 0) {
    const lines: string[] = [];
    for (const id of wrong) {
      const sum = expected.get(id) ?? 0;
      lines.push(
        `  ${id} add(${sum - ADDEND}, ${ADDEND}): through the app ${summarize(seen.get(id))}; on the server ${await serverView(api, id)}`
      );
    }
    problems.push(
      `${wrong.length} of ${all.length} runs did not complete with the right output within ${waitSeconds} s of the restart:\n${lines.join('\n')}`
    );
  }
  if (failed.length > 0 || unfinished.length > 0) {
    const lines = [
      ...failed.map((run) => `  ${run.id} failed: ${deliveryText(run)}`),
      ...unfinished.map((run) => `  ${run.id} ${run.status}`),
    ];
    problems.push(
      `${failed.length} delivery run(s) failed (dead letters) and ${unfinished.length} did not finish:\n${lines.join('\n')}`
    );
  }
  if (problems.length > 0) {
    throw new Error(
      `${problems.join('\n')}\nserver output: ${first.log}, ${second.log}; app output: ${app.log}`
    );
  }
  expect(
    unfinishedAtKill.length,
    'every run had finished before the kill, so the crash tested nothing: start more runs or kill sooner'
  ).toBeGreaterThan(0);
  console.log(`[restart] done after ${elapsed()}`);
}

/** A run as the worlds server has it: its status and its last event. */
async function serverView(api: ReturnType<typeof worldsApi>, id: string): Promise<string> {
  try {
    const run = await api.get<ServerRun>(`/v1/runs/${encodeURIComponent(id)}`);
    const events = await api.list<{ seq: number; type: string }>(
      `/v1/runs/${encodeURIComponent(id)}/events`,
      'resolve=none'
    );
    const last = events[events.length - 1];
    return `status ${run.status}, ${events.length} events, the last ${last ? `#${last.seq} ${last.type}` : 'none'}`;
  } catch (error) {
    return `unreadable (${(error as Error).message})`;
  }
}

/** What a failed delivery was and why it failed. */
function deliveryText(run: ServerRun): string {
  const input = run.input as { queueName?: string; message?: { runId?: string; workflowRunId?: string } } | undefined;
  const target = input?.message?.runId ?? input?.message?.workflowRunId;
  const what = input?.queueName ? `${input.queueName}${target ? ` for ${target}` : ''}: ` : '';
  const error = run.error as { message?: string } | undefined;
  return `${what}${(error?.message ?? JSON.stringify(run.error) ?? '').slice(0, 400)}`;
}

function isTerminal(status: string): boolean {
  return ['completed', 'failed', 'cancelled', 'compensated'].includes(status);
}

// ---- the worlds server ----

interface Worlds {
  proc: ChildProcess;
  /** The admin key, when this start created one. */
  key?: string;
  log: string;
}

async function startWorlds(
  bin: string,
  dir: string,
  port: number,
  secret: string,
  label: string
): Promise<Worlds> {
  const args = [
    'serve',
    '--addr',
    `127.0.0.1:${port}`,
    '--persistence',
    persistence,
    '--devkit-callback-origin',
    'loopback',
  ];
  const env: NodeJS.ProcessEnv = { ...process.env, WORLDS_DELIVERY_SECRET: secret };
  delete env.WORLDS_ENGINE_DIR;
  if (persistence === 'postgres') {
    args.push(...databaseArgs);
  } else {
    args.push('--dir', path.join(dir, 'world'));
    delete env.WORLDS_ENGINE_DATABASE_URL;
  }
  const log = path.join(dir, `${label}.log`);
  const out = openLog(log);
  out.write(`$ ${bin} ${args.join(' ')}\n`);
  const proc = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  processes.set(proc, 'server');
  proc.once('exit', () => processes.delete(proc));
  proc.stderr?.on('data', (chunk: Buffer) => out.write(chunk));

  return new Promise<Worlds>((resolve, reject) => {
    let key: string | undefined;
    let keyNext = false;
    let done = false;
    const timer = setTimeout(
      () => fail(new Error(`worlds serve did not say it serves within 60 s; see ${log}`)),
      60_000
    );
    const fail = (error: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(error);
    };
    proc.once('error', (error) => fail(new Error(`could not start ${bin}: ${error.message}`)));
    proc.once('exit', (code, signal) =>
      fail(new Error(`worlds serve exited (${signal ?? code}) before it served; see ${log}`))
    );
    lines(proc.stdout, (line) => {
      out.write(`${line}\n`);
      if (done) return;
      if (keyNext) {
        key = line.trim();
        keyNext = false;
      } else if (line.startsWith('no API key was set up: created admin key')) {
        keyNext = true;
      } else if (line.startsWith('serving the API')) {
        done = true;
        clearTimeout(timer);
        resolve({ proc, key, log });
      }
    });
  });
}

interface ServerRun {
  id: string;
  name: string;
  status: string;
  created_at: number;
  completed_at?: number;
  input?: unknown;
  error?: unknown;
}

function worldsApi(url: string, key: string) {
  const get = async <T>(pathAndQuery: string): Promise<T> => {
    const response = await fetch(`${url}${pathAndQuery}`, {
      headers: { authorization: `Bearer ${key}`, accept: 'application/json' },
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`GET ${pathAndQuery}: ${response.status} ${text.slice(0, 500)}`);
    return JSON.parse(text) as T;
  };
  return {
    get,
    /** Every item of a paginated `GET` (`path?query`), over all pages. */
    async list<T = ServerRun>(path: string, query = ''): Promise<T[]> {
      const items: T[] = [];
      let cursor: string | null = null;
      do {
        const params = new URLSearchParams(query);
        params.set('limit', '1000');
        if (cursor) params.set('cursor', cursor);
        const page: { data: T[]; cursor: string | null; has_more: boolean } = await get(
          `${path}?${params}`
        );
        items.push(...page.data);
        cursor = page.has_more ? page.cursor : null;
      } while (cursor);
      return items;
    },
  };
}

/** The delivery runs, once none is pending or running any more (or after `timeoutMs`). */
async function settledDeliveries(
  api: ReturnType<typeof worldsApi>,
  timeoutMs: number
): Promise<ServerRun[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const runs = await api.list('/v1/runs', `workflow=${DELIVERY_WORKFLOW}`);
    const busy = runs.some((run) => run.status === 'pending' || run.status === 'running');
    if (!busy || Date.now() > deadline) return runs;
    await sleep(250);
  }
}

// ---- the DevKit app ----

interface App {
  proc: ChildProcess;
  port: number;
  log: string;
}

/** Starts `@workflow/world-testing`'s server as its `startServer` does, with this World. */
async function startApp(dir: string, extraEnv: Record<string, string>): Promise<App> {
  const require = createRequire(import.meta.url);
  const testing = path.dirname(require.resolve('@workflow/world-testing/package.json'));
  const server = path.join(testing, 'dist', 'src', 'server.mjs');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...extraEnv,
    WORKFLOW_TARGET_WORLD: world,
    CONTROL_FD: '3',
  };
  // The app picks a port of its own and sets PORT itself.
  delete env.PORT;
  delete env.WORLDS_CALLBACK_URL;
  const log = path.join(dir, 'app.log');
  const out = openLog(log);
  const proc = spawn('node', [server], {
    cwd: packageDir,
    env,
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
  });
  processes.set(proc, 'app');
  proc.once('exit', () => processes.delete(proc));
  proc.stdout?.on('data', (chunk: Buffer) => out.write(chunk));
  proc.stderr?.on('data', (chunk: Buffer) => out.write(chunk));

  const control = proc.stdio[3] as Readable | null | undefined;
  if (!control) throw new Error('the app has no fd 3');
  return new Promise<App>((resolve, reject) => {
    let done = false;
    const timer = setTimeout(
      () => fail(new Error(`the app did not say it listens within 60 s; see ${log}`)),
      60_000
    );
    const fail = (error: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(error);
    };
    proc.once('error', (error) => fail(new Error(`could not start the app: ${error.message}`)));
    proc.once('exit', (code, signal) =>
      fail(new Error(`the app exited (${signal ?? code}) before it listened; see ${log}`))
    );
    lines(control, (line) => {
      if (done || line.trim() === '') return;
      try {
        const message = JSON.parse(line) as { state?: string; info?: { port?: unknown } };
        if (message.state === 'listening' && typeof message.info?.port === 'number') {
          done = true;
          clearTimeout(timer);
          resolve({ proc, port: message.info.port, log });
          return;
        }
      } catch {
        // not a control line
      }
      fail(new Error(`unexpected control line from the app: ${line}`));
    });
  });
}

/** `POST /invoke` of the suite's addition workflow: `addition(a, b)`. */
async function invokeAddition(appUrl: string, a: number, b: number): Promise<string> {
  const response = await fetch(`${appUrl}/invoke`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ file: 'workflows/addition.ts', workflow: 'addition', args: [a, b] }),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`POST /invoke addition(${a}, ${b}): ${response.status} ${text}`);
  const { runId } = JSON.parse(text) as { runId?: unknown };
  if (typeof runId !== 'string' || !/^wrun_.+/.test(runId)) {
    throw new Error(`POST /invoke addition(${a}, ${b}) answered no run id: ${text}`);
  }
  return runId;
}

/**
 * What `GET /runs/:id` on the app last gave for a run; `value` is its output as the runtime reads
 * it back (`hydrateWorkflowReturnValue`), for a completed run.
 */
type Seen =
  | { status: string; output?: unknown; error?: unknown; value?: unknown; unreadable?: string }
  | { failure: string };

/**
 * Polls the app until every run is finished (completed, failed or cancelled) or `timeoutMs`
 * passed; returns what was last seen of each.
 */
async function waitForRuns(
  appUrl: string,
  ids: string[],
  expected: Map<string, number>,
  timeoutMs: number
): Promise<Map<string, Seen>> {
  const seen = new Map<string, Seen>();
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await Promise.all(
      ids
        .filter((id) => !isFinished(seen.get(id)))
        .map(async (id) => seen.set(id, await readRun(appUrl, id)))
    );
    if (ids.every((id) => isFinished(seen.get(id)) || isRight(seen.get(id), expected.get(id)))) {
      return seen;
    }
    if (Date.now() > deadline) return seen;
    await sleep(500);
  }
}

/** The first of `ids` seen completed through the app, polling for at most `timeoutMs`. */
async function firstCompleted(
  appUrl: string,
  ids: string[],
  timeoutMs: number
): Promise<string | undefined> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const runs = await Promise.all(ids.map((id) => readRun(appUrl, id)));
    const index = runs.findIndex((run) => 'status' in run && run.status === 'completed');
    if (index >= 0) return ids[index];
    await sleep(20);
  }
  return undefined;
}

async function readRun(appUrl: string, id: string): Promise<Seen> {
  try {
    const response = await fetch(`${appUrl}/runs/${encodeURIComponent(id)}`);
    const text = await response.text();
    if (!response.ok) return { failure: `HTTP ${response.status} ${text.slice(0, 200)}` };
    // The app sends Uint8Array values as {__type: 'Uint8Array', data: base64}.
    const run = JSON.parse(text, (_key, value) =>
      value && typeof value === 'object' && value.__type === 'Uint8Array' && typeof value.data === 'string'
        ? new Uint8Array(Buffer.from(value.data, 'base64'))
        : value
    ) as { status: string; output?: unknown; error?: unknown; value?: unknown; unreadable?: string };
    if (run.status === 'completed' && run.output instanceof Uint8Array) {
      try {
        run.value = await hydrateWorkflowReturnValue(run.output, id, undefined);
      } catch (error) {
        run.unreadable = String(error);
      }
    }
    return run;
  } catch (error) {
    return { failure: String(error) };
  }
}

function isFinished(seen: Seen | undefined): boolean {
  return !!seen && 'status' in seen && isTerminal(seen.status);
}

/** Completed with the sum (its output read back by the runtime). */
function isRight(seen: Seen | undefined, sum: number | undefined): boolean {
  return !!seen && 'status' in seen && seen.status === 'completed' && seen.value === sum;
}

function summarize(seen: Seen | undefined): string {
  if (!seen) return 'never read';
  if ('failure' in seen) return `could not be read: ${seen.failure}`;
  let text = `status ${seen.status}`;
  if (seen.value !== undefined) text += `, output ${JSON.stringify(seen.value)}`;
  else if (seen.unreadable !== undefined) text += `, output unreadable (${seen.unreadable})`;
  if (seen.error instanceof Uint8Array) {
    text += `, error (${seen.error.byteLength} bytes) ${JSON.stringify(Buffer.from(seen.error).toString('utf8').slice(0, 300))}`;
  } else if (seen.error !== undefined) {
    text += `, error ${JSON.stringify(seen.error).slice(0, 300)}`;
  }
  return text;
}

// ---- plumbing ----

function openLog(file: string): WriteStream {
  const stream = createWriteStream(file, { flags: 'a' });
  logs.add(stream);
  return stream;
}

function lines(stream: Readable | null | undefined, onLine: (line: string) => void): void {
  if (!stream) return;
  createInterface({ input: stream, crlfDelay: Infinity }).on('line', onLine);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function exited(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => proc.once('exit', () => resolve()));
}

/** Stops a process: SIGINT (how `worlds serve` stops gracefully), SIGKILL after 5 s. */
async function stop(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const gone = exited(proc);
  proc.kill('SIGINT');
  const timer = setTimeout(() => proc.kill('SIGKILL'), 5_000);
  await gone;
  clearTimeout(timer);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
