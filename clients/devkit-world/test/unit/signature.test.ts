import { createHmac } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import {
  computeSignature,
  decodeSecret,
  signDelivery,
  verifySignature,
} from '../../src/signature';

const encoder = new TextEncoder();

describe('Standard Webhooks signatures', () => {
  // The example of the Standard Webhooks specification.
  test('matches the published example', () => {
    const key = decodeSecret('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
    const body = encoder.encode('{"test": 2432232314}');
    expect(computeSignature(key, 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, body)).toBe(
      'g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='
    );
    const result = verifySignature(
      key,
      {
        id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
        timestamp: '1614265330',
        signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
      },
      body,
      1614265330 * 1000 + 10_000
    );
    expect(result).toEqual({ ok: true, id: 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp: 1614265330 });
  });

  const keyBytes = Buffer.from('0123456789abcdef0123456789abcdef');
  const secret = `whsec_${keyBytes.toString('base64')}`;
  const id = 'msg_01JD0000000000000000000000';
  const body = encoder.encode('{"runId":"wrun_01JD","text":"null byte \\u0000"}');
  const now = Date.UTC(2026, 0, 2, 3, 4, 5);
  const timestamp = String(Math.floor(now / 1000));
  // Computed here with node's crypto directly, independently of the code under test.
  const digest = createHmac('sha256', keyBytes)
    .update(Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]))
    .digest('base64');
  const key = decodeSecret(secret);

  test('accepts a delivery signed with the secret', () => {
    const result = verifySignature(key, { id, timestamp, signature: `v1,${digest}` }, body, now);
    expect(result.ok).toBe(true);
    expect(signDelivery(secret, id, body, Number(timestamp))['webhook-signature']).toBe(`v1,${digest}`);
  });

  test('accepts any matching signature among several', () => {
    const signature = `v1,${Buffer.alloc(32).toString('base64')} v2,abc v1,${digest}`;
    expect(verifySignature(key, { id, timestamp, signature }, body, now).ok).toBe(true);
  });

  test('refuses a tampered body', () => {
    const tampered = encoder.encode('{"runId":"wrun_01JE","text":"null byte \\u0000"}');
    const result = verifySignature(key, { id, timestamp, signature: `v1,${digest}` }, tampered, now);
    expect(result).toMatchObject({ ok: false });
  });

  test('refuses another id or timestamp than the ones signed', () => {
    expect(
      verifySignature(key, { id: `${id}x`, timestamp, signature: `v1,${digest}` }, body, now).ok
    ).toBe(false);
    const later = String(Number(timestamp) + 1);
    expect(
      verifySignature(key, { id, timestamp: later, signature: `v1,${digest}` }, body, now).ok
    ).toBe(false);
  });

  test('refuses an old or future timestamp, even correctly signed', () => {
    const old = String(Number(timestamp) - 301);
    const oldSignature = signDelivery(secret, id, body, Number(old))['webhook-signature'];
    const result = verifySignature(key, { id, timestamp: old, signature: oldSignature }, body, now);
    expect(result).toMatchObject({ ok: false });
    expect((result as { reason: string }).reason).toMatch(/timestamp/);

    const future = String(Number(timestamp) + 301);
    const futureSignature = signDelivery(secret, id, body, Number(future))['webhook-signature'];
    expect(
      verifySignature(key, { id, timestamp: future, signature: futureSignature }, body, now).ok
    ).toBe(false);

    const edge = String(Number(timestamp) - 300);
    const edgeSignature = signDelivery(secret, id, body, Number(edge))['webhook-signature'];
    expect(verifySignature(key, { id, timestamp: edge, signature: edgeSignature }, body, now).ok).toBe(
      true
    );
  });

  test('refuses a wrong key, missing headers and malformed values', () => {
    const other = decodeSecret(`whsec_${Buffer.from('another key').toString('base64')}`);
    expect(verifySignature(other, { id, timestamp, signature: `v1,${digest}` }, body, now).ok).toBe(false);
    expect(verifySignature(key, { id, timestamp, signature: null }, body, now).ok).toBe(false);
    expect(verifySignature(key, { id: null, timestamp, signature: `v1,${digest}` }, body, now).ok).toBe(
      false
    );
    expect(
      verifySignature(key, { id, timestamp: '1e9', signature: `v1,${digest}` }, body, now).ok
    ).toBe(false);
    expect(verifySignature(key, { id, timestamp, signature: digest }, body, now).ok).toBe(false);
    expect(verifySignature(key, { id, timestamp, signature: `v2,${digest}` }, body, now).ok).toBe(false);
  });

  test('decodes secrets with or without the whsec_ prefix and refuses bad ones', () => {
    expect(decodeSecret(secret)).toEqual(keyBytes);
    expect(decodeSecret(keyBytes.toString('base64'))).toEqual(keyBytes);
    expect(() => decodeSecret('whsec_')).toThrow(/whsec_/);
    expect(() => decodeSecret('whsec_not base64!')).toThrow(/whsec_/);
  });
});
