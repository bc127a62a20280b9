import { WorkflowAPIError, WorkflowRunNotFoundError } from '@workflow/errors';
import { describe, expect, test } from 'vitest';
import { apiError, notSupported, parseErrorBody, runNotFound } from '../../src/errors';

const request = { method: 'POST', url: 'http://127.0.0.1:8080/v1/devkit/runs/wrun_1/steps' };

describe('error mapping', () => {
  test('a server error becomes a WorkflowAPIError with status, code and message', () => {
    const error = apiError(
      409,
      JSON.stringify({ code: 'conflict', message: 'step step_1 exists', details: { stepId: 'step_1' } }),
      request
    );
    expect(WorkflowAPIError.is(error)).toBe(true);
    expect(error.name).toBe('WorkflowAPIError');
    expect(error.status).toBe(409);
    expect(error.code).toBe('conflict');
    expect(error.message).toContain('step step_1 exists');
    expect(error.details).toEqual({ stepId: 'step_1' });
  });

  test('410 keeps its status (the DevKit treats it as "the run has finished")', () => {
    const error = apiError(410, '{"code":"gone","message":"run finished"}', request);
    expect(error.status).toBe(410);
  });

  test('a body that is not JSON still gives a message', () => {
    expect(apiError(502, 'Bad Gateway', request).message).toContain('Bad Gateway');
    expect(apiError(500, '', request).message).toContain('HTTP 500');
    expect(parseErrorBody('{"error":{"code":"x","message":"y"}}')).toEqual({
      code: 'x',
      message: 'y',
      details: undefined,
    });
  });

  test('404 from runs.get becomes WorkflowRunNotFoundError with the run id', () => {
    const error = runNotFound(apiError(404, '{"code":"not_found","message":"no run"}', request), 'wrun_9');
    expect(WorkflowRunNotFoundError.is(error)).toBe(true);
    expect((error as WorkflowRunNotFoundError).runId).toBe('wrun_9');
    const other = apiError(500, '', request);
    expect(runNotFound(other, 'wrun_9')).toBe(other);
  });

  test('what the World does not do is a 501', () => {
    const error = notSupported('pausing a run');
    expect(WorkflowAPIError.is(error)).toBe(true);
    expect(error.status).toBe(501);
  });
});
