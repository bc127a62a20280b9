/**
 * Checking the Standard Webhooks signature the worlds server puts on each delivery.
 *
 * The server signs `"{webhook-id}.{webhook-timestamp}.{raw body}"` with HMAC-SHA256; the key is
 * the base64 part of the shared secret `whsec_<base64>`. `webhook-signature` holds one or more
 * space-separated `v1,<base64 digest>`; any one matching is enough. `webhook-timestamp` is in
 * seconds and must be within five minutes of now, which bounds replays.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** How far `webhook-timestamp` may be from now. */
export const TIMESTAMP_TOLERANCE_SECONDS = 5 * 60;

const SECRET_PREFIX = 'whsec_';
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** The signing key of a `whsec_<base64>` secret; throws, saying why, when it is not one. */
export function decodeSecret(secret: string): Buffer {
  const trimmed = secret.trim();
  const encoded = trimmed.startsWith(SECRET_PREFIX)
    ? trimmed.slice(SECRET_PREFIX.length)
    : trimmed;
  if (encoded === '' || !BASE64.test(encoded) || encoded.length % 4 === 1) {
    throw new Error(
      'WORLDS_DELIVERY_SECRET is not a Standard Webhooks secret (whsec_ followed by base64)'
    );
  }
  const key = Buffer.from(encoded, 'base64');
  if (key.length === 0) {
    throw new Error('WORLDS_DELIVERY_SECRET holds an empty key');
  }
  return key;
}

/** The base64 HMAC-SHA256 digest over `"{id}.{timestamp}.{body}"`. */
export function computeSignature(
  key: Uint8Array,
  id: string,
  timestamp: string | number,
  body: Uint8Array | string
): string {
  const hmac = createHmac('sha256', key);
  hmac.update(`${id}.${timestamp}.`);
  hmac.update(typeof body === 'string' ? Buffer.from(body, 'utf8') : body);
  return hmac.digest('base64');
}

/**
 * The three headers of a signed delivery (what the server sends). Exposed for tests and tools
 * that need to sign a message the way the server does.
 */
/**
 * The id a delivery is signed under (its `webhook-id`): the message id, the attempt and the
 * queue name, so that none of the three can be changed on a captured delivery.
 */
export function deliveryId(messageId: string, attempt: string, queueName: string): string {
  return `${messageId}:${attempt}:${queueName}`;
}

export function signDelivery(
  secret: string,
  id: string,
  body: Uint8Array | string,
  timestampSeconds: number = Math.floor(Date.now() / 1000)
): { 'webhook-id': string; 'webhook-timestamp': string; 'webhook-signature': string } {
  const key = decodeSecret(secret);
  const timestamp = String(timestampSeconds);
  return {
    'webhook-id': id,
    'webhook-timestamp': timestamp,
    'webhook-signature': `v1,${computeSignature(key, id, timestamp, body)}`,
  };
}

export interface SignatureHeaders {
  id: string | null | undefined;
  timestamp: string | null | undefined;
  signature: string | null | undefined;
}

export type Verification = { ok: true; id: string; timestamp: number } | { ok: false; reason: string };

/**
 * Checks a delivery's signature over its exact raw body. `nowMs` is the current time (for
 * tests). Never throws: the reason of a refusal is in the result.
 */
export function verifySignature(
  key: Uint8Array,
  headers: SignatureHeaders,
  body: Uint8Array,
  nowMs: number = Date.now()
): Verification {
  const { id, timestamp, signature } = headers;
  if (!id || !timestamp || !signature) {
    return {
      ok: false,
      reason:
        'the delivery is not signed (webhook-id, webhook-timestamp and webhook-signature are required)',
    };
  }
  if (!/^\d{1,15}$/.test(timestamp)) {
    return { ok: false, reason: 'webhook-timestamp is not a number of seconds' };
  }
  const seconds = Number(timestamp);
  const nowSeconds = Math.floor(nowMs / 1000);
  if (Math.abs(nowSeconds - seconds) > TIMESTAMP_TOLERANCE_SECONDS) {
    return {
      ok: false,
      reason: `webhook-timestamp is more than ${TIMESTAMP_TOLERANCE_SECONDS} s away from this machine's clock`,
    };
  }
  const expected = createHmac('sha256', key)
    .update(`${id}.${timestamp}.`)
    .update(body)
    .digest();
  for (const candidate of signature.split(' ')) {
    const comma = candidate.indexOf(',');
    if (comma < 0 || candidate.slice(0, comma) !== 'v1') continue;
    const encoded = candidate.slice(comma + 1);
    if (!BASE64.test(encoded)) continue;
    const given = Buffer.from(encoded, 'base64');
    if (given.length === expected.length && timingSafeEqual(given, expected)) {
      return { ok: true, id, timestamp: seconds };
    }
  }
  return { ok: false, reason: 'no v1 signature in webhook-signature matches this delivery' };
}
