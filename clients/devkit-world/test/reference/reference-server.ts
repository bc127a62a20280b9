/**
 * A reference of PROTOCOL.md for tests: an HTTP server speaking the package's wire protocol,
 * its storage being the DevKit's own local World (`@workflow/world-local`, which holds the
 * reference semantics of every event), its queue a small in-memory one that delivers signed
 * messages the way the worlds server does.
 *
 * It is not durable and not a product: it checks the package against the runtime, and the
 * protocol against what the runtime expects, where the worlds server is not at hand. Every
 * request it cannot place answers 404 `no_route`, so a route the package calls that the
 * protocol lacks shows up as a failure.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createWorld as createLocalWorld } from '@workflow/world-local';
import type { World } from '@workflow/world';
import { deliveryId, signDelivery } from '../../src/signature';
import { DATE_FIELDS, fromWire, toDate, toWire } from '../../src/wire';

export interface ReferenceServer {
  url: string;
  apiKey: string;
  deliverySecret: string;
  /** Every request received, `METHOD path` (for tests that count calls). */
  requests: string[];
  close(): Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {}
  ) {
    super(message);
  }
}

/** The status and code of an error the local World threw (the table of PROTOCOL.md). */
function answerFor(error: unknown): { status: number; body: Record<string, unknown> } {
  if (error instanceof HttpError) {
    return { status: error.status, body: { error: { code: error.code, message: error.message, ...error.extra } } };
  }
  const e = error as { name?: string; message?: string; retryAfter?: number; runSpecVersion?: number };
  const message = e?.message ?? String(error);
  const table: Record<string, [number, string]> = {
    WorkflowRunNotFoundError: [404, 'run_not_found'],
    HookNotFoundError: [404, 'hook_not_found'],
    EntityConflictError: [409, 'conflict'],
    RunExpiredError: [410, 'run_expired'],
    PreconditionFailedError: [412, 'precondition_failed'],
    TooEarlyError: [425, 'too_early'],
    RunNotSupportedError: [426, 'run_not_supported'],
    ThrottleError: [429, 'throttled'],
    AttributeValidationError: [400, 'invalid'],
  };
  const known = e?.name ? table[e.name] : undefined;
  if (known) {
    const extra: Record<string, unknown> = {};
    if (typeof e.retryAfter === 'number') extra.retryAfter = e.retryAfter;
    if (typeof e.runSpecVersion === 'number') extra.runSpecVersion = e.runSpecVersion;
    return { status: known[0], body: { error: { code: known[1], message, ...extra } } };
  }
  if (/not found/i.test(message)) return { status: 404, body: { error: { code: 'not_found', message } } };
  if (e?.name === 'WorkflowWorldError' || e?.name === 'ZodError') {
    return { status: 400, body: { error: { code: 'invalid', message } } };
  }
  return { status: 500, body: { error: { code: 'internal', message: (error as Error)?.stack ?? message } } };
}

/** A request's event with its date fields as `Date`s (the local World reads them as such). */
function eventFromWire(value: unknown): any {
  const event = fromWire(value) as Record<string, any>;
  if (event && event.eventData && typeof event.eventData === 'object') {
    for (const field of DATE_FIELDS) {
      if (field in event.eventData) event.eventData[field] = toDate(event.eventData[field]);
    }
  }
  return event;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(toWire(body)));
}

function pagination(q: URLSearchParams) {
  const limit = q.get('limit');
  return {
    pagination: {
      limit: limit === null ? undefined : Number(limit),
      cursor: q.get('cursor') ?? undefined,
      sortOrder: (q.get('sortOrder') ?? undefined) as 'asc' | 'desc' | undefined,
    },
    resolveData: (q.get('resolveData') ?? undefined) as 'all' | 'none' | undefined,
  };
}

interface Message {
  id: string;
  queueName: string;
  body: string;
  callbackUrl: string;
  attempt: number;
}

/** The queue: delivers each message, signed, until it is acknowledged (or 50 attempts). */
function createQueue(secret: string, isClosed: () => boolean) {
  const byKey = new Map<string, string>();
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number, fn: () => void) => {
    if (isClosed()) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      fn();
    }, ms);
    timers.add(timer);
  };
  async function deliver(message: Message): Promise<void> {
    if (isClosed()) return;
    message.attempt++;
    const attempt = String(message.attempt);
    const kind = message.queueName.includes('_wkf_step_') ? 'step' : 'flow';
    const headers = {
      'content-type': 'application/json',
      'x-vqs-queue-name': message.queueName,
      'x-vqs-message-id': message.id,
      'x-vqs-message-attempt': attempt,
      ...signDelivery(secret, deliveryId(message.id, attempt, message.queueName), message.body),
    };
    let retryMs = 1_000;
    try {
      const response = await fetch(`${message.callbackUrl}/.well-known/workflow/v1/${kind}`, {
        method: 'POST',
        headers,
        body: message.body,
      });
      const text = await response.text();
      if (response.ok) {
        const answer = JSON.parse(text || '{}') as { timeoutSeconds?: number };
        if (typeof answer.timeoutSeconds === 'number') {
          later(answer.timeoutSeconds * 1000, () => void deliver(message));
        }
        return;
      }
      if (message.attempt >= 50) return;
    } catch {
      retryMs = 500;
    }
    later(retryMs, () => void deliver(message));
  }
  return {
    send(body: Record<string, any>): string {
      const key = body.idempotencyKey as string | undefined;
      if (key !== undefined && byKey.has(key)) return byKey.get(key)!;
      const id = `msg_${randomUUID()}`;
      if (key !== undefined) byKey.set(key, id);
      const message: Message = {
        id,
        queueName: body.queueName,
        // The message goes back as it came: bytes stay in their $bytes form.
        body: JSON.stringify(body.message),
        callbackUrl: String(body.callbackUrl).replace(/\/+$/, ''),
        attempt: 0,
      };
      later((Number(body.delaySeconds) || 0) * 1000, () => void deliver(message));
      return id;
    },
    close() {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
    },
  };
}

/** Streams a run's stream as Server-Sent Events by polling the local World. */
async function live(world: World, runId: string, name: string, from: number, res: ServerResponse, req: IncomingMessage) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  let gone = false;
  req.on('close', () => {
    gone = true;
  });
  let next = from;
  if (next < 0) {
    const info = await world.streams.getInfo(runId, name);
    next = Math.max(0, info.tailIndex + 1 + next);
  }
  while (!gone) {
    const info = await world.streams.getInfo(runId, name);
    while (next <= info.tailIndex && !gone) {
      const page = await world.streams.getChunks(runId, name, {
        limit: 100,
        cursor: Buffer.from(JSON.stringify({ i: next })).toString('base64'),
      });
      if (page.data.length === 0) break;
      for (const chunk of page.data) {
        res.write(
          `event: chunk\nid: ${chunk.index}\ndata: ${JSON.stringify({ index: chunk.index, base64: Buffer.from(chunk.data).toString('base64') })}\n\n`
        );
        next = chunk.index + 1;
      }
    }
    if (info.done && next > info.tailIndex) {
      res.write('event: end\ndata: end\n\n');
      res.end();
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

export async function startReferenceServer(): Promise<ReferenceServer> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'devkit-reference-'));
  const world = createLocalWorld({ dataDir }) as unknown as World;
  const apiKey = `wek_${randomUUID()}`;
  const deliverySecret = `whsec_${Buffer.from(randomUUID()).toString('base64')}`;
  let closed = false;
  const queue = createQueue(deliverySecret, () => closed);
  const requests: string[] = [];

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://reference');
    const q = url.searchParams;
    const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    const method = req.method ?? 'GET';
    requests.push(`${method} ${url.pathname}`);
    if (req.headers.authorization !== `Bearer ${apiKey}`) {
      throw new HttpError(401, 'unauthenticated', 'no or a wrong API key');
    }
    const raw = method === 'POST' ? await readBody(req) : Buffer.alloc(0);
    const body = () => JSON.parse(raw.toString('utf8') || '{}') as Record<string, any>;
    const at = (...expected: string[]) =>
      parts.length === expected.length && expected.every((p, i) => p === '*' || p === parts[i]);

    // ---- /v1/devkit ----
    if (method === 'POST' && at('v1', 'devkit', 'events')) {
      const { runId, event, params } = body();
      const p = fromWire(params ?? {}) as Record<string, any>;
      if (p.occurredAt !== undefined) p.occurredAt = toDate(p.occurredAt);
      return json(res, 200, await world.events.create(runId, eventFromWire(event), p));
    }
    if (method === 'GET' && at('v1', 'devkit', 'events')) {
      return json(res, 200, await world.events.listByCorrelationId({ correlationId: q.get('correlationId') ?? '', ...pagination(q) }));
    }
    if (method === 'GET' && at('v1', 'devkit', 'runs')) {
      return json(res, 200, await world.runs.list({
        workflowName: q.get('workflowName') ?? undefined,
        status: (q.get('status') ?? undefined) as any,
        ...pagination(q),
      }));
    }
    if (method === 'GET' && at('v1', 'devkit', 'runs', '*')) {
      return json(res, 200, await world.runs.get(parts[3]!, { resolveData: pagination(q).resolveData }));
    }
    if (method === 'POST' && at('v1', 'devkit', 'runs', '*', 'attributes')) {
      const { changes, allowReservedAttributes } = body();
      return json(res, 200, await world.runs.experimentalSetAttributes!(parts[3]!, changes, { allowReservedAttributes }));
    }
    if (method === 'GET' && at('v1', 'devkit', 'runs', '*', 'events')) {
      return json(res, 200, await world.events.list({ runId: parts[3]!, ...pagination(q) }));
    }
    if (method === 'GET' && at('v1', 'devkit', 'runs', '*', 'events', '*')) {
      return json(res, 200, await world.events.get(parts[3]!, parts[5]!, { resolveData: pagination(q).resolveData }));
    }
    if (method === 'GET' && at('v1', 'devkit', 'runs', '*', 'steps')) {
      return json(res, 200, await world.steps.list({ runId: parts[3]!, ...pagination(q) }));
    }
    if (method === 'GET' && at('v1', 'devkit', 'runs', '*', 'steps', '*')) {
      return json(res, 200, await world.steps.get(parts[3]!, parts[5]!, { resolveData: pagination(q).resolveData }));
    }
    if (method === 'POST' && at('v1', 'devkit', 'hooks', 'by-token')) {
      return json(res, 200, await world.hooks.getByToken(body().token));
    }
    if (method === 'GET' && at('v1', 'devkit', 'hooks')) {
      return json(res, 200, await world.hooks.list({ runId: q.get('runId') ?? undefined, ...pagination(q) }));
    }
    if (method === 'GET' && at('v1', 'devkit', 'hooks', '*')) {
      return json(res, 200, await world.hooks.get(parts[3]!, { resolveData: pagination(q).resolveData }));
    }
    if (method === 'POST' && at('v1', 'devkit', 'queue')) {
      return json(res, 202, { messageId: queue.send(body()) });
    }

    // ---- /v1/runs/{id}/streams ----
    if (parts[0] === 'v1' && parts[1] === 'runs' && parts[3] === 'streams') {
      const runId = parts[2]!;
      const name = parts[4];
      if (method === 'GET' && parts.length === 4) return json(res, 200, await world.streams.list(runId));
      if (name !== undefined && parts.length === 5 && method === 'POST') {
        await world.streams.write(runId, name, new Uint8Array(raw));
        return json(res, 201, {});
      }
      if (name !== undefined && parts.length === 6) {
        const what = parts[5];
        if (method === 'POST' && what === 'chunks') {
          const chunks = (fromWire(body().chunks) as Uint8Array[]) ?? [];
          await world.streams.writeMulti!(runId, name, chunks);
          return json(res, 201, {});
        }
        if (method === 'POST' && what === 'close') {
          await world.streams.close(runId, name);
          res.writeHead(204).end();
          return;
        }
        if (method === 'GET' && what === 'chunks') {
          const limit = q.get('limit');
          return json(res, 200, await world.streams.getChunks(runId, name, {
            limit: limit === null ? undefined : Number(limit),
            cursor: q.get('cursor') ?? undefined,
          }));
        }
        if (method === 'GET' && what === 'info') return json(res, 200, await world.streams.getInfo(runId, name));
        if (method === 'GET' && what === 'live') return live(world, runId, name, Number(q.get('from') ?? 0), res, req);
      }
    }
    throw new HttpError(404, 'no_route', `${method} ${url.pathname} is not a route of PROTOCOL.md`);
  }

  const server: Server = createServer((req, res) => {
    route(req, res).catch((error: unknown) => {
      const answer = answerFor(error);
      if (!res.headersSent) json(res, answer.status, answer.body);
      else res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    apiKey,
    deliverySecret,
    requests,
    async close() {
      closed = true;
      queue.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await (world as { close?: () => Promise<void> }).close?.();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
