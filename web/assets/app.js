// The oncepay shop: build an order, pay it, refund it, and watch what the
// server and the provider did, live. See intent.js for the retry rules.

import { Api, problemCode } from './api.js';
import { IntentRun, IntentStore, submit } from './intent.js';
import { byId, clock, h, minorDigits, money, renderKeyed, replace, short, statusLabel, tone } from './dom.js';

const POLL_MS = 1000;
const REASONS = {
  200: 'OK', 201: 'Created', 202: 'Accepted', 400: 'Bad Request', 401: 'Unauthorized', 402: 'Payment Required',
  404: 'Not Found', 409: 'Conflict', 413: 'Payload Too Large', 422: 'Unprocessable Content', 429: 'Too Many Requests',
  500: 'Internal Server Error', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout',
};
const PROVIDER_FAULTS = {
  'provider-timeout': { timeout_next: 1 },
  'provider-fail': { fail_next: 1 },
  'provider-drop': { drop_next: 1 },
};

const intents = new IntentStore(window.sessionStorage);

const state = {
  demo: null, // the body of GET /demo, null outside demo mode
  tenant: '', // a demo tenant's slug, or 'custom'
  api: null,
  products: [],
  cart: new Map(), // sku -> quantity
  order: null, // the order on screen
  live: null, // the last GET /demo/orders/{id}/payments
  payment: null, // the order's succeeded payment, for refunds
  paying: false,
  cancelling: false,
  givingUp: false,
  refunding: false,
  creating: false,
  gen: 0, // bumped when tenant or order changes: late answers are dropped
  pollTimer: 0,
  replayNotes: new Map(), // event id -> note after an operator replay
  recent: [], // the recent orders listed
};

const el = {};
for (const id of [
  'tenant', 'tenant-form', 'api-key', 'api-key-use', 'mode-pill', 'banner', 'products', 'cart-total', 'create-order',
  'order-result', 'order-log', 'pay', 'pay-order-id', 'pay-amount', 'pay-order-status', 'pay-form', 'method',
  'method-hint', 'chaos', 'pay-btn', 'giveup-btn', 'cancel-btn', 'pay-result', 'pay-requests', 'pay-key', 'pay-key-note', 'pay-log', 'refund',
  'refund-form', 'refund-amount', 'refund-currency', 'refund-hint', 'refund-btn', 'refund-result', 'refund-log',
  'live', 'live-empty', 'live-body', 'live-order-id', 'live-order-status', 'charged', 'charged-note', 'kpi-charged',
  'attempt-count', 'attempts', 'attempts-empty', 'events', 'events-empty', 'live-updated', 'live-dot', 'recent-list',
  'recent-empty',
]) {
  el[id] = byId(id);
}

// ---------------------------------------------------------------- banner

function banner(text) {
  el.banner.hidden = !text;
  el.banner.textContent = text || '';
}

/** A wait in words: 90 s, 5 min, 2 h. */
function duration(ms) {
  const s = Math.ceil(ms / 1000);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

/**
 * What the user reads when the server asked for a wait longer than the page
 * waits on its own (intent.js, RETRY.maxRetryAfterMs): the intent and its
 * key are kept, and the next press retries with them.
 */
function laterText({ ms, answer }) {
  const said = problemText(answer).replace(/[.\s]*$/, '.');
  return `${said} The service asks to retry in ${duration(ms)}: too long to wait here. ` +
    'Nothing is lost: the key is kept, and pressing the button again then retries with it.';
}

function problemText(answer) {
  const b = answer.body || {};
  const fields = Array.isArray(b.errors) ? b.errors.map((e) => `${e.field} ${e.message}`).join('; ') : '';
  return [b.detail || REASONS[answer.status] || `HTTP ${answer.status}`, fields].filter(Boolean).join(' ');
}

// ------------------------------------------------------------- tenants

async function init() {
  let demo = null;
  try {
    const a = await new Api('').get('/demo');
    if (a.ok && a.body && a.body.demo_mode) demo = a.body;
  } catch {
    banner('The API does not answer. Is the server running?');
  }
  state.demo = demo;
  el['mode-pill'].hidden = !demo;
  const options = demo
    ? demo.tenants.map((t) => h('option', { value: t.slug }, `${t.name} (${t.slug})`))
    : [h('option', { value: 'custom' }, 'Your API key')];
  replace(el.tenant, options);
  el.tenant.disabled = !demo;
  el['api-key'].hidden = !!demo;
  el['api-key-use'].hidden = !!demo;
  el.chaos.hidden = !demo;
  if (demo) {
    for (const opt of el.chaos.querySelectorAll('[data-needs="provider"]')) opt.hidden = !demo.chaos.provider_faults;
    const saved = sessionStorage.getItem('oncepay.tenant');
    const slug = demo.tenants.some((t) => t.slug === saved) ? saved : demo.tenants[0].slug;
    el.tenant.value = slug;
    await useTenant(slug);
  } else {
    el['api-key'].focus();
  }
}

function apiKeyOf(slug) {
  if (slug === 'custom') return el['api-key'].value.trim();
  const t = state.demo && state.demo.tenants.find((x) => x.slug === slug);
  return t ? t.api_key : '';
}

async function useTenant(slug) {
  stopPolling();
  state.gen++;
  state.tenant = slug;
  state.api = new Api(apiKeyOf(slug));
  state.order = null;
  state.live = null;
  state.payment = null;
  state.cart.clear();
  if (slug !== 'custom') sessionStorage.setItem('oncepay.tenant', slug);
  banner('');
  for (const id of ['order-result', 'pay-result', 'refund-result']) clearResult(el[id]);
  for (const id of ['order-log', 'pay-log', 'refund-log']) replace(el[id]);
  el['order-log'].hidden = true;
  el['refund-log'].hidden = true;
  el['pay-requests'].hidden = true;
  await loadProducts();
  const savedOrder = sessionStorage.getItem(`oncepay.order.${slug}`);
  await loadRecent();
  if (savedOrder) {
    const a = await state.api.get(`/v1/orders/${encodeURIComponent(savedOrder)}`).catch(() => null);
    if (a && a.ok) setOrder(a.body);
  }
  renderAll();
}

el.tenant.addEventListener('change', () => useTenant(el.tenant.value));
el['tenant-form'].addEventListener('submit', (ev) => {
  ev.preventDefault();
  if (!state.demo && el['api-key'].value.trim()) useTenant('custom');
});

// ------------------------------------------------------------ products

async function loadProducts() {
  el.products.setAttribute('aria-busy', 'true');
  let a;
  try {
    a = await state.api.get('/v1/products');
  } catch {
    banner('The API does not answer. Is the server running?');
    return;
  }
  el.products.setAttribute('aria-busy', 'false');
  if (a.status === 401) {
    banner('The API key is not valid.');
    state.products = [];
  } else if (!a.ok) {
    banner(problemText(a));
    state.products = [];
  } else {
    state.products = a.body.data || [];
  }
  renderProducts();
}

function renderProducts() {
  replace(
    el.products,
    state.products.map((p) => {
      const qty = state.cart.get(p.sku) || 0;
      const inputId = `qty-${p.sku}`;
      return h('li', { class: 'product' + (qty > 0 ? ' in-cart' : ''), dataset: { sku: p.sku } },
        h('div', { class: 'product-info' },
          h('label', { class: 'product-name', for: inputId }, p.name),
          h('span', { class: 'product-price' }, money(p.unit_amount, p.currency))),
        h('div', { class: 'stepper', role: 'group', 'aria-label': `Quantity of ${p.name}` },
          h('button', { type: 'button', class: 'step-btn', 'aria-label': `One ${p.name} less`, dataset: { sku: p.sku, delta: '-1' }, disabled: qty === 0 }, '−'),
          h('input', { id: inputId, class: 'qty', type: 'number', inputmode: 'numeric', min: '0', max: '1000', value: String(qty), dataset: { sku: p.sku } }),
          h('button', { type: 'button', class: 'step-btn', 'aria-label': `One ${p.name} more`, dataset: { sku: p.sku, delta: '1' } }, '+')));
    }),
  );
  renderCart();
}

function setQty(sku, qty) {
  qty = Math.max(0, Math.min(1000, Math.trunc(Number(qty) || 0)));
  if (qty === 0) state.cart.delete(sku);
  else state.cart.set(sku, qty);
  const li = el.products.querySelector(`li[data-sku="${CSS.escape(sku)}"]`);
  if (li) {
    li.classList.toggle('in-cart', qty > 0);
    li.querySelector('input.qty').value = String(qty);
    li.querySelector('button[data-delta="-1"]').disabled = qty === 0;
  }
  renderCart();
}

el.products.addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-delta]');
  if (!b) return;
  setQty(b.dataset.sku, (state.cart.get(b.dataset.sku) || 0) + Number(b.dataset.delta));
});
el.products.addEventListener('change', (ev) => {
  if (ev.target.matches('input.qty')) setQty(ev.target.dataset.sku, ev.target.value);
});

function cartLines() {
  return state.products.filter((p) => state.cart.get(p.sku) > 0).map((p) => ({ p, quantity: state.cart.get(p.sku) }));
}

function renderCart() {
  const lines = cartLines();
  const currency = lines.length ? lines[0].p.currency : state.products[0] && state.products[0].currency;
  const total = lines.reduce((s, l) => s + l.p.unit_amount * l.quantity, 0);
  el['cart-total'].textContent = currency ? money(total, currency) : '—';
  const pending = state.tenant && intents.load(state.tenant, 'order', 'new');
  el['create-order'].disabled = state.creating || lines.length === 0;
  el['create-order'].textContent = state.creating ? 'Creating…' : pending && sameBody(pending.body, orderBody()) ? 'Retry creating order' : 'Create order';
}

function orderBody() {
  const lines = cartLines();
  if (!lines.length) return null;
  return { currency: lines[0].p.currency, items: lines.map((l) => ({ sku: l.p.sku, quantity: l.quantity })) };
}

function sameBody(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

// ------------------------------------------------------ request logs

/**
 * A log of the HTTP attempts of one intent, rendered into list. label tells
 * concurrent submits apart (A, B).
 */
function requestLog(list, label = '') {
  return {
    attempt({ n, chaos }) {
      const started = performance.now();
      const outcome = h('span', { class: 'log-outcome' }, 'waiting for the answer…');
      const next = h('span', { class: 'log-next' });
      const rid = h('span', { class: 'log-rid' });
      const li = h('li', { class: 'log-entry', dataset: { state: 'sending', attempt: String(n), submit: label } },
        h('span', { class: 'log-n' }, `${label}#${n}`),
        h('span', { class: 'log-time' }, clock(new Date())),
        chaos ? h('span', { class: 'chip chip-chaos' }, `X-Demo-Chaos: ${chaos}`) : null,
        outcome, next, rid);
      list.append(li);
      list.hidden = false;
      const took = () => `${Math.round(performance.now() - started)} ms`;
      const retryText = (ms) => (ms == null ? '' : `retry in ${(ms / 1000).toFixed(1)} s, same key`);
      return {
        answered(a, retryMs, laterMs) {
          const code = problemCode(a);
          li.dataset.state = retryMs != null ? 'retry' : laterMs != null ? 'later' : a.ok ? 'ok' : 'final-error';
          li.dataset.status = String(a.status);
          if (a.replayed) li.dataset.replayed = 'true';
          replace(outcome,
            h('strong', {}, `${a.status} ${REASONS[a.status] || ''}`.trim()),
            code ? h('code', {}, code) : null,
            a.replayed ? h('span', { class: 'chip chip-replay' }, 'Idempotent-Replayed') : null,
            a.retryAfter ? h('span', { class: 'muted' }, `Retry-After ${a.retryAfter}`) : null,
            h('span', { class: 'muted' }, took()));
          next.textContent = laterMs != null ? `retry in ${duration(laterMs)}: yours to press, same key` : retryText(retryMs);
          if (a.requestId) {
            rid.textContent = `request ${short(a.requestId)}`;
            rid.title = `X-Request-Id ${a.requestId}: one per attempt`;
          }
        },
        lost(err, retryMs) {
          li.dataset.state = 'lost';
          replace(outcome, h('strong', {}, 'no answer'), h('span', { class: 'muted' }, `connection lost · ${took()}`));
          next.textContent = retryMs == null ? 'out of attempts' : retryText(retryMs);
        },
      };
    },
    superseded() {
      list.append(h('li', { class: 'log-entry log-note', dataset: { state: 'superseded', submit: label } },
        h('span', { class: 'log-n' }, `${label}`),
        h('span', {}, 'stops waiting: the intent already has its final answer; a retry could only replay it')));
    },
  };
}

function setResult(box, kind, outcome, ...children) {
  box.className = `result result-${kind}`;
  box.dataset.outcome = outcome;
  replace(box, ...children);
}

function clearResult(box) {
  box.className = 'result';
  delete box.dataset.outcome;
  delete box.dataset.replayed;
  delete box.dataset.paymentId;
  replace(box);
}

// -------------------------------------------------------------- orders

async function createOrder() {
  const body = orderBody();
  if (!body || state.creating) return;
  const tenant = state.tenant;
  let intent = intents.load(tenant, 'order', 'new');
  if (!intent || !sameBody(intent.body, body)) intent = intents.create(tenant, 'order', 'new', '/v1/orders', body);
  state.creating = true;
  renderCart();
  replace(el['order-log']);
  setResult(el['order-result'], 'wait', 'pending', 'Creating the order…');
  const gen = state.gen;
  try {
    const run = new IntentRun();
    const { answer, later } = await submit(state.api, intent, run, requestLog(el['order-log']));
    if (gen !== state.gen) return;
    if (later) {
      setResult(el['order-result'], 'warn', 'later', laterText(later));
      return;
    }
    if (!answer) {
      setResult(el['order-result'], 'warn', 'unresolved',
        'No answer after several attempts. The order may exist; press the button again to retry with the same key.');
      return;
    }
    intents.clear(tenant, 'order', 'new');
    if (answer.ok) {
      state.cart.clear();
      renderProducts();
      setResult(el['order-result'], 'ok', 'created',
        answer.replayed ? 'Order created (answer replayed from an earlier attempt).' : 'Order created.');
      setOrder(answer.body);
      loadRecent();
      el['pay-btn'].focus();
    } else {
      setResult(el['order-result'], 'bad', 'error', problemText(answer));
    }
  } finally {
    state.creating = false;
    renderCart();
  }
}

el['create-order'].addEventListener('click', createOrder);

function setOrder(order) {
  const changed = !state.order || state.order.id !== order.id;
  state.order = order;
  if (changed) {
    state.gen++;
    state.live = null;
    state.payment = loadPayment(order.id);
    state.replayNotes.clear();
    clearResult(el['pay-result']);
    clearResult(el['refund-result']);
    replace(el['pay-log']);
    replace(el['refund-log']);
    el['refund-log'].hidden = true;
    el['pay-requests'].hidden = true;
    sessionStorage.setItem(`oncepay.order.${state.tenant}`, order.id);
    const pending = intents.load(state.tenant, 'giveup', order.id) || intents.load(state.tenant, 'payment', order.id);
    if (pending) showKey(pending, 'no final answer yet: the next press resends it');
  }
  renderAll();
  startPolling();
}

function savePayment(payment) {
  sessionStorage.setItem(`oncepay.payment.${state.tenant}.${payment.order_id}`, JSON.stringify(payment));
}

function loadPayment(orderId) {
  try {
    return JSON.parse(sessionStorage.getItem(`oncepay.payment.${state.tenant}.${orderId}`) || 'null');
  } catch {
    return null;
  }
}

async function loadRecent() {
  const api = state.api;
  let a;
  try {
    a = await api.get('/v1/orders?limit=8');
  } catch {
    return;
  }
  if (api === state.api) renderRecent(a.ok ? a.body.data || [] : []);
}

function renderRecent(orders) {
  state.recent = orders;
  el['recent-empty'].hidden = orders.length > 0;
  replace(el['recent-list'], orders.map((o) =>
    h('li', {},
      h('button', {
        type: 'button', class: 'recent-item', 'aria-current': state.order && state.order.id === o.id ? 'true' : null,
        title: o.id, onclick: () => setOrder(o),
      },
      h('code', {}, short(o.id)),
      h('span', { class: 'recent-amount' }, money(o.amount_total, o.currency)),
      h('span', { class: `badge badge-${tone(o.status)}` }, statusLabel(o.status)),
      h('span', { class: 'muted small' }, clock(o.created_at).slice(0, 8))))));
}

// ---------------------------------------------------------------- pay

function chaosValue() {
  const c = el.chaos.querySelector('input[name="chaos"]:checked');
  return state.demo && c ? c.value : 'none';
}

function showKey(intent, note) {
  el['pay-requests'].hidden = false;
  el['pay-key'].textContent = intent.key;
  el['pay-key-note'].textContent = note;
}

async function pay(ev) {
  ev.preventDefault();
  const order = state.order;
  if (!order || state.paying || state.cancelling || state.givingUp || order.status !== 'awaiting_payment') return;
  const tenant = state.tenant;
  if (intents.load(tenant, 'giveup', order.id)) return; // given up: never resent
  let intent = intents.load(tenant, 'payment', order.id);
  const resumed = !!intent;
  if (!intent) {
    intent = intents.create(tenant, 'payment', order.id, `/v1/orders/${order.id}/payments`, { payment_method: el.method.value });
  }
  const chaos = chaosValue();
  state.paying = true;
  renderPay();
  replace(el['pay-log']);
  showKey(intent, resumed ? 'resent: the earlier attempts had no final answer' : 'new intent, kept in sessionStorage until a final answer');
  setResult(el['pay-result'], 'wait', 'pending', chaos === 'provider-timeout'
    ? 'Paying… the provider hangs on purpose; oncepay gives up after PSP_TIMEOUT and the retry finds the charge.'
    : 'Paying…');
  const gen = state.gen;
  let focusNext = null;
  try {
    if (PROVIDER_FAULTS[chaos]) {
      const f = await state.api.send('PUT', '/demo/faults', PROVIDER_FAULTS[chaos]);
      if (!f.ok) {
        setResult(el['pay-result'], 'bad', 'error', `Could not arm the provider fault: ${problemText(f)}`);
        return;
      }
    }
    const run = new IntentRun();
    const submits = chaos === 'double-submit'
      ? ['A', 'B'].map((label) => submit(state.api, intent, run, requestLog(el['pay-log'], label)))
      : [submit(state.api, intent, run, requestLog(el['pay-log']), { chaos: chaos === 'lose-response' ? 'lose-response' : '' })];
    const results = await Promise.all(submits);
    if (gen !== state.gen) return;
    const answer = run.final;
    const later = results.find((r) => r.later)?.later;
    if (!answer && later) {
      el['pay-key-note'].textContent = 'no final answer yet: still kept, the next press resends it';
      setResult(el['pay-result'], 'warn', 'later', laterText(later), ' ', GIVE_UP_HINT);
      return;
    }
    if (!answer) {
      el['pay-key-note'].textContent = 'no final answer yet: still kept, the next press resends it';
      setResult(el['pay-result'], 'warn', 'unresolved',
        'No final answer after several attempts. The payment may have gone through: press the button to retry with the same key. It cannot charge twice. ',
        GIVE_UP_HINT);
      return;
    }
    intents.clear(tenant, 'payment', order.id);
    el['pay-key-note'].textContent = 'final answer received: the key is done';
    focusNext = showPayOutcome(answer, chaos);
  } catch (err) {
    setResult(el['pay-result'], 'bad', 'error', `Something went wrong in the page: ${err.message}`);
  } finally {
    state.paying = false;
    resetChaos();
    renderPay();
    if (focusNext) focusNext.focus();
    refreshLive();
  }
}

function resetChaos() {
  const none = el.chaos.querySelector('input[value="none"]');
  if (none) none.checked = true;
}

/** Show the final answer of a payment; returns what to focus next, if anything. */
function showPayOutcome(answer, chaos) {
  const box = el['pay-result'];
  const replayed = answer.replayed
    ? h('span', { class: 'replay-note' }, h('span', { class: 'chip chip-replay' }, 'Replayed'),
      'This answer was stored by an earlier attempt and sent again (Idempotent-Replayed: true).')
    : null;
  if (answer.ok) {
    const p = answer.body;
    state.payment = p;
    savePayment(p);
    state.order = { ...state.order, status: 'paid' };
    setResult(box, 'ok', 'succeeded',
      h('strong', {}, `Paid ${money(p.amount, p.currency)}.`), ' ',
      `Payment `, h('code', { title: p.id }, short(p.id)), ` succeeded with ${p.payment_method}.`,
      chaos === 'double-submit' ? ' Two submits, one payment.' : '', ' ', replayed);
    box.dataset.paymentId = p.id;
    if (answer.replayed) box.dataset.replayed = 'true';
    return;
  }
  const code = problemCode(answer);
  if (answer.status === 402) {
    setResult(box, 'bad', 'declined',
      h('strong', {}, 'Declined. '),
      `${(answer.body && answer.body.detail) || 'The card was declined.'} Nothing was charged. `,
      'Choose another payment method and press Pay: that is a new intent, with a new key.', ' ', replayed);
    if (answer.replayed) box.dataset.replayed = 'true';
    return el.method; // the next step: choose another card

  }
  if (code === 'order_not_payable') {
    state.order = { ...state.order, status: 'cancelled' };
    setResult(box, 'info', 'not-payable', h('strong', {}, 'Not payable. '), problemText(answer), ' ', replayed);
    return;
  }
  if (code === 'order_already_paid') {
    setResult(box, 'info', 'already-paid', h('strong', {}, 'Already paid. '), problemText(answer), ' ', replayed);
    return;
  }
  setResult(box, 'bad', 'error', h('strong', {}, `${answer.status} ${code || ''}. `), problemText(answer));
}

el['pay-form'].addEventListener('submit', pay);

// ---------------------------------------------------------------- cancel

/**
 * Submit an intent of the pay panel other than the payment (a cancel, a
 * give-up) until it has a final answer, and return it; or report the wait
 * and return null (also when the tenant or order changed meanwhile: gen).
 * again says how to retry with the same key. The caller drops the key.
 */
async function finalAnswer(intent, gen, again) {
  const { answer, later } = await submit(state.api, intent, new IntentRun(), requestLog(el['pay-log']));
  if (gen !== state.gen) return null;
  if (!answer) {
    el['pay-key-note'].textContent = 'no final answer yet: still kept, the next press resends it';
    setResult(el['pay-result'], 'warn', later ? 'later' : 'unresolved', later ? laterText(later)
      : `No final answer after several attempts: ${again}`);
    return null;
  }
  el['pay-key-note'].textContent = 'final answer received: the key is done';
  return answer;
}

/**
 * Give the order up: POST /v1/orders/{id}/cancel under a key of its own,
 * kept until a final answer like a payment's. The server refuses while a
 * payment of the order is at the provider (its outcome unknown) or once it
 * is paid: the answer says which.
 */
async function cancelOrder() {
  const order = state.order;
  if (!order || state.paying || state.cancelling || state.givingUp || order.status !== 'awaiting_payment') return;
  const tenant = state.tenant;
  let intent = intents.load(tenant, 'cancel', order.id);
  if (!intent) intent = intents.create(tenant, 'cancel', order.id, `/v1/orders/${order.id}/cancel`, { reason: 'cancelled in the shop' });
  state.cancelling = true;
  renderPay();
  replace(el['pay-log']);
  showKey(intent, 'cancel intent, kept in sessionStorage until a final answer');
  setResult(el['pay-result'], 'wait', 'pending', 'Cancelling…');
  const gen = state.gen;
  try {
    const answer = await finalAnswer(intent, gen, 'press Cancel order again to retry with the same key.');
    if (!answer) return;
    intents.clear(tenant, 'cancel', order.id);
    const replayed = answer.replayed ? ' (answer replayed from an earlier attempt)' : '';
    if (answer.ok) {
      state.order = answer.body;
      setResult(el['pay-result'], 'info', 'cancelled', h('strong', {}, 'Order cancelled. '),
        `It can no longer be paid; a payment under a new key is refused${replayed}.`);
      loadRecent();
    } else if (problemCode(answer) === 'order_not_cancellable') {
      setResult(el['pay-result'], 'bad', 'not-cancellable', h('strong', {}, 'Not cancelled. '), problemText(answer), replayed);
    } else {
      setResult(el['pay-result'], 'bad', 'error', h('strong', {}, `${answer.status} ${problemCode(answer) || ''}. `), problemText(answer));
    }
  } catch (err) {
    setResult(el['pay-result'], 'bad', 'error', `Something went wrong in the page: ${err.message}`);
  } finally {
    state.cancelling = false;
    renderPay();
    refreshLive();
  }
}

el['cancel-btn'].addEventListener('click', cancelOrder);

// ---------------------------------------------------------------- give up

/** Offered with a payment that has no final answer (pay's later and unresolved results). */
const GIVE_UP_HINT = 'Or give it up: the payment then does not happen, or is refunded in full if it was charged.';

/**
 * What a cancel by key did, in plain words, by its outcome
 * (docs/CONTRACT.md, "Giving up on a payment by its key"). An outcome not
 * listed is a newer server's: the page says it did not understand it.
 */
const GIVE_UP_OUTCOMES = {
  prevented: ['The payment will not happen.',
    'Its request never reached the provider, and its key is refused from now on. The order can still be paid, under a new key.'],
  cancel_requested: ['If the provider charged, the charge is refunded in full.',
    'The payment was at the provider with its outcome unknown: it is not resent; if it charged, the order ends cancelled.'],
  refund_started: ['It had been charged; a full refund has started.', 'The order ends refunded.'],
  nothing_to_cancel: ['Nothing to undo.',
    'Nothing was charged (the payment was declined or refused), or what was charged is refunded already.'],
};

/**
 * Give up on the payment intent that has no final answer: POST
 * /v1/payments/cancel-by-key names it by the key it was sent under, so it
 * works whatever became of the request. The give-up is an intent of its
 * own, with its own key kept until a final answer, so that a give-up whose
 * answer was lost is retried and replays its outcome. While it is pending
 * the payment is never resent.
 */
async function giveUp() {
  const order = state.order;
  if (!order || state.paying || state.cancelling || state.givingUp) return;
  const tenant = state.tenant;
  let intent = intents.load(tenant, 'giveup', order.id);
  if (!intent) {
    const payment = intents.load(tenant, 'payment', order.id);
    if (!payment) return;
    intent = intents.create(tenant, 'giveup', order.id, '/v1/payments/cancel-by-key',
      { order_id: order.id, idempotency_key: payment.key });
  }
  state.givingUp = true;
  renderPay();
  replace(el['pay-log']);
  showKey(intent, `give-up intent for the payment under key ${short(intent.body.idempotency_key)}, kept in sessionStorage until a final answer`);
  setResult(el['pay-result'], 'wait', 'pending', 'Giving up on the payment…');
  const gen = state.gen;
  try {
    const answer = await finalAnswer(intent, gen, 'press Give up again to retry with the same key. The payment is not resent meanwhile.');
    if (!answer) return;
    intents.clear(tenant, 'giveup', order.id);
    showGiveUpOutcome(answer, intent);
  } catch (err) {
    setResult(el['pay-result'], 'bad', 'error', `Something went wrong in the page: ${err.message}`);
  } finally {
    state.givingUp = false;
    renderPay();
    refreshLive();
  }
}

/**
 * Show the final answer of a give-up. An outcome gives the payment a
 * definite fate, so its intent is dropped: resending it could only be
 * refused (409 payment_cancelled) or replay what the give-up undid.
 */
function showGiveUpOutcome(answer, intent) {
  const box = el['pay-result'];
  const b = answer.body || {};
  const said = answer.ok ? GIVE_UP_OUTCOMES[b.outcome] : null;
  if (!said) {
    setResult(box, 'bad', problemCode(answer) || 'error', h('strong', {}, 'Not given up. '), problemText(answer));
    return;
  }
  const payment = intents.load(state.tenant, 'payment', b.order_id);
  if (payment && payment.key === intent.body.idempotency_key) intents.clear(state.tenant, 'payment', b.order_id);
  setResult(box, 'info', b.outcome, h('strong', {}, 'Given up. '), `${said[0]} ${said[1]}`,
    answer.replayed ? ' (answer replayed from an earlier attempt)' : '');
  if (b.payment_id) box.dataset.paymentId = b.payment_id;
}

el['giveup-btn'].addEventListener('click', giveUp);

function renderPay() {
  const order = state.order;
  el.pay.hidden = !order;
  if (!order) return;
  el['pay-order-id'].textContent = order.id;
  el['pay-amount'].textContent = money(order.amount_total, order.currency);
  el['pay-order-status'].textContent = statusLabel(order.status);
  el['pay-order-status'].className = `badge badge-${tone(order.status)}`;
  const pending = intents.load(state.tenant, 'payment', order.id);
  const givingUp = intents.load(state.tenant, 'giveup', order.id);
  const busy = state.paying || state.cancelling || state.givingUp;
  const payable = order.status === 'awaiting_payment';
  const btn = el['pay-btn'];
  btn.disabled = busy || !payable || !!givingUp;
  renderGiveUp(pending, givingUp);
  const cancel = el['cancel-btn'];
  cancel.hidden = !payable;
  cancel.disabled = busy;
  cancel.setAttribute('aria-busy', state.cancelling ? 'true' : 'false');
  cancel.textContent = state.cancelling ? 'Cancelling…'
    : intents.load(state.tenant, 'cancel', order.id) ? 'Retry cancel (same key)' : 'Cancel order';
  btn.setAttribute('aria-busy', state.paying ? 'true' : 'false');
  el.method.disabled = state.paying || !payable || !!pending;
  for (const input of el.chaos.querySelectorAll('input')) input.disabled = state.paying;
  el.chaos.hidden = !state.demo || !payable;
  const hint = el['method-hint'];
  if (givingUp) {
    hint.hidden = false;
    hint.textContent = 'A payment of this order is being given up, so it is not resent; until the give-up has a final answer, Give up retries it with the same key.';
  } else if (pending && !state.paying) {
    el.method.value = pending.body.payment_method;
    hint.hidden = false;
    hint.textContent = 'A payment of this order has no final answer yet, so its card is fixed: pressing the button resends the same request with the same key; Give up makes sure it does not happen.';
  } else if (!payable) {
    hint.hidden = false;
    hint.textContent = order.status === 'cancelled'
      ? 'This order is cancelled. Create a new order to buy again.'
      : 'This order is paid. Create a new order to pay again.';
  } else {
    hint.hidden = true;
  }
  if (state.paying) btn.textContent = 'Paying…';
  else if (!payable) btn.textContent = statusLabel(order.status).replace(/^./, (c) => c.toUpperCase());
  else if (pending) btn.textContent = 'Retry payment (same key)';
  else btn.textContent = `Pay ${money(order.amount_total, order.currency)}`;
}

/**
 * Give up is offered next to the retry while a payment intent has no final
 * answer, whatever the order's status says meanwhile (a payment whose
 * answer was lost may have paid it), and while a give-up has none.
 */
function renderGiveUp(pending, givingUp) {
  const b = el['giveup-btn'];
  b.hidden = !givingUp && !(pending && !state.paying);
  b.disabled = state.paying || state.cancelling || state.givingUp;
  b.setAttribute('aria-busy', state.givingUp ? 'true' : 'false');
  b.textContent = state.givingUp ? 'Giving up…' : givingUp ? 'Retry giving up (same key)' : 'Give up this payment';
}

// -------------------------------------------------------------- refund

function refundablePayment() {
  const live = state.live && state.live.payments.find((p) => p.status === 'succeeded');
  return live || (state.payment && state.payment.status === 'succeeded' ? state.payment : null);
}

function renderRefund() {
  const order = state.order;
  const p = order && refundablePayment();
  const show = !!p && ['paid', 'fulfilled', 'partially_refunded', 'refunded'].includes(order.status);
  el.refund.hidden = !show;
  if (!show) return;
  const remaining = p.amount - (p.amount_refunded || 0);
  const digits = minorDigits(p.currency);
  el['refund-currency'].textContent = p.currency;
  const pending = intents.load(state.tenant, 'refund', p.id);
  const input = el['refund-amount'];
  input.readOnly = !!pending || state.refunding;
  if (pending) input.value = (pending.body.amount / 10 ** digits).toFixed(digits);
  else if (!input.value && remaining > 0) input.value = (remaining / 10 ** digits).toFixed(digits);
  el['refund-hint'].textContent = pending
    ? 'A refund of this amount has no final answer yet: the button resends it with the same key.'
    : remaining > 0 ? `Up to ${money(remaining, p.currency)} can be refunded.` : 'Fully refunded.';
  el['refund-btn'].disabled = state.refunding || (remaining <= 0 && !pending);
  el['refund-btn'].setAttribute('aria-busy', state.refunding ? 'true' : 'false');
  el['refund-btn'].textContent = state.refunding ? 'Refunding…' : pending ? 'Retry refund (same key)' : 'Refund';
}

async function refund(ev) {
  ev.preventDefault();
  const p = refundablePayment();
  if (!p || state.refunding) return;
  const tenant = state.tenant;
  let intent = intents.load(tenant, 'refund', p.id);
  if (!intent) {
    const digits = minorDigits(p.currency);
    const value = Number(el['refund-amount'].value.replace(',', '.'));
    const amount = Math.round(value * 10 ** digits);
    if (!Number.isFinite(value) || amount < 1) {
      setResult(el['refund-result'], 'bad', 'invalid', 'Enter an amount greater than zero.');
      el['refund-amount'].focus();
      return;
    }
    intent = intents.create(tenant, 'refund', p.id, `/v1/payments/${p.id}/refunds`, { amount });
  }
  state.refunding = true;
  renderRefund();
  replace(el['refund-log']);
  setResult(el['refund-result'], 'wait', 'pending', 'Refunding…');
  const gen = state.gen;
  try {
    const run = new IntentRun();
    const { answer, later } = await submit(state.api, intent, run, requestLog(el['refund-log']));
    if (gen !== state.gen) return;
    if (later) {
      setResult(el['refund-result'], 'warn', 'later', laterText(later));
      return;
    }
    if (!answer) {
      setResult(el['refund-result'], 'warn', 'unresolved', 'No final answer yet. Press the button to retry with the same key; it cannot refund twice.');
      return;
    }
    intents.clear(tenant, 'refund', p.id);
    el['refund-amount'].value = '';
    if (answer.ok) {
      const r = answer.body;
      setResult(el['refund-result'], 'ok', 'succeeded', h('strong', {}, `Refunded ${money(r.amount, p.currency)}.`),
        answer.replayed ? ' (answer replayed)' : '');
    } else {
      setResult(el['refund-result'], 'bad', problemCode(answer) || 'error', problemText(answer));
    }
  } finally {
    state.refunding = false;
    renderRefund();
    refreshLive();
  }
}

el['refund-form'].addEventListener('submit', refund);

// ---------------------------------------------------------- live view

function stopPolling() {
  clearTimeout(state.pollTimer);
  state.pollTimer = 0;
}

function startPolling() {
  stopPolling();
  if (!state.order || document.visibilityState !== 'visible') return;
  const tick = async () => {
    await refreshLive();
    if (state.order && document.visibilityState === 'visible') state.pollTimer = setTimeout(tick, POLL_MS);
  };
  tick();
}

document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') startPolling();
  else stopPolling();
});

async function fetchEvents(api, order) {
  const out = [];
  const since = Date.parse(order.created_at);
  let cursor = '';
  for (let page = 0; page < 5; page++) {
    const a = await api.get('/v1/events?limit=100' + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''));
    if (!a.ok) break;
    const data = a.body.data || [];
    out.push(...data);
    const oldest = data[data.length - 1];
    if (!a.body.next_cursor || !oldest || Date.parse(oldest.occurred_at) < since) break;
    cursor = a.body.next_cursor;
  }
  return out;
}

let refreshing = null;

/** Refresh the live view; concurrent calls share one refresh. */
function refreshLive() {
  if (!refreshing) refreshing = doRefresh().finally(() => { refreshing = null; });
  return refreshing;
}

async function doRefresh() {
  const order = state.order;
  if (!order) return;
  const gen = state.gen;
  const api = state.api;
  el['live-dot'].dataset.state = 'busy';
  const [o, live, events] = await Promise.allSettled([
    api.get(`/v1/orders/${order.id}`),
    state.demo ? api.get(`/demo/orders/${order.id}/payments`) : Promise.resolve(null),
    fetchEvents(api, order),
  ]);
  if (gen !== state.gen || !state.order) return;
  const failed = [o, events].some((r) => r.status === 'rejected');
  el['live-dot'].dataset.state = failed ? 'error' : 'ok';
  if (o.status === 'fulfilled' && o.value.ok) state.order = o.value.body;
  if (live.status === 'fulfilled' && live.value && live.value.ok) state.live = live.value.body;
  renderAll();
  if (events.status === 'fulfilled') renderEvents(events.value);
  el['live-updated'].textContent = failed ? 'Connection problem; retrying every second.' : `Updated ${clock(new Date())}`;
}

function renderLive() {
  const order = state.order;
  el['live-empty'].hidden = !!order;
  el['live-body'].hidden = !order;
  if (!order) return;
  el['live-order-id'].textContent = order.id;
  el['live-order-status'].textContent = statusLabel(order.status);
  el['live-order-status'].className = `badge badge-${tone(order.status)}`;

  const live = state.live && state.live.order_id === order.id ? state.live : null;
  const charged = live ? live.charged : null;
  const kpi = el['kpi-charged'];
  if (charged == null) {
    el.charged.textContent = '–';
    el.charged.dataset.count = '';
    kpi.dataset.tone = 'neutral';
    el['charged-note'].textContent = state.demo ? 'the provider is not the simulator' : 'visible in demo mode';
  } else {
    el.charged.textContent = `${charged}×`;
    el.charged.dataset.count = String(charged);
    kpi.dataset.tone = charged === 1 ? 'ok' : charged === 0 ? 'neutral' : 'bad';
    el['charged-note'].textContent = charged > 1
      ? 'charged more than once: this must never happen'
      : "from the payment simulator's own ledger";
  }

  const payments = live ? live.payments : state.payment && state.payment.order_id === order.id ? [state.payment] : [];
  el['attempt-count'].textContent = String(payments.length);
  el['attempts-empty'].hidden = payments.length > 0;
  const refunds = live ? live.refunds : [];
  renderKeyed(el.attempts, payments.map((p, i) => ({
    key: p.id,
    sig: JSON.stringify([p, refunds.filter((r) => r.payment_id === p.id)]),
    render: () => attemptItem(p, i + 1, refunds.filter((r) => r.payment_id === p.id)),
  })));
}

function attemptItem(p, n, refunds) {
  const prov = p.provider;
  return h('li', { class: 'attempt', dataset: { status: p.status } },
    h('div', { class: 'attempt-head' },
      h('span', { class: 'attempt-n' }, `Attempt ${n}`),
      h('span', { class: `badge badge-${tone(p.status)}` }, statusLabel(p.status)),
      h('span', { class: 'attempt-amount' }, money(p.amount, p.currency))),
    h('dl', { class: 'attempt-facts' },
      fact('Payment', h('code', { title: p.id }, short(p.id))),
      fact('Card', p.payment_method),
      p.idempotency_key ? fact('Key', h('code', { title: p.idempotency_key }, short(p.idempotency_key))) : null,
      p.failure_code ? fact('Reason', p.failure_code) : null,
      prov ? fact('At the provider', `${prov.charges_succeeded} charged, ${prov.charges_failed} declined`) : null,
      p.amount_refunded ? fact('Refunded', money(p.amount_refunded, p.currency)) : null),
    refunds.length
      ? h('ul', { class: 'refunds' }, refunds.map((r) => h('li', {},
        h('span', { class: `badge badge-${tone(r.status)}` }, `refund ${statusLabel(r.status)}`), ' ',
        money(r.amount, p.currency), ' ', h('code', { title: r.idempotency_key }, `key ${short(r.idempotency_key)}`))))
      : null);
}

function fact(label, value) {
  return h('div', {}, h('dt', {}, label), h('dd', {}, value));
}

function relevantEvents(all, order) {
  const ids = new Set([order.id]);
  const live = state.live && state.live.order_id === order.id ? state.live : null;
  if (live) {
    for (const p of live.payments) ids.add(p.id);
    for (const r of live.refunds) ids.add(r.id);
  }
  if (state.payment) ids.add(state.payment.id);
  return all.filter((e) => {
    const pl = e.payload || {};
    return ids.has(e.aggregate_id) || pl.order_id === order.id || ids.has(pl.payment_id);
  }).reverse();
}

/** Consumers of an event, whatever shape the events API gives them. */
function consumers(e) {
  const list = e.processed_by || e.consumed_by || e.subscribers;
  if (!Array.isArray(list)) return null;
  return list.map((c) => (typeof c === 'string' ? { name: c } : { name: c.subscriber || c.name || c.consumer || '?', at: c.processed_at || c.at }));
}

function renderEvents(all) {
  const order = state.order;
  if (!order) return;
  const events = relevantEvents(all, order);
  el['events-empty'].hidden = events.length > 0;
  const canReplay = !!(state.demo && state.demo.chaos.event_replay);
  renderKeyed(el.events, events.map((e) => {
    const note = state.replayNotes.get(e.id) || '';
    return { key: e.id, sig: JSON.stringify([e.published_at, e.processed_by, e.attempts, e.last_error, e.stuck, note, canReplay]), render: () => eventItem(e, note, canReplay) };
  }));
}

function eventItem(e, note, canReplay) {
  const cons = consumers(e);
  return h('li', { class: 'event', dataset: { type: e.type } },
    h('div', { class: 'event-head' },
      h('span', { class: 'event-type' }, e.type),
      h('span', { class: 'muted small' }, `${e.aggregate_type} `, h('code', { title: e.aggregate_id }, short(e.aggregate_id)))),
    h('div', { class: 'event-meta' },
      h('span', {}, `occurred ${clock(e.occurred_at)}`),
      publication(e)),
    cons
      ? h('div', { class: 'event-consumers' }, cons.length ? 'consumed by ' : 'not consumed yet',
        cons.map((c) => h('span', { class: 'chip', title: c.at ? `processed ${c.at}` : null }, c.name)))
      : null,
    canReplay || note
      ? h('div', { class: 'event-actions' },
        canReplay ? h('button', {
          type: 'button', class: 'btn btn-small btn-ghost', dataset: { focusKey: `replay-${e.id}` },
          'aria-label': `Replay event ${e.type} ${short(e.id)}`, onclick: () => replayEvent(e),
        }, 'Replay event') : null,
        note ? h('span', { class: 'muted small', role: 'status' }, note) : null)
      : null);
}

/** Where the event is on its way to the broker. */
function publication(e) {
  if (e.published_at) return h('span', { class: 'published' }, `published ${clock(e.published_at)}`);
  const why = e.last_error ? `: ${e.last_error}` : '';
  if (e.stuck) return h('span', { class: 'stuck' }, `stuck after ${e.attempts} attempts${why}`);
  if (e.attempts > 0) return h('span', { class: 'unpublished' }, `not published yet, ${e.attempts} failed attempts${why}`);
  return h('span', { class: 'unpublished' }, 'not published yet');
}

async function replayEvent(e) {
  state.replayNotes.set(e.id, 'replaying…');
  const a = await state.api.send('POST', `/demo/events/${e.id}/replay`).catch(() => null);
  state.replayNotes.set(e.id, a && a.ok
    ? `replayed at ${clock(new Date())}: the consumers see the same message id and change nothing`
    : `replay failed: ${a ? problemText(a) : 'no answer'}`);
  refreshLive();
}

function renderAll() {
  renderPay();
  renderRefund();
  renderLive();
  const order = state.order;
  const i = order ? state.recent.findIndex((o) => o.id === order.id) : -1;
  if (i >= 0 && state.recent[i].status !== order.status) {
    state.recent[i] = order;
    renderRecent(state.recent);
  }
  for (const b of el['recent-list'].querySelectorAll('button.recent-item')) {
    b.setAttribute('aria-current', order && b.title === order.id ? 'true' : 'false');
  }
}

init();
