import { afterEach, describe, expect, test, vi } from 'vitest';
import { createWorld } from '../../src/index';
import { deliveryId, signDelivery } from '../../src/signature';

const T0 = 1_764_000_000_000;
const secret = `whsec_${Buffer.from('a delivery secret of 32 bytes!!!').toString('base64')}`;
const stepQueue = '__wkf_step_step//workflows/addition.ts//add';
const flowQueue = '__wkf_workflow_workflow//workflows/addition.ts//addition';

type Call = { method: string; url: string; body: Record<string, unknown> };

/** A stand-in for the worlds server: records each call, answers with `answer`. */
function stubServer(answer: (call: Call) => Response): Call[] {
  const calls: Call[] = [];
  vi.stubGlobal(
    'fetch',
    vi.fn(async (url: string, init: RequestInit) => {
      const call: Call = {
        method: String(init.method),
        url,
        body: typeof init.body === 'string' ? JSON.parse(init.body) : {},
      };
      calls.push(call);
      return answer(call);
    })
  );
  return calls;
}

const queued = () => Response.json({ messageId: 'wrun_msg' }, { status: 202 });

/** A signed delivery of a step message, as the server sends it. */
function stepDelivery(messageId: string): Request {
  const body = JSON.stringify({
    workflowName: 'workflow//workflows/addition.ts//addition',
    workflowRunId: 'wrun_run',
    workflowStartedAt: T0,
    stepId: 'step_1',
  });
  return new Request('http://localhost/.well-known/workflow/v1/step', {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-vqs-queue-name': stepQueue,
      'x-vqs-message-id': messageId,
      'x-vqs-message-attempt': '1',
      ...signDelivery(secret, deliveryId(messageId, '1', stepQueue), body),
    },
    body,
  });
}

const config = { url: 'http://server:1', deliverySecret: secret, callbackUrl: 'http://app:3000' };

describe('continuity after a crash of the server', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
  });

  test("the runtime's own continuation after a step gets the step's key, and no second one is sent", async () => {
    const calls = stubServer(queued);
    const world = createWorld(config);
    const handle = world.createQueueHandler('__wkf_step_', async () => {
      await world.queue(flowQueue, { runId: 'wrun_run' });
    });
    expect((await handle(stepDelivery('wrun_m1'))).status).toBe(200);
    expect(calls.map((c) => c.body)).toEqual([
      {
        queueName: flowQueue,
        message: { runId: 'wrun_run' },
        callbackUrl: 'http://app:3000',
        idempotencyKey: 'continue:wrun_m1',
      },
    ]);
  });

  test('a step delivery taken without a continuation (its step was already completed) still continues the workflow', async () => {
    const calls = stubServer(queued);
    const handle = createWorld(config).createQueueHandler('__wkf_step_', async () => undefined);
    expect((await handle(stepDelivery('wrun_m2'))).status).toBe(200);
    expect(calls).toHaveLength(1);
    expect(calls[0]?.body).toMatchObject({
      queueName: flowQueue,
      message: { runId: 'wrun_run' },
      idempotencyKey: 'continue:wrun_m2',
    });
  });

  test('a step asked to come back later is not continued, and a continuation that cannot be queued fails the delivery', async () => {
    const calls = stubServer(queued);
    const later = createWorld(config).createQueueHandler('__wkf_step_', async () => ({
      timeoutSeconds: 2,
    }));
    expect(await (await later(stepDelivery('wrun_m3'))).json()).toEqual({ timeoutSeconds: 2 });
    expect(calls).toHaveLength(0);

    stubServer(() => new Response('down', { status: 503 }));
    const down = createWorld(config).createQueueHandler('__wkf_step_', async () => undefined);
    expect((await down(stepDelivery('wrun_m4'))).status).toBe(500);
  });

  test('a step that exists but never started gets its message queued again under its id, once', async () => {
    const existing = {
      runId: 'wrun_run',
      stepId: 'step_lost',
      stepName: 'step//workflows/addition.ts//add',
      status: 'pending',
      input: [],
      attempt: 0,
      createdAt: T0,
      updatedAt: T0,
    };
    const calls = stubServer((call) =>
      call.url.endsWith('/steps')
        ? Response.json(
            {
              code: 'CONFLICT',
              message: 'run wrun_run already has step step_lost',
              details: { step: existing, workflowName: 'workflow//w.ts//w', startedAt: T0 },
            },
            { status: 409 }
          )
        : queued()
    );
    const world = createWorld(config);
    for (let i = 0; i < 2; i++) {
      const error = await world.steps
        .create('wrun_run', { stepId: 'step_lost', stepName: existing.stepName, input: [] })
        .catch((e: unknown) => e);
      expect((error as { status?: number }).status).toBe(409);
    }
    const requeued = calls.filter((c) => c.url.endsWith('/v1/devkit/queue'));
    expect(requeued.map((c) => c.body)).toEqual([
      {
        queueName: `__wkf_step_${existing.stepName}`,
        message: {
          workflowName: 'workflow//w.ts//w',
          workflowRunId: 'wrun_run',
          workflowStartedAt: T0,
          stepId: 'step_lost',
        },
        callbackUrl: 'http://app:3000',
        idempotencyKey: 'step_lost',
      },
    ]);
  });
});
