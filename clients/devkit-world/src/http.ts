/**
 * Calls to the worlds-engine HTTP API: the key on every request, JSON in and out (bytes as
 * `{"$bytes": ...}`, see wire.ts), errors as the DevKit's classes (see errors.ts).
 */
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
export async function send(config: DevkitWorldConfig, options: CallOptions): Promise<Response> {
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
  let resent = false;
  for (let attempt = 0; ; attempt++) {
    let response: Response;
    try {
      response = await fetch(url, {
        method: options.method,
        headers,
        body,
        signal: options.signal,
      });
    } catch (cause) {
      if (options.signal?.aborted) throw cause;
      // A read whose connection was closed or reset under it (a kept-alive connection the
      // server had just closed) is sent once more, on a fresh connection.
      if (options.method === 'GET' && !resent && connectionDropped(cause)) {
        resent = true;
        continue;
      }
      throw transportError({ method: options.method, url }, cause);
    }
    if (response.ok) return response;
    const text = await response.text().catch(() => '');
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
  const text = await response.text();
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

/** Discards an answer's body (so that the connection is reused). */
export async function drain(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => undefined);
}

/** True if `fetch` failed because the connection was closed or reset (undici's `SocketError`). */
function connectionDropped(cause: unknown): boolean {
  const code = (cause as { cause?: { code?: unknown } } | undefined)?.cause?.code;
  return code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE';
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
