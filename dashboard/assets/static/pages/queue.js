// Queue: one queue (?topic=&group=): its counts, a chart of ready and
// inflight (the broker's 5 s backlog samples, then the live ticks), its
// settings edited through PUT /admin/api/queue-dlq (and a re-declare for
// the default TTL, which that endpoint does not take), its partitions, its
// consumers (GET /admin/api/subscriptions, filtered here: one request), a
// test publish, and links to its messages and its dead letters. Live over
// the events families queues and subscriptions. An unknown queue says so.
import {
  start, live, el, $, setText, replace, fmt, get, put, post, q, table, lineChart, urlState, banner, bindForm, errorText,
} from '../dash.js';
import { Backlog, queueKey, policyText, ttlText } from '../lib/queues.js';

const topic = urlState.get('topic', '');
const group = urlState.get('group', '');
const key = queueKey(topic, group);
const label = fmt.queue(topic, group || 'default');

const backlog = new Backlog();
const inflight = []; // [atMs, inflight] from the live ticks
let queue = null; // the listing's row, null until seen (or when gone)
let subs = [];
let globalTarget; // GET /admin/api/global-dlq's target, once
let parts = null, consumers = null;
let settingsDirty = false;
let feed = null;

const norm = (g) => (g === 'default' ? '' : (g || ''));

function showMissing(text) {
  $('#qd-body').hidden = true;
  $('#qd-missing').hidden = false;
  setText('qd-missing-text', text);
  setText('qd-sub', text);
}

function showQueue(row) {
  $('#qd-missing').hidden = true;
  $('#qd-body').hidden = false;
  setText('qd-sub', row.partition_count + (row.partition_count === 1 ? ' partition' : ' partitions') + ', ' + row.loaded_partitions +
    ' loaded. Dead letters ' + policyText(row.dlq) + ', max retries ' + row.dlq.max_retries + ', default TTL ' + ttlText(row.default_message_ttl_ms) + '.');
  setText('qd-ready', fmt.num(row.ready));
  setText('qd-loaded', row.loaded_partitions === 0 ? 'not loaded: counts unknown' : row.loaded_partitions + ' of ' + row.partition_count + ' partitions loaded');
  setText('qd-inflight', fmt.num(row.inflight));
  setText('qd-delayed', fmt.num(row.delayed));
  setText('qd-pending-dlq', fmt.num(row.pending_dlq));
  setText('qd-consumers', fmt.num(row.consumers));
  setText('qd-publish-rate', fmt.rate(row.publish_rate_per_sec));
  setText('qd-deliver-rate', 'deliver ' + fmt.rate(row.deliver_rate_per_sec));
  showSettings(row);
  parts.update(row.partitions || []);
  $('#qd-p-part').max = String(Math.max(0, row.partition_count - 1));
}

function showSettings(row) {
  const d = row.dlq || {};
  replace($('#qd-settings'),
    el('dt', {}, 'Dead letters'), el('dd', { id: 'qd-set-policy' }, policyText(d)),
    el('dt', {}, 'Max retries'), el('dd', { id: 'qd-set-retries' }, String(d.max_retries)),
    el('dt', {}, 'Default TTL'), el('dd', { id: 'qd-set-ttl' }, ttlText(row.default_message_ttl_ms)));
  if (!settingsDirty) {
    $('#qd-s-policy').value = d.policy || 'discard';
    $('#qd-s-target-topic').value = d.policy === 'custom' ? d.topic || '' : '';
    $('#qd-s-target-group').value = d.policy === 'custom' && d.group && d.group !== 'default' ? d.group : '';
    $('#qd-s-retries').value = String(d.max_retries);
    $('#qd-s-ttl').value = String(row.default_message_ttl_ms || 0);
    customFields();
  }
  showDLQLink(d);
}

// showDLQLink links where the queue's dead letters go: a custom target's
// messages and the dead-letter page for it, the global DLQ's, or nothing.
function showDLQLink(d) {
  const box = $('#qd-dlq-link');
  let target = null;
  if (d.policy === 'custom') target = { topic: d.topic, group: d.group };
  else if (d.policy === 'global') target = globalTarget || null;
  const want = target ? 'dlq:' + target.topic + '/' + norm(target.group) : d.policy === 'global' ? 'global-unset' : 'discard';
  if (box.dataset.shown === want) return;
  box.dataset.shown = want;
  if (target) {
    const g = norm(target.group);
    replace(box, el('a', { id: 'qd-dlq', href: '/admin/dlq' + q({ topic: target.topic, group: g, source: topic + '/' + norm(group) }) },
      'Its dead letters (' + fmt.queue(target.topic, g || 'default') + ')'));
  } else if (d.policy === 'global') {
    replace(box, el('span', { class: 'muted' }, 'Dead letters go to the global DLQ, which is not set: '), el('a', { href: '/admin/settings' }, 'set it'));
  } else {
    replace(box, el('span', { class: 'muted' }, 'Dead letters are discarded (no DLQ)'));
  }
}

function customFields() {
  const custom = $('#qd-s-policy').value === 'custom';
  document.querySelectorAll('#qd-settings-form [data-custom]').forEach((n) => { n.hidden = !custom; });
}

function drawChart() {
  if (!queue) return;
  const ready = backlog.of(key);
  lineChart($('#qd-chart'), [{ name: 'ready', points: ready }, { name: 'inflight', points: inflight }], { legend: $('#qd-chart-legend') });
  $('#qd-chart').dataset.history = String(backlog.historyOf(key));
  const first = Math.min(ready.length ? ready[0][0] : Infinity, inflight.length ? inflight[0][0] : Infinity);
  setText('qd-chart-span', Number.isFinite(first) ? 'last ' + fmt.ms(Math.max(0, Date.now() - first)) : 'no sample yet');
}

function onQueues(data) {
  const row = (data.queues || []).find((r) => r.topic === topic && norm(r.group) === norm(group));
  if (!row) {
    queue = null;
    showMissing('No queue ' + label + ' is declared on this broker' + '. It may have been deleted, or the name is misspelt.');
    return;
  }
  queue = row;
  const now = Date.now();
  if (row.loaded_partitions > 0) {
    backlog.add(key, now, row.ready);
    if (!inflight.length || inflight[inflight.length - 1][0] < now) inflight.push([now, row.inflight]);
    while (inflight.length > 400 || (inflight.length && now - inflight[0][0] > 10 * 60_000)) inflight.shift();
  }
  showQueue(row);
  drawChart();
}

function onSubscriptions(data) {
  subs = (data.subscriptions || []).filter((s) => s.topic === topic && norm(s.group) === norm(group) && s.kind !== 'stream');
  consumers.update(subs);
  setText('qd-subs', subs.length + (subs.length === 1 ? ' subscription' : ' subscriptions'));
}

const orNot = (v) => (v === null || v === undefined ? el('span', { class: 'muted' }, 'not loaded') : fmt.num(v));

function setupTables() {
  parts = table($('#qd-parts'), [
    { key: 'partition', label: 'Partition', num: true },
    { key: 'ready', label: 'Ready', num: true, render: (p) => orNot(p.ready) },
    { key: 'inflight', label: 'Inflight', num: true, render: (p) => orNot(p.inflight) },
    { key: 'delayed', label: 'Delayed', num: true, render: (p) => orNot(p.delayed) },
    { key: 'pending_dlq', label: 'Pending DLQ', num: true, render: (p) => orNot(p.pending_dlq) },
    { key: 'consumers', label: 'Consumers', num: true, render: (p) => orNot(p.consumers) },
  ], { id: 'qp', sort: 'partition', rowKey: (p) => String(p.partition) });
  consumers = table($('#qd-cons'), [
    { key: 'connection', label: 'Connection', num: true, render: (s) => (s.connection ? String(s.connection) : el('span', { class: 'muted' }, 'dormant')) },
    { key: 'session', label: 'Session', num: true, render: (s) => String(s.session) },
    { key: 'sub_id', label: 'Subscription', num: true, render: (s) => String(s.sub_id) },
    { key: 'partition', label: 'Partition', num: true },
    { key: 'prefetch', label: 'Prefetch', num: true },
    { key: 'held', label: 'Held', num: true },
    { key: 'auto_ack', label: 'Ack', render: (s) => (s.auto_ack ? 'auto' : 'manual') },
    { key: 'kind', label: 'Kind' },
  ], { id: 'qc', rowKey: (s) => s.session + '/' + s.sub_id, empty: 'Nobody consumes this queue now.' });
}

function setupSettings() {
  const form = $('#qd-settings-form');
  form.addEventListener('input', () => { settingsDirty = true; });
  $('#qd-s-policy').addEventListener('change', customFields);
  bindForm(form, async (v) => {
    if (!queue) throw new Error('the queue is gone');
    const body = { topic, group, policy: v.policy, max_retries: v.max_retries };
    if (v.policy === 'custom') body.target = { topic: v.target_topic.trim(), group: v.target_group.trim() };
    await put('/admin/api/queue-dlq', body);
    // The default TTL is not PUT queue-dlq's: a re-declare merges it
    // ("absent means the existing setting"), as a client's would.
    if (v.default_message_ttl_ms !== undefined && v.default_message_ttl_ms !== (queue.default_message_ttl_ms || 0)) {
      await post('/admin/api/queues', { topic, group, default_message_ttl_ms: v.default_message_ttl_ms });
    }
    settingsDirty = false;
    await feed.refresh();
    const d = queue.dlq;
    return 'Saved: dead letters ' + policyText(d) + ', max retries ' + d.max_retries + ', default TTL ' + ttlText(queue.default_message_ttl_ms) + '.';
  });
}

function setupPublish() {
  bindForm($('#qd-pub-form'), async (v) => {
    const out = await post('/admin/api/publish', { topic, group, text: v.text, content_type: v.content_type.trim(), partition: v.partition });
    const result = 'Published to partition ' + out.partition + ' at offset ' + out.offset + '.';
    $('#qd-pub-form').dataset.offset = String(out.offset);
    $('#qd-pub-form').dataset.partition = String(out.partition);
    feed.refresh();
    return result;
  });
}

start(async () => {
  if (!topic) {
    showMissing('No queue named: open one from the Queues page (this page takes ?topic=&group=).');
    setText('page-title', 'Queue');
    return;
  }
  setText('page-title', 'Queue ' + label);
  document.title = label + ' · Queue · Fibril';
  $('#qd-browse').href = '/admin/messages' + q({ topic, group: norm(group) });
  setupTables();
  setupSettings();
  setupPublish();
  // The global DLQ's target, for the link; a failure leaves it unset.
  get('/admin/api/global-dlq').then((g) => { globalTarget = g.target; if (queue) showDLQLink(queue.dlq); }).catch((err) => {
    if (err.status !== 404) banner('The global DLQ could not be read: ' + errorText(err));
  });
  backlog.load().then(drawChart);
  feed = live(['queues', 'subscriptions'], (family, data) => {
    if (family === 'queues') onQueues(data);
    else if (family === 'subscriptions') onSubscriptions(data);
  });
  document.addEventListener('themechange', drawChart);
  window.addEventListener('resize', drawChart);
});
