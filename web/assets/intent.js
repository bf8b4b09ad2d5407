// Intents and their retries: the client side of the idempotency contract.
//
// An intent is one thing the user means (create this order, pay this order
// with this card, refund this amount). It gets one Idempotency-Key when it is
// made, the key is kept in sessionStorage until the intent has a final
// answer, and every attempt of the intent (a retry after a lost connection,
// a 409, a 503, a reload of the page) sends that same key with the same
// body. A new intent, say a second card after a decline, gets a new key.

import { NetworkError, problemCode } from './api.js';

/** The retry policy: bounded attempts, capped exponential backoff. */
export const RETRY = Object.freeze({
  maxAttempts: 6,
  baseMs: 400,
  capMs: 8000,
  // The longest Retry-After a submit waits for on its own. A server asking
  // for more (a maintenance window, say) is the user's to come back to:
  // submit stops and reports the wait, and the intent keeps its key for
  // that retry (docs/CONTRACT.md, "Retry-After"; the Go client keeps the
  // same bound).
  maxRetryAfterMs: 60000,
});

/** A fresh key: a random UUID. */
export function newKey() {
  if (globalThis.crypto && typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  // randomUUID needs a secure context; a phone on the LAN over plain http
  // has getRandomValues only.
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Whether an answer is final for its intent. Final: 2xx, and 4xx such as
 * 402 card_declined, 409 order_already_paid, 422: asking again gives the same
 * answer. Not final: 409 request_in_progress (the first attempt still runs),
 * 408/425/429, and 5xx (outcome unknown: the key is free or resumable).
 */
export function isFinal(answer) {
  const s = answer.status;
  if (s >= 200 && s < 300) return true;
  if (s === 409) return problemCode(answer) !== 'request_in_progress';
  if (s === 408 || s === 425 || s === 429) return false;
  return s >= 400 && s < 500;
}

/** Retry-After in milliseconds (delta-seconds or an HTTP date), or null. */
export function parseRetryAfter(value, now = Date.now()) {
  if (value == null || value === '') return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/**
 * How long to wait before attempt n+1, after attempt n (1-based): capped
 * exponential backoff with jitter, and never less than the server's
 * Retry-After, however long (submit does not wait past
 * RETRY.maxRetryAfterMs: it reports the wait instead).
 */
export function retryDelay(n, retryAfter, random = Math.random) {
  const exp = Math.min(RETRY.capMs, RETRY.baseMs * 2 ** (n - 1));
  const backoff = Math.round(exp / 2 + (random() * exp) / 2);
  const asked = parseRetryAfter(retryAfter);
  if (asked === null) return backoff;
  return Math.max(backoff, asked);
}

/** Intents in sessionStorage: one per (tenant, kind, scope). */
export class IntentStore {
  /** @param {Storage} storage usually window.sessionStorage */
  constructor(storage) {
    this.storage = storage;
  }

  slot(tenant, kind, scope) {
    return `oncepay.intent.${tenant}.${kind}.${scope}`;
  }

  /** The pending intent, or null. */
  load(tenant, kind, scope) {
    try {
      const raw = this.storage.getItem(this.slot(tenant, kind, scope));
      return raw ? JSON.parse(raw) : null;
    } catch {
      return null;
    }
  }

  /** A new intent with a fresh key, saved until it has a final answer. */
  create(tenant, kind, scope, path, body) {
    const intent = { key: newKey(), kind, scope, path, body, createdAt: new Date().toISOString() };
    this.storage.setItem(this.slot(tenant, kind, scope), JSON.stringify(intent));
    return intent;
  }

  /** Forget an intent: it has its final answer. */
  clear(tenant, kind, scope) {
    this.storage.removeItem(this.slot(tenant, kind, scope));
  }
}

/**
 * One run of an intent: one or more concurrent submits (a double click)
 * share it. The first final answer ends the run; the other submits stop
 * waiting, since asking again could only replay that answer.
 */
export class IntentRun {
  constructor() {
    this.final = null;
    this.controller = new AbortController();
  }

  finish(answer) {
    if (this.final) return;
    this.final = answer;
    this.controller.abort();
  }

  get signal() {
    return this.controller.signal;
  }
}

/** Wait ms; resolves false when signal fired first. */
function wait(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    function onAbort() {
      clearTimeout(t);
      resolve(false);
    }
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Submit an intent until it has a final answer, the attempts run out, or
 * the server asks for a wait longer than RETRY.maxRetryAfterMs: then
 * submit returns at once with that answer and its wait as later, for the
 * user to retry then with the intent's key. log.attempt({n, chaos})
 * returns an entry with answered(answer, retryMs, laterMs) and
 * lost(error, retryMs); retryMs is null when no retry follows, laterMs
 * is the wait left to the user. chaos, when set, is sent as X-Demo-Chaos
 * on the first attempt only.
 * @returns {Promise<{answer: object|null, exhausted: boolean, later: {ms: number, answer: object}|null}>}
 */
export async function submit(api, intent, run, log, { chaos = '' } = {}) {
  for (let n = 1; n <= RETRY.maxAttempts; n++) {
    if (run.final) return { answer: run.final, exhausted: false, later: null };
    const headers = { 'Idempotency-Key': intent.key };
    if (chaos && n === 1) headers['X-Demo-Chaos'] = chaos;
    const entry = log.attempt({ n, chaos: headers['X-Demo-Chaos'] || '' });
    const last = n === RETRY.maxAttempts;
    let answer;
    try {
      answer = await api.send('POST', intent.path, intent.body, { headers });
    } catch (err) {
      if (!(err instanceof NetworkError)) throw err;
      const ms = last ? null : retryDelay(n, null);
      entry.lost(err, ms);
      if (last || !(await wait(ms, run.signal))) break;
      continue;
    }
    if (isFinal(answer)) {
      run.finish(answer);
      entry.answered(answer, null, null);
      return { answer, exhausted: false, later: null };
    }
    const asked = parseRetryAfter(answer.retryAfter);
    if (asked !== null && asked > RETRY.maxRetryAfterMs) {
      entry.answered(answer, null, asked);
      return { answer: null, exhausted: false, later: { ms: asked, answer } };
    }
    const ms = last ? null : retryDelay(n, answer.retryAfter);
    entry.answered(answer, ms, null);
    if (last || !(await wait(ms, run.signal))) break;
  }
  if (run.final) {
    log.superseded();
    return { answer: run.final, exhausted: false, later: null };
  }
  return { answer: null, exhausted: true, later: null };
}
