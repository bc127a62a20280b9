// Medians per world and workload of the JSON lines run.sh writes ($WORK/results/devkit-*.jsonl).
//   node bench/summarize.mjs [results dir, default /tmp/devkit-bench/results]
import fs from "node:fs";
import path from "node:path";

const dir = process.argv[2] || "/tmp/devkit-bench/results";
const median = (xs) => {
  const s = xs.filter((x) => x !== null && x !== undefined).sort((a, b) => a - b);
  if (!s.length) return null;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (x) => (x === null ? "-" : Number(x.toPrecision(3)).toString());

const rows = [];
for (const f of fs.readdirSync(dir).filter((f) => /^devkit-.*\.jsonl$/.test(f)).sort()) {
  const world = f.replace(/^devkit-|\.jsonl$/g, "");
  const recs = fs.readFileSync(path.join(dir, f), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
  for (const w of ["W1", "W2", "W3"]) {
    const r = recs.filter((x) => x.workload === w);
    if (!r.length) continue;
    rows.push([world, w, r[0].n, r[0].k, r.length, fmt(median(r.map((x) => x.wall_s))),
      fmt(median(r.map((x) => x.workflows_per_s))), fmt(median(r.map((x) => x.steps_per_s))),
      fmt(median(r.map((x) => x.p50_ms))), fmt(median(r.map((x) => x.p99_ms))),
      r.map((x) => x.loadavg_1m).join("/")]);
  }
}
console.log("| world | workload | n | k | runs | wall s | workflows/s | steps/s | p50 ms | p99 ms | load 1m |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|");
for (const r of rows) console.log(`| ${r.join(" | ")} |`);
