/**
 * The server's error answers as the DevKit's error classes (`@workflow/errors`).
 *
 * The runtime tells errors apart by `name` (`EntityConflictError.is(err)` and so on), so each
 * status of PROTOCOL.md becomes its class:
 *
 * | status | error |
 * |---|---|
 * | 400 | `WorkflowWorldError` (`status` 400: the runtime treats it as a validation failure) |
 * | 404 | `WorkflowRunNotFoundError` (`run_not_found`), `HookNotFoundError` (`hook_not_found`), otherwise `WorkflowWorldError` with `status` 404 |
 * | 409 | `EntityConflictError` |
 * | 410 | `RunExpiredError` |
 * | 412 | `PreconditionFailedError` |
 * | 425 | `TooEarlyError` with `retryAfter` (seconds) |
 * | 426 | `RunNotSupportedError` |
 * | 429 | `ThrottleError` with `retryAfter` (after the client's own retries) |
 * | other | `WorkflowWorldError` with `status` (5xx: the runtime retries the delivery) |
 *
 * A server that cannot be reached is a `WorkflowWorldError` with `code: 'TRANSPORT'`, and an
 * answer that is not JSON one with `code: 'PARSE_ERROR'`: the runtime retries the first and
 * counts the second as the World's fault.
 */
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

export {
  EntityConflictError,
  HookNotFoundError,
  PreconditionFailedError,
  RunExpiredError,
  RunNotSupportedError,
  ThrottleError,
  TooEarlyError,
  WorkflowRunNotFoundError,
  WorkflowWorldError,
};

/** The body of a worlds-engine error answer, `{"error": {"code", "message", ...}}`. */
export interface ServerErrorBody {
  code?: string;
  message?: string;
  /** Every other field of the error object (`retryAfter`, `runSpecVersion`, `details`, ...). */
  fields: Record<string, unknown>;
}

/** Reads an error body: the server's JSON, or any text. */
export function parseErrorBody(text: string): ServerErrorBody {
  const trimmed = text.trim();
  if (trimmed === '') return { fields: {} };
  try {
    const parsed: unknown = JSON.parse(trimmed);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
      const body = parsed as Record<string, unknown>;
      const inner =
        body.error && typeof body.error === 'object' && !Array.isArray(body.error)
          ? { ...body, ...(body.error as Record<string, unknown>) }
          : body;
      // `details` (the server's usual place for the facts of an error) below the error's own
      // fields.
      const details =
        inner.details && typeof inner.details === 'object' && !Array.isArray(inner.details)
          ? (inner.details as Record<string, unknown>)
          : {};
      return {
        code: typeof inner.code === 'string' ? inner.code : undefined,
        message:
          typeof inner.message === 'string'
            ? inner.message
            : typeof body.error === 'string'
              ? body.error
              : undefined,
        fields: { ...details, ...inner },
      };
    }
    if (typeof parsed === 'string') return { message: parsed, fields: {} };
  } catch {
    // not JSON: the text as it is
  }
  return { message: trimmed.length > 500 ? `${trimmed.slice(0, 500)}…` : trimmed, fields: {} };
}

/** What the call was about, for the errors that name it. */
export interface ErrorContext {
  /** The run the call was about (for `WorkflowRunNotFoundError`). */
  runId?: string;
  /** The hook id or token the call was about (for `HookNotFoundError`). */
  hook?: string;
  /** What a 404 of this call means when its code is neither `run_not_found` nor `hook_not_found`. */
  notFound?: 'run' | 'hook';
}

export interface FailedRequest {
  method: string;
  url: string;
  /** The `Retry-After` header of the answer. */
  retryAfter?: string | null;
}

/** The error for a non-2xx answer. */
export function errorForStatus(
  status: number,
  bodyText: string,
  request: FailedRequest,
  context: ErrorContext = {},
  hint?: string
): Error {
  const body = parseErrorBody(bodyText);
  let message = `${request.method} ${pathOf(request.url)}: ${body.message ?? `HTTP ${status}`}`;
  if (hint) message = `${message} (${hint})`;
  const tag = <E extends WorkflowWorldError>(error: E): E => {
    error.status = status;
    if (body.code !== undefined) error.code = body.code;
    error.url = request.url;
    return error;
  };
  switch (status) {
    case 404: {
      const byCode = notFoundKind(body);
      // What the server's code says, else what a 404 of this call means.
      const kind = byCode ?? context.notFound;
      if (kind === 'run') {
        const runId = context.runId ?? stringField(body.fields, 'runId') ?? stringField(body.fields, 'id') ?? '';
        return withCause(new WorkflowRunNotFoundError(runId), message);
      }
      if (kind === 'hook') {
        const hook =
          context.hook ??
          stringField(body.fields, 'token') ??
          stringField(body.fields, 'hookId') ??
          stringField(body.fields, 'id') ??
          '';
        return withCause(new HookNotFoundError(hook), message);
      }
      break;
    }
    case 409:
      return tag(new EntityConflictError(message));
    case 410:
      return tag(new RunExpiredError(message));
    case 412:
      return tag(new PreconditionFailedError(message, { retryAfter: retryAfterSeconds(body, request) }));
    case 425:
      return tag(new TooEarlyError(message, { retryAfter: retryAfterSeconds(body, request) }));
    case 426:
      return withCause(new RunNotSupportedError(runSpecVersion(body), SPEC_VERSION_CURRENT), message);
    case 429:
      return tag(new ThrottleError(message, { retryAfter: retryAfterSeconds(body, request) }));
    default:
      break;
  }
  return new WorkflowWorldError(message, {
    status,
    code: body.code,
    url: request.url,
    retryAfter: retryAfterSeconds(body, request),
  });
}

/** The server could not be reached (or the connection broke): retryable. */
export function transportError(request: FailedRequest, cause: unknown): WorkflowWorldError {
  return new WorkflowWorldError(
    `${request.method} ${pathOf(request.url)}: could not reach the worlds server at ${originOf(request.url)}: ${describeCause(cause)}`,
    { code: 'TRANSPORT', url: request.url, cause }
  );
}

/** The server answered 2xx with something that is not what the protocol says. */
export function contractError(request: FailedRequest, what: string): WorkflowWorldError {
  return new WorkflowWorldError(`${request.method} ${pathOf(request.url)}: ${what}`, {
    code: 'PARSE_ERROR',
    url: request.url,
  });
}

/**
 * A step's `retryAfter` in seconds: the error's `retryAfter` (seconds, or an ISO time), else the
 * `Retry-After` header (seconds). `undefined` when neither says.
 */
export function retryAfterSeconds(
  body: ServerErrorBody,
  request: FailedRequest,
  nowMs: number = Date.now()
): number | undefined {
  const value = body.fields.retryAfter;
  if (typeof value === 'number' && Number.isFinite(value)) return Math.max(0, Math.ceil(value));
  if (typeof value === 'string' && value.trim() !== '') {
    const asNumber = Number(value);
    if (Number.isFinite(asNumber)) return Math.max(0, Math.ceil(asNumber));
    const at = Date.parse(value);
    if (!Number.isNaN(at)) return Math.max(0, Math.ceil((at - nowMs) / 1000));
  }
  const header = request.retryAfter;
  if (header) {
    const seconds = Number(header);
    if (Number.isFinite(seconds)) return Math.max(0, Math.ceil(seconds));
    const at = Date.parse(header);
    if (!Number.isNaN(at)) return Math.max(0, Math.ceil((at - nowMs) / 1000));
  }
  return undefined;
}

/** The spec version a 426 names for the run (`runSpecVersion` or `specVersion`). */
function runSpecVersion(body: ServerErrorBody): number {
  const details = body.fields.details;
  const candidates = [
    body.fields.runSpecVersion,
    body.fields.specVersion,
    details && typeof details === 'object' ? (details as Record<string, unknown>).runSpecVersion : undefined,
    details && typeof details === 'object' ? (details as Record<string, unknown>).specVersion : undefined,
  ];
  for (const value of candidates) {
    if (typeof value === 'number' && Number.isFinite(value)) return value;
  }
  // Else the version its message names ("... of spec version 6 ..."), else one above this
  // World's: the server said the run needs a newer World without saying which.
  const named = body.message?.match(/spec version (\d+)/i);
  const version = named ? Number(named[1]) : NaN;
  return Number.isFinite(version) && version > SPEC_VERSION_CURRENT ? version : SPEC_VERSION_CURRENT + 1;
}

/**
 * What a 404 is about, from its code (`run_not_found`, `hook_not_found`, in any case) or from
 * `details.what` of a plain `not_found` (`{"what": "run", "id": ...}`).
 */
function notFoundKind(body: ServerErrorBody): 'run' | 'hook' | undefined {
  const code = body.code?.toLowerCase();
  if (code === 'run_not_found') return 'run';
  if (code === 'hook_not_found') return 'hook';
  if (code === 'not_found' || code === undefined) {
    const what = body.fields.what;
    if (what === 'run') return 'run';
    if (what === 'hook') return 'hook';
  }
  return undefined;
}

function stringField(fields: Record<string, unknown>, key: string): string | undefined {
  const value = fields[key];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function withCause<E extends Error>(error: E, serverMessage: string): E {
  (error as { cause?: unknown }).cause = new Error(serverMessage);
  return error;
}

function describeCause(cause: unknown): string {
  if (cause instanceof Error) {
    const inner = (cause as { cause?: unknown }).cause;
    if (inner instanceof Error && inner.message) return `${cause.message} (${inner.message})`;
    if (inner && typeof inner === 'object' && 'code' in inner) {
      return `${cause.message} (${String((inner as { code: unknown }).code)})`;
    }
    return cause.message;
  }
  return String(cause);
}

export function pathOf(url: string): string {
  try {
    const u = new URL(url);
    return `${u.pathname}${u.search}`;
  } catch {
    return url;
  }
}

function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}
