/**
 * The request wrapper's core, free of JupyterLab imports so node's test runner can load it.
 *
 * `requestJSON(send, what)` runs `send()` once and turns every outcome into either the parsed
 * JSON body or an `APIError` whose message is the server's own (`{"message": ...}`), so callers
 * show what went wrong and never swallow it.
 */

/** A failed call to the gkeresume API; `status` is 0 when the server could not be reached. */
export class APIError extends Error {
  readonly status: number;
  readonly what: string;

  constructor(what: string, status: number, message: string) {
    super(message);
    this.name = 'APIError';
    this.what = what;
    this.status = status;
  }
}

/** The message of an error reply: JSON `message` (else `reason`), else the text, else status. */
async function errorMessage(response: Response): Promise<string> {
  const text = await response.text().catch(() => '');
  try {
    const body = JSON.parse(text);
    if (body && typeof body.message === 'string' && body.message) {
      return body.message;
    }
    if (body && typeof body.reason === 'string' && body.reason) {
      return body.reason;
    }
  } catch {
    // not JSON: an HTML error page or a proxy's text
  }
  const plain = text.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim();
  const status = `${response.status} ${response.statusText}`.trim();
  return plain ? `${status}: ${plain.slice(0, 300)}` : status;
}

/**
 * Send one request and read its JSON reply.
 *
 * @param send - performs the request (fetch, or JupyterLab's ServerConnection.makeRequest).
 * @param what - what the call does, for the error message ("GET status").
 * @returns the parsed body, or `undefined` for an empty reply (204).
 * @throws APIError with the server's message for a 4xx/5xx, status 0 for a network failure.
 */
export async function requestJSON<T>(
  send: () => Promise<Response>,
  what: string
): Promise<T> {
  let response: Response;
  try {
    response = await send();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new APIError(what, 0, `${what}: the server could not be reached (${reason})`);
  }
  if (!response.ok) {
    throw new APIError(what, response.status, await errorMessage(response));
  }
  const text = await response.text();
  if (!text) {
    return undefined as T;
  }
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new APIError(
      what,
      response.status,
      `${what}: the server answered something that is not JSON: ${text.slice(0, 200)}`
    );
  }
}
