import { defineConfig } from "nitro";
import { resolve } from "node:path";

export default defineConfig({
  serverDir: "./server",
  modules: ["workflow/nitro"],
  // nitro 3.0.1-alpha.1 tree-shakes every module not listed here as side-effect free, which
  // drops the registerStepFunction() calls of the generated steps bundle ("Step ... not found").
  moduleSideEffects: ["unenv/polyfill/", resolve("node_modules/.nitro/workflow") + "/"],
});
