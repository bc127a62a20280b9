// Preload (NODE_OPTIONS=--require): counts outgoing fetch calls and incoming HTTP requests by route
// (writes of events by event type).
const fs = require('node:fs');
const http = require('node:http');
const stats = new Map();
const norm = (m, u) => {
  let p;
  try { p = new URL(u, 'http://x').pathname; } catch { p = String(u); }
  p = p.replace(/wrun_[0-9A-Z]+/g, ':run').replace(/step_[0-9A-Z]+/g, ':step').replace(/hook_[0-9A-Z]+/g, ':hook').replace(/strm_[^/]+/g, ':stream').replace(/msg_[0-9A-Z]+/g, ':msg');
  return `${m} ${p}`;
};
const add = (k, ms) => { const s = stats.get(k) || { n: 0, ms: 0 }; s.n++; s.ms += ms; stats.set(k, s); };
const orig = globalThis.fetch;
globalThis.fetch = async function (input, init) {
  const url = typeof input === 'string' ? input : input.url ?? String(input);
  const method = (init && init.method) || (input && input.method) || 'GET';
  let key = 'out ' + norm(method, url);
  // The World's writes all go to one route: name the event type too.
  if (key === 'out POST /v1/devkit/events' && init && typeof init.body === 'string') {
    try { key += ' ' + JSON.parse(init.body).event.eventType; } catch { /* not an event */ }
  }
  const t0 = performance.now();
  try { return await orig.call(this, input, init); } finally { add(key, performance.now() - t0); }
};
const emit = http.Server.prototype.emit;
http.Server.prototype.emit = function (ev, req, res) {
  if (ev === 'request') { const t0 = performance.now(); const k = 'in ' + norm(req.method, req.url); res.on('finish', () => add(k, performance.now() - t0)); }
  return emit.apply(this, arguments);
};
const dump = () => {
  const lines = [...stats.entries()].sort((a, b) => b[1].n - a[1].n).map(([k, s]) => `${String(s.n).padStart(7)} ${(s.ms / s.n).toFixed(1).padStart(8)} ms  ${k}`);
  fs.writeFileSync((process.env.COUNT_HTTP_OUT || '/tmp/count-http') + '.' + process.pid + '.txt', lines.join('\n') + '\n');
};
setInterval(dump, 2000).unref();
process.on('exit', dump);
