/**
 * `@worlds-engine/devkit-world`: a Workflow DevKit World (spec version 5, `@workflow/world`
 * 5.x) whose runs, steps, events, hooks, queue and streams live in a worlds-engine server.
 *
 * Point a DevKit app at it with `WORKFLOW_TARGET_WORLD=@worlds-engine/devkit-world` and the
 * settings in {@link DevkitWorldConfig} (`WORLDS_URL`, `WORLDS_API_KEY`,
 * `WORLDS_DELIVERY_SECRET`, ...). Each World call is one request to the server (PROTOCOL.md),
 * on a kept-alive connection reused from call to call; nothing else is kept in the app's process.
 *
 * The runtime may call the factory more than once per process, so it only builds an object of
 * closures: settings are read from the environment on each call.
 */
import { SPEC_VERSION_CURRENT, type World } from '@workflow/world';
import { type DevkitWorldConfig, resolveConfig } from './config.js';
import { deploymentId, enqueue, queueHandler } from './queue.js';
import { createStorage } from './storage.js';
import {
  closeStream,
  getChunks,
  getInfo,
  listStreams,
  readStream,
  writeChunk,
  writeChunks,
} from './streams.js';

export type { DevkitWorldConfig } from './config.js';
export { decodeSecret, signDelivery, verifySignature } from './signature.js';

/** The spec version of the World interface this package implements. */
export const SPEC_VERSION = SPEC_VERSION_CURRENT;
/** The `@workflow/world` release this package is built and tested against. */
export const WORLD_PACKAGE_VERSION = '5.0.0-beta.21';
/** The DevKit runtime (`workflow`, `@workflow/core`) release this package is tested with. */
export const RUNTIME_PACKAGE_VERSION = '5.0.0-beta.35';

/** Warnings already printed (module-level: shared by every instance). */
let warnedAtStart = false;

/**
 * The error a runtime of an older spec (the 4.x DevKit, which writes runs, steps and hooks
 * directly and has no `specVersion` check) gets when it calls a method this World no longer has.
 */
export function unsupportedRuntime(method: string): Error {
  return new Error(
    `@worlds-engine/devkit-world implements the World of spec version ${SPEC_VERSION} ` +
      `(@workflow/world ${WORLD_PACKAGE_VERSION}, for the workflow ${RUNTIME_PACKAGE_VERSION} runtime), ` +
      `but the runtime of this app called world.${method}(), which only a World of the 4.x line ` +
      `(spec version 1, workflow 4.x) has: upgrade the app to workflow ${RUNTIME_PACKAGE_VERSION}, ` +
      `or use a release of this package built for workflow 4.x`
  );
}

/** The 4.x methods, each throwing `unsupportedRuntime` (not enumerable: not part of the World). */
function addLegacyGuards(world: World): World {
  const guard = (method: string) => ({
    value: () => Promise.reject(unsupportedRuntime(method)),
    enumerable: false,
  });
  for (const [target, prefix, methods] of [
    [world.runs, 'runs', ['create', 'update', 'cancel', 'pause', 'resume']],
    [world.steps, 'steps', ['create', 'update']],
    [world.hooks, 'hooks', ['create', 'dispose']],
  ] as const) {
    for (const method of methods) {
      if (!(method in target)) Object.defineProperty(target, method, guard(`${prefix}.${method}`));
    }
  }
  Object.defineProperties(world, {
    writeToStream: guard('writeToStream'),
    closeStream: guard('closeStream'),
    readFromStream: guard('readFromStream'),
  });
  return world;
}

/** Creates the World. Called with no arguments by the DevKit; `overrides` win over the env. */
export function createWorld(overrides: DevkitWorldConfig = {}): World {
  const getConfig = () => resolveConfig(overrides);

  const world: World = {
    specVersion: SPEC_VERSION,

    ...createStorage(getConfig),

    async getDeploymentId() {
      return deploymentId(getConfig());
    },
    queue(queueName, message, opts) {
      return enqueue(getConfig(), queueName, message, opts);
    },
    createQueueHandler(prefix, handler) {
      return queueHandler(getConfig, prefix, handler);
    },

    streams: {
      write(runId, name, chunk) {
        return writeChunk(getConfig(), runId, name, chunk);
      },
      writeMulti(runId, name, chunks) {
        return writeChunks(getConfig(), runId, name, chunks);
      },
      close(runId, name) {
        return closeStream(getConfig(), runId, name);
      },
      async get(runId, name, startIndex) {
        return readStream(getConfig, runId, name, startIndex ?? 0);
      },
      list(runId) {
        return listStreams(getConfig(), runId);
      },
      getChunks(runId, name, options) {
        return getChunks(getConfig(), runId, name, options);
      },
      getInfo(runId, name) {
        return getInfo(getConfig(), runId, name);
      },
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

    async close() {
      // Nothing to release: every call is a request of its own, on a kept-alive connection of
      // the shared agents that, idle, does not keep the process alive and closes after 4 s (live
      // stream reads end when their reader cancels them).
    },
  };
  return addLegacyGuards(world);
}

export default createWorld;
