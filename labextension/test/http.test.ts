import assert from 'node:assert/strict';
import { AddressInfo } from 'node:net';
import { createServer, Server } from 'node:http';
import { after, before, test } from 'node:test';

import { APIError, requestJSON } from '../src/http';

/** A real HTTP server answering like jupyter_server's APIHandler and a few proxies do. */
const REPLIES: Record<string, [number, string, string]> = {
  '/status': [200, 'application/json', '{"state": "running"}'],
  '/conflict': [409, 'application/json', '{"message": "a pause is in flight (op-1)", "reason": null}'],
  '/reason-only': [403, 'application/json', '{"reason": "Forbidden"}'],
  '/html': [502, 'text/html', '<html><body><h1>Bad Gateway</h1></body></html>'],
  '/empty': [204, 'application/json', ''],
  '/not-json': [200, 'text/plain', 'hello']
};

let server: Server;
let base: string;

before(async () => {
  server = createServer((req, res) => {
    const [code, type, body] = REPLIES[req.url ?? ''] ?? [404, 'application/json', '{"message": "no such route"}'];
    res.writeHead(code, { 'Content-Type': type });
    res.end(body);
  });
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(() => {
  server.closeAllConnections();
  return new Promise<void>(resolve => server.close(() => resolve()));
});

const get = (path: string) => requestJSON(() => fetch(base + path), `GET ${path}`);

async function failure(path: string): Promise<APIError> {
  try {
    await get(path);
  } catch (error) {
    assert.ok(error instanceof APIError, String(error));
    return error;
  }
  throw new Error(`GET ${path} did not fail`);
}

test('a JSON reply is parsed', async () => {
  assert.deepEqual(await get('/status'), { state: 'running' });
});

test('an empty 204 reply resolves to undefined', async () => {
  assert.equal(await get('/empty'), undefined);
});

test("an error reply carries the server's message and status", async () => {
  const error = await failure('/conflict');
  assert.equal(error.status, 409);
  assert.equal(error.message, 'a pause is in flight (op-1)');
  assert.equal(error.what, 'GET /conflict');
  assert.equal((await failure('/reason-only')).message, 'Forbidden');
  assert.equal((await failure('/missing')).message, 'no such route');
});

test('an HTML error page becomes readable text', async () => {
  const error = await failure('/html');
  assert.equal(error.status, 502);
  assert.equal(error.message, '502 Bad Gateway: Bad Gateway');
});

test('a reply that is not JSON is an error, not a crash', async () => {
  const error = await failure('/not-json');
  assert.match(error.message, /not JSON: hello/);
});

test('an unreachable server is status 0 with the reason', async () => {
  const closed = createServer();
  await new Promise<void>(resolve => closed.listen(0, '127.0.0.1', resolve));
  const port = (closed.address() as AddressInfo).port;
  await new Promise<void>(resolve => closed.close(() => resolve()));
  try {
    await requestJSON(() => fetch(`http://127.0.0.1:${port}/status`), 'GET status');
    assert.fail('no error');
  } catch (error) {
    assert.ok(error instanceof APIError);
    assert.equal(error.status, 0);
    assert.match(error.message, /^GET status: the server could not be reached/);
  }
});
