/**
 * Calls to the worlds-engine HTTP API: the key on every request, JSON in and out (bytes as
 * `{"$bytes": ...}`, see wire.ts), errors as the DevKit's classes (see errors.ts).
 *
 * Requests go through `node:http` / `node:https` with one shared keep-alive agent per protocol
 * (a DevKit app calls the World very often, and `fetch` cost over twice the CPU per request).
 * Live stream reads (streams.ts) stay on `fetch`, which hands out the body as it arrives.
 */
import http from 'node:http';
import https from 'node:https';
import { baseUrl, type DevkitWorldConfig } from './config.js';
import { contractError, type ErrorContext, errorForStatus, transportError } from './errors.js';
import { fromWire, toWire } from './wire.js';

/** Query parameters; `undefined` ones are left out. */
export type Query = Record<string, string | number | boolean | undefined>;

export interface CallOptions {
  method: 'GET' | 'POST';
  /** Path from the server's root, e.g. `/v1/devkit/runs`. */
  path: string;
  query?: Query;
  /** A JSON body (encoded with `toWire`). */
  json?: unknown;
  /** Raw bytes (sent as application/octet-stream). */
  bytes?: Uint8Array;
  /** Extra headers. */
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** What the call is about, for the errors that name it. */
  context?: ErrorContext;
}

/** How many times a 429 answer is retried, after the wait the server asks for. */
const RATE_LIMIT_RETRIES = 3;
/** The longest wait taken for a 429's Retry-After. */
const RATE_LIMIT_MAX_WAIT_MS = 5_000;
/**
 * How long an idle kept-alive connection is kept: shorter than the server's idle timeout (10 s
 * by default), so that the client closes it before the server does.
 */
const IDLE_CONNECTION_MS = 4_000;

/**
 * The shared agents: connections are kept alive and reused from call to call. An idle one is
 * unref'd by the agent (it does not keep the process alive) and closed after
 * `IDLE_CONNECTION_MS`.
 */
const agents = {
  'http:': new http.Agent({ keepAlive: true, timeout: IDLE_CONNECTION_MS }),
  'https:': new https.Agent({ keepAlive: true, timeout: IDLE_CONNECTION_MS }),
};

/** An answer of the server, its body read in full. */
export interface Answer {
  status: number;
  ok: boolean;
  /** The URL the request went to. */
  url: string;
  headers: { get(name: string): string | null };
  /** The body as UTF-8 text. */
  text(): string;
}

/** Encodes one path segment (ids and stream names may hold any character). */
export function seg(value: string): string {
  return encodeURIComponent(value);
}

/** The full URL of a path on the server, with its query. */
export function urlFor(config: DevkitWorldConfig, path: string, query?: Query): string {
  const url = new URL(`${baseUrl(config)}${path}`);
  if (query) {
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
  }
  return url.toString();
}

/** The headers every request carries. */
export function baseHeaders(config: DevkitWorldConfig): Record<string, string> {
  const headers: Record<string, string> = {};
  if (config.apiKey) headers.authorization = `Bearer ${config.apiKey}`;
  return headers;
}

/** Sends a request and returns the answer if it is 2xx; otherwise throws the mapped error. */
export async function send(config: DevkitWorldConfig, options: CallOptions): Promise<Answer> {
  const url = urlFor(config, options.path, options.query);
  const headers: Record<string, string> = {
    accept: 'application/json',
    ...baseHeaders(config),
    ...options.headers,
  };
  let body: string | Uint8Array | undefined;
  if (options.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(toWire(options.json));
  } else if (options.bytes !== undefined) {
    headers['content-type'] = 'application/octet-stream';
    body = options.bytes;
  }
  if (body !== undefined) {
    headers['content-length'] = String(typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength);
  } else if (options.method === 'POST') {
    headers['content-length'] = '0';
  }
  let resent = false;
  for (let attempt = 0; ; attempt++) {
    let response: Answer;
    try {
      response = await request(url, options.method, headers, body, options.signal);
    } catch (cause) {
      // As `fetch` did: an aborted call rejects with the signal's reason.
      if (options.signal?.aborted) throw options.signal.reason ?? cause;
      // A read whose connection was closed or reset under it (a kept-alive connection the
      // server had just closed) is sent once more, on a fresh connection.
      if (options.method === 'GET' && !resent && connectionDropped(cause)) {
        resent = true;
        continue;
      }
      throw transportError({ method: options.method, url }, cause);
    }
    if (response.ok) return response;
    const text = response.text();
    const retryAfter = response.headers.get('retry-after');
    if (response.status === 429 && attempt < RATE_LIMIT_RETRIES) {
      await sleep(retryAfterMs(retryAfter));
      continue;
    }
    throw errorForStatus(
      response.status,
      text,
      { method: options.method, url, retryAfter },
      options.context,
      hintFor(response.status, config)
    );
  }
}

/** Sends a request and returns its JSON answer, bytes decoded (`undefined` for an empty one). */
export async function call<T = unknown>(config: DevkitWorldConfig, options: CallOptions): Promise<T> {
  const response = await send(config, options);
  const text = response.text();
  if (text.trim() === '') return undefined as T;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw contractError(
      { method: options.method, url: response.url || options.path },
      `the worlds server answered ${response.status} with a body that is not JSON`
    );
  }
  return fromWire(parsed) as T;
}

/**
 * One request on the shared agent of its protocol; resolves once the whole answer is read (so
 * that its connection goes back to the pool), rejects if the connection fails.
 */
function request(
  url: string,
  method: string,
  headers: Record<string, string>,
  body: string | Uint8Array | undefined,
  signal: AbortSignal | undefined
): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
    const target = new URL(url);
    const secure = target.protocol === 'https:';
    const options: http.RequestOptions = {
      method,
      headers,
      agent: agents[secure ? 'https:' : 'http:'],
      signal,
    };
    let settled = false;
    const fail = (error: unknown) => {
      if (settled) return;
      settled = true;
      reject(error);
    };
    const req = (secure ? https : http).request(target, options, (res) => {
      const status = res.statusCode ?? 0;
      const ok = status >= 200 && status <= 299;
      const chunks: Buffer[] = [];
      const answer = (text: string) => {
        if (settled) return;
        settled = true;
        resolve({
          status,
          ok,
          url,
          headers: {
            get(name: string) {
              const value = res.headers[name.toLowerCase()];
              return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value;
            },
          },
          text: () => text,
        });
      };
      // An error answer whose body cannot be read is still that error (with no body), as
      // `fetch`'s `response.text().catch(() => '')` made it; a 2xx one is a failed call.
      const broken = (error: unknown) => {
        if (!ok && !signal?.aborted) answer('');
        else fail(error);
      };
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        answer(chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks).toString('utf8'));
      });
      res.on('error', broken);
      res.on('close', () => {
        if (!res.complete) broken(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }));
      });
    });
    req.on('error', fail);
    req.end(body);
  });
}

/**
 * True if the request failed because the connection was closed or reset under it (a kept-alive
 * connection the server had just closed): node's `ECONNRESET` / `EPIPE` / "socket hang up", or
 * undici's `SocketError` inside a `fetch` error.
 */
function connectionDropped(cause: unknown): boolean {
  const error = cause as { code?: unknown; message?: unknown; cause?: { code?: unknown } } | undefined;
  const codes = [error?.code, error?.cause?.code];
  return (
    codes.some((code) => code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE') ||
    error?.message === 'socket hang up'
  );
}

function hintFor(status: number, config: DevkitWorldConfig): string | undefined {
  if (status === 401 && !config.apiKey) return 'WORLDS_API_KEY is not set';
  if (status === 401) return 'the server does not accept WORLDS_API_KEY';
  if (status === 403) return 'the key in WORLDS_API_KEY lacks the scope for this route';
  return undefined;
}

function retryAfterMs(header: string | null): number {
  const seconds = header === null ? NaN : Number(header);
  const ms = Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : 1000;
  return Math.min(ms, RATE_LIMIT_MAX_WAIT_MS);
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
