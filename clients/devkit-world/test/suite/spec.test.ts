// The Workflow DevKit's World test suite, run against this package's build and a live
// worlds-engine server. `scripts/devkit-suite` (at the repository root) starts the server,
// builds the package and runs this file with WORLDS_URL, WORLDS_API_KEY and
// WORLDS_DELIVERY_SECRET set; each test's app server inherits them.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createTestSuite } from '@workflow/world-testing';
import { test } from 'vitest';

const world = fileURLToPath(new URL('../../dist/index.js', import.meta.url));
const missing = ['WORLDS_URL', 'WORLDS_API_KEY', 'WORLDS_DELIVERY_SECRET'].filter(
  (name) => !process.env[name]
);

if (missing.length > 0) {
  test.skip(`the DevKit World suite needs a worlds server (${missing.join(', ')} not set): run scripts/devkit-suite`, () => {});
} else if (!existsSync(world)) {
  throw new Error(`${world} does not exist: run \`npm run build\` first`);
} else {
  createTestSuite(world);
}
