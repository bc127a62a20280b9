/**
 * Messages a crash must not lose.
 *
 * The DevKit runtime makes two pairs of calls that belong together but are not one write: a
 * step handler records the step's result and then queues the workflow's continuation, and a
 * workflow handler creates a step and then queues its message. If the worlds server stops
 * between the two (a crash, a deploy), the runtime's retry skips the second call: the step is
 * already completed, or the step already exists (409). The run would then wait forever. This
 * module closes both gaps, with the server's idempotency keys keeping every message single:
 *
 * - **After a step**: a step delivery that the handler takes (not one it asks to see again
 *   later) is followed by the workflow's continuation, queued under the key
 *   `continue:<step message id>`. The runtime's own continuation, queued inside that handler,
 *   gets the same key, so the two are one message, and a retried delivery whose step was
 *   already completed still queues it.
 * - **A step that exists**: when `steps.create` finds the step already there (409) and it has
 *   never started, its message is queued again under the step's id, the key the runtime uses:
 *   the server answers with the message it has, or makes the one that was lost.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { DevkitWorldConfig } from './config';
import type { ValidQueueName } from '@workflow/world';
import { enqueue } from './queue-client';

/** The step delivery being handled. */
interface StepDelivery {
  messageId: string;
  workflowName: string;
  workflowRunId: string;
  /** The runtime queued the continuation itself (the server took it). */
  continued?: boolean;
}

const current = new AsyncLocalStorage<StepDelivery>();

/** The step delivery a message of a step queue stands for, if it has the fields for one. */
export function stepDelivery(messageId: string, message: unknown): StepDelivery | undefined {
  if (!message || typeof message !== 'object') return undefined;
  const { workflowName, workflowRunId } = message as Record<string, unknown>;
  if (typeof workflowName !== 'string' || typeof workflowRunId !== 'string') return undefined;
  return { messageId, workflowName, workflowRunId };
}

/** Runs `work` as the handling of `delivery`. */
export function handlingStep<T>(delivery: StepDelivery | undefined, work: () => Promise<T>): Promise<T> {
  return delivery ? current.run(delivery, work) : work();
}

/** The key of the continuation after a step delivery. */
export function continuationKey(messageId: string): string {
  return `continue:${messageId}`;
}

type QueueOptions = { deploymentId?: string; idempotencyKey?: string };

/**
 * Sends a `queue()` call: the continuation of the step being handled goes under the
 * continuation key, and is noted as sent; everything else as it is.
 */
export async function send<T>(
  queueName: string,
  message: unknown,
  opts: QueueOptions | undefined,
  enqueueWith: (opts: QueueOptions | undefined) => Promise<T>
): Promise<T> {
  const step = current.getStore();
  const runId = (message as { runId?: unknown } | null)?.runId;
  const continuation =
    step !== undefined &&
    opts?.idempotencyKey === undefined &&
    queueName === `__wkf_workflow_${step.workflowName}` &&
    runId === step.workflowRunId;
  if (!continuation) return enqueueWith(opts);
  const sent = await enqueueWith({ ...opts, idempotencyKey: continuationKey(step.messageId) });
  step.continued = true;
  return sent;
}

/**
 * Queues the continuation after a step delivery the handler took, unless the runtime did
 * (the same key would make it the same message anyway: this saves the call).
 */
export async function continueAfter(config: DevkitWorldConfig, step: StepDelivery): Promise<void> {
  if (step.continued) return;
  await enqueue(
    config,
    `__wkf_workflow_${step.workflowName}` as ValidQueueName,
    { runId: step.workflowRunId },
    { idempotencyKey: continuationKey(step.messageId) }
  );
}

/** What `steps.create` needs to queue a step's message again. */
export interface ExistingStep {
  runId: string;
  stepId: string;
  stepName: string;
  status: string;
  attempt: number;
}

/** The run fields a step message carries. */
export interface StepRun {
  workflowName: string;
  startedAt?: Date;
}

/**
 * Queues the message of a step that exists but never started, under the step's id (the key the
 * runtime queued it with): one message whether or not the first one was lost.
 */
export async function requeueStep(
  config: DevkitWorldConfig,
  step: ExistingStep,
  run: StepRun
): Promise<boolean> {
  if (step.status !== 'pending' || step.attempt !== 0) return false;
  // Once the server has taken a step's message it keeps it: one call per step is enough.
  const known = `${step.runId}/${step.stepId}`;
  if (requeued.has(known)) return false;
  await enqueue(
    config,
    `__wkf_step_${step.stepName}` as ValidQueueName,
    {
      workflowName: run.workflowName,
      workflowRunId: step.runId,
      workflowStartedAt: run.startedAt ? +run.startedAt : Date.now(),
      stepId: step.stepId,
    },
    { idempotencyKey: step.stepId }
  );
  remember(known);
  return true;
}

/** Steps whose message this process made sure of (the newest few thousand). */
const requeued = new Set<string>();
const REMEMBERED = 10_000;

function remember(step: string): void {
  requeued.add(step);
  if (requeued.size > REMEMBERED) {
    const oldest = requeued.values().next().value;
    if (oldest !== undefined) requeued.delete(oldest);
  }
}
