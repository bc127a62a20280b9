import { describe, expect, test } from 'vitest';
import { fromBase64, fromWire, isBytes, resultWithDates, toBase64, toWire, withDates } from '../../src/wire';

/** JSON on the wire and back, as a request and its answer go. */
function roundTrip(value: unknown): unknown {
  return fromWire(JSON.parse(JSON.stringify(toWire(value))));
}

describe('bytes', () => {
  test('a Uint8Array is {"$bytes": base64} and comes back as a plain Uint8Array', () => {
    const bytes = new Uint8Array([0, 1, 2, 253, 254, 255]);
    expect(toWire(bytes)).toEqual({ $bytes: 'AAEC/f7/' });
    const back = roundTrip(bytes) as Uint8Array;
    expect(back.constructor).toBe(Uint8Array);
    expect(Array.from(back)).toEqual([0, 1, 2, 253, 254, 255]);
  });

  test('an empty Uint8Array survives', () => {
    expect(toWire(new Uint8Array(0))).toEqual({ $bytes: '' });
    const back = roundTrip(new Uint8Array(0)) as Uint8Array;
    expect(back).toBeInstanceOf(Uint8Array);
    expect(back.byteLength).toBe(0);
  });

  test('NUL bytes and NUL characters survive', () => {
    const bytes = new Uint8Array([0, 0, 0x41, 0, 0]);
    expect(Array.from(roundTrip(bytes) as Uint8Array)).toEqual([0, 0, 0x41, 0, 0]);
    expect(roundTrip({ text: 'a\u0000b' })).toEqual({ text: 'a\u0000b' });
  });

  test('a Buffer and a view into a larger buffer send only their own bytes', () => {
    expect(toWire(Buffer.from('hi'))).toEqual({ $bytes: toBase64(new TextEncoder().encode('hi')) });
    const big = new Uint8Array([9, 9, 1, 2, 3, 9]);
    expect(toWire(big.subarray(2, 5))).toEqual({ $bytes: 'AQID' });
  });

  test('nested bytes, in objects and arrays, at any depth', () => {
    const event = {
      eventType: 'step_completed',
      correlationId: 'step_1',
      eventData: {
        result: new Uint8Array([1, 2, 3]),
        list: [new Uint8Array([4]), { deep: { deeper: new Uint8Array([5, 0]) } }],
        other: 'kept',
        nothing: null,
        left: undefined,
      },
    };
    const wire = toWire(event) as Record<string, any>;
    expect(wire.eventData.result).toEqual({ $bytes: 'AQID' });
    expect(wire.eventData.list[1].deep.deeper).toEqual({ $bytes: 'BQA=' });
    expect('left' in wire.eventData).toBe(false);
    const back = roundTrip(event) as Record<string, any>;
    expect(back.eventData.result).toEqual(new Uint8Array([1, 2, 3]));
    expect(back.eventData.list[0]).toEqual(new Uint8Array([4]));
    expect(back.eventData.list[1].deep.deeper).toEqual(new Uint8Array([5, 0]));
    expect(back.eventData.other).toBe('kept');
    expect(back.eventData.nothing).toBeNull();
  });

  test('only an object whose single key is $bytes is bytes', () => {
    expect(isBytes({ $bytes: 'AA==' })).toBe(true);
    expect(isBytes({ $bytes: 'AA==', other: 1 })).toBe(false);
    expect(isBytes({ $bytes: 1 })).toBe(false);
    expect(fromWire({ $bytes: 'AA==', other: 1 })).toEqual({ $bytes: 'AA==', other: 1 });
    expect(fromWire([{ $bytes: '' }])).toEqual([new Uint8Array(0)]);
  });

  test('bad base64 from the server is refused', () => {
    expect(() => fromBase64('a')).toThrow(/base64/);
    expect(() => fromBase64('@@@@')).toThrow(/base64/);
    expect(Array.from(fromBase64('AAE='))).toEqual([0, 1]);
  });

  test('dates go out as ISO strings; what JSON cannot carry is refused', () => {
    expect(toWire({ occurredAt: new Date(Date.UTC(2026, 10, 29, 10)) })).toEqual({
      occurredAt: '2026-11-29T10:00:00.000Z',
    });
    expect(() => toWire({ n: 1n })).toThrow(/\$\.n: a bigint/);
    expect(() => toWire({ m: new Map() })).toThrow(/Map/);
    expect(() => toWire(new Date(NaN))).toThrow(/invalid Date/);
  });
});

describe('dates of entities', () => {
  test('the date fields of an entity and of its eventData become Dates; nulls go', () => {
    const run = withDates({
      runId: 'wrun_1',
      status: 'completed',
      createdAt: '2026-11-29T10:00:00.000Z',
      updatedAt: '2026-11-29T10:00:01.000Z',
      startedAt: '2026-11-29T10:00:00.500Z',
      completedAt: '2026-11-29T10:00:02.000Z',
      expiredAt: null,
      executionContext: null,
      workflowName: 'createdAt',
    }) as Record<string, unknown>;
    expect(run.createdAt).toEqual(new Date('2026-11-29T10:00:00.000Z'));
    expect(run.completedAt).toBeInstanceOf(Date);
    expect('expiredAt' in run).toBe(false);
    expect('executionContext' in run).toBe(false);
    expect(run.workflowName).toBe('createdAt');

    const event = withDates({
      eventId: 'evnt_1',
      eventType: 'wait_created',
      createdAt: '2026-11-29T10:00:00.000Z',
      occurredAt: '2026-11-29T09:59:59.000Z',
      eventData: { resumeAt: '2026-11-29T11:00:00.000Z', note: '2026-11-29T11:00:00.000Z' },
    }) as Record<string, any>;
    expect(event.occurredAt).toEqual(new Date('2026-11-29T09:59:59.000Z'));
    expect(event.eventData.resumeAt).toEqual(new Date('2026-11-29T11:00:00.000Z'));
    expect(event.eventData.note).toBe('2026-11-29T11:00:00.000Z');
  });

  test('a step retryAfter and ms timestamps become Dates', () => {
    const step = withDates({ retryAfter: '2026-11-29T10:00:05.000Z', createdAt: 1_764_410_400_000 }) as Record<
      string,
      unknown
    >;
    expect(step.retryAfter).toEqual(new Date('2026-11-29T10:00:05.000Z'));
    expect(step.createdAt).toEqual(new Date(1_764_410_400_000));
  });

  test('an EventResult: event, run, step, hook, wait and the preloaded events', () => {
    const iso = '2026-11-29T10:00:00.000Z';
    const result = resultWithDates({
      event: { createdAt: iso },
      run: { createdAt: iso },
      step: { updatedAt: iso },
      hook: { createdAt: iso },
      wait: { resumeAt: iso },
      events: [{ createdAt: iso }, { createdAt: iso, eventData: { retryAfter: iso } }],
      cursor: 'c',
    }) as Record<string, any>;
    for (const key of ['event', 'run', 'hook']) expect(result[key].createdAt).toBeInstanceOf(Date);
    expect(result.step.updatedAt).toBeInstanceOf(Date);
    expect(result.wait.resumeAt).toBeInstanceOf(Date);
    expect(result.events[1].eventData.retryAfter).toBeInstanceOf(Date);
    expect(result.cursor).toBe('c');
  });
});
