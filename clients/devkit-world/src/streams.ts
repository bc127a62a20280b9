/**
 * Streams, on the server's stream routes (`/v1/runs/{runId}/streams/{name}`): chunks are
 * written as raw bytes (or a JSON batch), read live as Server-Sent Events, and paged.
 */
import type { StreamChunksResponse, StreamInfoResponse } from '@workflow/world';
import type { DevkitWorldConfig } from './config.js';
import { contractError, errorForStatus, parseErrorBody, transportError, WorkflowWorldError } from './errors.js';
import { baseHeaders, call, send, seg, sleep, urlFor } from './http.js';
import { fromBase64, fromWire, isBytes } from './wire.js';

export function streamPath(runId: string, name: string): string {
  return `/v1/runs/${seg(runId)}/streams/${seg(name)}`;
}

const encoder = new TextEncoder();

/** A chunk as bytes (a string is written as its UTF-8). */
export function toBytes(chunk: string | Uint8Array): Uint8Array {
  if (typeof chunk === 'string') return encoder.encode(chunk);
  if (chunk instanceof Uint8Array) return chunk;
  throw new TypeError(`a stream chunk must be a string or a Uint8Array, got ${typeof chunk}`);
}

/** Appends a chunk to a run's stream. */
export async function writeChunk(
  config: DevkitWorldConfig,
  runId: string,
  name: string,
  chunk: string | Uint8Array
): Promise<void> {
  await send(config, { method: 'POST', path: streamPath(runId, name), bytes: toBytes(chunk) });
}

/** Appends chunks, in order, in one write. */
export async function writeChunks(
  config: DevkitWorldConfig,
  runId: string,
  name: string,
  chunks: (string | Uint8Array)[]
): Promise<void> {
  if (chunks.length === 0) return;
  await send(config, {
    method: 'POST',
    path: `${streamPath(runId, name)}/chunks`,
    json: { chunks: chunks.map(toBytes) },
  });
}

/** Closes a run's stream: readers end after its last chunk. */
export async function closeStream(config: DevkitWorldConfig, runId: string, name: string): Promise<void> {
  await send(config, { method: 'POST', path: `${streamPath(runId, name)}/close` });
}

/** The names of a run's streams. */
export async function listStreams(config: DevkitWorldConfig, runId: string): Promise<string[]> {
  const path = `/v1/runs/${seg(runId)}/streams`;
  const answer = await call<unknown>(config, { method: 'GET', path });
  const names = Array.isArray(answer)
    ? answer
    : answer && typeof answer === 'object'
      ? ((answer as { data?: unknown; names?: unknown }).data ?? (answer as { names?: unknown }).names)
      : undefined;
  if (!Array.isArray(names) || !names.every((name) => typeof name === 'string')) {
    throw contractError({ method: 'GET', url: path }, 'the worlds server sent stream names that are not a list of strings');
  }
  return names;
}

/** A page of a stream's chunks as they are now. */
export async function getChunks(
  config: DevkitWorldConfig,
  runId: string,
  name: string,
  options?: { limit?: number; cursor?: string }
): Promise<StreamChunksResponse> {
  const path = `${streamPath(runId, name)}/chunks`;
  const answer = await call<Record<string, unknown>>(config, {
    method: 'GET',
    path,
    query: { limit: options?.limit, cursor: options?.cursor },
  });
  if (!answer || !Array.isArray(answer.data)) {
    throw contractError({ method: 'GET', url: path }, 'the worlds server sent a page of chunks without data');
  }
  const data = answer.data.map((item: unknown) => {
    const chunk = item as { index?: unknown; data?: unknown };
    if (typeof chunk?.index !== 'number' || !(chunk.data instanceof Uint8Array)) {
      throw contractError({ method: 'GET', url: path }, 'the worlds server sent a chunk without index or bytes');
    }
    return { index: chunk.index, data: chunk.data };
  });
  return {
    data,
    cursor: typeof answer.cursor === 'string' && answer.cursor !== '' ? answer.cursor : null,
    hasMore: answer.hasMore === true,
    done: answer.done === true,
  };
}

/** Where a stream ends now and whether it is closed. */
export async function getInfo(config: DevkitWorldConfig, runId: string, name: string): Promise<StreamInfoResponse> {
  const path = `${streamPath(runId, name)}/info`;
  const answer = await call<Record<string, unknown>>(config, { method: 'GET', path });
  if (!answer || typeof answer.tailIndex !== 'number') {
    throw contractError({ method: 'GET', url: path }, 'the worlds server sent stream info without tailIndex');
  }
  return { tailIndex: answer.tailIndex, done: answer.done === true };
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
  data?: unknown;
}

/** The bytes of a `chunk` event's data (`text`, `base64`, or `data` as `{"$bytes": ...}`). */
export function decodeChunk(data: string): { index: number; bytes: Uint8Array } {
  const chunk = JSON.parse(data) as WireChunk;
  if (!chunk || typeof chunk.index !== 'number') {
    throw new Error('a stream chunk event without an index');
  }
  if (typeof chunk.text === 'string') return { index: chunk.index, bytes: encoder.encode(chunk.text) };
  if (typeof chunk.base64 === 'string') return { index: chunk.index, bytes: fromBase64(chunk.base64) };
  if (isBytes(chunk.data)) return { index: chunk.index, bytes: fromWire(chunk.data) as Uint8Array };
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
 * Reads a stream live: every chunk from `startIndex` (negative: that many chunks before the
 * end), then each new one as it is written, until the server says the stream is done (closed, or
 * its run finished). A dropped connection is resumed after the last chunk received.
 */
export function readStream(
  getConfig: () => DevkitWorldConfig,
  runId: string,
  name: string,
  startIndex = 0
): ReadableStream<Uint8Array> {
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
        if (++failures > MAX_FAILURES) throw transportError(request, cause);
        await sleep(backoffMs(failures), abort.signal);
        continue;
      }
      if (!response.ok || !response.body) {
        const text = await response.text().catch(() => '');
        if (RETRYABLE.has(response.status) && ++failures <= MAX_FAILURES) {
          await sleep(backoffMs(failures), abort.signal);
          continue;
        }
        throw errorForStatus(response.status, text, request, { runId });
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
          new WorkflowWorldError(`GET ${streamPath(runId, name)}/live: the connection kept dropping`)
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
            lastError = new WorkflowWorldError(
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
