import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { createWorld } from '../../src/index';
import { decodeChunk, SseParser } from '../../src/streams';
import { type StubServer, startStubServer } from './stub-server';

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
    expect(decodeChunk('{"index":5,"data":{"$bytes":"AP8="}}').bytes).toEqual(new Uint8Array([0, 255]));
    expect(decodeChunk('{"index":6}').bytes.byteLength).toBe(0);
    expect(() => decodeChunk('{"text":"x"}')).toThrow(/index/);
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

describe('streams', () => {
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
    const stream = await world.streams.get('wrun_01ABC', 'strm_01ABC_user', 0);
    expect(await readAll(stream)).toBe('{"event":"hookCreated"}\nsecond\n');
    expect(urls).toEqual([
      'http://server:1/v1/runs/wrun_01ABC/streams/strm_01ABC_user/live?from=0',
      'http://server:1/v1/runs/wrun_01ABC/streams/strm_01ABC_user/live?from=0',
      'http://server:1/v1/runs/wrun_01ABC/streams/strm_01ABC_user/live?from=2',
    ]);
  });

  test('get with a negative start asks for it, then resumes at an absolute index', async () => {
    const urls: string[] = [];
    const answers = [sse([chunk(7, 'a')]), sse([chunk(8, 'b'), 'event: end\ndata: end\n\n'])];
    vi.stubGlobal(
      'fetch',
      vi.fn(async (url: string) => {
        urls.push(url);
        const answer = answers.shift();
        if (!answer) throw new Error('no more answers');
        return answer;
      })
    );
    const stream = await createWorld({ url: 'http://server:1' }).streams.get('wrun_1', 'out', -3);
    expect(await readAll(stream)).toBe('ab');
    expect(urls).toEqual([
      'http://server:1/v1/runs/wrun_1/streams/out/live?from=-3',
      'http://server:1/v1/runs/wrun_1/streams/out/live?from=8',
    ]);
  });

  test('a 4xx other than 404 ends the read with the mapped error', async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(async () => Response.json({ error: { code: 'invalid', message: 'bad from' } }, { status: 400 }))
    );
    const stream = await createWorld({ url: 'http://server:1' }).streams.get('wrun_1', 'out');
    await expect(readAll(stream)).rejects.toThrow(/bad from/);
  });

  // Writes, lists and pages go through the World's own transport: a real server answers them.
  describe('writes and pages, against a real server', () => {
    let server: StubServer;
    beforeEach(async () => {
      server = await startStubServer();
    });
    afterEach(async () => {
      await server.close();
    });

    test('writeMulti sends the chunks in order in one request; list, getChunks, getInfo', async () => {
      const answers: Record<string, unknown> = {
        '/v1/runs/wrun_1/streams': ['out', 'strm_x'],
        '/v1/runs/wrun_1/streams/out/chunks?limit=2&cursor=c1': {
          data: [
            { index: 2, data: { $bytes: 'AA==' } },
            { index: 3, data: { $bytes: '' } },
          ],
          cursor: 'c2',
          hasMore: true,
          done: false,
        },
        '/v1/runs/wrun_1/streams/out/info': { tailIndex: -1, done: true },
      };
      const calls = server.answer(({ url }) =>
        url in answers ? Response.json(answers[url]) : new Response(null, { status: 204 })
      );
      const world = createWorld({ url: server.url });
      await world.streams.writeMulti!('wrun_1', 'out', ['a', new Uint8Array([0, 1])]);
      expect(calls[0]?.url).toBe('/v1/runs/wrun_1/streams/out/chunks');
      expect(calls[0]?.body).toEqual({ chunks: [{ $bytes: 'YQ==' }, { $bytes: 'AAE=' }] });
      await world.streams.writeMulti!('wrun_1', 'out', []);
      expect(calls).toHaveLength(1);

      expect(await world.streams.list('wrun_1')).toEqual(['out', 'strm_x']);
      const page = await world.streams.getChunks('wrun_1', 'out', { limit: 2, cursor: 'c1' });
      expect(page).toEqual({
        data: [
          { index: 2, data: new Uint8Array([0]) },
          { index: 3, data: new Uint8Array(0) },
        ],
        cursor: 'c2',
        hasMore: true,
        done: false,
      });
      expect(await world.streams.getInfo('wrun_1', 'out')).toEqual({ tailIndex: -1, done: true });
    });

    test('writes raw bytes and closes', async () => {
      const calls = server.answer(() => new Response(null, { status: 204 }));
      const world = createWorld({ url: server.url, apiKey: 'wek_test' });
      await world.streams.write('wrun_01ABC', 'strm_01ABC_user', 'héllo');
      await world.streams.write('wrun_01ABC', 'strm_01ABC_user', new Uint8Array([0, 1, 2]));
      await world.streams.close('wrun_01ABC', 'strm_01ABC_user');
      expect(calls.map((c) => c.url)).toEqual([
        '/v1/runs/wrun_01ABC/streams/strm_01ABC_user',
        '/v1/runs/wrun_01ABC/streams/strm_01ABC_user',
        '/v1/runs/wrun_01ABC/streams/strm_01ABC_user/close',
      ]);
      expect(calls[0]?.body).toEqual(new TextEncoder().encode('héllo'));
      expect(calls[0]?.headers['content-type']).toBe('application/octet-stream');
      expect(calls[0]?.headers.authorization).toBe('Bearer wek_test');
      expect(calls[1]?.body).toEqual(new Uint8Array([0, 1, 2]));
    });
  });
});
