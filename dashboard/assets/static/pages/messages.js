// Messages: browse one queue partition's messages by state (GET
// /admin/api/messages, one request per page of the table), page on with
// next_offset_hint, and inspect one message: its headers and its payload
// preview as text, pretty JSON or a hex dump. Everything the view depends
// on is in the URL (topic, group, partition, status, from, limit, offset,
// preview, view, auto), so a link or a reload shows the same thing. The
// partition's counts come from the `queues` family of the page's one live
// stream: the page makes no queue listing of its own.
import { start, get, q, el, replace, setText, fmt, table, urlState, banner, errorText, live, $, queueHref } from '../dash.js';
import { details, previewSize, previewDefault, replaceKeepingFocus } from '../lib/payload.js';
import { queueKey } from '../lib/queues.js';

const activeStates = ['ready', 'inflight', 'delayed', 'pending_dlq'];
const allStates = [...activeStates, 'settled'];

let queues = [];
let current = null; // the last page answered
let history = []; // the froms of the pages before this one (Previous page)
let tbl = null;
let loading = 0; // the ticket of the table's last request
let inspecting = 0; // the ticket of the inspector's last request

function selected() {
  const [topic, group] = ($('#msg-queue').value || '/').split('/');
  return { topic, group };
}

// statesWanted answers the states in the URL (default: the four active
// ones, as the API's default).
function statesWanted() {
  const raw = urlState.get('status', '');
  const list = raw ? raw.split(',').filter((s) => allStates.includes(s)) : activeStates.slice();
  return list.length ? list : activeStates.slice();
}

// browseQuery turns the states into the API's parameters: status lists the
// active ones and include_settled adds settled offsets. Only "settled"
// asked for: the API cannot answer settled offsets alone, so the page asks
// for all and keeps the settled rows (said under the table).
function browseQuery(states) {
  const active = states.filter((s) => s !== 'settled');
  const settled = states.includes('settled');
  return { status: (active.length ? active : activeStates).join(','), include_settled: settled ? 'true' : '', settledOnly: settled && active.length === 0 };
}

function fillQueues() {
  const topic = urlState.get('topic', ''), group = urlState.get('group', '');
  const want = topic ? queueKey(topic, group) : '';
  const options = queues.map((x) => el('option', { value: queueKey(x.topic, x.group) }, fmt.queue(x.topic, x.group) + ' (' + x.partition_count + (x.partition_count === 1 ? ' partition)' : ' partitions)')));
  if (want && !queues.some((x) => queueKey(x.topic, x.group) === want)) {
    options.unshift(el('option', { value: want }, fmt.queue(topic, group) + ' (not listed)'));
  }
  if (!want) options.unshift(el('option', { value: '' }, queues.length ? 'Choose a queue…' : 'No queue is declared'));
  replace($('#msg-queue'), ...options);
  $('#msg-queue').value = want;
  fillPartitions();
}

function fillPartitions() {
  const { topic, group } = selected();
  const qd = queues.find((x) => queueKey(x.topic, x.group) === queueKey(topic, group));
  const count = Math.max(1, (current && current.partition_count) || (qd ? qd.partition_count : 1));
  const want = urlState.get('partition', '0');
  replace($('#msg-partition'), ...Array.from({ length: count }, (_, i) => el('option', { value: String(i) }, String(i))));
  $('#msg-partition').value = Number(want) < count ? want : '0';
}

function showCounts() {
  const { topic, group } = selected();
  const qd = queues.find((x) => queueKey(x.topic, x.group) === queueKey(topic, group));
  const part = qd && (qd.partitions || []).find((p) => String(p.partition) === urlState.get('partition', '0'));
  for (const s of activeStates) {
    setText('msg-c-' + s, part && part.loaded ? fmt.num(part[s]) : part ? 'not loaded' : '–');
  }
  setText('msg-c-next', current ? fmt.num(current.next_offset) : '–');
}

// shortTime is a time of today as a clock time, else with its date (the
// full time is in the cell's title).
function shortTime(ms) {
  const d = new Date(ms);
  return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
}

function dueCell(m) {
  if (m.state === 'delayed' && m.not_before_ms) return el('span', { title: 'not before ' + new Date(m.not_before_ms).toISOString() }, 'not before ' + shortTime(m.not_before_ms));
  if (m.state === 'inflight' && m.lease_deadline_ms) return el('span', { title: 'lease deadline ' + new Date(m.lease_deadline_ms).toISOString() }, 'lease until ' + shortTime(m.lease_deadline_ms));
  return '–';
}

const stateBadge = { ready: 'ok', inflight: 'warning', delayed: '', pending_dlq: 'critical', settled: '' };

const columns = [
  { key: 'offset', label: 'Offset', num: true, render: (m) => m.state === 'settled'
    ? el('span', { class: 'mono' }, String(m.offset))
    : el('a', { href: inspectHref(m.offset), class: 'mono', 'aria-label': 'Inspect offset ' + m.offset, onclick: (ev) => { ev.preventDefault(); inspect(m.offset); } }, String(m.offset)) },
  { key: 'state', label: 'State', render: (m) => el('span', { class: 'badge ' + (stateBadge[m.state] || '') }, m.state) },
  { key: 'delivery_count', label: 'Deliveries', num: true, render: (m) => m.state === 'settled' ? '–' : fmt.num(m.delivery_count) },
  { key: 'due', label: 'Not before / lease deadline', sort: (m) => m.not_before_ms || m.lease_deadline_ms || 0, render: dueCell, nofilter: true },
  { key: 'expires_at_ms', label: 'Expires', render: (m) => m.expires_at_ms ? shortTime(m.expires_at_ms) : '–', nofilter: true },
  { key: 'payload_len', label: 'Size (bytes)', num: true, render: (m) => m.state === 'settled' ? '–' : fmt.num(m.payload_len) },
  { key: 'content_type', label: 'Content type', render: (m) => m.content_type || (m.state === 'settled' ? '–' : 'none') },
  { key: 'headers', label: 'Headers', num: true, sort: (m) => Object.keys(m.headers || {}).length, render: (m) => m.state === 'settled' ? '–' : String(Object.keys(m.headers || {}).length), nofilter: true },
];

function inspectHref(offset) {
  const u = new URL(location.href);
  u.searchParams.set('offset', String(offset));
  return u.pathname + u.search;
}

// noStates says whether every state box is unchecked: the page then asks
// for nothing (the API would read no status as the active four, so the
// table would show what was just unchecked).
function noStates() {
  return allStates.every((s) => !$('#msg-st-' + s).checked);
}

// load asks for the page the URL names and draws it.
async function load() {
  const topic = urlState.get('topic', '');
  const none = noStates();
  $('#msg-states-none').hidden = !none;
  const link = $('#msg-queue-link');
  link.href = queueHref(topic, urlState.get('group', ''));
  link.hidden = !topic;
  if (!topic || none) {
    ++loading; // an answer still on its way is not drawn
    current = null;
    tbl.update([]);
    setText('msg-range', none ? 'no state chosen' : 'no queue chosen');
    setText('msg-scan', '');
    showCounts();
    pager();
    return;
  }
  const states = statesWanted();
  const bq = browseQuery(states);
  const ticket = ++loading;
  try {
    const page = await get('/admin/api/messages' + q({
      topic, group: urlState.get('group', ''), partition: urlState.get('partition', '0'),
      from: urlState.get('from', '0'), limit: urlState.get('limit', '50'),
      status: bq.status, include_settled: bq.include_settled,
    }));
    if (ticket !== loading) return;
    banner('');
    current = page;
    const items = bq.settledOnly ? page.items.filter((m) => m.state === 'settled') : page.items;
    tbl.update(items);
    markSelected();
    const first = page.items.length ? page.items[0].offset : null, last = page.items.length ? page.items[page.items.length - 1].offset : null;
    setText('msg-range', page.items.length
      ? 'offsets ' + first + '–' + last + ' · ' + items.length + (items.length === 1 ? ' message' : ' messages') + ' on this page'
      : 'nothing from offset ' + urlState.get('from', '0'));
    setText('msg-scan', page.next_offset_hint < page.next_offset
      ? 'More from offset ' + page.next_offset_hint + ' (the partition ends at ' + page.next_offset + ').'
      : 'End of the partition (next publish offset ' + page.next_offset + ').' + (bq.settledOnly ? ' Active messages are hidden: only settled was asked for.' : ''));
    if (page.partition_count !== $('#msg-partition').options.length) fillPartitions();
  } catch (err) {
    if (ticket !== loading) return;
    current = null;
    tbl.update([]);
    setText('msg-range', 'no answer');
    setText('msg-scan', '');
    banner(errorText(err));
  }
  showCounts();
  pager();
}

function pager() {
  const from = Number(urlState.get('from', '0'));
  $('#msg-first').disabled = from === 0;
  $('#msg-prev').disabled = from === 0;
  $('#msg-next').disabled = !current || current.next_offset_hint >= current.next_offset;
}

function go(from) {
  urlState.set('from', from ? String(from) : '');
  $('#msg-from').value = String(from);
  load();
}

// ---- The inspector

// markSelected shows which row the inspector shows.
function markSelected() {
  const offset = urlState.get('offset', '');
  for (const tr of document.querySelectorAll('#msg-table tbody tr')) {
    if (tr.dataset.key === offset) tr.setAttribute('aria-current', 'true');
    else tr.removeAttribute('aria-current');
  }
}

// inspect shows the message at offset (a click in the table) and moves
// the focus to the inspector's heading, so a keyboard or screen-reader user
// lands on what opened rather than staying in the table.
async function inspect(offset) {
  urlState.set('offset', String(offset));
  markSelected();
  if (await showInspector()) $('#msg-insp-title').focus();
}

// showInspector draws the message the URL names; it answers false when a
// newer request overtook this one (a click on another offset while this
// answer was on its way: the late answer is not drawn over the newer).
async function showInspector() {
  const my = ++inspecting;
  const offset = urlState.get('offset', '');
  const box = $('#msg-insp-body');
  const topic = urlState.get('topic', '');
  if (offset === '' || !topic) {
    setText('msg-insp-offset', '');
    replace(box, el('p', { class: 'muted' }, 'Choose a message\'s offset in the table to see its headers and payload.'));
    return true;
  }
  const preview = previewSize(urlState.get('preview', ''));
  setText('msg-insp-offset', 'offset ' + offset);
  let page;
  try {
    // One request: the message at offset, in any state, with its preview.
    page = await get('/admin/api/messages' + q({
      topic, group: urlState.get('group', ''), partition: urlState.get('partition', '0'),
      from: offset, limit: 1, status: activeStates.join(','), include_settled: 'true',
      include_payload: 'true', payload_limit_bytes: preview,
    }));
  } catch (err) {
    if (my !== inspecting) return false;
    replace(box, el('p', { class: 'form-error', role: 'alert' }, errorText(err)));
    return true;
  }
  if (my !== inspecting) return false;
  const m = page.items[0];
  if (!m || String(m.offset) !== offset) {
    replace(box, el('p', { class: 'muted', id: 'msg-insp-none' }, 'Offset ' + offset + ' holds no message: the partition\'s next publish offset is ' + page.next_offset + '.'));
    return true;
  }
  if (m.state === 'settled') {
    replace(box, el('p', { class: 'muted', id: 'msg-insp-none' }, 'Offset ' + offset + ' is settled. The broker keeps no settled message in memory and the API does not read the log back, so its content is not shown.'));
    return true;
  }
  replaceKeepingFocus(box, details(m, {
    prefix: 'msg', view: urlState.get('view', 'auto'), preview,
    onView: (v) => { urlState.set('view', v === 'auto' ? '' : v); showInspector(); },
    onPreview: (n) => { urlState.set('preview', n === previewDefault ? '' : n); showInspector(); },
  }));
  markSelected();
  return true;
}

// ---- The form

function readForm() {
  const { topic, group } = selected();
  urlState.set('topic', topic);
  urlState.set('group', group);
  urlState.set('partition', $('#msg-partition').value === '0' ? '' : $('#msg-partition').value);
  const states = allStates.filter((s) => $('#msg-st-' + s).checked);
  const isDefault = states.length === activeStates.length && activeStates.every((s) => states.includes(s));
  // No state at all keeps the URL's last choice: load() asks for nothing.
  if (states.length) urlState.set('status', isDefault ? '' : states.join(','));
  urlState.set('limit', $('#msg-limit').value === '50' ? '' : $('#msg-limit').value);
}

function writeForm() {
  const states = statesWanted();
  for (const s of allStates) $('#msg-st-' + s).checked = states.includes(s);
  $('#msg-from').value = urlState.get('from', '0');
  $('#msg-limit').value = urlState.get('limit', '50');
  $('#msg-auto').checked = urlState.get('auto', '') === '1';
}

start(async () => {
  tbl = table($('#msg-table'), columns, { id: 'msg', filter: true, filterLabel: 'Filter the messages of this page', rowKey: (m) => String(m.offset), empty: 'No message in the chosen states on this page.' });
  writeForm();
  // The queue listing comes from the live stream's `queues` family (its
  // first value polled at once): the select waits for that first value.
  let listed;
  const firstListing = new Promise((resolve) => { listed = resolve; });
  let lastLoad = Date.now();
  live(['queues'], (family, data) => {
    banner('', 'msg-queues');
    queues = data.queues || [];
    listed();
    showCounts();
    // The table follows the ticks only when asked, every 4 s at most.
    if ($('#msg-auto').checked && Date.now() - lastLoad >= 4000) {
      lastLoad = Date.now();
      load();
    }
  }, { onError: (family, err) => { banner('queue listing: ' + errorText(err), 'msg-queues'); listed(); } });
  await firstListing;
  fillQueues();
  const form = $('#msg-form');
  // A change of queue, partition, states or page size starts again at
  // offset 0; the form's button goes to the typed offset.
  const restart = () => { readForm(); history = []; urlState.set('offset', ''); go(0); showInspector(); };
  $('#msg-queue').addEventListener('change', () => { urlState.set('partition', ''); current = null; fillPartitions(); restart(); });
  $('#msg-partition').addEventListener('change', restart);
  for (const s of allStates) $('#msg-st-' + s).addEventListener('change', restart);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    readForm();
    const from = Math.max(0, Math.floor(Number($('#msg-from').value) || 0));
    history = [];
    go(from);
  });
  $('#msg-first').addEventListener('click', () => { history = []; go(0); });
  $('#msg-prev').addEventListener('click', () => { go(history.length ? history.pop() : 0); });
  $('#msg-next').addEventListener('click', () => {
    if (!current) return;
    history.push(Number(urlState.get('from', '0')));
    go(current.next_offset_hint);
  });
  $('#msg-auto').addEventListener('change', (ev) => urlState.set('auto', ev.target.checked ? '1' : ''));
  await Promise.all([load(), showInspector()]);
});
