// Queues: every declared queue (GET /admin/api/queues, live as the events
// family "queues"), sortable and filterable with the filters in the URL;
// a backlog sparkline each from the broker's own 5 s samples
// (GET /admin/api/queue-backlog) and the live ticks; create, purge and
// delete through the API, the last two behind a confirmation. Invariants:
//   - one request per table: the listing; the sparklines' history is one
//     more request at open, never one per row;
//   - a refused action shows the API's message (banner and toast), and the
//     table is redrawn from the API's answer, never patched by hand.
import {
  start, live, el, $, setText, fmt, post, table, sparkline, queueHref, urlState,
  toast, banner, errorText, bindForm, addCommand, confirmDialog,
} from '../dash.js';
import { Backlog, queueKey, policyText, ttlText } from '../lib/queues.js';

const backlog = new Backlog();
let rows = [];
let view = null;
let refresh = () => {};

// shows are the "Show" choices: which queues the table lists.
const shows = {
  '': () => true,
  backlog: (r) => r.ready > 0,
  no_consumer: (r) => r.ready > 0 && r.consumers === 0,
  inflight: (r) => r.inflight > 0,
  dlq: (r) => r.pending_dlq > 0,
  unloaded: (r) => r.loaded_partitions === 0,
};

const name = (r) => fmt.queue(r.topic, r.group || 'default');

// count is a numeric cell; data-f names the field for the tests and
// scripts reading the page.
function count(field, format) {
  return (r) => el('span', { dataset: { f: field } }, (format || fmt.num)(r[field]));
}

function spark(r) {
  if (r.loaded_partitions === 0) return el('span', { class: 'muted' }, 'not loaded');
  const pts = backlog.of(queueKey(r.topic, r.group));
  const values = pts.map((p) => p[1]);
  const label = 'Ready messages of ' + name(r) + ' over the last ' + (pts.length > 1 ? fmt.ms(pts[pts.length - 1][0] - pts[0][0]) : 'moment') +
    (values.length ? ': from ' + fmt.num(values[0]) + ' to ' + fmt.num(values[values.length - 1]) + ', peak ' + fmt.num(Math.max(...values)) : '');
  const svg = sparkline(values, label);
  svg.dataset.points = String(values.length);
  svg.dataset.history = String(backlog.historyOf(queueKey(r.topic, r.group)));
  if (pts.length) svg.dataset.first = String(pts[0][0]);
  return svg;
}

function actions(r) {
  return el('div', { class: 'row-actions' },
    el('button', { type: 'button', class: 'ghost small', 'aria-label': 'Purge ' + name(r), dataset: { act: 'purge' }, onclick: () => purge(r) }, 'Purge'),
    el('button', { type: 'button', class: 'danger small', 'aria-label': 'Delete ' + name(r), dataset: { act: 'delete' }, onclick: () => remove(r) }, 'Delete'));
}

const columns = [
  { key: 'name', label: 'Queue', sort: name, render: (r) => el('a', { href: queueHref(r.topic, r.group) }, name(r)),
    title: (r) => 'dead letters ' + policyText(r.dlq) + ', max retries ' + r.dlq.max_retries + ', default TTL ' + ttlText(r.default_message_ttl_ms) },
  { key: 'partitions', label: 'Loaded', num: true, sort: (r) => r.loaded_partitions,
    render: (r) => el('span', { dataset: { f: 'partitions' } }, r.loaded_partitions + ' of ' + r.partition_count) },
  { key: 'ready', label: 'Ready', num: true, render: count('ready') },
  { key: 'inflight', label: 'Inflight', num: true, render: count('inflight') },
  { key: 'delayed', label: 'Delayed', num: true, render: count('delayed') },
  { key: 'pending_dlq', label: 'Pending DLQ', num: true, render: count('pending_dlq') },
  { key: 'publish_rate_per_sec', label: 'Publish', num: true, nofilter: true, render: count('publish_rate_per_sec', fmt.rate) },
  { key: 'deliver_rate_per_sec', label: 'Deliver', num: true, nofilter: true, render: count('deliver_rate_per_sec', fmt.rate) },
  { key: 'consumers', label: 'Consumers', num: true, render: count('consumers') },
  { key: 'backlog', label: 'Backlog, 10 min', nosort: true, nofilter: true, render: spark },
  { key: 'actions', label: 'Actions', nosort: true, nofilter: true, render: actions },
];

// tableOpts is kept: table() reads opts.empty at each draw, so the empty
// line can say whether no queue exists or the "Show" choice hides them.
const tableOpts = {
  id: 'qs', filter: true, filterLabel: 'Filter queues', filterPlaceholder: 'Filter by name or count…', sort: 'name',
  rowKey: (r) => queueKey(r.topic, r.group),
};

function draw() {
  const choice = urlState.get('qs.show', '');
  const show = shows[choice] || shows[''];
  tableOpts.empty = rows.length === 0 ? 'No queue is declared yet: create one below, or publish to a topic.'
    : 'None of the ' + rows.length + ' queues is shown by the "Show" choice (' + $('#qs-show').selectedOptions[0].textContent + ').';
  view.update(rows.filter(show));
  const sum = (k) => rows.reduce((a, r) => a + (r[k] || 0), 0);
  setText('qs-count', fmt.num(rows.length));
  setText('qs-loaded', fmt.num(rows.filter((r) => r.loaded_partitions > 0).length) + ' loaded');
  setText('qs-ready', fmt.num(sum('ready')));
  setText('qs-inflight', fmt.num(sum('inflight')));
  setText('qs-delayed', fmt.num(sum('delayed')));
  setText('qs-pending-dlq', fmt.num(sum('pending_dlq')));
  setText('qs-consumers', fmt.num(sum('consumers')));
  setText('qs-rates', fmt.rate(sum('publish_rate_per_sec')) + ' in, ' + fmt.rate(sum('deliver_rate_per_sec')) + ' out');
}

function onQueues(data) {
  rows = data.queues || [];
  // The broker's time of the listing, the history's clock (lib/queues.js).
  for (const r of rows) if (r.loaded_partitions > 0) backlog.add(queueKey(r.topic, r.group), data.at_ms, r.ready);
  backlog.keep(new Set(rows.map((r) => queueKey(r.topic, r.group))));
  draw();
}

async function purge(r) {
  const ok = await confirmDialog('Purge ' + name(r) + '? Its ' + fmt.num(r.ready) + ' ready and ' + fmt.num(r.delayed) +
    ' delayed messages are removed for good; the ' + fmt.num(r.inflight) + ' inflight stay with their consumers.', 'Purge queue');
  if (!ok) return;
  try {
    const out = await post('/admin/api/queues/purge', { topic: r.topic, group: r.group });
    banner('');
    toast('Purged ' + fmt.num(out.purged) + ' messages from ' + name(r) + '.');
  } catch (err) {
    banner(name(r) + ' was not purged: ' + errorText(err));
    toast(errorText(err), 'error');
  }
  await settle(r, 'purge');
}

async function remove(r) {
  const ok = await confirmDialog('Delete ' + name(r) + ' and all its messages? Its subscribers are closed. The broker refuses while messages are inflight.', 'Delete queue');
  if (!ok) return;
  try {
    await post('/admin/api/queues/delete', { topic: r.topic, group: r.group });
    banner('');
    toast('Deleted ' + name(r) + '.');
  } catch (err) {
    // 409 in_use: the broker says how many are inflight; shown as it is.
    banner(name(r) + ' was not deleted: ' + errorText(err));
    toast(errorText(err), 'error');
  }
  await settle(r, 'delete');
}

// settle redraws from the API after an action. The table keeps its rows
// while a row's button has the focus (it would vanish under the
// keyboard), so the focus leaves first and comes back to the same button
// of the same row, or to the filter when the row is gone.
async function settle(r, act) {
  if (document.activeElement) document.activeElement.blur();
  await refresh();
  const key = queueKey(r.topic, r.group);
  const row = [...document.querySelectorAll('#qs-table tbody tr')].find((tr) => tr.dataset.key === key);
  const again = row && row.querySelector('button[data-act="' + act + '"]');
  (again || $('#qs-filter')).focus();
}

function setupCreate() {
  const form = $('#qs-create-form');
  const policy = $('#qs-c-policy');
  const custom = () => form.querySelectorAll('[data-custom]').forEach((n) => { n.hidden = policy.value !== 'custom'; });
  policy.addEventListener('change', custom);
  custom();
  bindForm(form, async (v) => {
    const existed = rows.some((r) => queueKey(r.topic, r.group) === queueKey(v.topic.trim(), v.group.trim()));
    const body = {
      topic: v.topic.trim(), group: v.group.trim(), partition_count: v.partition_count, policy: v.policy,
      target: v.policy === 'custom' ? { topic: v.target_topic.trim(), group: v.target_group.trim() } : undefined,
      max_retries: v.max_retries, default_message_ttl_ms: v.default_message_ttl_ms,
    };
    const q = await post('/admin/api/queues', body);
    await refresh();
    const what = name(q) + ': ' + q.partition_count + (q.partition_count === 1 ? ' partition' : ' partitions') +
      ', dead letters ' + policyText(q.dlq) + ', max retries ' + q.dlq.max_retries + ', default TTL ' + ttlText(q.default_message_ttl_ms);
    return existed ? 'Already declared; the settings given were merged. ' + what : 'Created ' + what + '.';
  });
  addCommand({ label: 'Create a queue', kind: 'action', run: () => { $('#qs-create').open = true; $('#qs-c-topic').focus(); } });
}

start(() => {
  const show = $('#qs-show');
  show.value = urlState.get('qs.show', '');
  show.addEventListener('change', () => { urlState.set('qs.show', show.value); draw(); });
  tableOpts.empty = 'Loading the queues…';
  view = table($('#qs-list'), columns, tableOpts);
  setupCreate();
  // The history first paints with the rows it has: the listing and the
  // backlog are fetched together and whichever comes second redraws.
  backlog.load().then(draw);
  const feed = live(['queues'], (family, data) => { if (family === 'queues') onQueues(data); });
  refresh = feed.refresh;
});
