// The DevKit's World suite against this package's build and the reference of PROTOCOL.md
// (reference-server.ts: the local World behind the wire protocol). It needs no worlds server:
// a failure here is the package's (or the protocol's), not the server's.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createTestSuite } from '@workflow/world-testing';
import { afterAll } from 'vitest';
import { startReferenceServer } from './reference-server';

const world = fileURLToPath(new URL('../../dist/index.js', import.meta.url));
if (!existsSync(world)) throw new Error(`${world} does not exist: run \`npm run build\` first`);

const reference = await startReferenceServer();
// Each test's app server inherits these.
process.env.WORLDS_URL = reference.url;
process.env.WORLDS_API_KEY = reference.apiKey;
process.env.WORLDS_DELIVERY_SECRET = reference.deliverySecret;
delete process.env.WORLDS_CALLBACK_URL;
afterAll(async () => {
  // Which routes the runtime used, ids replaced by `*`.
  const counts = new Map<string, number>();
  for (const request of reference.requests) {
    const shape = request.replace(/\/(wrun|step|hook|wait|evnt|strm)_[^/]+/g, '/*').replace(/\/streams\/[^/]+/, '/streams/*');
    counts.set(shape, (counts.get(shape) ?? 0) + 1);
  }
  console.log([...counts].sort().map(([shape, n]) => `${n}\t${shape}`).join('\n'));
  await reference.close();
});

createTestSuite(world);
