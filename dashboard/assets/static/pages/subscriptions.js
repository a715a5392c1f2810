// Subscriptions: every subscription of every session (kind, topic, group,
// partition, prefetch, held, auto-ack), each linking to its queue and to
// its connection's row; sortable and filterable, filters in the URL. Live
// over one events stream (subscriptions, and connections for the client
// names).
import { start, live, el, replace, setText, fmt, table, urlState, queueHref, q, $, update } from '../dash.js';
import { connectionsBySession, bindSelect, connectionHref, staleWatch } from '../lib/clients.js';

let subs = null; // null until the first answer
let byConn = new Map();
let view = null;
const filters = { kind: '', ack: '', state: '' };

const field = (name, ...children) => el('span', { dataset: { f: name } }, ...children);

// topicHref: a queue's detail page; streams and cohorts have their pages.
function topicHref(s) {
  switch (s.kind) {
    // Those pages filter by their own URL keys (st.q, co.q).
    case 'stream': return '/admin/streams' + q({ 'st.q': s.topic });
    case 'cohort': return '/admin/cohorts' + q({ 'co.q': s.topic });
    default: return queueHref(s.topic, s.group);
  }
}

const columns = [
  { key: 'kind', label: 'Kind', render: (s) => field('kind', el('span', { class: 'badge' }, s.kind || '–')) },
  { key: 'topic', label: 'Topic', render: (s) => field('topic', el('a', { href: topicHref(s) }, s.topic)) },
  { key: 'group', label: 'Group', render: (s) => field('group', s.group || 'default') },
  { key: 'partition', label: 'Partition', num: true, sort: (s) => Number(s.partition), render: (s) => field('partition', String(s.partition)) },
  { key: 'prefetch', label: 'Prefetch', num: true, sort: (s) => Number(s.prefetch), nofilter: true, render: (s) => field('prefetch', fmt.num(s.prefetch)) },
  { key: 'held', label: 'Held', num: true, sort: (s) => Number(s.held), nofilter: true, render: (s) => field('held', fmt.num(s.held)) },
  { key: 'auto_ack', label: 'Acks', sort: (s) => (s.auto_ack ? 'auto' : 'manual'), render: (s) => field('ack', s.auto_ack ? 'auto-ack' : 'manual') },
  { key: 'client', label: 'Client', sort: (s) => clientOf(s).client_name || '',
    render: (s) => field('client', clientOf(s).client_name || '–') },
  { key: 'session', label: 'Connection', sort: (s) => Number(s.session),
    render: (s) => field('connection', el('a', { href: connectionHref(s.session) },
      s.connection ? 'connection ' + s.connection : 'session ' + s.session),
    s.connection ? el('span', { class: 'muted' }, ' · session ' + s.session) : el('span', { class: 'badge warning sb-dormant' }, 'dormant')) },
  { key: 'sub_id', label: 'Sub ID', num: true, sort: (s) => Number(s.sub_id), render: (s) => field('sub', String(s.sub_id)) },
];

function clientOf(s) { return byConn.get(s.session) || {}; }

function matches(s) {
  const only = urlState.get('session', '');
  if (only && String(s.session) !== only) return false;
  if (filters.kind && s.kind !== filters.kind) return false;
  if (filters.ack && (s.auto_ack ? 'auto' : 'manual') !== filters.ack) return false;
  if (filters.state && (s.connection ? 'open' : 'dormant') !== filters.state) return false;
  return true;
}

function showSummary() {
  const kinds = { queue: 0, stream: 0, cohort: 0 };
  let prefetch = 0, held = 0;
  for (const s of subs) {
    kinds[s.kind] = (kinds[s.kind] || 0) + 1;
    prefetch += Number(s.prefetch) || 0;
    held += Number(s.held) || 0;
  }
  const n = (id, v) => el('strong', { id }, fmt.num(v));
  const sessions = new Set(subs.map((s) => s.session)).size;
  update($('#sb-summary'),
    n('sb-sum-total', subs.length), subs.length === 1 ? ' subscription (' : ' subscriptions (',
    n('sb-sum-queue', kinds.queue), ' queue, ', n('sb-sum-stream', kinds.stream), ' stream, ', n('sb-sum-cohort', kinds.cohort), ' cohort) of ',
    n('sb-sum-sessions', sessions), sessions === 1 ? ' session · prefetch ' : ' sessions · prefetch ',
    n('sb-sum-prefetch', prefetch), ' in all · ', n('sb-sum-held', held), ' held');
}

const tableOpts = { id: 'sb', filter: true, filterLabel: 'Filter subscriptions', filterPlaceholder: 'Filter by topic, group, client…',
  sort: 'topic', rowKey: (s) => s.session + ':' + s.sub_id + ':' + s.partition, empty: 'Loading…' };

function draw() {
  if (subs === null) return;
  showSummary();
  const only = urlState.get('session', '');
  $('#sb-only').hidden = !only;
  setText('sb-only-text', only ? 'Showing session ' + only + ' only.' : '');
  tableOpts.empty = only ? 'Session ' + only + ' holds no subscription (any more).'
    : subs.length ? 'No subscription matches the filters.' : 'No client subscribes to anything.';
  view.update(subs.filter(matches));
}

start(() => {
  for (const key of Object.keys(filters)) {
    filters[key] = bindSelect('sb-' + key, key, (v) => { filters[key] = v; draw(); }).value;
  }
  $('#sb-only-clear').addEventListener('click', () => { urlState.set('session', ''); draw(); $('#sb-filter').focus(); });
  view = table($('#sb-list'), columns, tableOpts);
  const fresh = staleWatch('/admin/api/subscriptions', (data) => { subs = data.subscriptions || []; draw(); });
  live(['subscriptions', 'connections'], (family, data) => {
    if (family === 'subscriptions') { subs = data.subscriptions || []; fresh(); }
    else byConn = connectionsBySession(data.connections || []);
    draw();
  });
});
