/**
 * A real HTTP server on 127.0.0.1 for the unit tests: it records each request as a `Call` and
 * answers with the web `Response` the test's function returns (or, when that function throws,
 * drops the connection).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** A request as the server saw it: `url` is the path and query. */
export type Call = { method: string; url: string; headers: Record<string, string>; body: any };

export type Answer = (call: Call) => Response | Promise<Response>;

export interface StubServer {
  /** The server's base URL, `http://127.0.0.1:<port>`. */
  url: string;
  /** How many connections the server accepted. */
  connections(): number;
  /** Answers every request from now on with `answer`; returns the calls it receives. */
  answer(answer: Answer): Call[];
  /** Stops the server, closing every connection. */
  close(): Promise<void>;
}

export async function startStubServer(): Promise<StubServer> {
  let answer: Answer = () => new Response('no answer set', { status: 500 });
  let calls: Call[] = [];
  let connections = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      void (async () => {
        const raw = Buffer.concat(chunks);
        const headers: Record<string, string> = {};
        for (const [name, value] of Object.entries(req.headers)) {
          if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : value;
        }
        const call: Call = {
          method: String(req.method),
          url: String(req.url),
          headers,
          body:
            raw.length === 0
              ? undefined
              : headers['content-type'] === 'application/json'
                ? JSON.parse(raw.toString('utf8'))
                : new Uint8Array(raw),
        };
        calls.push(call);
        let response: Response;
        try {
          response = await answer(call);
        } catch {
          req.socket.destroy();
          return;
        }
        const body = Buffer.from(await response.arrayBuffer());
        const out: Record<string, string> = {};
        response.headers.forEach((value, name) => {
          out[name] = value;
        });
        res.writeHead(response.status, out);
        res.end(body);
      })();
    });
  });
  server.on('connection', () => {
    connections += 1;
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => connections,
    answer(next) {
      answer = next;
      calls = [];
      return calls;
    },
    close() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
