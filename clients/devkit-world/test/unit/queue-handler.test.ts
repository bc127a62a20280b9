import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { createWorld } from '../../src/index';
import { deliveryId, signDelivery } from '../../src/signature';

const secret = `whsec_${Buffer.from('a delivery secret of 32 bytes!!!').toString('base64')}`;
const queueName = '__wkf_workflow_workflow//workflows/addition.ts//addition';
const messageId = 'msg_01JDTEST';

function delivery(options: {
  body?: string;
  headers?: Record<string, string | undefined>;
  sign?: boolean;
  timestamp?: number;
  /** The id to sign under; by default the one the (final) headers call for. */
  signedId?: string;
}): Request {
  const body = options.body ?? JSON.stringify({ runId: 'wrun_1', stepId: 'step_1' });
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'x-vqs-queue-name': queueName,
    'x-vqs-message-id': messageId,
    'x-vqs-message-attempt': '2',
  };
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    if (value === undefined) delete headers[name];
    else headers[name] = value;
  }
  const id =
    options.signedId ??
    deliveryId(
      headers['x-vqs-message-id'] ?? '',
      headers['x-vqs-message-attempt'] ?? '',
      headers['x-vqs-queue-name'] ?? ''
    );
  if (options.sign !== false) Object.assign(headers, signDelivery(secret, id, body, options.timestamp));
  // Overridden signature headers replace what was signed.
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    if (!name.startsWith('webhook-')) continue;
    if (value === undefined) delete headers[name];
    else headers[name] = value;
  }
  return new Request('http://localhost/.well-known/workflow/v1/flow', {
    method: 'POST',
    headers,
    body,
  });
}

describe('the queue handler', () => {
  beforeEach(() => {
    vi.spyOn(console, 'error').mockImplementation(() => undefined);
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });

  test('passes a signed delivery to the handler and acknowledges it', async () => {
    const handler = vi.fn(async () => undefined);
    const handle = createWorld({ deliverySecret: secret }).createQueueHandler('__wkf_workflow_', handler);
    const response = await handle(delivery({}));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ ok: true });
    expect(handler).toHaveBeenCalledWith(
      { runId: 'wrun_1', stepId: 'step_1' },
      { attempt: 2, queueName, messageId }
    );
  });

  test('turns $bytes in the message back into Uint8Array (the runtime first message carries the run input)', async () => {
    const handler = vi.fn(async () => undefined);
    const handle = createWorld({ deliverySecret: secret }).createQueueHandler('__wkf_workflow_', handler);
    const body = JSON.stringify({
      runId: 'wrun_1',
      runInput: { input: { $bytes: 'AAEA' }, deploymentId: 'worlds', workflowName: 'w', specVersion: 5 },
      requestedAt: '2026-11-29T10:00:00.000Z',
    });
    expect((await handle(delivery({ body }))).status).toBe(200);
    const [message] = handler.mock.calls[0] as unknown as [Record<string, any>];
    expect(message.runInput.input).toEqual(new Uint8Array([0, 1, 0]));
    // Not an entity: the runtime's schema coerces requestedAt itself.
    expect(message.requestedAt).toBe('2026-11-29T10:00:00.000Z');
    const bad = JSON.stringify({ runId: 'wrun_1', x: { $bytes: '!' } });
    expect((await handle(delivery({ body: bad }))).status).toBe(400);
  });

  test('answers timeoutSeconds for a redelivery later (whole seconds, 0 for at once)', async () => {
    const handle = createWorld({ deliverySecret: secret }).createQueueHandler(
      '__wkf_workflow_',
      async () => ({ timeoutSeconds: 2 })
    );
    const response = await handle(delivery({}));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ timeoutSeconds: 2 });
    const later = createWorld({ deliverySecret: secret }).createQueueHandler('__wkf_workflow_', async () => ({
      timeoutSeconds: 0.2,
    }));
    expect(await (await later(delivery({}))).json()).toEqual({ timeoutSeconds: 1 });
    const now = createWorld({ deliverySecret: secret }).createQueueHandler('__wkf_workflow_', async () => ({
      timeoutSeconds: 0,
    }));
    expect(await (await now(delivery({}))).json()).toEqual({ timeoutSeconds: 0 });
  });

  test('answers 500 with the error text when the handler throws', async () => {
    const handle = createWorld({ deliverySecret: secret }).createQueueHandler('__wkf_workflow_', async () => {
      throw new Error('step exploded');
    });
    const response = await handle(delivery({}));
    expect(response.status).toBe(500);
    expect(await response.text()).toContain('step exploded');
  });

  test('works when taken off the World object (the DevKit calls it unbound)', async () => {
    const { createQueueHandler } = createWorld({ deliverySecret: secret });
    const response = await createQueueHandler('__wkf_workflow_', async () => undefined)(delivery({}));
    expect(response.status).toBe(200);
  });

  test('answers 503 (retry later: the app is misconfigured) to every delivery without a secret', async () => {
    const handler = vi.fn(async () => undefined);
    const saved = process.env.WORLDS_DELIVERY_SECRET;
    delete process.env.WORLDS_DELIVERY_SECRET;
    try {
      const response = await createWorld().createQueueHandler('__wkf_workflow_', handler)(delivery({}));
      expect(response.status).toBe(503);
      expect(((await response.json()) as { error: string }).error).toMatch(/WORLDS_DELIVERY_SECRET/);
      const malformed = await createWorld({ deliverySecret: 'whsec_!!' }).createQueueHandler('__wkf_workflow_', handler)(
        delivery({})
      );
      expect(malformed.status).toBe(503);
    } finally {
      if (saved !== undefined) process.env.WORLDS_DELIVERY_SECRET = saved;
    }
    expect(handler).not.toHaveBeenCalled();
  });

  test('reads the secret from WORLDS_DELIVERY_SECRET when the request comes in', async () => {
    const saved = process.env.WORLDS_DELIVERY_SECRET;
    const handle = createWorld().createQueueHandler('__wkf_workflow_', async () => undefined);
    process.env.WORLDS_DELIVERY_SECRET = secret;
    try {
      expect((await handle(delivery({}))).status).toBe(200);
    } finally {
      if (saved === undefined) delete process.env.WORLDS_DELIVERY_SECRET;
      else process.env.WORLDS_DELIVERY_SECRET = saved;
    }
  });

  test('refuses unsigned, badly signed, tampered and stale deliveries with 401', async () => {
    const handler = vi.fn(async () => undefined);
    const handle = createWorld({ deliverySecret: secret }).createQueueHandler('__wkf_workflow_', handler);

    expect((await handle(delivery({ sign: false }))).status).toBe(401);
    expect(
      (await handle(delivery({ headers: { 'webhook-signature': 'v1,AAAA' } }))).status
    ).toBe(401);

    const signedBody = JSON.stringify({ runId: 'wrun_1', stepId: 'step_1' });
    const tampered = new Request('http://localhost/x', {
      method: 'POST',
      headers: Object.fromEntries(delivery({ body: signedBody }).headers),
      body: JSON.stringify({ runId: 'wrun_2', stepId: 'step_1' }),
    });
    expect((await handle(tampered)).status).toBe(401);

    const stale = delivery({ timestamp: Math.floor(Date.now() / 1000) - 600 });
    expect((await handle(stale)).status).toBe(401);

    // A captured delivery replayed with another message id, attempt or queue.
    const original = deliveryId(messageId, '2', queueName);
    for (const changed of [
      { 'x-vqs-message-id': 'msg_other' },
      { 'x-vqs-message-attempt': '3' },
      { 'x-vqs-queue-name': '__wkf_workflow_workflow//workflows/other.ts//drop' },
    ]) {
      expect((await handle(delivery({ headers: changed, signedId: original }))).status).toBe(401);
    }

    expect(handler).not.toHaveBeenCalled();
  });

  test('refuses missing headers, another queue and a non-JSON body with 400', async () => {
    const handler = vi.fn(async () => undefined);
    const handle = createWorld({ deliverySecret: secret }).createQueueHandler('__wkf_workflow_', handler);

    expect((await handle(delivery({ headers: { 'x-vqs-queue-name': undefined } }))).status).toBe(400);
    expect((await handle(delivery({ headers: { 'x-vqs-message-attempt': undefined } }))).status).toBe(400);
    expect((await handle(delivery({ headers: { 'x-vqs-message-attempt': '0' } }))).status).toBe(400);
    const flow = await handle(
      delivery({ headers: { 'x-vqs-queue-name': '__wkf_step_step//x.ts//x' } })
    );
    expect(flow.status).toBe(400);
    expect(((await flow.json()) as { error: string }).error).toMatch(/__wkf_step_/);
    expect((await handle(delivery({ body: 'not json' }))).status).toBe(400);

    expect(handler).not.toHaveBeenCalled();
  });
});
