import {
  EntityConflictError,
  HookNotFoundError,
  TooEarlyError,
  WorkflowRunNotFoundError,
  WorkflowWorldError,
} from '@workflow/errors';
import { SPEC_VERSION_CURRENT } from '@workflow/world';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { createWorld, unsupportedRuntime } from '../../src/index';
import { type Call, type StubServer, startStubServer } from './stub-server';

const ISO = '2026-11-29T10:00:00.000Z';

/** The test server of the running test (a real HTTP server, see stub-server.ts). */
let server: StubServer;

/** Answers every request from now on with `answer`; returns the calls the server receives. */
function stubServer(answer: (call: Call) => Response): Call[] {
  return server.answer(answer);
}

async function startServer(): Promise<void> {
  server = await startStubServer();
}

async function stopServer(): Promise<void> {
  await server.close();
}

const run = {
  runId: 'wrun_01ABC',
  deploymentId: 'worlds',
  workflowName: 'w',
  status: 'running',
  input: { $bytes: 'AAEC' },
  output: null,
  specVersion: SPEC_VERSION_CURRENT,
  createdAt: ISO,
  updatedAt: ISO,
  startedAt: ISO,
};

describe('the World object', () => {
  test('declares the runtime spec version and has no encryption key of its own', () => {
    const world = createWorld();
    expect(world.specVersion).toBe(SPEC_VERSION_CURRENT);
    expect(world.getEncryptionKeyForRun).toBeUndefined();
    expect(typeof world.close).toBe('function');
  });

  test('a 4.x runtime calling a CRUD method is told which versions this package is for', async () => {
    const world = createWorld() as unknown as Record<string, any>;
    await expect(world.runs.create({})).rejects.toThrow(/spec version 5.*workflow 5\.0\.0-beta\.35/);
    await expect(world.steps.update('wrun_1', 'step_1', {})).rejects.toThrow(/world\.steps\.update\(\)/);
    await expect(world.writeToStream('s', 'wrun_1', 'x')).rejects.toThrow(/4\.x/);
    expect(Object.keys(world)).not.toContain('writeToStream');
    expect(unsupportedRuntime('hooks.create').message).toContain('@workflow/world 5.0.0-beta.21');
  });
});

describe('storage: one request per call', () => {
  beforeEach(startServer);
  afterEach(stopServer);

  test('events.create posts {runId, event, params} with bytes and dates encoded, and decodes the result', async () => {
    const calls = stubServer(() =>
      Response.json({
        event: {
          runId: 'wrun_01ABC',
          eventId: 'evnt_1',
          eventType: 'step_completed',
          correlationId: 'step_1',
          createdAt: ISO,
          eventData: { result: { $bytes: 'AAA=' } },
        },
        step: { runId: 'wrun_01ABC', stepId: 'step_1', status: 'completed', output: { $bytes: 'AAA=' }, createdAt: ISO, updatedAt: ISO, completedAt: ISO },
        events: [{ eventId: 'evnt_2', createdAt: ISO }],
        cursor: 'c2',
        hasMore: false,
      })
    );
    const world = createWorld({ url: server.url, apiKey: 'wek_k' });
    const result = await world.events.create(
      'wrun_01ABC',
      { eventType: 'step_completed', correlationId: 'step_1', eventData: { result: new Uint8Array([0, 0]) } },
      { sinceCursor: 'c1', occurredAt: new Date(ISO) }
    );
    expect(calls[0]).toMatchObject({
      method: 'POST',
      url: '/v1/devkit/events',
      body: {
        runId: 'wrun_01ABC',
        event: { eventType: 'step_completed', correlationId: 'step_1', eventData: { result: { $bytes: 'AAA=' } } },
        params: { sinceCursor: 'c1', occurredAt: ISO },
      },
    });
    expect(calls[0]?.headers.authorization).toBe('Bearer wek_k');
    expect((result.event as any).eventData.result).toEqual(new Uint8Array([0, 0]));
    expect(result.event?.createdAt).toEqual(new Date(ISO));
    expect(result.step?.output).toEqual(new Uint8Array([0, 0]));
    expect(result.step?.completedAt).toBeInstanceOf(Date);
    expect(result.events?.[0]?.createdAt).toBeInstanceOf(Date);
    expect(result.cursor).toBe('c2');
  });

  test('run_created with no run id sends runId null', async () => {
    const calls = stubServer(() => Response.json({ event: { eventId: 'evnt_1', createdAt: ISO }, run }));
    const result = await createWorld({ url: server.url }).events.create(null, {
      eventType: 'run_created',
      eventData: { deploymentId: 'worlds', workflowName: 'w', input: new Uint8Array([1]) },
    });
    expect(calls[0]?.body.runId).toBeNull();
    expect(calls[0]?.body.params).toEqual({});
    expect(result.run?.input).toEqual(new Uint8Array([0, 1, 2]));
    expect(result.run && 'output' in result.run).toBe(false);
  });

  test('events.create errors: 409, 425 with retryAfter, 404 on a hook event, 404 of the run', async () => {
    const world = createWorld({ url: server.url });
    stubServer(() => Response.json({ error: { code: 'conflict', message: 'step exists' } }, { status: 409 }));
    const conflict = await world.events
      .create('wrun_1', { eventType: 'step_created', correlationId: 'step_1', eventData: { stepName: 's', input: new Uint8Array() } })
      .catch((e: unknown) => e);
    expect(EntityConflictError.is(conflict)).toBe(true);

    stubServer(() => Response.json({ error: { code: 'too_early', message: 'not yet', retryAfter: 2 } }, { status: 425 }));
    const early = await world.events
      .create('wrun_1', { eventType: 'step_started', correlationId: 'step_1' })
      .catch((e: unknown) => e);
    expect(TooEarlyError.is(early)).toBe(true);
    expect((early as TooEarlyError).retryAfter).toBe(2);

    stubServer(() => Response.json({ error: { code: 'not_found', message: 'no hook' } }, { status: 404 }));
    const hook = await world.events
      .create('wrun_1', { eventType: 'hook_received', correlationId: 'hook_1', eventData: { payload: new Uint8Array() } })
      .catch((e: unknown) => e);
    expect(HookNotFoundError.is(hook)).toBe(true);
    expect((hook as HookNotFoundError).token).toBe('hook_1');

    stubServer(() => Response.json({ error: { code: 'run_not_found', message: 'no run' } }, { status: 404 }));
    const noRun = await world.events
      .create('wrun_2', { eventType: 'run_failed', eventData: { error: new Uint8Array() } })
      .catch((e: unknown) => e);
    expect(WorkflowRunNotFoundError.is(noRun)).toBe(true);
    expect((noRun as WorkflowRunNotFoundError).runId).toBe('wrun_2');
  });

  test('runs.get: the run with Dates and bytes; 404 is WorkflowRunNotFoundError', async () => {
    const calls = stubServer(() => Response.json(run));
    const world = createWorld({ url: server.url });
    const got = await world.runs.get('wrun_01ABC', { resolveData: 'none' });
    expect(calls[0]?.url).toBe('/v1/devkit/runs/wrun_01ABC?resolveData=none');
    expect(got.createdAt).toEqual(new Date(ISO));
    stubServer(() => Response.json({ error: { code: 'not_found', message: 'no such run' } }, { status: 404 }));
    const error = await world.runs.get('wrun_nope').catch((e: unknown) => e);
    expect(WorkflowRunNotFoundError.is(error)).toBe(true);
    expect((error as WorkflowRunNotFoundError).runId).toBe('wrun_nope');
  });

  test('a read whose connection was dropped is sent once more; a write never is', async () => {
    // The test server drops the connection (destroys its socket) without answering.
    let fail = 1;
    const calls = stubServer(() => {
      if (fail > 0) {
        fail -= 1;
        throw new Error('drop the connection');
      }
      return Response.json(run);
    });
    const world = createWorld({ url: server.url });
    const got = await world.runs.get('wrun_01ABC');
    expect(got.runId).toBe('wrun_01ABC');
    expect(calls.map((c) => c.method)).toEqual(['GET', 'GET']);

    // Dropped twice: the second drop is the caller's error.
    fail = 2;
    calls.length = 0;
    await expect(world.runs.get('wrun_01ABC')).rejects.toThrow(/could not reach the worlds server/);
    expect(calls).toHaveLength(2);

    // A write the server may have recorded is not sent again.
    fail = 1;
    calls.length = 0;
    await expect(
      world.events.create('wrun_01ABC', { eventType: 'run_started' } as any)
    ).rejects.toThrow(/could not reach the worlds server/);
    expect(calls.map((c) => c.method)).toEqual(['POST']);
  });

  test('lists pass filters and pagination, and answer {data, cursor, hasMore}', async () => {
    const calls = stubServer(() => Response.json({ data: [run], cursor: 'next', hasMore: true }));
    const world = createWorld({ url: server.url });
    const page = await world.runs.list({
      workflowName: 'w',
      status: 'running',
      pagination: { limit: 10, cursor: 'c', sortOrder: 'desc' },
      resolveData: 'all',
    });
    expect(calls[0]?.url).toBe(
      '/v1/devkit/runs?workflowName=w&status=running&limit=10&cursor=c&sortOrder=desc&resolveData=all'
    );
    expect(page.cursor).toBe('next');
    expect(page.hasMore).toBe(true);
    expect(page.data[0]?.createdAt).toBeInstanceOf(Date);

    await world.events.list({ runId: 'wrun_1', pagination: { sortOrder: 'asc' } });
    expect(calls[1]?.url).toBe('/v1/devkit/runs/wrun_1/events?sortOrder=asc');
    await world.events.listByCorrelationId({ correlationId: 'step_1' });
    expect(calls[2]?.url).toBe('/v1/devkit/events?correlationId=step_1');
    await world.steps.list({ runId: 'wrun_1' });
    expect(calls[3]?.url).toBe('/v1/devkit/runs/wrun_1/steps');
    await world.hooks.list({ runId: 'wrun_1', resolveData: 'none' });
    expect(calls[4]?.url).toBe('/v1/devkit/hooks?runId=wrun_1&resolveData=none');

    stubServer(() => Response.json({ data: [], hasMore: false }));
    expect(await world.events.list({ runId: 'wrun_1' })).toEqual({ data: [], cursor: null, hasMore: false });
  });

  test('single reads: events.get, steps.get, hooks.get', async () => {
    const calls = stubServer(() => Response.json({ createdAt: ISO }));
    const world = createWorld({ url: server.url });
    await world.events.get('wrun_1', 'evnt_1');
    await world.steps.get('wrun_1', 'step/1', { resolveData: 'all' });
    await world.hooks.get('hook_1');
    expect(calls.map((c) => c.url)).toEqual([
      '/v1/devkit/runs/wrun_1/events/evnt_1',
      '/v1/devkit/runs/wrun_1/steps/step%2F1?resolveData=all',
      '/v1/devkit/hooks/hook_1',
    ]);
    stubServer(() => Response.json({ error: { code: 'not_found', message: 'gone' } }, { status: 404 }));
    expect(HookNotFoundError.is(await world.hooks.get('hook_9').catch((e: unknown) => e))).toBe(true);
  });

  test('hooks.getByToken posts the token (never in the URL); 404 is HookNotFoundError', async () => {
    const calls = stubServer(() =>
      Response.json({ runId: 'wrun_1', hookId: 'hook_1', token: 'secret/tok', metadata: { $bytes: 'AQ==' }, createdAt: ISO })
    );
    const world = createWorld({ url: server.url });
    const hook = await world.hooks.getByToken('secret/tok');
    expect(calls[0]).toMatchObject({ method: 'POST', url: '/v1/devkit/hooks/by-token', body: { token: 'secret/tok' } });
    expect(hook.metadata).toEqual(new Uint8Array([1]));
    expect(hook.createdAt).toBeInstanceOf(Date);
    expect((await world.hooks.getByToken('secret/tok', { resolveData: 'none' })).metadata).toBeUndefined();

    stubServer(() => Response.json({ error: { code: 'not_found', message: 'no hook' } }, { status: 404 }));
    const error = await world.hooks.getByToken('tok').catch((e: unknown) => e);
    expect(HookNotFoundError.is(error)).toBe(true);
    expect((error as HookNotFoundError).token).toBe('tok');
  });

  test('runs.experimentalSetAttributes posts the changes and answers the attributes', async () => {
    const calls = stubServer(() => Response.json({ attributes: { a: '1' } }));
    const world = createWorld({ url: server.url });
    const result = await world.runs.experimentalSetAttributes!('wrun_1', [
      { key: 'a', value: '1' },
      { key: 'b', value: null },
    ]);
    expect(result).toEqual({ attributes: { a: '1' } });
    expect(calls[0]).toMatchObject({
      url: '/v1/devkit/runs/wrun_1/attributes',
      body: { changes: [{ key: 'a', value: '1' }, { key: 'b', value: null }] },
    });
    expect(calls[0]?.body).not.toHaveProperty('allowReservedAttributes');
    await world.runs.experimentalSetAttributes!('wrun_1', [{ key: '$x', value: 'y' }], { allowReservedAttributes: true });
    expect(calls[1]?.body.allowReservedAttributes).toBe(true);
  });

  test('a 2xx answer that is not JSON is a PARSE_ERROR', async () => {
    stubServer(() => new Response('<html>', { status: 200 }));
    const error = await createWorld({ url: server.url }).runs.get('wrun_1').catch((e: unknown) => e);
    expect(WorkflowWorldError.is(error)).toBe(true);
    expect((error as WorkflowWorldError).code).toBe('PARSE_ERROR');
  });

  test('429 is retried after Retry-After', async () => {
    let n = 0;
    const calls = stubServer(() =>
      n++ === 0 ? new Response('', { status: 429, headers: { 'retry-after': '0' } }) : Response.json(run)
    );
    await createWorld({ url: server.url }).runs.get('wrun_01ABC');
    expect(calls).toHaveLength(2);
  });

  test('sequential calls reuse one kept-alive connection', async () => {
    const calls = stubServer(() => Response.json(run));
    const world = createWorld({ url: server.url });
    for (let i = 0; i < 20; i++) await world.runs.get('wrun_01ABC');
    expect(calls).toHaveLength(20);
    expect(server.connections()).toBe(1);
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
  beforeEach(async () => {
    savedPort = process.env.PORT;
    await startServer();
  });
  afterEach(async () => {
    await stopServer();
    if (savedPort === undefined) delete process.env.PORT;
    else process.env.PORT = savedPort;
  });

  test('posts the message (bytes encoded) with the callback URL read from PORT at call time', async () => {
    const calls = stubServer(() => Response.json({ messageId: 'msg_1' }, { status: 202 }));
    const world = createWorld({ url: server.url });
    process.env.PORT = '4321';
    const result = await world.queue(
      '__wkf_workflow_w',
      {
        runId: 'wrun_1',
        runInput: { input: new Uint8Array([7]), deploymentId: 'worlds', workflowName: 'w', specVersion: 5 },
      },
      { idempotencyKey: 'step_1', deploymentId: 'worlds', specVersion: 5 }
    );
    expect(result).toEqual({ messageId: 'msg_1' });
    expect(calls[0]).toMatchObject({
      method: 'POST',
      url: '/v1/devkit/queue',
      body: {
        queueName: '__wkf_workflow_w',
        message: { runId: 'wrun_1', runInput: { input: { $bytes: 'Bw==' } } },
        idempotencyKey: 'step_1',
        callbackUrl: 'http://localhost:4321',
      },
    });
    expect(Object.keys(calls[0]?.body).sort()).toEqual(['callbackUrl', 'idempotencyKey', 'message', 'queueName']);
  });

  test('passes delaySeconds through as it is, and leaves out a zero delay', async () => {
    const calls = stubServer(() => Response.json({ messageId: 'msg_2' }, { status: 202 }));
    process.env.PORT = '4321';
    const world = createWorld({ url: server.url });
    await world.queue('__wkf_workflow_w', { runId: 'wrun_1' }, { delaySeconds: 2.5, idempotencyKey: 'k' });
    await world.queue('__wkf_workflow_w', { runId: 'wrun_1' }, { delaySeconds: 0 });
    expect(calls[0]?.body).toMatchObject({ delaySeconds: 2.5, idempotencyKey: 'k' });
    expect(calls[1]?.body).not.toHaveProperty('delaySeconds');
  });

  test('WORLDS_CALLBACK_URL wins over PORT', async () => {
    const calls = stubServer(() => Response.json({ messageId: 'msg_2' }));
    process.env.PORT = '4321';
    await createWorld({ url: server.url, callbackUrl: 'http://app.internal:3000/' }).queue(
      '__wkf_workflow_w',
      { runId: 'wrun_1' }
    );
    expect(calls[0]?.body).toMatchObject({ callbackUrl: 'http://app.internal:3000' });
  });

  test('an answer without messageId is a contract error', async () => {
    stubServer(() => Response.json({}, { status: 202 }));
    process.env.PORT = '1';
    const error = await createWorld({ url: server.url })
      .queue('__wkf_workflow_w', { runId: 'wrun_1' })
      .catch((e: unknown) => e);
    expect((error as WorkflowWorldError).code).toBe('PARSE_ERROR');
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
