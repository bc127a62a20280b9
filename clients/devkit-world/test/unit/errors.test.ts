import {
  EntityConflictError,
  HookNotFoundError,
  PreconditionFailedError,
  RunExpiredError,
  RunNotSupportedError,
  ThrottleError,
  TooEarlyError,
  WorkflowRunNotFoundError,
  WorkflowWorldError,
} from '@workflow/errors';
import { SPEC_VERSION_CURRENT } from '@workflow/world';
import { describe, expect, test } from 'vitest';
import { errorForStatus, parseErrorBody, retryAfterSeconds, transportError } from '../../src/errors';

const request = { method: 'POST', url: 'http://127.0.0.1:8080/v1/devkit/events' };

function body(code: string, message: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ error: { code, message, ...extra } });
}

describe('error mapping (PROTOCOL.md)', () => {
  test('400 is a WorkflowWorldError with status 400 (the runtime reads it as a validation failure)', () => {
    const error = errorForStatus(400, body('invalid', 'eventType is missing'), request);
    expect(WorkflowWorldError.is(error)).toBe(true);
    expect((error as WorkflowWorldError).status).toBe(400);
    expect((error as WorkflowWorldError).code).toBe('invalid');
    expect(error.message).toContain('eventType is missing');
    expect(error.message).toContain('POST /v1/devkit/events');
  });

  test('404 run_not_found is WorkflowRunNotFoundError with the run id', () => {
    const error = errorForStatus(404, body('run_not_found', 'no run'), request, { runId: 'wrun_9' });
    expect(WorkflowRunNotFoundError.is(error)).toBe(true);
    expect((error as WorkflowRunNotFoundError).runId).toBe('wrun_9');
  });

  test('404 hook_not_found is HookNotFoundError with the hook', () => {
    const error = errorForStatus(404, body('hook_not_found', 'disposed'), request, { hook: 'tok' });
    expect(HookNotFoundError.is(error)).toBe(true);
    expect((error as HookNotFoundError).token).toBe('tok');
  });

  test('another 404 is what the call says a 404 means, else a WorkflowWorldError with status 404', () => {
    const forRun = errorForStatus(404, body('not_found', 'x'), request, { runId: 'wrun_1', notFound: 'run' });
    expect(WorkflowRunNotFoundError.is(forRun)).toBe(true);
    const forHook = errorForStatus(404, '', request, { hook: 'h', notFound: 'hook' });
    expect(HookNotFoundError.is(forHook)).toBe(true);
    const step = errorForStatus(404, body('step_not_found', 'no step'), request);
    expect(WorkflowWorldError.is(step)).toBe(true);
    expect((step as WorkflowWorldError).status).toBe(404);
    expect((step as WorkflowWorldError).code).toBe('step_not_found');
    // The code wins over the call's default.
    const run = errorForStatus(404, body('run_not_found', 'x'), request, { runId: 'wrun_2', notFound: 'hook' });
    expect(WorkflowRunNotFoundError.is(run)).toBe(true);
  });

  test('409 is EntityConflictError, 410 RunExpiredError, 412 PreconditionFailedError', () => {
    const conflict = errorForStatus(409, body('conflict', 'step exists'), request);
    expect(EntityConflictError.is(conflict)).toBe(true);
    expect(conflict.message).toContain('step exists');
    expect((conflict as EntityConflictError).status).toBe(409);
    expect(RunExpiredError.is(errorForStatus(410, body('run_ended', 'ended'), request))).toBe(true);
    expect(PreconditionFailedError.is(errorForStatus(412, body('stale', 'stale'), request))).toBe(true);
  });

  test('425 is TooEarlyError with retryAfter in seconds (number, ISO time or header)', () => {
    const n = errorForStatus(425, body('too_early', 'wait', { retryAfter: 3 }), request);
    expect(TooEarlyError.is(n)).toBe(true);
    expect((n as TooEarlyError).retryAfter).toBe(3);
    const at = new Date(Date.now() + 4_500).toISOString();
    const iso = errorForStatus(425, body('too_early', 'wait', { retryAfter: at }), request);
    expect((iso as TooEarlyError).retryAfter).toBeGreaterThanOrEqual(4);
    expect((iso as TooEarlyError).retryAfter).toBeLessThanOrEqual(5);
    const header = errorForStatus(425, body('too_early', 'wait'), { ...request, retryAfter: '7' });
    expect((header as TooEarlyError).retryAfter).toBe(7);
    expect(retryAfterSeconds(parseErrorBody(body('x', 'y', { retryAfter: 1.2 })), request)).toBe(2);
  });

  test('426 is RunNotSupportedError naming the run spec version and this World one', () => {
    const error = errorForStatus(426, body('run_not_supported', 'newer', { runSpecVersion: 7 }), request);
    expect(RunNotSupportedError.is(error)).toBe(true);
    expect((error as RunNotSupportedError).runSpecVersion).toBe(7);
    expect((error as RunNotSupportedError).worldSpecVersion).toBe(SPEC_VERSION_CURRENT);
    const unnamed = errorForStatus(426, body('run_not_supported', 'newer'), request);
    expect((unnamed as RunNotSupportedError).runSpecVersion).toBeGreaterThan(SPEC_VERSION_CURRENT);
  });

  test('429 is ThrottleError; 5xx a WorkflowWorldError with its status', () => {
    const throttle = errorForStatus(429, '', { ...request, retryAfter: '2' });
    expect(ThrottleError.is(throttle)).toBe(true);
    expect((throttle as ThrottleError).retryAfter).toBe(2);
    const failed = errorForStatus(503, 'Service Unavailable', request);
    expect(WorkflowWorldError.is(failed)).toBe(true);
    expect((failed as WorkflowWorldError).status).toBe(503);
    expect(failed.message).toContain('Service Unavailable');
    expect(errorForStatus(500, '', request).message).toContain('HTTP 500');
  });

  test('an unreachable server is a WorkflowWorldError with code TRANSPORT (retried by the runtime)', () => {
    const error = transportError(request, new TypeError('fetch failed', { cause: new Error('ECONNREFUSED') }));
    expect(WorkflowWorldError.is(error)).toBe(true);
    expect(error.code).toBe('TRANSPORT');
    expect(error.status).toBeUndefined();
    expect(error.message).toContain('http://127.0.0.1:8080');
    expect(error.message).toContain('ECONNREFUSED');
  });

  test('error bodies: wrapped, flat, text', () => {
    expect(parseErrorBody(body('x', 'y'))).toMatchObject({ code: 'x', message: 'y' });
    expect(parseErrorBody('{"code":"x","message":"y"}')).toMatchObject({ code: 'x', message: 'y' });
    expect(parseErrorBody('Bad Gateway')).toMatchObject({ message: 'Bad Gateway' });
    expect(parseErrorBody('')).toEqual({ fields: {} });
  });
});

describe('the server error shape as it is today', () => {
  test('a flat {code, message, details} with NOT_FOUND and details.what', () => {
    const run = errorForStatus(
      404,
      JSON.stringify({ code: 'NOT_FOUND', message: 'no run wrun_7', details: { what: 'run', id: 'wrun_7' } }),
      request
    );
    expect(WorkflowRunNotFoundError.is(run)).toBe(true);
    expect((run as WorkflowRunNotFoundError).runId).toBe('wrun_7');
    const hook = errorForStatus(
      404,
      JSON.stringify({ code: 'NOT_FOUND', message: 'no hook', details: { what: 'hook', id: 'hook_3' } }),
      request
    );
    expect(HookNotFoundError.is(hook)).toBe(true);
    expect((hook as HookNotFoundError).token).toBe('hook_3');
    const step = errorForStatus(
      404,
      JSON.stringify({ code: 'NOT_FOUND', message: 'no step', details: { what: 'step', id: 'step_1' } }),
      request
    );
    expect(WorkflowWorldError.is(step)).toBe(true);
    expect(errorForStatus(404, JSON.stringify({ code: 'RUN_NOT_FOUND', message: 'x' }), request).name).toBe(
      'WorkflowRunNotFoundError'
    );
  });

  test('retryAfter and runSpecVersion may sit in details', () => {
    const early = errorForStatus(
      425,
      JSON.stringify({ code: 'TOO_EARLY', message: 'wait', details: { retryAfter: 4 } }),
      request
    );
    expect((early as TooEarlyError).retryAfter).toBe(4);
    const newer = errorForStatus(
      426,
      JSON.stringify({ code: 'RUN_NOT_SUPPORTED', message: 'newer', details: { runSpecVersion: 6 } }),
      request
    );
    expect((newer as RunNotSupportedError).runSpecVersion).toBe(6);
    // As the server answers today: UPGRADE_REQUIRED, the version in the message only.
    const today = errorForStatus(
      426,
      JSON.stringify({ code: 'UPGRADE_REQUIRED', message: 'run wrun_1 was made by a DevKit runtime of spec version 7; this server speaks version 5', details: null }),
      request
    );
    expect(RunNotSupportedError.is(today)).toBe(true);
    expect((today as RunNotSupportedError).runSpecVersion).toBe(7);
  });
});
