// lib/queues.js: what the Queues and Queue pages share: the key a queue's
// backlog history is filed under, the history itself (GET
// /admin/api/queue-backlog once, then the live ticks), and how a DLQ policy
// reads.

import { get, fmt, setText } from '../dash.js';

// queueKey is the key of GET /admin/api/queue-backlog and of the attention
// items: topic + "/" + group, the default group spelled "".
export function queueKey(topic, group) {
  return topic + '/' + (group === 'default' ? '' : (group || ''));
}

// The broker keeps 10 min of 5 s samples; the page keeps the same window
// and at most pointsMax points a queue (the live ticks come every 2 s).
const windowMs = 10 * 60_000;
const pointsMax = 400;

// backlog holds, per queue key, [atMs, ready] points, oldest first.
export class Backlog {
  constructor() {
    this.points = new Map();
    // fromBroker counts, per key, the points that came from the broker's
    // history (the page shows it as data-history, the tests read it).
    this.fromBroker = new Map();
  }

  // load fills the history from the broker's sampler; a failure leaves it
  // empty (the sparklines then start from the first tick).
  async load() {
    try {
      const data = await get('/admin/api/queue-backlog');
      for (const [key, pts] of Object.entries(data.queues || {})) {
        const mine = this.points.get(key) || [];
        this.fromBroker.set(key, pts.length);
        this.points.set(key, pts.map(([t, v]) => [t, v]).concat(mine).sort((a, b) => a[0] - b[0]).slice(-pointsMax));
      }
      return true;
    } catch (e) {
      return false;
    }
  }

  // add appends a live observation of ready.
  add(key, atMs, ready) {
    const pts = this.points.get(key) || [];
    if (pts.length && pts[pts.length - 1][0] >= atMs) return;
    pts.push([atMs, ready]);
    while (pts.length > pointsMax || (pts.length && atMs - pts[0][0] > windowMs)) pts.shift();
    this.points.set(key, pts);
  }

  of(key) { return this.points.get(key) || []; }

  historyOf(key) { return this.fromBroker.get(key) || 0; }

  // keep forgets the queues not in keys (deleted ones).
  keep(keys) {
    for (const k of [...this.points.keys()]) {
      if (!keys.has(k)) { this.points.delete(k); this.fromBroker.delete(k); }
    }
  }
}

// policyText says where a queue's dead letters go.
export function policyText(dlq) {
  if (!dlq) return '–';
  switch (dlq.policy) {
    case 'custom': return 'to ' + fmt.queue(dlq.topic, dlq.group);
    case 'global': return 'to the global DLQ';
    default: return 'discarded';
  }
}

// ttlText: a default TTL of 0 is none.
export function ttlText(ms) {
  return ms ? fmt.ms(ms) : 'none';
}

// confirmAction is dash.js's confirmDialog on the same #confirm dialog,
// except that a close event still queued from the dialog's previous use
// cannot answer it. dash.js's listener takes the first close event after
// the call, so a confirm opened before the previous close was dispatched
// (a cancel and a new click in one task, or a busy renderer) resolves
// false at once and leaves the dialog open, its button doing nothing.
// TestDashboardQueues does exactly that (cancel, then delete, in one
// script) and fails with confirmDialog. A close event that arrives while
// the dialog is open is not this one's and is ignored.
export function confirmAction(text, label) {
  const d = document.getElementById('confirm');
  setText('confirm-text', text);
  setText('confirm-ok', label || 'Confirm');
  return new Promise((resolve) => {
    const onClose = () => {
      if (d.open) return; // a stale event of the previous close
      d.removeEventListener('close', onClose);
      resolve(d.returnValue === 'ok');
    };
    d.returnValue = '';
    d.showModal();
    d.addEventListener('close', onClose);
    document.getElementById('confirm-ok').focus();
  });
}
