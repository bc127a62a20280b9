/**
 * Records between the wire and the DevKit. On the wire every timestamp is an integer of
 * milliseconds since the Unix epoch and absent fields are left out; the DevKit wants `Date`s and
 * `undefined` (never `null`). Each record is checked against the DevKit's own zod schema, so
 * what the World returns has exactly the shape the DevKit expects.
 */
import {
  type CreateEventRequest,
  type Event,
  EventSchema,
  type Hook,
  HookSchema,
  type PaginatedResponse,
  type ResolveData,
  type Step,
  StepSchema,
  type UpdateStepRequest,
  type WorkflowRun,
  WorkflowRunSchema,
} from '@workflow/world';

type Wire = Record<string, unknown>;

/** A wire timestamp (ms) as a `Date`; `undefined` when absent. */
export function toDate(value: unknown, field: string): Date | undefined {
  if (value === undefined || value === null) return undefined;
  if (value instanceof Date) return value;
  if (typeof value === 'number' && Number.isFinite(value)) return new Date(value);
  if (typeof value === 'string' && value.trim() !== '') {
    const asNumber = Number(value);
    const date = Number.isFinite(asNumber) ? new Date(asNumber) : new Date(value);
    if (!Number.isNaN(date.getTime())) return date;
  }
  throw new Error(`field ${field}: ${JSON.stringify(value)} is not a timestamp`);
}

/** A `Date` (or ms, or a date string) as wire milliseconds; `undefined` when absent. */
export function toMillis(value: unknown, field: string): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (value instanceof Date) {
    const ms = value.getTime();
    if (Number.isNaN(ms)) throw new Error(`field ${field}: invalid Date`);
    return ms;
  }
  if (typeof value === 'number' && Number.isFinite(value)) return Math.round(value);
  if (typeof value === 'string') {
    const ms = Date.parse(value);
    if (!Number.isNaN(ms)) return ms;
  }
  throw new Error(`field ${field}: ${JSON.stringify(value)} is not a date`);
}

function asObject(value: unknown, what: string): Wire {
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    throw new Error(`the worlds server sent a ${what} that is not an object`);
  }
  return { ...(value as Wire) };
}

/** Removes the listed fields when they are `null` (absent, for the DevKit). */
function dropNulls(record: Wire, fields: readonly string[]): void {
  for (const field of fields) {
    if (record[field] === null) delete record[field];
  }
}

function convertDates(record: Wire, fields: readonly string[], what: string): void {
  for (const field of fields) {
    if (field in record) {
      const date = toDate(record[field], `${what}.${field}`);
      if (date === undefined) delete record[field];
      else record[field] = date;
    }
  }
}

function check<T>(
  schema: { safeParse(value: unknown): { success: true; data: T } | { success: false; error: unknown } },
  record: Wire,
  what: string
): T {
  const result = schema.safeParse(record);
  if (!result.success) {
    const id = record.runId ?? '';
    throw new Error(
      `the worlds server sent a ${what}${id ? ` of ${String(id)}` : ''} that does not fit the DevKit's schema: ${describeIssues(result.error)}`
    );
  }
  return result.data;
}

function describeIssues(error: unknown): string {
  const issues = (error as { issues?: Array<{ path?: unknown[]; message?: string }> }).issues;
  if (!Array.isArray(issues)) return String(error);
  return issues
    .slice(0, 5)
    .map((issue) => `${(issue.path ?? []).join('.') || '(record)'}: ${issue.message ?? ''}`)
    .join('; ');
}

const RUN_DATES = ['startedAt', 'completedAt', 'createdAt', 'updatedAt'] as const;
const STEP_DATES = ['startedAt', 'completedAt', 'createdAt', 'updatedAt', 'retryAfter'] as const;

/** A run from the wire. */
export function runFromWire(value: unknown): WorkflowRun {
  const run = asObject(value, 'run');
  dropNulls(run, ['error', 'executionContext', 'startedAt', 'completedAt']);
  if (run.status !== 'completed' && run.output === null) delete run.output;
  convertDates(run, RUN_DATES, 'run');
  return check(WorkflowRunSchema, run, 'run') as WorkflowRun;
}

/** A step from the wire. */
export function stepFromWire(value: unknown): Step {
  const step = asObject(value, 'step');
  dropNulls(step, ['error', 'startedAt', 'completedAt', 'retryAfter']);
  convertDates(step, STEP_DATES, 'step');
  return check(StepSchema, step, 'step') as Step;
}

/** A hook from the wire. */
export function hookFromWire(value: unknown): Hook {
  const hook = asObject(value, 'hook');
  dropNulls(hook, ['metadata']);
  convertDates(hook, ['createdAt'], 'hook');
  return check(HookSchema, hook, 'hook') as Hook;
}

/** An event from the wire (`wait_created`'s `resumeAt` becomes a `Date`). */
export function eventFromWire(value: unknown): Event {
  const event = asObject(value, 'event');
  dropNulls(event, ['correlationId', 'eventData']);
  convertDates(event, ['createdAt'], 'event');
  if (event.eventType === 'wait_created' && event.eventData && typeof event.eventData === 'object') {
    const data = { ...(event.eventData as Wire) };
    const resumeAt = toDate(data.resumeAt, 'event.eventData.resumeAt');
    if (resumeAt !== undefined) data.resumeAt = resumeAt;
    event.eventData = data;
  }
  return check(EventSchema, event, 'event') as Event;
}

/** A page from the wire, its items converted by `item`. */
export function pageFromWire<T>(value: unknown, item: (value: unknown) => T): PaginatedResponse<T> {
  const page = asObject(value, 'page');
  if (!Array.isArray(page.data)) throw new Error('the worlds server sent a page without data');
  const cursor = typeof page.cursor === 'string' ? page.cursor : null;
  return { data: page.data.map(item), cursor, hasMore: page.hasMore === true };
}

/** An event to create, for the wire (`wait_created`'s `resumeAt` in ms). */
export function eventToWire(data: CreateEventRequest): Wire {
  const wire: Wire = { eventType: data.eventType };
  if (data.correlationId !== undefined) wire.correlationId = data.correlationId;
  if ('eventData' in data && data.eventData !== undefined) {
    let eventData = data.eventData as Wire;
    if (data.eventType === 'wait_created') {
      eventData = {
        ...eventData,
        resumeAt: toMillis(eventData.resumeAt, 'eventData.resumeAt'),
      };
    }
    wire.eventData = eventData;
  }
  return wire;
}

/** A step update, for the wire (`retryAfter` in ms). */
export function stepUpdateToWire(data: UpdateStepRequest): Wire {
  const wire: Wire = {};
  if (data.status !== undefined) wire.status = data.status;
  if (data.attempt !== undefined) wire.attempt = data.attempt;
  if (data.output !== undefined) wire.output = data.output;
  if (data.error !== undefined) wire.error = data.error;
  if (data.retryAfter !== undefined) wire.retryAfter = toMillis(data.retryAfter, 'retryAfter');
  return wire;
}

// With `resolveData: 'none'` the DevKit expects the payloads left out, as the reference
// worlds do: the server always sends them, so they are dropped here.

export function filterRun(run: WorkflowRun, resolveData: ResolveData | undefined): WorkflowRun {
  if (resolveData !== 'none') return run;
  return { ...run, input: [], output: undefined } as WorkflowRun;
}

export function filterStep(step: Step, resolveData: ResolveData | undefined): Step {
  if (resolveData !== 'none') return step;
  return { ...step, input: [], output: undefined };
}

export function filterEvent(event: Event, resolveData: ResolveData | undefined): Event {
  if (resolveData !== 'none') return event;
  const { eventData: _eventData, ...rest } = event as Event & { eventData?: unknown };
  return rest as Event;
}

export function filterHook(hook: Hook, resolveData: ResolveData | undefined): Hook {
  if (resolveData !== 'none') return hook;
  const { metadata: _metadata, ...rest } = hook;
  return rest;
}
