/**
 * `@worlds-engine/devkit-world`: a Workflow DevKit World whose runs, steps, events, hooks,
 * queue and streams live in a worlds-engine server.
 *
 * Point a DevKit app at it with `WORKFLOW_TARGET_WORLD=@worlds-engine/devkit-world` and the
 * settings in {@link DevkitWorldConfig} (`WORLDS_URL`, `WORLDS_API_KEY`,
 * `WORLDS_DELIVERY_SECRET`, ...).
 *
 * The DevKit calls the factory more than once per process (once for the queue handlers while
 * the workflow bundles load, once for everything else), so it only builds an object of
 * closures: settings are read from the environment on each call, and nothing is shared
 * between instances but module-level state.
 */
import type { World } from '@workflow/world';
import { type DevkitWorldConfig, resolveConfig } from './config';
import { send } from './continuity';
import { deploymentId, enqueue, queueHandler } from './queue';
import { createStorage } from './storage';
import { closeStream, readStream, writeChunk } from './streams';

export type { DevkitWorldConfig } from './config';
export { runIdFromStreamName } from './streams';
export { signDelivery, verifySignature, decodeSecret } from './signature';

/** Warnings already printed (module-level: shared by every instance). */
let warnedAtStart = false;

/** Creates the World. Called with no arguments by the DevKit; `overrides` win over the env. */
export function createWorld(overrides: DevkitWorldConfig = {}): World {
  const getConfig = () => resolveConfig(overrides);

  return {
    ...createStorage(getConfig),

    async getDeploymentId() {
      return deploymentId(getConfig());
    },
    queue(queueName, message, opts) {
      return send(queueName, message, opts, (keyedOpts) =>
        enqueue(getConfig(), queueName, message, keyedOpts)
      );
    },
    createQueueHandler(prefix, handler) {
      return queueHandler(getConfig, prefix, handler);
    },

    writeToStream(name, runId, chunk) {
      return writeChunk(getConfig(), name, runId, chunk);
    },
    closeStream(name, runId) {
      return closeStream(getConfig(), name, runId);
    },
    async readFromStream(name, startIndex) {
      return readStream(getConfig, name, startIndex ?? 0);
    },

    async start() {
      if (warnedAtStart) return;
      warnedAtStart = true;
      const config = getConfig();
      if (!config.url) {
        console.warn('[worlds-engine world] WORLDS_URL is not set: every call to the server will fail');
      }
      if (!config.deliverySecret) {
        console.warn(
          '[worlds-engine world] WORLDS_DELIVERY_SECRET is not set: every delivery from the server will be refused'
        );
      }
    },
  };
}

export default createWorld;
