import { afterEach, describe, expect, test, vi } from 'vitest';
import { createWorld } from '../../src/index';
import { decodeChunk, runIdFromStreamName, SseParser } from '../../src/streams';

describe('stream names', () => {
  test('strm_<X>_… belongs to run wrun_<X>', () => {
    expect(runIdFromStreamName('strm_01JD5ZK3Q8_user')).toBe('wrun_01JD5ZK3Q8');
    // A namespaced stream: base64url of the namespace after `_user_`, which may hold `_`.
    expect(runIdFromStreamName('strm_01JD5ZK3Q8_user_bXlfbmFtZQ')).toBe('wrun_01JD5ZK3Q8');
  });

  test('other names are refused with an explanation', () => {
    expect(() => runIdFromStreamName('default')).toThrow(/strm_/);
    expect(() => runIdFromStreamName('strm_')).toThrow(/strm_/);
    expect(() => runIdFromStreamName('strm__user')).toThrow(/strm_/);
  });
});

describe('Server-Sent Events', () => {
  test('events split anywhere, with CRLF, comments and multi-line data', () => {
    const parser = new SseParser();
    const text =
      ': keep-alive\r\nevent: chunk\r\nid: 0\r\ndata: {"index":0,"text":"a"}\r\n\r\n' +
      'event: chunk\nid: 1\ndata: line1\ndata: line2\n\nevent: end\ndata: end\n\n';
    const events = [];
    for (let i = 0; i < text.length; i += 3) events.push(...parser.push(text.slice(i, i + 3)));
    expect(events).toEqual([
      { event: 'chunk', id: '0', data: '{"index":0,"text":"a"}' },
      { event: 'chunk', id: '1', data: 'line1\nline2' },
      { event: 'end', id: '1', data: 'end' },
    ]);
  });

  test('chunks carry text or base64', () => {
    expect(decodeChunk('{"index":3,"created_at":1,"text":"hé\\u0000"}')).toEqual({
      index: 3,
      bytes: new TextEncoder().encode('hé\u0000'),
    });
    const bytes = decodeChunk(`{"index":4,"base64":"${Buffer.from([0xff, 0x00, 0x80]).toString('base64')}"}`);
    expect(Array.from(bytes.bytes)).toEqual([0xff, 0x00, 0x80]);
    expect(bytes.bytes.constructor).toBe(Uint8Array);
  });
});

function sse(parts: string[]): Response {
  const encoder = new TextEncoder();
  return new Response(
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (const part of parts) controller.enqueue(encoder.encode(part));
        controller.close();
      },
    }),
    { headers: { 'content-type': 'text/event-stream' } }
  );
}

function chunk(index: number, text: string): string {
  return `event: chunk\nid: ${index}\ndata: ${JSON.stringify({ index, created_at: 1, text })}\n\n`;
}

async function readAll(stream: ReadableStream<Uint8Array>): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  for await (const part of stream as unknown as AsyncIterable<Uint8Array>) text += decoder.decode(part);
  return text;
}

describe('readFromStream', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
  });

  test('reads live chunks until end, resuming after a dropped connection', async () => {
    const urls: string[] = [];
    const answers = [
      new Response('{"code":"not_found","message":"no run yet"}', { status: 404 }),
      sse([chunk(0, '{"event":"hookCreated"}\n'), chunk(1, '')]),
      sse([chunk(1, 'dup'), chunk(2, 'second\n'), 'event: end\ndata: end\n\n']),
    ];
    vi.stubGlobal(
      'fetch',
      vi.fn(async (url: string, init: RequestInit) => {
        urls.push(url);
        expect((init.headers as Record<string, string>).authorization).toBe('Bearer wek_test');
        const answer = answers.shift();
        if (!answer) throw new Error('no more answers');
        return answer;
      })
    );
    const world = createWorld({ url: 'http://server:1/', apiKey: 'wek_test' });
    const stream = await world.readFromStream('strm_01ABC_user', 0);
    expect(await readAll(stream)).toBe('{"event":"hookCreated"}\nsecond\n');
    expect(urls).toEqual([
      'http://server:1/v1/runs/wrun_01ABC/streams/strm_01ABC_user/live?from=0',
      'http://server:1/v1/runs/wrun_01ABC/streams/strm_01ABC_user/live?from=0',
      'http://server:1/v1/runs/wrun_01ABC/streams/strm_01ABC_user/live?from=2',
    ]);
  });

  test('writes raw bytes and closes, awaiting a promised run id', async () => {
    const calls: Array<{ url: string; init: RequestInit }> = [];
    vi.stubGlobal(
      'fetch',
      vi.fn(async (url: string, init: RequestInit) => {
        calls.push({ url, init });
        return new Response(null, { status: 204 });
      })
    );
    const world = createWorld({ url: 'http://server:1', apiKey: 'wek_test' });
    await world.writeToStream('strm_01ABC_user', Promise.resolve('wrun_01ABC'), 'héllo');
    await world.writeToStream('strm_01ABC_user', 'wrun_01ABC', new Uint8Array([0, 1, 2]));
    await world.closeStream('strm_01ABC_user', 'wrun_01ABC');
    expect(calls.map((c) => c.url)).toEqual([
      'http://server:1/v1/runs/wrun_01ABC/streams/strm_01ABC_user',
      'http://server:1/v1/runs/wrun_01ABC/streams/strm_01ABC_user',
      'http://server:1/v1/runs/wrun_01ABC/streams/strm_01ABC_user/close',
    ]);
    expect(calls[0]?.init.body).toEqual(new TextEncoder().encode('héllo'));
    expect((calls[0]?.init.headers as Record<string, string>)['content-type']).toBe(
      'application/octet-stream'
    );
    expect(calls[1]?.init.body).toEqual(new Uint8Array([0, 1, 2]));
  });
});
