// Streams: every declared stream with its settings (GET /admin/api/streams,
// the Node's catalogue), its partitions with the offsets the broker observed
// of the loaded ones, the stream subscribers (GET /admin/api/subscriptions,
// kind=stream) and a create form (POST /admin/api/streams, the path a
// client's DECLARE_PLEXUS takes). Live over the events stream: streams,
// subscriptions. Every number is the API's; nothing is computed here but
// counts of rows and sums the API also gives.
import { start, live, setText, fmt, el, table, bindForm, get, post, addCommand, banner, errorText, $ } from '../dash.js';

let streams = [], subs = [];

// retention says a stream's bounds in words ("unbounded" when none).
function retention(s) {
  const parts = [];
  if (s.max_age_ms) parts.push('age ' + fmt.ms(s.max_age_ms));
  if (s.max_bytes) parts.push(fmt.bytes(s.max_bytes));
  if (s.max_records) parts.push(fmt.num(s.max_records) + ' records');
  return parts.length ? parts.join(', ') : 'unbounded';
}

// subscribersOf counts the stream subscriptions of topic (and partition).
function subscribersOf(topic, partition) {
  return subs.filter((x) => x.topic === topic && (partition === undefined || x.partition === partition)).length;
}

const orNull = (v) => (v === null || v === undefined ? '–' : fmt.num(v));

let streamTable, partTable, subTable;

// makeTables builds the three tables once the page is there.
function makeTables() {
  streamTable = table($('#st-list'), [
    { key: 'topic', label: 'Topic', render: (s) => el('code', {}, s.topic) },
    { key: 'durability', label: 'Durability', render: (s) => el('span', { class: 'badge' + (s.durability === 'durable' ? ' ok' : '') }, s.durability) },
    { key: 'partition_count', label: 'Partitions', num: true },
    { key: 'loaded_partitions', label: 'Loaded', num: true },
    { key: 'retention', label: 'Retention', sort: retention, render: retention },
    { key: 'records', label: 'Records', num: true },
    { key: 'subscribers', label: 'Subscribers', num: true, sort: (s) => subscribersOf(s.topic), render: (s) => fmt.num(subscribersOf(s.topic)) },
  ], { id: 'st', filter: true, filterLabel: 'Filter streams', sort: 'topic', rowKey: (s) => s.topic,
    empty: 'No stream is declared.' });

  partTable = table($('#st-parts'), [
    { key: 'topic', label: 'Stream', render: (p) => el('code', {}, p.topic) },
    { key: 'partition', label: 'Partition', num: true },
    { key: 'loaded', label: 'State', sort: (p) => (p.loaded ? 1 : 0), render: (p) => el('span', { class: 'badge' + (p.loaded ? ' ok' : '') }, p.loaded ? 'loaded' : 'not loaded') },
    { key: 'oldest_offset', label: 'Oldest offset', num: true, sort: (p) => p.oldest_offset ?? -1, render: (p) => orNull(p.oldest_offset) },
    { key: 'next_offset', label: 'Next offset', num: true, sort: (p) => p.next_offset ?? -1, render: (p) => orNull(p.next_offset) },
    { key: 'records', label: 'Records', num: true, sort: (p) => p.records ?? -1, render: (p) => orNull(p.records) },
    { key: 'subscriptions', label: 'Subscribers', num: true, sort: (p) => p.subscriptions ?? -1, render: (p) => orNull(p.subscriptions) },
  ], { id: 'stp', filter: true, filterLabel: 'Filter partitions', rowKey: (p) => p.topic + '/' + p.partition,
    empty: 'No stream, so no partition.' });

  subTable = table($('#st-subs'), [
    { key: 'topic', label: 'Stream', render: (x) => el('code', {}, x.topic) },
    { key: 'partition', label: 'Partition', num: true },
    { key: 'session', label: 'Session', num: true },
    { key: 'connection', label: 'Connection', render: (x) => (x.connection ? String(x.connection) : 'dormant') },
    { key: 'prefetch', label: 'Prefetch', num: true },
    { key: 'auto_ack', label: 'Auto-ack', render: (x) => (x.auto_ack ? 'yes' : 'no') },
  ], { id: 'sts', filter: true, filterLabel: 'Filter subscribers', rowKey: (x) => x.session + '/' + x.sub_id,
    empty: 'No client is subscribed to a stream.' });
}

function draw() {
  setText('st-count', fmt.num(streams.length));
  const partitions = streams.reduce((n, s) => n + s.partition_count, 0);
  setText('st-partitions', fmt.num(partitions) + (partitions === 1 ? ' partition' : ' partitions'));
  setText('st-loaded', fmt.num(streams.reduce((n, s) => n + s.loaded_partitions, 0)));
  setText('st-records', fmt.num(streams.reduce((n, s) => n + s.records, 0)));
  setText('st-subscribers', fmt.num(subs.length));
  $('#st-none').hidden = streams.length > 0;
  streamTable.update(streams);
  partTable.update(streams.flatMap((s) => s.partitions.map((p) => ({ topic: s.topic, ...p }))));
  subTable.update(subs);
}

start(() => {
  makeTables();
  live(['streams', 'subscriptions'], (family, data) => {
    if (family === 'streams') streams = data.streams || [];
    else subs = (data.subscriptions || []).filter((x) => x.kind === 'stream');
    draw();
  });
  const form = $('#st-create');
  bindForm(form, async (v) => {
    const body = { topic: v.topic.trim(), durability: v.durability };
    for (const k of ['partition_count', 'max_age_ms', 'max_bytes', 'max_records']) {
      if (v[k] !== undefined) body[k] = v[k];
    }
    // A refusal throws: the form's status line shows the API's message.
    const created = await post('/admin/api/streams', body);
    streams = streams.filter((s) => s.topic !== created.topic).concat([created]).sort((a, b) => a.topic.localeCompare(b.topic));
    draw();
    return 'Stream ' + created.topic + ' is declared: ' + created.partition_count +
      (created.partition_count === 1 ? ' partition, ' : ' partitions, ') + created.durability + ', retention ' + retention(created) + '.';
  });
  addCommand({ label: 'Create a stream', kind: 'action', run: () => $('#st-topic').focus() });
  // live() polls quietly; a listing the API refuses (503 while the broker
  // starts, 401 after a logout) is said once in the banner.
  get('/admin/api/streams').then(() => banner(''), (err) => banner('Streams: ' + errorText(err)));
});
