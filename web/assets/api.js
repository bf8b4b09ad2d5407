// The API client: one HTTP attempt per call, no retries (intent.js owns
// those). Every answer comes back as a plain object, problems included.

/** An attempt that got no HTTP answer at all: refused, reset, dropped. */
export class NetworkError extends Error {
  constructor(cause) {
    super('no answer from the server (' + (cause && cause.message ? cause.message : 'network error') + ')');
    this.name = 'NetworkError';
    this.cause = cause;
  }
}

/**
 * An answer: status, the headers that matter, the parsed body (JSON or
 * problem+json; null for anything else).
 * @typedef {{status:number, ok:boolean, body:any, replayed:boolean,
 *   requestId:string, retryAfter:string|null, location:string|null}} Answer
 */

export class Api {
  /** @param {string} apiKey the tenant's API key */
  constructor(apiKey) {
    this.apiKey = apiKey;
  }

  /** GET path and return the Answer. */
  get(path, { signal } = {}) {
    return this.send('GET', path, undefined, { signal });
  }

  /**
   * Send one request. headers may add Idempotency-Key and X-Demo-Chaos.
   * Throws NetworkError when no answer arrived (the request may or may not
   * have been executed: that is exactly what the key is for).
   * @returns {Promise<Answer>}
   */
  async send(method, path, body, { headers = {}, signal } = {}) {
    const h = { Accept: 'application/json', ...headers };
    if (this.apiKey) h.Authorization = 'Bearer ' + this.apiKey;
    let init = { method, headers: h, signal, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      h['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (err) {
      if (err && err.name === 'AbortError') throw err;
      throw new NetworkError(err);
    }
    let parsed = null;
    try {
      const text = await res.text();
      const type = res.headers.get('Content-Type') || '';
      if (text && type.includes('json')) parsed = JSON.parse(text);
    } catch (err) {
      if (err && err.name === 'AbortError') throw err;
      // A connection cut mid-body is no answer either.
      if (err instanceof TypeError) throw new NetworkError(err);
      parsed = null;
    }
    return {
      status: res.status,
      ok: res.ok,
      body: parsed,
      replayed: res.headers.get('Idempotent-Replayed') === 'true',
      requestId: res.headers.get('X-Request-Id') || '',
      retryAfter: res.headers.get('Retry-After'),
      location: res.headers.get('Location'),
    };
  }
}

/** The stable problem code of an answer, or '' for a non-problem body. */
export function problemCode(answer) {
  return answer && answer.body && typeof answer.body.code === 'string' ? answer.body.code : '';
}
