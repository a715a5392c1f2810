// Queue: one queue (?topic=&group=): its counts, a chart of ready and
// inflight (the broker's 5 s backlog samples, then the live ticks), its
// settings edited through PUT /admin/api/queue-dlq (and a re-declare for
// the default TTL, which that endpoint does not take), its partitions, its
// consumers (GET /admin/api/subscriptions, filtered here: one request), a
// test publish, and links to its messages and its dead letters. Live over
// the events families queues and subscriptions. An unknown queue says so.
// Invariants of the settings form:
//   - every number is checked before anything is sent;
//   - only what the user changed since the form was filled is sent,
//     compared with the snapshot taken at the fill (never with a later
//     listing): a queue that never set max_retries shows the broker's
//     default and keeps following it unless the user changes it;
//   - the settings in force are read again before sending: if someone else
//     changed them since the fill, nothing is sent and the page says what
//     is in force now;
//   - a save in two requests that fails half way says what was saved and
//     what not.
// Chart points are on the broker's clock (the listing's at_ms), as the
// history is: the browser's clock never decides what is drawn or dropped.
import {
  start, live, el, $, setText, replace, update, fmt, get, put, post, q, table, lineChart, urlState, banner, bindForm, errorText,
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
let snap = null; // the settings the form was filled from (settingsOf)
let lastAt = 0; // the broker's time of the newest listing
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

// settingsOf is what the form edits of a listing's row, in the form's
// terms: the target only with the custom policy, the default group "".
function settingsOf(row) {
  const d = row.dlq || {};
  const custom = d.policy === 'custom';
  return {
    policy: d.policy || 'discard', topic: custom ? d.topic || '' : '', group: custom ? norm(d.group) : '',
    max_retries: d.max_retries, ttl: row.default_message_ttl_ms || 0,
  };
}

const sameTarget = (a, b) => a.policy === b.policy && a.topic === b.topic && a.group === b.group;
const settingsText = (s) => 'dead letters ' + policyText(s) + ', max retries ' + s.max_retries + ', default TTL ' + ttlText(s.ttl);

// fill puts settings s into the form's fields (only those in only, when
// given) and takes the snapshot the next save compares with.
function fill(s, only) {
  const want = (f) => !only || only.has(f);
  if (want('policy')) {
    $('#qd-s-policy').value = s.policy;
    $('#qd-s-target-topic').value = s.topic;
    $('#qd-s-target-group').value = s.group;
  }
  if (want('max_retries')) $('#qd-s-retries').value = String(s.max_retries);
  if (want('ttl')) $('#qd-s-ttl').value = String(s.ttl);
  customFields();
  snap = s;
}

function showSettings(row) {
  const d = row.dlq || {};
  // update(), not replace(): a tick that changed nothing leaves the list
  // (and a reader's selection in it) alone.
  update($('#qd-settings'),
    el('dt', {}, 'Dead letters'), el('dd', { id: 'qd-set-policy' }, policyText(d)),
    el('dt', {}, 'Max retries'), el('dd', { id: 'qd-set-retries' }, String(d.max_retries)),
    el('dt', {}, 'Default TTL'), el('dd', { id: 'qd-set-ttl' }, ttlText(row.default_message_ttl_ms)));
  if (!settingsDirty || !snap) fill(settingsOf(row));
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
  if (Number.isFinite(first)) $('#qd-chart').dataset.first = String(first);
  // The span on the broker's clock: its newest listing minus the oldest point.
  const newest = Math.max(lastAt, ready.length ? ready[ready.length - 1][0] : 0);
  setText('qd-chart-span', Number.isFinite(first) ? 'last ' + fmt.ms(Math.max(0, newest - first)) : 'no sample yet');
}

function onQueues(data) {
  const row = (data.queues || []).find((r) => r.topic === topic && norm(r.group) === norm(group));
  if (!row) {
    queue = null;
    showMissing('No queue ' + label + ' is declared on this broker' + '. It may have been deleted, or the name is misspelt.');
    return;
  }
  queue = row;
  // The broker's time of the listing (the history's clock); a listing
  // without it adds no point.
  const now = data.at_ms;
  if (Number.isFinite(now)) lastAt = Math.max(lastAt, now);
  if (row.loaded_partitions > 0 && Number.isFinite(now)) {
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

// wholeNumber checks one number field: an integer from 0 to max, else
// the problem said in words.
function wholeNumber(label, v, max) {
  if (v === undefined || !Number.isInteger(v) || v < 0 || v > max) {
    return label + ' must be a whole number from 0 to ' + fmt.num(max) + (v === undefined ? ' (it is empty or not a number)' : ' (not ' + v + ')');
  }
  return '';
}

// readForm checks the form's values: the settings asked for, or an Error
// naming every bad number.
function readForm(v) {
  const bad = [wholeNumber('Max retries', v.max_retries, 4294967295), wholeNumber('Default TTL (ms)', v.default_message_ttl_ms, Number.MAX_SAFE_INTEGER)]
    .filter(Boolean);
  if (bad.length) throw new Error('Nothing sent: ' + bad.join('; ') + '.');
  const custom = v.policy === 'custom';
  return {
    policy: v.policy, topic: custom ? v.target_topic.trim() : '', group: custom ? norm(v.target_group.trim()) : '',
    max_retries: v.max_retries, ttl: v.default_message_ttl_ms,
  };
}

async function saveSettings(v) {
  if (!queue || !snap) throw new Error('the queue is gone');
  const want = readForm(v);
  const changed = new Set();
  if (!sameTarget(want, snap)) changed.add('policy');
  if (want.max_retries !== snap.max_retries) changed.add('max_retries');
  if (want.ttl !== snap.ttl) changed.add('ttl');
  if (changed.size === 0) {
    settingsDirty = false;
    return 'Nothing changed since the form was filled: nothing sent.';
  }
  // What is in force now, read again: someone else may have saved since
  // the fill. Then nothing is sent; the fields this user did not change
  // take the values in force, and a second save sends this user's changes.
  try {
    onQueues(await get('/admin/api/queues'));
  } catch (err) {
    throw new Error('Nothing sent: the settings in force could not be read to check them: ' + errorText(err));
  }
  if (!queue) throw new Error('Nothing sent: the queue is gone.');
  const now = settingsOf(queue);
  if (!sameTarget(now, snap) || now.max_retries !== snap.max_retries || now.ttl !== snap.ttl) {
    const others = new Set(['policy', 'max_retries', 'ttl'].filter((f) => !changed.has(f)));
    fill(now, others);
    throw new Error('Nothing sent: the settings changed since this form was filled (someone else saved). In force now: ' + settingsText(now) +
      '. Your changes are still in the form; save again to apply them.');
  }
  const saved = [], said = {
    policy: 'dead letters ' + policyText(want), max_retries: 'max retries ' + want.max_retries, ttl: 'default TTL ' + ttlText(want.ttl),
  };
  if (changed.has('policy') || changed.has('max_retries')) {
    // policy is required by PUT queue-dlq; unchanged, it is the one just
    // read. max_retries goes only when changed: absent keeps the queue's
    // (a queue that never set it keeps following the broker's default).
    const body = { topic, group, policy: want.policy };
    if (want.policy === 'custom') body.target = { topic: want.topic, group: want.group };
    if (changed.has('max_retries')) body.max_retries = want.max_retries;
    try {
      await put('/admin/api/queue-dlq', body);
    } catch (err) {
      throw new Error('Nothing saved: ' + errorText(err));
    }
    if (changed.has('policy')) saved.push('policy');
    if (changed.has('max_retries')) saved.push('max_retries');
  }
  if (changed.has('ttl')) {
    // The default TTL is not PUT queue-dlq's: a re-declare merges it
    // ("absent means the existing setting"), as a client's would.
    try {
      await post('/admin/api/queues', { topic, group, default_message_ttl_ms: want.ttl });
    } catch (err) {
      await settled();
      if (!saved.length) throw new Error('Nothing saved: ' + errorText(err));
      throw new Error('Partly saved: ' + saved.map((f) => said[f]).join(', ') + ' saved; ' + said.ttl + ' NOT saved (' + errorText(err) +
        '). In force now: ' + (queue ? settingsText(settingsOf(queue)) : 'unknown') + '.');
    }
    saved.push('ttl');
  }
  settingsDirty = false;
  await settled();
  return 'Saved: ' + saved.map((f) => said[f]).join(', ') + '. In force now: ' + (queue ? settingsText(settingsOf(queue)) : 'unknown') + '.';
}

// settled reads the listing after a save and takes the snapshot from what
// is in force: the fields still being edited (a dirty form after a partial
// failure) keep their values, so a second save sends only what is left.
async function settled() {
  try {
    onQueues(await get('/admin/api/queues'));
  } catch (err) {
    return; // the live ticks will bring it
  }
  if (queue && settingsDirty) snap = settingsOf(queue);
}

function setupSettings() {
  const form = $('#qd-settings-form');
  form.addEventListener('input', () => { settingsDirty = true; });
  $('#qd-s-policy').addEventListener('change', customFields);
  bindForm(form, saveSettings);
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
  backlog.load(key).then(drawChart);
  feed = live(['queues', 'subscriptions'], (family, data) => {
    if (family === 'queues') onQueues(data);
    else if (family === 'subscriptions') onSubscriptions(data);
  });
  document.addEventListener('themechange', drawChart);
  window.addEventListener('resize', drawChart);
});
