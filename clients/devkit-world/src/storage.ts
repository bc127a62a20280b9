/**
 * Runs, steps, events and hooks, on the server's `/v1/devkit` routes.
 */
import type { PaginationOptions, Storage } from '@workflow/world';
import type { DevkitWorldConfig } from './config';
import {
  eventFromWire,
  eventToWire,
  filterEvent,
  filterHook,
  filterRun,
  filterStep,
  hookFromWire,
  pageFromWire,
  runFromWire,
  stepFromWire,
  stepUpdateToWire,
} from './convert';
import { requeueStep } from './continuity';
import { notSupported, runNotFound } from './errors';
import { type CallOptions, call, type Query, seg } from './http';

const BASE = '/v1/devkit';

/** `limit` and `cursor` of a list call. */
function pageQuery(pagination: PaginationOptions | undefined): Query {
  return { limit: pagination?.limit, cursor: pagination?.cursor };
}

/** `limit`, `cursor` and `sortOrder` (for the routes that sort by creation time). */
function sortedPageQuery(
  pagination: PaginationOptions | undefined,
  defaultOrder?: 'asc' | 'desc'
): Query {
  return { ...pageQuery(pagination), sortOrder: pagination?.sortOrder ?? defaultOrder };
}

/** The storage half of the World. */
export function createStorage(getConfig: () => DevkitWorldConfig): Storage {
  const request = <T = unknown>(options: CallOptions) => call<T>(getConfig(), options);
  const get = (path: string, query?: Query) =>
    request({ method: 'GET', path: `${BASE}${path}`, query });
  const post = (path: string, json?: unknown) =>
    request({ method: 'POST', path: `${BASE}${path}`, json });
  const patch = (path: string, json: unknown) =>
    request({ method: 'PATCH', path: `${BASE}${path}`, json });

  const runs: Storage['runs'] = {
    async create(data) {
      const body: Record<string, unknown> = {
        deploymentId: data.deploymentId,
        workflowName: data.workflowName,
        input: data.input,
      };
      if (data.executionContext !== undefined) body.executionContext = data.executionContext;
      return runFromWire(await post('/runs', body));
    },
    async get(id, params) {
      try {
        return filterRun(runFromWire(await get(`/runs/${seg(id)}`)), params?.resolveData);
      } catch (error) {
        throw runNotFound(error, id);
      }
    },
    async update(id, data) {
      const body: Record<string, unknown> = {};
      if (data.status !== undefined) body.status = data.status;
      if (data.output !== undefined) body.output = data.output;
      if (data.error !== undefined) body.error = data.error;
      if (data.executionContext !== undefined) body.executionContext = data.executionContext;
      return runFromWire(await patch(`/runs/${seg(id)}`, body));
    },
    async list(params) {
      const page = pageFromWire(
        await get('/runs', {
          workflowName: params?.workflowName,
          status: params?.status,
          ...sortedPageQuery(params?.pagination),
        }),
        runFromWire
      );
      return { ...page, data: page.data.map((run) => filterRun(run, params?.resolveData)) };
    },
    async cancel(id, params) {
      return filterRun(runFromWire(await post(`/runs/${seg(id)}/cancel`)), params?.resolveData);
    },
    async pause() {
      throw notSupported('pausing a run');
    },
    async resume() {
      throw notSupported('resuming a paused run');
    },
  };

  const steps: Storage['steps'] = {
    async create(runId, data) {
      try {
        return stepFromWire(
          await post(`/runs/${seg(runId)}/steps`, {
            stepId: data.stepId,
            stepName: data.stepName,
            input: data.input,
          })
        );
      } catch (error) {
        // The step exists: if it never started, its message may have been lost between the
        // two calls that made them (see continuity.ts). The 409 is the runtime's answer still.
        // The server's 409 says what the step is, and the run's name and start.
        const refused = error as { status?: unknown; details?: unknown };
        const details = refused.details as
          | { step?: unknown; workflowName?: unknown; startedAt?: unknown }
          | undefined;
        if (refused.status === 409 && details?.step && typeof details.workflowName === 'string') {
          const step = stepFromWire(details.step);
          const startedAt =
            typeof details.startedAt === 'number' ? new Date(details.startedAt) : undefined;
          await requeueStep(getConfig(), step, { workflowName: details.workflowName, startedAt });
        }
        throw error;
      }
    },
    async get(runId, stepId, params) {
      const path =
        runId === undefined
          ? `/steps/${seg(stepId)}`
          : `/runs/${seg(runId)}/steps/${seg(stepId)}`;
      return filterStep(stepFromWire(await get(path)), params?.resolveData);
    },
    async update(runId, stepId, data) {
      return stepFromWire(
        await patch(`/runs/${seg(runId)}/steps/${seg(stepId)}`, stepUpdateToWire(data))
      );
    },
    async list(params) {
      const page = pageFromWire(
        await get(`/runs/${seg(params.runId)}/steps`, pageQuery(params.pagination)),
        stepFromWire
      );
      return { ...page, data: page.data.map((step) => filterStep(step, params.resolveData)) };
    },
  };

  const events: Storage['events'] = {
    async create(runId, data, params) {
      return filterEvent(
        eventFromWire(await post(`/runs/${seg(runId)}/events`, eventToWire(data))),
        params?.resolveData
      );
    },
    async list(params) {
      // Events come oldest first unless asked otherwise (as in the reference worlds).
      const page = pageFromWire(
        await get(
          `/runs/${seg(params.runId)}/events`,
          sortedPageQuery(params.pagination, 'asc')
        ),
        eventFromWire
      );
      return { ...page, data: page.data.map((event) => filterEvent(event, params.resolveData)) };
    },
    async listByCorrelationId(params) {
      const page = pageFromWire(
        await get('/events', {
          correlationId: params.correlationId,
          ...sortedPageQuery(params.pagination, 'asc'),
        }),
        eventFromWire
      );
      return { ...page, data: page.data.map((event) => filterEvent(event, params.resolveData)) };
    },
  };

  const hooks: Storage['hooks'] = {
    async create(runId, data) {
      const body: Record<string, unknown> = { hookId: data.hookId, token: data.token };
      if (data.metadata !== undefined) body.metadata = data.metadata;
      return hookFromWire(await post(`/runs/${seg(runId)}/hooks`, body));
    },
    async get(hookId, params) {
      return filterHook(hookFromWire(await get(`/hooks/${seg(hookId)}`)), params?.resolveData);
    },
    async getByToken(token, params) {
      return filterHook(hookFromWire(await post('/hooks/by-token', { token })), params?.resolveData);
    },
    async list(params) {
      const page = pageFromWire(
        await get('/hooks', { runId: params.runId, ...pageQuery(params.pagination) }),
        hookFromWire
      );
      return { ...page, data: page.data.map((hook) => filterHook(hook, params.resolveData)) };
    },
    async dispose(hookId, params) {
      return filterHook(hookFromWire(await post(`/hooks/${seg(hookId)}/dispose`)), params?.resolveData);
    },
  };

  return { runs, steps, events, hooks };
}
