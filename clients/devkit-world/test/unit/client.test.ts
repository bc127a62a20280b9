import { WorkflowAPIError, WorkflowRunNotFoundError } from '@workflow/errors';
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest';
import { createWorld } from '../../src/index';

const T0 = 1_764_000_000_000;

type Call = { method: string; url: string; headers: Record<string, string>; body: unknown };

function stubServer(answer: (call: Call) => Response): Call[] {
  const calls: Call[] = [];
  vi.stubGlobal(
    'fetch',
    vi.fn(async (url: string, init: RequestInit) => {
      const call: Call = {
        method: String(init.method),
        url,
        headers: init.headers as Record<string, string>,
        body: typeof init.body === 'string' ? JSON.parse(init.body) : init.body,
      };
      calls.push(call);
      return answer(call);
    })
  );
  return calls;
}

const run = {
  runId: 'wrun_01ABC',
  deploymentId: 'worlds',
  workflowName: 'w',
  status: 'pending',
  input: [],
  createdAt: T0,
  updatedAt: T0,
};

describe('the storage calls', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
  });

  test('runs.create posts the request with the key and returns the run with Dates', async () => {
    const calls = stubServer(() => Response.json(run, { status: 201 }));
    const world = createWorld({ url: 'http://server:1', apiKey: 'wek_k' });
    const created = await world.runs.create({ deploymentId: 'worlds', workflowName: 'w', input: [] });
    expect(created.createdAt).toEqual(new Date(T0));
    expect(calls[0]).toMatchObject({
      method: 'POST',
      url: 'http://server:1/v1/devkit/runs',
      body: { deploymentId: 'worlds', workflowName: 'w', input: [] },
    });
    expect(calls[0]?.headers.authorization).toBe('Bearer wek_k');
  });

  test('runs.get: 404 is WorkflowRunNotFoundError', async () => {
    stubServer(() => Response.json({ code: 'not_found', message: 'no such run' }, { status: 404 }));
    const error = await createWorld({ url: 'http://server:1' })
      .runs.get('wrun_nope')
      .catch((e: unknown) => e);
    expect(WorkflowRunNotFoundError.is(error)).toBe(true);
    expect((error as WorkflowRunNotFoundError).runId).toBe('wrun_nope');
  });

  test('steps.create: 409 is a WorkflowAPIError with status 409', async () => {
    stubServer(() => Response.json({ code: 'conflict', message: 'exists' }, { status: 409 }));
    const error = await createWorld({ url: 'http://server:1' })
      .steps.create('wrun_01ABC', { stepId: 'step_1', stepName: 's', input: [] })
      .catch((e: unknown) => e);
    expect(WorkflowAPIError.is(error)).toBe(true);
    expect((error as WorkflowAPIError).status).toBe(409);
  });

  test('steps.get without a run id uses /steps/{stepId}; updates send retryAfter in ms', async () => {
    const step = {
      runId: 'wrun_01ABC',
      stepId: 'step_1',
      stepName: 's',
      status: 'pending',
      input: [],
      attempt: 1,
      retryAfter: T0 + 2000,
      createdAt: T0,
      updatedAt: T0,
    };
    const calls = stubServer(() => Response.json(step));
    const world = createWorld({ url: 'http://server:1' });
    const got = await world.steps.get(undefined, 'step_1');
    expect(got.retryAfter).toEqual(new Date(T0 + 2000));
    await world.steps.update('wrun_01ABC', 'step_1', { status: 'pending', retryAfter: new Date(T0 + 2000) });
    expect(calls.map((c) => `${c.method} ${c.url}`)).toEqual([
      'GET http://server:1/v1/devkit/steps/step_1',
      'PATCH http://server:1/v1/devkit/runs/wrun_01ABC/steps/step_1',
    ]);
    expect(calls[1]?.body).toEqual({ status: 'pending', retryAfter: T0 + 2000 });
  });

  test('events.list asks for the oldest first and passes the cursor', async () => {
    const calls = stubServer(() => Response.json({ data: [], cursor: null, hasMore: false }));
    const world = createWorld({ url: 'http://server:1' });
    await world.events.list({ runId: 'wrun_01ABC', pagination: { cursor: 'c1' } });
    expect(calls[0]?.url).toBe(
      'http://server:1/v1/devkit/runs/wrun_01ABC/events?cursor=c1&sortOrder=asc'
    );
  });

  test('hooks.getByToken posts the token', async () => {
    const calls = stubServer(() =>
      Response.json({
        runId: 'wrun_01ABC',
        hookId: 'hook_1',
        token: 'a/b?c',
        ownerId: 'o',
        projectId: 'p',
        environment: 'e',
        createdAt: T0,
      })
    );
    const hook = await createWorld({ url: 'http://server:1' }).hooks.getByToken('a/b?c');
    expect(hook.token).toBe('a/b?c');
    expect(calls[0]).toMatchObject({
      method: 'POST',
      url: 'http://server:1/v1/devkit/hooks/by-token',
      body: { token: 'a/b?c' },
    });
  });

  test('pause and resume answer 501 without calling the server', async () => {
    const calls = stubServer(() => Response.json(run));
    const world = createWorld({ url: 'http://server:1' });
    const error = await world.runs.pause('wrun_01ABC').catch((e: unknown) => e);
    expect((error as WorkflowAPIError).status).toBe(501);
    expect(((await world.runs.resume('wrun_01ABC').catch((e: unknown) => e)) as WorkflowAPIError).status).toBe(501);
    expect(calls).toHaveLength(0);
  });

  test('without WORLDS_URL the first call says so', async () => {
    const saved = process.env.WORLDS_URL;
    delete process.env.WORLDS_URL;
    try {
      await expect(createWorld().runs.get('wrun_1')).rejects.toThrow(/WORLDS_URL/);
    } finally {
      if (saved !== undefined) process.env.WORLDS_URL = saved;
    }
  });
});

describe('queue()', () => {
  let savedPort: string | undefined;
  beforeEach(() => {
    savedPort = process.env.PORT;
  });
  afterEach(() => {
    vi.unstubAllGlobals();
    if (savedPort === undefined) delete process.env.PORT;
    else process.env.PORT = savedPort;
  });

  test('posts the message with the callback URL read from PORT at call time', async () => {
    const calls = stubServer(() => Response.json({ messageId: 'msg_1' }));
    const world = createWorld({ url: 'http://server:1' });
    process.env.PORT = '4321';
    const result = await world.queue(
      '__wkf_step_step//x.ts//add',
      { workflowName: 'w', workflowRunId: 'wrun_1', workflowStartedAt: T0, stepId: 'step_1' },
      { idempotencyKey: 'step_1' }
    );
    expect(result).toEqual({ messageId: 'msg_1' });
    expect(calls[0]).toMatchObject({
      method: 'POST',
      url: 'http://server:1/v1/devkit/queue',
      body: {
        queueName: '__wkf_step_step//x.ts//add',
        idempotencyKey: 'step_1',
        callbackUrl: 'http://localhost:4321',
      },
    });
    expect(calls[0]?.body).not.toHaveProperty('deploymentId');
  });

  test('WORLDS_CALLBACK_URL wins over PORT', async () => {
    const calls = stubServer(() => Response.json({ messageId: 'msg_2' }));
    process.env.PORT = '4321';
    await createWorld({ url: 'http://server:1', callbackUrl: 'http://app.internal:3000/' }).queue(
      '__wkf_workflow_w',
      { runId: 'wrun_1' },
      { deploymentId: 'dpl_1' }
    );
    expect(calls[0]?.body).toMatchObject({ callbackUrl: 'http://app.internal:3000', deploymentId: 'dpl_1' });
  });

  test('getDeploymentId defaults to worlds', async () => {
    const saved = process.env.WORLDS_DEPLOYMENT_ID;
    delete process.env.WORLDS_DEPLOYMENT_ID;
    try {
      expect(await createWorld().getDeploymentId()).toBe('worlds');
      expect(await createWorld({ deploymentId: 'dpl_x' }).getDeploymentId()).toBe('dpl_x');
    } finally {
      if (saved !== undefined) process.env.WORLDS_DEPLOYMENT_ID = saved;
    }
  });
});
