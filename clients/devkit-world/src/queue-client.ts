/**
 * Sending messages to the worlds server's queue (`POST /v1/devkit/queue`).
 */
import type { MessageId, ValidQueueName } from '@workflow/world';
import { callbackUrl, DEFAULT_DEPLOYMENT_ID, type DevkitWorldConfig } from './config';
import { call } from './http';

/** Sends a message to the server's queue. */
export async function enqueue(
  config: DevkitWorldConfig,
  queueName: ValidQueueName,
  message: unknown,
  opts?: { deploymentId?: string; idempotencyKey?: string }
): Promise<{ messageId: MessageId }> {
  const body: Record<string, unknown> = {
    queueName,
    message,
    callbackUrl: callbackUrl(config),
  };
  if (opts?.idempotencyKey !== undefined) body.idempotencyKey = opts.idempotencyKey;
  if (opts?.deploymentId !== undefined) body.deploymentId = opts.deploymentId;
  const answer = await call<{ messageId?: unknown }>(config, {
    method: 'POST',
    path: '/v1/devkit/queue',
    json: body,
  });
  if (!answer || typeof answer.messageId !== 'string' || answer.messageId === '') {
    throw new Error(`POST /v1/devkit/queue: the worlds server sent no messageId for ${queueName}`);
  }
  return { messageId: answer.messageId as MessageId };
}

export function deploymentId(config: DevkitWorldConfig): string {
  return config.deploymentId ?? DEFAULT_DEPLOYMENT_ID;
}
