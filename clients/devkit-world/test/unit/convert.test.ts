import { describe, expect, test } from 'vitest';
import {
  eventFromWire,
  eventToWire,
  filterRun,
  hookFromWire,
  pageFromWire,
  runFromWire,
  stepFromWire,
  stepUpdateToWire,
  toDate,
  toMillis,
} from '../../src/convert';

const T0 = 1_764_000_000_000;

describe('runs from the wire', () => {
  test('a pending run: timestamps become Dates, absent fields stay absent', () => {
    const run = runFromWire({
      runId: 'wrun_01JD',
      deploymentId: 'worlds',
      workflowName: 'workflow//workflows/addition.ts//addition',
      status: 'pending',
      input: [[1, 2]],
      createdAt: T0,
      updatedAt: T0 + 1,
    });
    expect(run.createdAt).toEqual(new Date(T0));
    expect(run.updatedAt).toEqual(new Date(T0 + 1));
    expect(run.createdAt).toBeInstanceOf(Date);
    expect('startedAt' in run).toBe(false);
    expect('output' in run).toBe(false);
    expect('completedAt' in run).toBe(false);
  });

  test('a completed run keeps its output exactly, null bytes included', () => {
    const run = runFromWire({
      runId: 'wrun_01JD',
      deploymentId: 'worlds',
      workflowName: 'w',
      status: 'completed',
      input: [],
      output: ['null byte \u0000'],
      startedAt: T0 + 5,
      completedAt: T0 + 9,
      createdAt: T0,
      updatedAt: T0 + 9,
    });
    expect(run.output).toEqual(['null byte \u0000']);
    expect(run.startedAt).toEqual(new Date(T0 + 5));
    expect(run.completedAt).toEqual(new Date(T0 + 9));
  });

  test('nulls for absent fields are dropped rather than refused', () => {
    const run = runFromWire({
      runId: 'wrun_01JD',
      deploymentId: 'worlds',
      workflowName: 'w',
      status: 'running',
      input: [],
      output: null,
      error: null,
      completedAt: null,
      startedAt: T0,
      createdAt: T0,
      updatedAt: T0,
    });
    expect(run.status).toBe('running');
    expect(run.output).toBeUndefined();
    expect(run.error).toBeUndefined();
  });

  test('a failed run needs its error; a run that does not fit the schema is refused', () => {
    const failed = runFromWire({
      runId: 'wrun_01JD',
      deploymentId: 'worlds',
      workflowName: 'w',
      status: 'failed',
      input: [],
      error: { message: 'boom', stack: 'Error: boom' },
      completedAt: T0,
      createdAt: T0,
      updatedAt: T0,
    });
    expect(failed.error).toEqual({ message: 'boom', stack: 'Error: boom' });
    expect(() =>
      runFromWire({
        runId: 'wrun_01JD',
        deploymentId: 'worlds',
        workflowName: 'w',
        status: 'completed',
        input: [],
        createdAt: T0,
        updatedAt: T0,
      })
    ).toThrow(/wrun_01JD.*schema.*completedAt/);
  });

  test('resolveData none leaves the payloads out', () => {
    const run = runFromWire({
      runId: 'wrun_01JD',
      deploymentId: 'worlds',
      workflowName: 'w',
      status: 'completed',
      input: [1],
      output: [3],
      completedAt: T0,
      createdAt: T0,
      updatedAt: T0,
    });
    expect(filterRun(run, 'none')).toMatchObject({ input: [], output: undefined });
    expect(filterRun(run, 'all')).toBe(run);
  });
});

describe('steps, hooks, events', () => {
  test('a step keeps attempt, and startedAt/retryAfter become Dates', () => {
    const step = stepFromWire({
      runId: 'wrun_01JD',
      stepId: 'step_01',
      stepName: 'step//workflows/errors.ts//retryable',
      status: 'pending',
      input: [],
      attempt: 1,
      startedAt: T0,
      retryAfter: T0 + 2000,
      error: null,
      createdAt: T0,
      updatedAt: T0,
    });
    expect(step.attempt).toBe(1);
    expect(step.startedAt).toEqual(new Date(T0));
    expect(step.retryAfter).toEqual(new Date(T0 + 2000));
    expect('error' in step).toBe(false);
    expect('completedAt' in step).toBe(false);
  });

  test('a hook keeps its metadata as stored', () => {
    const hook = hookFromWire({
      runId: 'wrun_01JD',
      hookId: 'hook_01',
      token: 'tok',
      metadata: [{ customData: 1 }, 'my-custom-data'],
      ownerId: 'o',
      projectId: 'p',
      environment: 'e',
      createdAt: T0,
    });
    expect(hook.metadata).toEqual([{ customData: 1 }, 'my-custom-data']);
    expect(hook.createdAt).toEqual(new Date(T0));
  });

  test('wait_created resumeAt: ms on the wire, a Date for the DevKit, both ways', () => {
    const resumeAt = new Date(T0 + 60_000);
    expect(
      eventToWire({ eventType: 'wait_created', correlationId: 'wait_1', eventData: { resumeAt } })
    ).toEqual({ eventType: 'wait_created', correlationId: 'wait_1', eventData: { resumeAt: T0 + 60_000 } });

    const event = eventFromWire({
      runId: 'wrun_01JD',
      eventId: 'evnt_01',
      eventType: 'wait_created',
      correlationId: 'wait_1',
      eventData: { resumeAt: T0 + 60_000 },
      createdAt: T0,
    });
    expect(event.createdAt).toEqual(new Date(T0));
    expect((event as { eventData: { resumeAt: Date } }).eventData.resumeAt).toEqual(resumeAt);
  });

  test('other events pass their data through; absent fields are not sent', () => {
    expect(eventToWire({ eventType: 'step_started', correlationId: 'step_1' })).toEqual({
      eventType: 'step_started',
      correlationId: 'step_1',
    });
    const event = eventFromWire({
      runId: 'wrun_01JD',
      eventId: 'evnt_02',
      eventType: 'step_failed',
      correlationId: 'step_1',
      eventData: { error: 'FatalError: no', stack: 's', fatal: true },
      createdAt: T0,
    });
    expect(event).toMatchObject({ eventData: { error: 'FatalError: no', fatal: true } });
    expect(() =>
      eventFromWire({ runId: 'r', eventId: 'e', eventType: 'mystery', createdAt: T0 })
    ).toThrow(/event.*schema/);
  });

  test('step updates send retryAfter in ms and leave out what is not set', () => {
    expect(stepUpdateToWire({ status: 'pending', retryAfter: new Date(T0) })).toEqual({
      status: 'pending',
      retryAfter: T0,
    });
    expect(stepUpdateToWire({ status: 'running', attempt: 2 })).toEqual({ status: 'running', attempt: 2 });
  });

  test('pages keep cursor and hasMore', () => {
    const page = pageFromWire({ data: [1, 2], cursor: 'c2', hasMore: true }, (x) => Number(x) * 2);
    expect(page).toEqual({ data: [2, 4], cursor: 'c2', hasMore: true });
    expect(pageFromWire({ data: [], cursor: null, hasMore: false }, (x) => x)).toEqual({
      data: [],
      cursor: null,
      hasMore: false,
    });
  });

  test('timestamp helpers', () => {
    expect(toDate(T0, 'x')).toEqual(new Date(T0));
    expect(toDate(undefined, 'x')).toBeUndefined();
    expect(toDate(null, 'x')).toBeUndefined();
    expect(() => toDate('soon', 'x')).toThrow(/x/);
    expect(toMillis(new Date(T0), 'x')).toBe(T0);
    expect(toMillis(new Date(T0).toISOString(), 'x')).toBe(T0);
    expect(toMillis(undefined, 'x')).toBeUndefined();
  });
});
