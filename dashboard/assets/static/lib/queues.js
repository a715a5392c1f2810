// lib/queues.js: what the Queues and Queue pages share: the key a queue's
// backlog history is filed under, the history itself (GET
// /admin/api/queue-backlog once, then the live ticks), and how a DLQ policy
// reads. Every point's time is the broker's clock: the history's at_ms and
// the listing's at_ms (GET /admin/api/queues, the queues family), never the
// browser's Date.now(), so a browser clock off by an hour neither drops the
// live points (older than the history) nor the history (out of a window
// measured from a time in the future).

import { get, q, fmt } from '../dash.js';

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

  // load fills the history from the broker's sampler, of every queue or of
  // the one queue key (?key=); a failure leaves it empty (the sparklines
  // then start from the first tick).
  async load(key) {
    try {
      const data = await get('/admin/api/queue-backlog' + q({ key }));
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

  // add appends a live observation of ready at the broker's time atMs (a
  // listing without at_ms adds nothing rather than a point on another
  // clock).
  add(key, atMs, ready) {
    if (!Number.isFinite(atMs)) return;
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
