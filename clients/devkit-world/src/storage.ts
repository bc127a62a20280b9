/**
 * The World's storage (`runs`, `steps`, `events`, `hooks`) on the server's `/v1/devkit` routes.
 * Every write is an event (`events.create`); the rest are reads. Each call is one request.
 */
import type {
  AttributeChange,
  CreateEventParams,
  Event,
  EventResult,
  ExperimentalSetAttributesResult,
  Hook,
  PaginatedResponse,
  PaginationOptions,
  ResolveData,
  Storage,
} from '@workflow/world';
import type { DevkitWorldConfig } from './config.js';
import { contractError } from './errors.js';
import { call, type Query, seg } from './http.js';
import { resultWithDates, withDates } from './wire.js';

const HOOK_EVENTS_REQUIRING_A_HOOK = new Set(['hook_received', 'hook_disposed']);

function pageQuery(pagination: PaginationOptions | undefined, resolveData: ResolveData | undefined): Query {
  return {
    limit: pagination?.limit,
    cursor: pagination?.cursor,
    sortOrder: pagination?.sortOrder,
    resolveData,
  };
}

function asObject(value: unknown, path: string, what: string): Record<string, unknown> {
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    throw contractError({ method: 'GET', url: path }, `the worlds server sent ${what} that is not an object`);
  }
  return value as Record<string, unknown>;
}

/** A page from the wire: each item with its dates. */
export function pageFromWire<T>(value: unknown, path: string): PaginatedResponse<T> {
  const page = asObject(value, path, 'a page');
  if (!Array.isArray(page.data)) {
    throw contractError({ method: 'GET', url: path }, 'the worlds server sent a page without data');
  }
  return {
    data: page.data.map((item) => withDates(item) as T),
    cursor: typeof page.cursor === 'string' && page.cursor !== '' ? page.cursor : null,
    hasMore: page.hasMore === true,
  };
}

/** An entity from the wire, with its dates. */
export function entityFromWire<T>(value: unknown, path: string, what: string): T {
  return withDates(asObject(value, path, what)) as T;
}

/** With `resolveData: 'none'` a hook comes without its metadata. */
function hookData(hook: Hook, resolveData: ResolveData | undefined): Hook {
  if (resolveData !== 'none') return hook;
  const { metadata: _metadata, ...rest } = hook;
  return rest as Hook;
}

export function createStorage(getConfig: () => DevkitWorldConfig): Storage {
  const get = async <T>(path: string, query: Query, what: string, context?: Parameters<typeof call>[1]['context']) =>
    entityFromWire<T>(await call(getConfig(), { method: 'GET', path, query, context }), path, what);
  const list = async <T>(path: string, query: Query) =>
    pageFromWire<T>(await call(getConfig(), { method: 'GET', path, query }), path);

  const events: Storage['events'] = {
    async create(runId: string | null, event: unknown, params?: CreateEventParams): Promise<EventResult> {
      const data = event as { eventType?: string; correlationId?: string };
      const path = '/v1/devkit/events';
      const answer = await call(getConfig(), {
        method: 'POST',
        path,
        json: { runId, event, params: params ?? {} },
        context: {
          runId: runId ?? undefined,
          hook: data.correlationId,
          notFound: HOOK_EVENTS_REQUIRING_A_HOOK.has(data.eventType ?? '') ? 'hook' : undefined,
        },
      });
      const result = asObject(answer, path, 'an event result') as EventResult;
      resultWithDates(result);
      if (result.events !== undefined && !Array.isArray(result.events)) {
        throw contractError({ method: 'POST', url: path }, 'the worlds server sent `events` that is not a list');
      }
      return result;
    },
    async get(runId, eventId, params) {
      return get<Event>(
        `/v1/devkit/runs/${seg(runId)}/events/${seg(eventId)}`,
        { resolveData: params?.resolveData },
        'an event',
        { runId }
      );
    },
    async list(params) {
      return list<Event>(
        `/v1/devkit/runs/${seg(params.runId)}/events`,
        pageQuery(params.pagination, params.resolveData)
      );
    },
    async listByCorrelationId(params) {
      return list<Event>('/v1/devkit/events', {
        correlationId: params.correlationId,
        ...pageQuery(params.pagination, params.resolveData),
      });
    },
  } as Storage['events'];

  const runs = {
    async get(id: string, params?: { resolveData?: ResolveData }) {
      return get(`/v1/devkit/runs/${seg(id)}`, { resolveData: params?.resolveData }, 'a run', {
        runId: id,
        notFound: 'run',
      });
    },
    async list(params?: {
      workflowName?: string;
      status?: string;
      deploymentId?: string;
      pagination?: PaginationOptions;
      resolveData?: ResolveData;
    }) {
      return list('/v1/devkit/runs', {
        workflowName: params?.workflowName,
        status: params?.status,
        deploymentId: params?.deploymentId,
        ...pageQuery(params?.pagination, params?.resolveData),
      });
    },
    async experimentalSetAttributes(
      runId: string,
      changes: AttributeChange[],
      options?: { allowReservedAttributes?: boolean }
    ): Promise<ExperimentalSetAttributesResult> {
      const path = `/v1/devkit/runs/${seg(runId)}/attributes`;
      const answer = await call<{ attributes?: unknown }>(getConfig(), {
        method: 'POST',
        path,
        json: {
          changes,
          ...(options?.allowReservedAttributes ? { allowReservedAttributes: true } : {}),
        },
        context: { runId, notFound: 'run' },
      });
      const attributes = answer?.attributes;
      if (!attributes || typeof attributes !== 'object' || Array.isArray(attributes)) {
        throw contractError({ method: 'POST', url: path }, 'the worlds server sent no `attributes`');
      }
      return { attributes: attributes as Record<string, string> };
    },
  } as Storage['runs'];

  const steps = {
    async get(runId: string, stepId: string, params?: { resolveData?: ResolveData }) {
      return get(
        `/v1/devkit/runs/${seg(runId)}/steps/${seg(stepId)}`,
        { resolveData: params?.resolveData },
        'a step',
        { runId }
      );
    },
    async list(params: { runId: string; pagination?: PaginationOptions; resolveData?: ResolveData }) {
      return list(
        `/v1/devkit/runs/${seg(params.runId)}/steps`,
        pageQuery(params.pagination, params.resolveData)
      );
    },
  } as Storage['steps'];

  const hooks: Storage['hooks'] = {
    async get(hookId, params) {
      return get<Hook>(`/v1/devkit/hooks/${seg(hookId)}`, { resolveData: params?.resolveData }, 'a hook', {
        hook: hookId,
        notFound: 'hook',
      });
    },
    async getByToken(token, params) {
      // The token travels in the body: it is a secret, kept out of URLs and logs.
      const path = '/v1/devkit/hooks/by-token';
      const answer = await call(getConfig(), {
        method: 'POST',
        path,
        json: { token },
        context: { hook: token, notFound: 'hook' },
      });
      return hookData(entityFromWire<Hook>(answer, path, 'a hook'), params?.resolveData);
    },
    async list(params) {
      return list<Hook>('/v1/devkit/hooks', {
        runId: params.runId,
        ...pageQuery(params.pagination, params.resolveData),
      });
    },
  };

  return { events, runs, steps, hooks };
}
