/**
 * Configuration: read from the environment each time it is needed, so that variables set after
 * the module was loaded (the DevKit's test server sets PORT once it listens) are seen.
 */

/** Settings of the World. Every field defaults to its environment variable. */
export interface DevkitWorldConfig {
  /** Base URL of the worlds-engine server, e.g. `http://127.0.0.1:8080` (`WORLDS_URL`). */
  url?: string;
  /** API key sent as `Authorization: Bearer <key>` (`WORLDS_API_KEY`). */
  apiKey?: string;
  /**
   * The secret the server signs deliveries with, `whsec_<base64>` (`WORLDS_DELIVERY_SECRET`).
   * Without it the queue handler refuses every delivery.
   */
  deliverySecret?: string;
  /**
   * Base URL of this app as the server should call it (`WORLDS_CALLBACK_URL`). Default:
   * `http://localhost:${PORT}`, with PORT read when a message is queued.
   */
  callbackUrl?: string;
  /** What `getDeploymentId()` returns (`WORLDS_DEPLOYMENT_ID`, default `worlds`). */
  deploymentId?: string;
}

/** The default deployment id. */
export const DEFAULT_DEPLOYMENT_ID = 'worlds';

function nonEmpty(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  return trimmed === '' ? undefined : trimmed;
}

/** The settings in force now: the given ones over the environment. */
export function resolveConfig(overrides: DevkitWorldConfig = {}): DevkitWorldConfig {
  const env = process.env;
  return {
    url: nonEmpty(overrides.url) ?? nonEmpty(env.WORLDS_URL),
    apiKey: nonEmpty(overrides.apiKey) ?? nonEmpty(env.WORLDS_API_KEY),
    deliverySecret:
      nonEmpty(overrides.deliverySecret) ?? nonEmpty(env.WORLDS_DELIVERY_SECRET),
    callbackUrl: nonEmpty(overrides.callbackUrl) ?? nonEmpty(env.WORLDS_CALLBACK_URL),
    deploymentId:
      nonEmpty(overrides.deploymentId) ?? nonEmpty(env.WORLDS_DEPLOYMENT_ID),
  };
}

function withoutTrailingSlash(url: string): string {
  return url.replace(/\/+$/, '');
}

/** The server's base URL, or a clear error when it is not configured. */
export function baseUrl(config: DevkitWorldConfig): string {
  if (!config.url) {
    throw new Error(
      'WORLDS_URL is not set: point it at the worlds-engine server, e.g. WORLDS_URL=http://127.0.0.1:8080'
    );
  }
  if (!/^https?:\/\//i.test(config.url)) {
    throw new Error(
      `WORLDS_URL=${config.url} is not an http(s) URL (expected e.g. http://127.0.0.1:8080)`
    );
  }
  return withoutTrailingSlash(config.url);
}

/**
 * The base URL the server should deliver this app's messages to: WORLDS_CALLBACK_URL, or
 * `http://localhost:${PORT}` with PORT read now.
 */
export function callbackUrl(config: DevkitWorldConfig): string {
  if (config.callbackUrl) return withoutTrailingSlash(config.callbackUrl);
  const port = nonEmpty(process.env.PORT);
  if (!port) {
    throw new Error(
      'cannot tell the worlds server where to deliver messages: set WORLDS_CALLBACK_URL to the base URL of this app (or PORT, for http://localhost:$PORT)'
    );
  }
  return `http://localhost:${port}`;
}
