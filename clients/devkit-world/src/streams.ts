/**
 * Streams, on the server's stream routes (`/v1/runs/{runId}/streams/{name}`): chunks are written
 * as raw bytes and read live as Server-Sent Events.
 *
 * `readFromStream(name)` is given no run id, so it is taken from the name. The DevKit names a
 * run's streams `runId.replace('wrun_', 'strm_') + '_user'` (plus `_<namespace>` for a named
 * one): `strm_<X>_…` belongs to run `wrun_<X>`. This needs the part of the run id after `wrun_`
 * to hold no `_`, which is true of the ids the worlds server gives.
 */
import type { DevkitWorldConfig } from './config';
import { apiError, parseErrorBody, unreachable, WorkflowAPIError } from './errors';
import { baseHeaders, send, seg, sleep, urlFor } from './http';

const STREAM_PREFIX = 'strm_';
const RUN_PREFIX = 'wrun_';

/** The run a stream belongs to, from the stream's name (`strm_<X>_…` → `wrun_<X>`). */
export function runIdFromStreamName(name: string): string {
  if (name.startsWith(STREAM_PREFIX)) {
    const rest = name.slice(STREAM_PREFIX.length);
    const end = rest.indexOf('_');
    if (end > 0) return `${RUN_PREFIX}${rest.slice(0, end)}`;
  }
  throw new Error(
    `cannot tell which run stream "${name}" belongs to: the worlds-engine World reads streams named strm_<X>_… (the DevKit's names for run wrun_<X>)`
  );
}

function streamPath(runId: string, name: string): string {
  return `/v1/runs/${seg(runId)}/streams/${seg(name)}`;
}

const encoder = new TextEncoder();

function toBytes(chunk: string | Uint8Array): Uint8Array {
  if (typeof chunk === 'string') return encoder.encode(chunk);
  if (chunk instanceof Uint8Array) return chunk;
  throw new TypeError(`a stream chunk must be a string or a Uint8Array, got ${typeof chunk}`);
}

/** Appends a chunk to a run's stream. */
export async function writeChunk(
  config: DevkitWorldConfig,
  name: string,
  runId: string | Promise<string>,
  chunk: string | Uint8Array
): Promise<void> {
  const id = await runId;
  const response = await send(config, {
    method: 'POST',
    path: streamPath(id, name),
    bytes: toBytes(chunk),
  });
  await response.body?.cancel().catch(() => undefined);
}

/** Closes a run's stream: readers end after its last chunk. */
export async function closeStream(
  config: DevkitWorldConfig,
  name: string,
  runId: string | Promise<string>
): Promise<void> {
  const id = await runId;
  const response = await send(config, { method: 'POST', path: `${streamPath(id, name)}/close` });
  await response.body?.cancel().catch(() => undefined);
}

/** One Server-Sent Event. */
export interface SseEvent {
  event: string;
  data: string;
  id?: string;
}

/** An incremental parser of the `text/event-stream` format. */
export class SseParser {
  private buffer = '';
  private eventType = '';
  private data: string[] = [];
  private lastId: string | undefined;

  /** Feeds text; returns the events completed by it. */
  push(text: string): SseEvent[] {
    this.buffer += text;
    const events: SseEvent[] = [];
    for (;;) {
      const at = this.buffer.search(/[\r\n]/);
      if (at < 0) break;
      // A CR at the very end may be the first half of a CRLF: wait for more.
      if (this.buffer[at] === '\r' && at === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, at);
      const width = this.buffer[at] === '\r' && this.buffer[at + 1] === '\n' ? 2 : 1;
      this.buffer = this.buffer.slice(at + width);
      this.line(line, events);
    }
    return events;
  }

  private line(line: string, events: SseEvent[]): void {
    if (line === '') {
      if (this.data.length > 0) {
        const event: SseEvent = { event: this.eventType || 'message', data: this.data.join('\n') };
        if (this.lastId !== undefined) event.id = this.lastId;
        events.push(event);
      }
      this.eventType = '';
      this.data = [];
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'event':
        this.eventType = value;
        break;
      case 'data':
        this.data.push(value);
        break;
      case 'id':
        if (!value.includes('\0')) this.lastId = value;
        break;
      default:
        break;
    }
  }
}

/** A chunk as the server sends it in a `chunk` event. */
export interface WireChunk {
  index: number;
  created_at?: number;
  text?: string;
  base64?: string;
}

/** The bytes of a `chunk` event's data. */
export function decodeChunk(data: string): { index: number; bytes: Uint8Array } {
  const chunk = JSON.parse(data) as WireChunk;
  if (!chunk || typeof chunk.index !== 'number') {
    throw new Error('a stream chunk event without an index');
  }
  if (typeof chunk.text === 'string') return { index: chunk.index, bytes: encoder.encode(chunk.text) };
  if (typeof chunk.base64 === 'string') {
    return { index: chunk.index, bytes: new Uint8Array(Buffer.from(chunk.base64, 'base64')) };
  }
  return { index: chunk.index, bytes: new Uint8Array(0) };
}

/** Statuses of the live route that are worth waiting out (the run not visible yet, overload). */
const RETRYABLE = new Set([404, 408, 429, 500, 502, 503, 504]);
/** How many failed connections in a row end the reading with an error. */
const MAX_FAILURES = 20;

function backoffMs(failures: number): number {
  return Math.min(100 * 2 ** Math.min(failures, 5), 2_000);
}

/**
 * Reads a stream live: every chunk from `startIndex`, then each new one as it is written, until
 * the server says the stream is done (closed, or its run finished). A dropped connection is
 * resumed after the last chunk received.
 */
export function readStream(
  getConfig: () => DevkitWorldConfig,
  name: string,
  startIndex = 0
): ReadableStream<Uint8Array> {
  const runId = runIdFromStreamName(name);
  const abort = new AbortController();
  let lastIndex: number | undefined;
  let lastError: Error | undefined;

  async function pump(controller: ReadableStreamDefaultController<Uint8Array>): Promise<void> {
    let failures = 0;
    while (!abort.signal.aborted) {
      const config = getConfig();
      const from = lastIndex === undefined ? startIndex : lastIndex + 1;
      const url = urlFor(config, `${streamPath(runId, name)}/live`, { from });
      const request = { method: 'GET', url };
      let response: Response;
      try {
        response = await fetch(url, {
          headers: { accept: 'text/event-stream', ...baseHeaders(config) },
          signal: abort.signal,
        });
      } catch (cause) {
        if (abort.signal.aborted) return;
        if (++failures > MAX_FAILURES) throw unreachable(request, cause);
        await sleep(backoffMs(failures), abort.signal);
        continue;
      }
      if (!response.ok || !response.body) {
        const text = await response.text().catch(() => '');
        if (RETRYABLE.has(response.status) && ++failures <= MAX_FAILURES) {
          await sleep(backoffMs(failures), abort.signal);
          continue;
        }
        throw apiError(response.status, text, request);
      }

      const before = lastIndex;
      const ended = await consume(response.body, controller);
      if (ended) {
        controller.close();
        return;
      }
      // The connection dropped before `end`: resume after the last chunk received.
      if (lastIndex !== before) failures = 0;
      if (++failures > MAX_FAILURES) {
        throw (
          lastError ??
          new WorkflowAPIError(`GET ${streamPath(runId, name)}/live: the connection kept dropping`)
        );
      }
      await sleep(backoffMs(failures), abort.signal);
    }
  }

  /** Reads one connection's events; true once `end` came. */
  async function consume(
    body: ReadableStream<Uint8Array>,
    controller: ReadableStreamDefaultController<Uint8Array>
  ): Promise<boolean> {
    const parser = new SseParser();
    const decoder = new TextDecoder();
    const reader = body.getReader();
    try {
      for (;;) {
        let next: Awaited<ReturnType<typeof reader.read>>;
        try {
          next = await reader.read();
        } catch {
          return false;
        }
        if (next.done) return false;
        for (const event of parser.push(decoder.decode(next.value, { stream: true }))) {
          if (event.event === 'chunk') {
            const chunk = decodeChunk(event.data);
            if (lastIndex !== undefined && chunk.index <= lastIndex) continue;
            lastIndex = chunk.index;
            // Empty chunks are skipped, as the reference worlds do (a byte stream refuses them).
            if (chunk.bytes.byteLength > 0) controller.enqueue(chunk.bytes);
          } else if (event.event === 'end') {
            return true;
          } else if (event.event === 'error') {
            // The server failed mid-read: reconnect after the last chunk, as for a drop.
            const body = parseErrorBody(event.data);
            lastError = new WorkflowAPIError(
              `GET ${streamPath(runId, name)}/live: ${body.message ?? 'the server failed while sending the stream'}`,
              { code: body.code }
            );
            return false;
          }
        }
      }
    } finally {
      reader.cancel().catch(() => undefined);
    }
  }

  return new ReadableStream<Uint8Array>({
    start(controller) {
      pump(controller).catch((error: unknown) => {
        if (abort.signal.aborted) return;
        try {
          controller.error(error);
        } catch {
          // already closed or errored
        }
      });
    },
    cancel() {
      abort.abort();
    },
  });
}
