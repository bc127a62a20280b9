/**
 * Errors as the DevKit expects them. The DevKit recognizes errors by `name` (and, for
 * `WorkflowAPIError`, by `status`: 409 means "already exists", 410 "the run has finished"), so
 * the server's error answers are turned into the classes of `@workflow/errors`.
 */
import { WorkflowAPIError, WorkflowRunNotFoundError } from '@workflow/errors';

export { WorkflowAPIError, WorkflowRunNotFoundError };

/** The body of a worlds-engine error answer. */
export interface ServerErrorBody {
  code?: string;
  message?: string;
  details?: unknown;
}

/** A `WorkflowAPIError`, with the server's `details` when it sent some. */
export type ApiError = WorkflowAPIError & { details?: unknown };

/** Reads an error body: the server's JSON `{code, message, details}`, or any text. */
export function parseErrorBody(text: string): ServerErrorBody {
  const trimmed = text.trim();
  if (trimmed === '') return {};
  try {
    const parsed: unknown = JSON.parse(trimmed);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
      const body = parsed as Record<string, unknown>;
      // `{"error": {...}}` is accepted too, in case a proxy wraps the answer.
      const inner =
        body.error && typeof body.error === 'object'
          ? (body.error as Record<string, unknown>)
          : body;
      return {
        code: typeof inner.code === 'string' ? inner.code : undefined,
        message: typeof inner.message === 'string' ? inner.message : undefined,
        details: inner.details,
      };
    }
    if (typeof parsed === 'string') return { message: parsed };
  } catch {
    // not JSON: use the text as it is
  }
  return { message: trimmed.length > 500 ? `${trimmed.slice(0, 500)}…` : trimmed };
}

/**
 * The error for a non-2xx answer: a `WorkflowAPIError` carrying the HTTP status, the server's
 * code and message.
 */
export function apiError(
  status: number,
  bodyText: string,
  request: { method: string; url: string },
  hint?: string
): ApiError {
  const body = parseErrorBody(bodyText);
  let message = body.message ?? `HTTP ${status}`;
  if (hint) message = `${message} (${hint})`;
  const error: ApiError = new WorkflowAPIError(
    `${request.method} ${pathOf(request.url)}: ${message}`,
    { status, code: body.code, url: request.url }
  );
  if (body.details !== undefined) error.details = body.details;
  return error;
}

/** A `WorkflowAPIError` with no status: the server could not be reached. */
export function unreachable(
  request: { method: string; url: string },
  cause: unknown
): ApiError {
  const reason = describeCause(cause);
  return new WorkflowAPIError(
    `${request.method} ${pathOf(request.url)}: could not reach the worlds server at ${originOf(request.url)}: ${reason}`,
    { url: request.url, cause }
  );
}

/** For `runs.get`: a 404 becomes `WorkflowRunNotFoundError` with the run id. */
export function runNotFound(error: unknown, runId: string): unknown {
  if (isStatus(error, 404)) {
    const notFound = new WorkflowRunNotFoundError(runId);
    (notFound as { cause?: unknown }).cause = error;
    return notFound;
  }
  return error;
}

/** A `WorkflowAPIError` for something this World does not do; the server is not called. */
export function notSupported(what: string): ApiError {
  return new WorkflowAPIError(`${what} is not supported by the worlds-engine World`, {
    status: 501,
    code: 'not_supported',
  });
}

/** Whether `error` is a `WorkflowAPIError` (by name, as the DevKit checks) with this status. */
export function isStatus(error: unknown, status: number): boolean {
  return WorkflowAPIError.is(error) && (error as WorkflowAPIError).status === status;
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

function pathOf(url: string): string {
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
