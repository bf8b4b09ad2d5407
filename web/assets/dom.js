// Small DOM and formatting helpers. Text from the API only ever reaches the
// page through textContent and attributes, never as HTML.

/** The element with this id (throws when the page lacks it: a bug). */
export function byId(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error('missing #' + id);
  return el;
}

/**
 * Make an element: h('li', {class: 'x', dataset: {id: 1}}, 'text', child).
 * Attributes with null or false values are left out; on* are listeners.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replace an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/**
 * Render a keyed list without disturbing what did not change, so a live
 * list that refreshes every second keeps keyboard focus and scroll.
 * items: [{key, sig, render: () => Element}]; sig changes mean re-render.
 */
export function renderKeyed(container, items) {
  const old = new Map();
  for (const node of container.children) old.set(node.dataset.key, node);
  const active = document.activeElement;
  const focusKey = active && container.contains(active) ? active.dataset.focusKey : null;
  let refocus = null;
  items.forEach((item, i) => {
    let node = old.get(item.key);
    if (!node || node.dataset.sig !== item.sig) {
      const fresh = item.render();
      fresh.dataset.key = item.key;
      fresh.dataset.sig = item.sig;
      if (node) node.replaceWith(fresh);
      node = fresh;
      if (focusKey) refocus = node.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`) || refocus;
    }
    old.delete(item.key);
    if (container.children[i] !== node) container.insertBefore(node, container.children[i] || null);
  });
  for (const node of old.values()) node.remove();
  if (refocus && document.activeElement !== refocus) refocus.focus();
}

/** Minor units to a localised amount: 3600 EUR -> €36.00. */
export function money(minor, currency) {
  if (minor == null || !currency) return '—';
  const fmt = new Intl.NumberFormat(undefined, { style: 'currency', currency });
  const digits = fmt.resolvedOptions().maximumFractionDigits;
  return fmt.format(minor / 10 ** digits);
}

/** The number of minor units of a currency (EUR: 2). */
export function minorDigits(currency) {
  return new Intl.NumberFormat(undefined, { style: 'currency', currency }).resolvedOptions().maximumFractionDigits;
}

/** A clock time with milliseconds: 14:03:27.118. */
export function clock(iso) {
  const d = iso instanceof Date ? iso : new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

/**
 * The last 8 characters of an id, for display (the full id goes in a
 * title). The last ones, because time-ordered UUIDv7 ids made in the same
 * second share their first ones.
 */
export function short(id) {
  return id ? '…' + String(id).slice(-8) : '';
}

/** A human label for a status. */
export function statusLabel(status) {
  return String(status || '').replaceAll('_', ' ');
}

/** The badge tone of a status. */
export function tone(status) {
  switch (status) {
    case 'succeeded':
    case 'paid':
    case 'fulfilled':
      return 'ok';
    case 'failed':
    case 'cancelled':
      return 'bad';
    case 'pending':
    case 'awaiting_payment':
      return 'wait';
    case 'partially_refunded':
    case 'refunded':
      return 'info';
    default:
      return 'neutral';
  }
}
