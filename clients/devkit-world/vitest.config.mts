import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Node 20 lacks Promise.withResolvers, which the DevKit's hooks test calls.
    setupFiles: ['./test/setup.ts'],
    testTimeout: 60_000,
  },
});
