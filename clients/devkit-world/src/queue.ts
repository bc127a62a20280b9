/**
 * The queue: messages are kept and delivered by the worlds server, which POSTs each one back to
 * this app (`/.well-known/workflow/v1/flow` or `/step` under the callback URL) signed with the
 * shared delivery secret. `createQueueHandler` checks the signature and runs the runtime's
 * handler; the answer tells the server what to do next:
 *
 * - `200 {"ok": true}`: done, the message is acknowledged;
 * - `200 {"timeoutSeconds": N}`: deliver the same message again in N seconds;
 * - `500`: the handler failed, retry with backoff (the server dead-letters it in the end);
 * - `503`: this app has no (valid) delivery secret: a mistake of its settings, so the server
 *   keeps the message and retries, and the message runs once the app is fixed;
 * - `400` / `401`: the delivery is malformed or not signed by the server (the server
 *   dead-letters a 4xx at once).
 */
import type { MessageId, Queue, QueueOptions, ValidQueueName } from '@workflow/world';
import { callbackUrl, DEFAULT_DEPLOYMENT_ID, type DevkitWorldConfig } from './config.js';
import { contractError } from './errors.js';
import { call } from './http.js';
import { decodeSecret, deliveryId, verifySignature } from './signature.js';
import { fromWire } from './wire.js';

type Handler = Parameters<Queue['createQueueHandler']>[1];
type Prefix = Parameters<Queue['createQueueHandler']>[0];

/** What `getDeploymentId()` answers: `WORLDS_DEPLOYMENT_ID`, or `worlds`. */
export function deploymentId(config: DevkitWorldConfig): string {
  return config.deploymentId ?? DEFAULT_DEPLOYMENT_ID;
}

/** The body of `POST /v1/devkit/queue` for a `queue()` call. */
export function enqueueBody(
  config: DevkitWorldConfig,
  queueName: string,
  message: unknown,
  opts?: QueueOptions
): Record<string, unknown> {
  const body: Record<string, unknown> = {
    queueName,
    message,
    callbackUrl: callbackUrl(config),
  };
  if (opts?.idempotencyKey !== undefined) body.idempotencyKey = opts.idempotencyKey;
  // A durable delay of the server (fractions of a second are kept); 0 delivers at once.
  if (opts?.delaySeconds !== undefined && opts.delaySeconds > 0) body.delaySeconds = opts.delaySeconds;
  return body;
}

/** Sends a message to the server's queue (`POST /v1/devkit/queue`). */
export async function enqueue(
  config: DevkitWorldConfig,
  queueName: ValidQueueName,
  message: unknown,
  opts?: QueueOptions
): Promise<{ messageId: MessageId }> {
  const path = '/v1/devkit/queue';
  const answer = await call<{ messageId?: unknown }>(config, {
    method: 'POST',
    path,
    json: enqueueBody(config, queueName, message, opts),
  });
  if (!answer || typeof answer.messageId !== 'string' || answer.messageId === '') {
    throw contractError({ method: 'POST', url: path }, `the worlds server sent no messageId for ${queueName}`);
  }
  return { messageId: answer.messageId as MessageId };
}

/** Refusals already logged, so a misconfigured app says why once, not on every delivery. */
const logged = new Set<string>();

function refuse(status: 400 | 401 | 503, reason: string): Response {
  if (status !== 400 && !logged.has(reason)) {
    logged.add(reason);
    console.error(`[worlds-engine world] refusing a delivery: ${reason}`);
  }
  return Response.json({ error: reason }, { status });
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The HTTP handler for deliveries of queues starting with `prefix`. It reads the settings when
 * a request comes in, so it works from any World instance.
 */
export function queueHandler(
  getConfig: () => DevkitWorldConfig,
  prefix: Prefix,
  handler: Handler
): (req: Request) => Promise<Response> {
  return async (req: Request): Promise<Response> => {
    const secret = getConfig().deliverySecret;
    if (!secret) {
      return refuse(
        503,
        'WORLDS_DELIVERY_SECRET is not set, so this app cannot tell deliveries of the worlds server from forged ones: set it to the secret the server signs with'
      );
    }
    let key: Buffer;
    try {
      key = decodeSecret(secret);
    } catch (error) {
      return refuse(503, (error as Error).message);
    }

    const raw = new Uint8Array(await req.arrayBuffer());
    const verified = verifySignature(
      key,
      {
        id: req.headers.get('webhook-id'),
        timestamp: req.headers.get('webhook-timestamp'),
        signature: req.headers.get('webhook-signature'),
      },
      raw
    );
    if (!verified.ok) return refuse(401, verified.reason);

    const queueName = req.headers.get('x-vqs-queue-name');
    const messageId = req.headers.get('x-vqs-message-id');
    const attemptHeader = req.headers.get('x-vqs-message-attempt');
    if (!queueName || !messageId || !attemptHeader) {
      return refuse(
        400,
        'missing headers: x-vqs-queue-name, x-vqs-message-id and x-vqs-message-attempt are required'
      );
    }
    if (verified.id !== deliveryId(messageId, attemptHeader, queueName)) {
      return refuse(
        401,
        'the signed webhook-id does not match x-vqs-message-id, x-vqs-message-attempt and x-vqs-queue-name'
      );
    }
    const attempt = Number(attemptHeader);
    if (!Number.isInteger(attempt) || attempt < 1) {
      return refuse(400, 'x-vqs-message-attempt is not a positive integer');
    }
    if (!queueName.startsWith(prefix)) {
      return refuse(400, `queue ${queueName} is not handled here (this route takes ${prefix}*)`);
    }
    let message: unknown;
    try {
      message = fromWire(JSON.parse(utf8.decode(raw)));
    } catch {
      return refuse(400, 'the body is not JSON (or holds a $bytes value that is not base64)');
    }

    try {
      const result = await handler(message, {
        attempt,
        queueName: queueName as ValidQueueName,
        messageId: messageId as MessageId,
      });
      const timeoutSeconds = (result as { timeoutSeconds?: unknown } | undefined)?.timeoutSeconds;
      if (typeof timeoutSeconds === 'number' && Number.isFinite(timeoutSeconds)) {
        return Response.json({ timeoutSeconds: Math.max(0, Math.ceil(timeoutSeconds)) });
      }
      return Response.json({ ok: true });
    } catch (error) {
      return new Response(errorText(error), {
        status: 500,
        headers: { 'content-type': 'text/plain; charset=utf-8' },
      });
    }
  };
}

/** The error as text for the server's records (its stack when it has one), at most 8 KiB. */
function errorText(error: unknown): string {
  const text =
    error instanceof Error ? error.stack || `${error.name}: ${error.message}` : String(error);
  return text.length > 8192 ? `${text.slice(0, 8192)}…` : text;
}
