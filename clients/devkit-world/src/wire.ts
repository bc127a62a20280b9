/**
 * Values between the World and the wire (see PROTOCOL.md, "Values").
 *
 * Out: every `Uint8Array` becomes `{"$bytes": "<standard base64>"}` and every `Date` an ISO 8601
 * string. In: every object whose only key is `$bytes` becomes a `Uint8Array` again, and the date
 * fields of the entities (runs, steps, hooks, waits, events and their `eventData`) become
 * `Date`s.
 */

/** The key of an encoded byte string. */
export const BYTES_KEY = '$bytes';

/** Standard base64 of some bytes. */
export function toBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** The bytes of standard base64 (a plain `Uint8Array`, not a `Buffer`). */
export function fromBase64(text: string): Uint8Array {
  if (text.length % 4 === 1 || !BASE64.test(text)) {
    throw new Error(`the worlds server sent a $bytes value that is not standard base64`);
  }
  const buffer = Buffer.from(text, 'base64');
  const bytes = new Uint8Array(buffer.byteLength);
  bytes.set(buffer);
  return bytes;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object') return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * A value as it goes on the wire: bytes as `{"$bytes": ...}`, dates as ISO strings, `undefined`
 * fields left out; everything else as it is. Throws on a value JSON cannot carry faithfully
 * (a function, a bigint, a Map...), naming where it is.
 */
export function toWire(value: unknown, path = '$'): unknown {
  if (value === null || value === undefined) return value;
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      return Number.isFinite(value) ? value : null;
    case 'bigint':
    case 'function':
    case 'symbol':
      throw new TypeError(`${path}: a ${typeof value} cannot be sent to the worlds server`);
    default:
      break;
  }
  if (value instanceof Uint8Array) return { [BYTES_KEY]: toBase64(value) };
  if (value instanceof ArrayBuffer) return { [BYTES_KEY]: toBase64(new Uint8Array(value)) };
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) throw new TypeError(`${path}: an invalid Date`);
    return value.toISOString();
  }
  if (Array.isArray(value)) return value.map((item, i) => toWire(item, `${path}[${i}]`));
  if (isPlainObject(value)) {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      if (item === undefined) continue;
      out[key] = toWire(item, `${path}.${key}`);
    }
    return out;
  }
  const json = (value as { toJSON?: () => unknown }).toJSON;
  if (typeof json === 'function') return toWire(json.call(value), path);
  throw new TypeError(
    `${path}: a ${(value as object).constructor?.name ?? 'object'} cannot be sent to the worlds server`
  );
}

/** Whether `value` is an encoded byte string (an object whose only key is `$bytes`). */
export function isBytes(value: unknown): value is { $bytes: string } {
  if (!isPlainObject(value)) return false;
  const keys = Object.keys(value);
  return keys.length === 1 && keys[0] === BYTES_KEY && typeof value[BYTES_KEY] === 'string';
}

/** A value from the wire: every `{"$bytes": ...}` in it, at any depth, becomes a `Uint8Array`. */
export function fromWire(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(fromWire);
  if (isBytes(value)) return fromBase64(value.$bytes);
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
    out[key] = fromWire(item);
  }
  return out;
}

/** The fields of entities (and of an event's `eventData`) that hold a time. */
export const DATE_FIELDS = [
  'createdAt',
  'updatedAt',
  'startedAt',
  'completedAt',
  'expiredAt',
  'retryAfter',
  'resumeAt',
  'occurredAt',
] as const;

/** A wire time (ISO string, or ms since the epoch) as a `Date`; anything else as it is. */
export function toDate(value: unknown): unknown {
  if (typeof value === 'string' && value.trim() !== '') {
    const ms = Date.parse(value);
    return Number.isNaN(ms) ? value : new Date(ms);
  }
  if (typeof value === 'number' && Number.isFinite(value)) return new Date(value);
  return value;
}

/**
 * An entity from the wire (in place): its date fields as `Date`s, also in its `eventData`, and
 * its `null` fields removed (the DevKit's entity schemas take an absent field, never `null`).
 */
export function withDates<T>(entity: T): T {
  if (!isPlainObject(entity)) return entity;
  const record = entity as Record<string, unknown>;
  for (const [field, value] of Object.entries(record)) {
    if (value === null) delete record[field];
  }
  datesIn(record);
  if (isPlainObject(record.eventData)) datesIn(record.eventData);
  return entity;
}

function datesIn(record: Record<string, unknown>): void {
  for (const field of DATE_FIELDS) {
    if (!(field in record)) continue;
    if (record[field] === null) delete record[field];
    else record[field] = toDate(record[field]);
  }
}

/** The entities of an `EventResult` or of a page, each with its dates (in place). */
export function resultWithDates<T>(result: T): T {
  if (!isPlainObject(result)) return result;
  const record = result as Record<string, unknown>;
  for (const key of ['event', 'run', 'step', 'hook', 'wait']) {
    if (isPlainObject(record[key])) withDates(record[key]);
  }
  for (const key of ['events', 'data']) {
    const list = record[key];
    if (Array.isArray(list)) list.forEach(withDates);
  }
  return result;
}
