// Dead letters: a DLQ queue's copies (GET /admin/api/messages on the DLQ,
// one request per page) with their source, reason and time from the
// broker's stroma.dlq.* headers; filter by source and reason; replay the
// chosen copies (POST /admin/api/dlq/replay, the outcome of each offset
// shown); redrive a filtered set (POST /admin/api/dlq/redrive), always
// counted first with a dry run whose number the confirmation states. The
// view is in the URL: topic, group, partition, source, reason, from,
// offset (the copy inspected), view, preview. The queue listing and the
// global DLQ target come from the `queues` and `global-dlq` families of the
// page's one live stream: the page makes no listing of its own.
import { start, get, post, q, el, replace, setText, fmt, table, urlState, banner, errorText, confirmDialog, toast, live, $ } from '../dash.js';
import { details, previewSize, previewDefault, replaceKeepingFocus } from '../lib/payload.js';
import { queueKey } from '../lib/queues.js';

const H = {
  topic: 'stroma.dlq.source_topic', group: 'stroma.dlq.source_group', partition: 'stroma.dlq.source_partition',
  offset: 'stroma.dlq.source_offset', reason: 'stroma.dlq.reason', at: 'stroma.dlq.dead_lettered_at_ms', retries: 'stroma.dlq.retry_count',
};
const reasons = ['retries_exhausted', 'terminal_nack', 'expired', 'pending_recovery'];
// pageLimit: copies per page of the table; the source and reason filters
// apply to the page (the browse API has no header filter; the redrive
// filters on the broker).
const pageLimit = 500;
// replayOffsetsMax is the API's bound on one replay.
const replayOffsetsMax = 100;
// redriveLimitMax is the API's cap on one redrive's limit (its 0 means its
// default of 1000, so the page never sends 0).
const redriveLimitMax = 10000;

let queues = [];
let globalTarget = null;
let page = null;
let rows = [];
let picked = new Set(); // offsets chosen for a replay
let tbl = null;
let ticket = 0; // the ticket of the table's last request
let inspecting = 0; // the ticket of the inspector's last request
function sourceOf(m) {
  const h = m.headers || {};
  return h[H.topic] ? queueKey(h[H.topic], h[H.group] || '') : '';
}
function sourceLabel(key) {
  if (!key) return 'unknown';
  const [t, g] = key.split('/');
  return fmt.queue(t, g);
}

// targets answers the queues that some queue dead-letters into, each with
// the queues feeding it.
function targets() {
  const out = new Map();
  for (const x of queues) {
    let key = null;
    if (x.dlq && x.dlq.policy === 'custom' && x.dlq.topic) key = queueKey(x.dlq.topic, x.dlq.group);
    else if (x.dlq && x.dlq.policy === 'global' && globalTarget) key = queueKey(globalTarget.topic, globalTarget.group);
    if (!key) continue;
    if (!out.has(key)) out.set(key, []);
    out.get(key).push(fmt.queue(x.topic, x.group));
  }
  if (globalTarget) {
    const key = queueKey(globalTarget.topic, globalTarget.group);
    if (!out.has(key)) out.set(key, []);
  }
  return out;
}

function fillQueues() {
  const t = targets();
  const exists = new Set(queues.map((x) => queueKey(x.topic, x.group)));
  let want = urlState.get('topic', '') ? queueKey(urlState.get('topic', ''), urlState.get('group', '')) : '';
  if (!want) want = [...t.keys()].find((k) => exists.has(k)) || '';
  const dl = [...t.keys()].sort().map((k) => el('option', { value: k, disabled: exists.has(k) ? null : true },
    sourceLabel(k) + (exists.has(k) ? '' : ' (no dead letter yet)')));
  const others = queues.map((x) => queueKey(x.topic, x.group)).filter((k) => !t.has(k)).map((k) => el('option', { value: k }, sourceLabel(k)));
  const opts = [];
  if (!want) opts.push(el('option', { value: '' }, queues.length ? 'Choose a queue…' : 'No queue is declared'));
  if (want && !exists.has(want)) opts.push(el('option', { value: want }, sourceLabel(want) + ' (not listed)'));
  if (dl.length) opts.push(el('optgroup', { label: 'Dead-letter targets' }, ...dl));
  if (others.length) opts.push(el('optgroup', { label: 'Other queues' }, ...others));
  replace($('#dlq-queue'), ...opts);
  $('#dlq-queue').value = want;
  if (want) {
    const [topic, group] = want.split('/');
    urlState.set('topic', topic);
    urlState.set('group', group);
  }
  const feeds = t.get(want);
  setText('dlq-feeds', feeds && feeds.length ? 'dead letters of ' + feeds.join(', ') : want ? 'no queue dead-letters here' : '');
  fillPartitions();
}

function fillPartitions() {
  const [topic, group] = ($('#dlq-queue').value || '/').split('/');
  const qd = queues.find((x) => queueKey(x.topic, x.group) === queueKey(topic, group));
  const count = Math.max(1, (page && page.partition_count) || (qd ? qd.partition_count : 1));
  replace($('#dlq-partition'), ...Array.from({ length: count }, (_, i) => el('option', { value: String(i) }, String(i))));
  const want = urlState.get('partition', '0');
  $('#dlq-partition').value = Number(want) < count ? want : '0';
}

function fillSources() {
  const seen = new Set(page ? page.items.map(sourceOf) : []);
  const want = urlState.get('source', '');
  if (want) seen.add(want);
  replace($('#dlq-source'), el('option', { value: '' }, 'All sources'), ...[...seen].filter(Boolean).sort().map((k) => el('option', { value: k }, sourceLabel(k))));
  $('#dlq-source').value = want;
  $('#dlq-reason').value = urlState.get('reason', '');
}

// ---- The table

function pickBox(m) {
  return el('input', { type: 'checkbox', class: 'dlq-pick', 'aria-label': 'Select offset ' + m.offset, checked: picked.has(m.offset) ? true : null,
    dataset: { offset: String(m.offset) }, onchange: (ev) => { if (ev.target.checked) picked.add(m.offset); else picked.delete(m.offset); showPicked(); } });
}

const columns = [
  { key: 'pick', label: 'Select', nosort: true, nofilter: true, render: pickBox },
  { key: 'offset', label: 'Offset', num: true, render: (m) => el('a', { href: '#dlq-inspector', class: 'mono', 'aria-label': 'Inspect offset ' + m.offset, onclick: (ev) => { ev.preventDefault(); inspect(m.offset); } }, String(m.offset)) },
  { key: 'source', label: 'Source', sort: (m) => sourceOf(m), render: (m) => {
    const h = m.headers || {};
    return el('span', {}, sourceLabel(sourceOf(m)), h[H.partition] !== undefined ? el('span', { class: 'muted' }, ' #' + h[H.partition] + (h[H.offset] !== undefined ? ' @' + h[H.offset] : '')) : null);
  } },
  { key: 'reason', label: 'Reason', sort: (m) => (m.headers || {})[H.reason] || '', render: (m) => el('span', { class: 'badge ' + ((m.headers || {})[H.reason] === 'terminal_nack' ? 'critical' : 'warning') }, (m.headers || {})[H.reason] || 'unknown') },
  { key: 'at', label: 'Dead-lettered', sort: (m) => Number((m.headers || {})[H.at] || 0), render: (m) => {
    const at = Number((m.headers || {})[H.at] || 0);
    return at ? el('span', { title: new Date(at).toISOString() }, fmt.time(at)) : '–';
  } },
  { key: 'retries', label: 'Retries', num: true, sort: (m) => Number((m.headers || {})[H.retries] || 0), render: (m) => (m.headers || {})[H.retries] || '–' },
  { key: 'payload_len', label: 'Size (bytes)', num: true },
  { key: 'content_type', label: 'Content type', render: (m) => m.content_type || 'none' },
  { key: 'state', label: 'State', render: (m) => el('span', { class: 'badge' }, m.state) },
];

function filtered() {
  const src = urlState.get('source', ''), reason = urlState.get('reason', '');
  return (page ? page.items : []).filter((m) => (!src || sourceOf(m) === src) && (!reason || (m.headers || {})[H.reason] === reason));
}

function draw() {
  rows = filtered();
  tbl.update(rows);
  const all = page ? page.items : [];
  setText('dlq-c-total', page ? fmt.num(all.length) : '–');
  setText('dlq-c-shown', page ? fmt.num(rows.length) : '–');
  for (const r of ['retries_exhausted', 'terminal_nack', 'expired']) {
    setText('dlq-c-' + r, page ? fmt.num(all.filter((m) => (m.headers || {})[H.reason] === r).length) : '–');
  }
  setText('dlq-c-range', all.length ? 'offsets ' + all[0].offset + '–' + all[all.length - 1].offset : 'none from offset ' + urlState.get('from', '0'));
  const qd = queues.find((x) => queueKey(x.topic, x.group) === queueKey(urlState.get('topic', ''), urlState.get('group', '')));
  const part = qd && (qd.partitions || []).find((p) => String(p.partition) === urlState.get('partition', '0'));
  setText('dlq-c-ready', part && part.loaded ? fmt.num(part.ready) : part ? 'not loaded' : '–');
  const offset = urlState.get('offset', '');
  for (const tr of document.querySelectorAll('#dlq-table tbody tr')) {
    if (tr.dataset.key === offset) tr.setAttribute('aria-current', 'true'); else tr.removeAttribute('aria-current');
  }
  showPicked();
}

function showPicked() {
  const shown = new Set(rows.map((m) => m.offset));
  // A copy that left the page (replayed and moved, or filtered out) is no
  // longer a choice.
  for (const o of [...picked]) if (!shown.has(o)) picked.delete(o);
  setText('dlq-selected-count', picked.size ? picked.size + ' selected' : 'none selected');
  $('#dlq-replay').disabled = picked.size === 0;
  setText('dlq-replay', picked.size ? 'Replay ' + picked.size + ' selected' : 'Replay selected');
  const all = $('#dlq-all');
  all.checked = rows.length > 0 && picked.size === rows.length;
  all.indeterminate = picked.size > 0 && picked.size < rows.length;
}

async function load() {
  const topic = urlState.get('topic', '');
  const my = ++ticket;
  if (!topic) { page = null; draw(); return; }
  try {
    const answer = await get('/admin/api/messages' + q({ topic, group: urlState.get('group', ''), partition: urlState.get('partition', '0'), from: urlState.get('from', '0'), limit: pageLimit }));
    if (my !== ticket) return;
    banner('');
    page = answer;
    if (page.partition_count !== $('#dlq-partition').options.length) fillPartitions();
  } catch (err) {
    if (my !== ticket) return;
    page = null;
    banner(errorText(err));
  }
  fillSources();
  draw();
  $('#dlq-first').disabled = Number(urlState.get('from', '0')) === 0;
  $('#dlq-next').disabled = !page || page.next_offset_hint >= page.next_offset;
  setText('dlq-scan', !page ? '' : page.next_offset_hint < page.next_offset
    ? 'More from offset ' + page.next_offset_hint + '; filters apply to this page of at most ' + pageLimit + '.'
    : 'End of the partition (next offset ' + page.next_offset + ').');
}

// ---- Replay

async function replay() {
  const offsets = [...picked].sort((a, b) => a - b);
  if (offsets.length === 0) return;
  if (offsets.length > replayOffsetsMax) {
    toast('A replay takes at most ' + replayOffsetsMax + ' offsets; ' + offsets.length + ' are selected.', 'error');
    return;
  }
  const ok = await confirmDialog('Publish ' + offsets.length + (offsets.length === 1 ? ' copy' : ' copies') + ' back to their source queues? The copies stay here (a replay does not remove them; a redrive does).', 'Replay');
  if (!ok) return;
  const btn = $('#dlq-replay');
  btn.disabled = true;
  let outcome = null; // the heading of what happened, where the focus goes
  try {
    const res = await post('/admin/api/dlq/replay', { dlq_topic: urlState.get('topic', ''), dlq_group: urlState.get('group', ''), partition: Number(urlState.get('partition', '0')), offsets });
    const results = res.results || [];
    const replayed = results.filter((r) => r.outcome === 'replayed').length;
    outcome = el('h3', { class: 'msg-h3', id: 'dlq-replay-heading', tabindex: '-1' }, 'Replay: ' + replayed + ' of ' + results.length + ' replayed');
    replace($('#dlq-replay-results'),
      outcome,
      el('div', { class: 'table-wrap' }, el('table', { id: 'dlq-replay-table' },
        el('thead', {}, el('tr', {}, el('th', { scope: 'col', class: 'num' }, 'Offset'), el('th', { scope: 'col' }, 'Outcome'), el('th', { scope: 'col' }, 'Reason'))),
        el('tbody', {}, ...results.map((r) => el('tr', { dataset: { offset: String(r.offset), outcome: r.outcome } },
          el('td', { class: 'num mono' }, String(r.offset)),
          el('td', {}, el('span', { class: 'badge ' + (r.outcome === 'replayed' ? 'ok' : 'warning') }, r.outcome)),
          el('td', {}, r.reason || '–')))))));
    toast(replayed + (replayed === 1 ? ' copy' : ' copies') + ' replayed');
    picked.clear();
  } catch (err) {
    outcome = el('p', { class: 'form-error', role: 'alert', id: 'dlq-replay-heading', tabindex: '-1' }, 'Replay refused: ' + errorText(err));
    replace($('#dlq-replay-results'), outcome);
  } finally {
    btn.disabled = false;
  }
  await refresh();
  // Disabling the focused button dropped the focus to the page's body: it
  // goes back to the button, or, the button being disabled now (a replay
  // clears the selection), to the outcome's heading.
  if (document.activeElement === document.body || document.activeElement === btn) {
    if (!btn.disabled) btn.focus(); else outcome.focus();
  }
}

// ---- Redrive

// localMs reads a time field: Unix ms, or a local date and time
// ("2026-12-01 17:30[:05]"). A date alone is the start of that day, or
// with endOfDay (the "until" field) its last millisecond, so "until
// 2026-12-01" includes that day. A date or time that does not exist is
// refused with what is wrong: Date would quietly move 2026-13-45 25:00 to
// 2027-02-15 01:00, and the checked round trip also catches a local time
// skipped by a daylight-saving change. Plain text fields, not
// datetime-local: those take a Tab per date part.
function localMs(value, endOfDay) {
  value = value.trim();
  if (!value) return 0;
  if (/^\d{10,}$/.test(value) && Number.isSafeInteger(Number(value))) return Number(value);
  const m = /^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2}))?)?$/.exec(value);
  if (!m) throw new Error('"' + value + '" is not a time: write 2026-12-01 17:30 or Unix milliseconds');
  const [y, mo, d, h, mi, sec] = m.slice(1).map((x) => Number(x || 0));
  const wrong = [];
  if (y < 1970) wrong.push('year ' + y + ' is before 1970');
  if (mo < 1 || mo > 12) wrong.push('month ' + mo + ' is not 1-12');
  else {
    const days = new Date(y, mo, 0).getDate();
    if (d < 1 || d > days) wrong.push('day ' + d + ' is not 1-' + days + ' in ' + y + '-' + m[2]);
  }
  if (h > 23) wrong.push('hour ' + h + ' is not 0-23');
  if (mi > 59) wrong.push('minute ' + mi + ' is not 0-59');
  if (sec > 59) wrong.push('second ' + sec + ' is not 0-59');
  if (wrong.length) throw new Error('"' + value + '" is not a time: ' + wrong.join(', '));
  const at = new Date(y, mo - 1, d, h, mi, sec);
  if (at.getFullYear() !== y || at.getMonth() !== mo - 1 || at.getDate() !== d || at.getHours() !== h || at.getMinutes() !== mi || at.getSeconds() !== sec) {
    throw new Error('"' + value + '" does not exist in local time (a daylight-saving change skips it)');
  }
  if (endOfDay && m[4] === undefined) return new Date(y, mo - 1, d + 1).getTime() - 1;
  return at.getTime();
}

// field reads one input of the redrive form with read, marking it invalid
// (aria-invalid) and naming it in the error when read throws.
function field(id, label, read) {
  const input = $('#' + id);
  try {
    const v = read(input.value);
    input.removeAttribute('aria-invalid');
    return v;
  } catch (err) {
    input.setAttribute('aria-invalid', 'true');
    throw new Error(label + ': ' + errorText(err));
  }
}

function readLimit(raw) {
  const n = Number(raw.trim());
  if (raw.trim() === '' || !Number.isInteger(n) || n < 1 || n > redriveLimitMax) {
    throw new Error((raw.trim() === '' ? 'empty' : '"' + raw.trim() + '"') + ': write a whole number from 1 to ' + fmt.num(redriveLimitMax) + ' (the cap of one redrive; run it again for more)');
  }
  return n;
}

// redriveBody reads the form into the dry run's body. Every field is read
// (and marked) before the first error is thrown.
function redriveBody() {
  const errors = [];
  const read = (id, label, fn) => { try { return field(id, label, fn); } catch (err) { errors.push(err.message); return 0; } };
  const body = {
    dlq_topic: urlState.get('topic', ''), dlq_group: urlState.get('group', ''),
    source_topic: $('#rd-source-topic').value.trim(), source_group: $('#rd-source-group').value.trim(),
    reason: $('#rd-reason').value,
    from_ms: read('rd-from', 'Dead-lettered from', (v) => localMs(v, false)),
    to_ms: read('rd-to', 'Until', (v) => localMs(v, true)),
    limit: read('rd-limit', 'At most', readLimit),
    dry_run: true,
  };
  if (body.source_group && !body.source_topic) errors.push('Source group: name the source topic too: a source group alone matches nothing');
  if (errors.length) throw new Error(errors.join('. '));
  return body;
}

// sourceText names the redrive's source filter. The API reads an empty
// source_group as any group of the topic and "default" as its default
// group only, so the two are spelled out.
function sourceText(b) {
  if (!b.source_group) return b.source_topic + ' (any group)';
  if (b.source_group === 'default') return b.source_topic + ' (default group)';
  return b.source_topic + ' / ' + b.source_group;
}

function filterText(b) {
  const parts = [];
  if (b.source_topic) parts.push('from ' + sourceText(b));
  if (b.reason) parts.push('reason ' + b.reason);
  if (b.from_ms || b.to_ms) parts.push('dead-lettered ' + (b.from_ms ? 'from ' + fmt.time(b.from_ms) : '') + (b.to_ms ? ' until ' + fmt.time(b.to_ms) : ''));
  return parts.length ? parts.join(', ') : 'every ready or delayed copy';
}

function resultBox(r, b) {
  const rowsKv = [['Matched', fmt.num(r.matched)], ['Replayed', fmt.num(r.replayed)], ['Skipped', fmt.num(r.skipped)],
    ['Scan', r.next_offset_hint === null || r.next_offset_hint === undefined ? 'reached the end of the DLQ' : 'stopped at partition ' + r.next_partition + ' offset ' + r.next_offset_hint + ' (the limit): run again to go on'],
    ['Stopped early', r.stopped_early ? 'yes (the deadline): run again to go on' : 'no']];
  return el('div', { id: 'rd-outcome', dataset: { matched: String(r.matched), replayed: String(r.replayed) } },
    el('h3', { class: 'msg-h3' }, 'Redrive done: ' + r.replayed + (r.replayed === 1 ? ' copy' : ' copies') + ' moved'),
    el('p', { class: 'muted' }, filterText(b)),
    el('dl', { class: 'kv' }, ...rowsKv.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)])));
}

function copies(n) { return fmt.num(n) + (n === 1 ? ' copy' : ' copies'); }

// redrive counts the form's filter with a dry run (the preview) and, with
// run, moves what it counted. The real redrive never moves more than the
// confirmation stated: it runs with limit = the count, and the count is
// taken again after the confirmation; if it changed meanwhile (copies
// dead-lettered or taken), the page says so and asks again.
async function redrive(run) {
  const box = $('#rd-result');
  let body;
  try { body = redriveBody(); } catch (err) { replace(box, el('p', { class: 'form-error', role: 'alert' }, errorText(err))); return; }
  if (!body.dlq_topic) { replace(box, el('p', { class: 'form-error', role: 'alert' }, 'Choose a dead-letter queue first.')); return; }
  const buttons = [$('#rd-preview'), $('#rd-run')];
  // Disabling the focused button drops the focus to the page's body: it
  // comes back once the answer is in (as dash.js bindForm does).
  const focused = document.activeElement;
  const busy = (on) => buttons.forEach((b) => { b.disabled = on; });
  busy(true);
  try {
    // The preview is a dry run: the same filter, counted by the broker.
    const count = async (changedFrom) => {
      const dry = await post('/admin/api/dlq/redrive', body);
      const more = dry.next_offset_hint !== null && dry.next_offset_hint !== undefined;
      replace(box,
        changedFrom === undefined ? null : el('p', { id: 'rd-changed' }, el('strong', {}, 'The count changed after the confirmation: ' + copies(changedFrom) + ' then, ' + copies(dry.matched) + ' now.')),
        el('p', { id: 'rd-preview-text' }, el('strong', { id: 'rd-preview-count' }, fmt.num(dry.matched)),
          (dry.matched === 1 ? ' copy matches' : ' copies match') + ' (' + filterText(body) + ')' + (more ? '; the limit stopped the count, more may match.' : '.')));
      return dry.matched;
    };
    let matched = await count();
    if (!run) return;
    let changedFrom;
    for (;;) {
      if (matched === 0) { toast('Nothing matches: nothing to redrive.'); return; }
      busy(false);
      const ok = await confirmDialog((changedFrom === undefined ? '' : 'The count changed: ' + copies(changedFrom) + ' when you confirmed, ' + copies(matched) + ' now. ')
        + 'Move ' + copies(matched) + ' (' + filterText(body) + ') back to their source queues? Each is completed here once durable in its source.', 'Redrive ' + matched);
      if (!ok) return;
      busy(true);
      const now = await count(matched);
      if (now === matched) break;
      changedFrom = matched;
      matched = now;
    }
    const res = await post('/admin/api/dlq/redrive', { ...body, dry_run: false, limit: matched });
    replace(box, resultBox(res, body));
    toast(copies(res.replayed) + ' redriven');
    await refresh();
  } catch (err) {
    replace(box, el('p', { class: 'form-error', role: 'alert' }, 'Redrive refused: ' + errorText(err)));
  } finally {
    busy(false);
    if (focused && focused.isConnected && document.activeElement === document.body) focused.focus();
  }
}

// ---- The inspector

// inspect shows the copy at offset (a click in the table) and moves the
// focus to the inspector's heading, so a keyboard or screen-reader user
// lands on what opened.
async function inspect(offset) {
  urlState.set('offset', String(offset));
  draw();
  if (await showInspector()) $('#dlq-insp-title').focus();
}

// showInspector draws the copy the URL names; it answers false when a
// newer request overtook this one (its late answer is not drawn).
async function showInspector() {
  const my = ++inspecting;
  const offset = urlState.get('offset', ''), topic = urlState.get('topic', '');
  const box = $('#dlq-insp-body');
  if (offset === '' || !topic) { setText('dlq-insp-offset', ''); return true; }
  setText('dlq-insp-offset', 'offset ' + offset);
  const preview = previewSize(urlState.get('preview', ''));
  try {
    const one = await get('/admin/api/messages' + q({ topic, group: urlState.get('group', ''), partition: urlState.get('partition', '0'), from: offset, limit: 1, include_settled: 'true', include_payload: 'true', payload_limit_bytes: preview }));
    if (my !== inspecting) return false;
    const m = one.items[0];
    if (!m || String(m.offset) !== offset || m.state === 'settled') {
      replace(box, el('p', { class: 'muted' }, 'Offset ' + offset + ' holds no copy now (settled, redriven, or beyond the end).'));
      return true;
    }
    const h = m.headers || {};
    replaceKeepingFocus(box, details(m, {
      prefix: 'dlq', view: urlState.get('view', 'auto'), preview,
      facts: [['Source', sourceLabel(sourceOf(m)) + (h[H.partition] !== undefined ? ' partition ' + h[H.partition] : '') + (h[H.offset] !== undefined ? ' offset ' + h[H.offset] : '')],
        ['Reason', h[H.reason] || 'unknown'], ['Dead-lettered', h[H.at] ? fmt.time(Number(h[H.at])) : '–']],
      onView: (v) => { urlState.set('view', v === 'auto' ? '' : v); showInspector(); },
      onPreview: (n) => { urlState.set('preview', n === previewDefault ? '' : n); showInspector(); },
    }));
  } catch (err) {
    if (my !== inspecting) return false;
    replace(box, el('p', { class: 'form-error', role: 'alert' }, errorText(err)));
  }
  return true;
}

// refresh redraws the table and the inspector; the counts from the queue
// listing follow with the stream's next tick (2 s).
async function refresh() {
  await Promise.all([load(), showInspector()]);
}

// sourceFields fills the redrive form's source from a browse key
// (topic/group, the default group spelled ""). The API reads an empty
// source_group as any group, so the default group is named: a redrive of
// "orders" must not take the copies of orders / billing.
function sourceFields(key) {
  const [topic, group] = key ? key.split('/') : ['', ''];
  $('#rd-source-topic').value = topic || '';
  $('#rd-source-group').value = topic ? group || 'default' : '';
}

start(async () => {
  const selectAll = el('label', { class: 'msg-check', for: 'dlq-all' }, el('input', { type: 'checkbox', id: 'dlq-all', onchange: (ev) => {
    picked = ev.target.checked ? new Set(rows.map((m) => m.offset)) : new Set();
    tbl.update(rows);
    showPicked();
  } }), 'Select all shown');
  const replayBtn = el('button', { type: 'button', id: 'dlq-replay', class: 'small', disabled: true, onclick: replay }, 'Replay selected');
  tbl = table($('#dlq-table'), columns, { id: 'dlq', tools: [selectAll, replayBtn], rowKey: (m) => String(m.offset), empty: 'No dead-lettered copy here (with this filter).' });
  // The listing and the global target come from the live stream (their
  // first values polled at once); the select waits for both. The counts
  // redraw with each listing; the table only on Refresh or after a change
  // (it would move under the user's checkboxes). A failing global-dlq
  // (no runtime settings) leaves the custom targets: it is not shown.
  const arrived = new Set();
  let listed;
  const firstListing = new Promise((resolve) => { listed = resolve; });
  const heard = (family) => {
    arrived.add(family);
    if (arrived.has('queues') && arrived.has('global-dlq')) listed();
  };
  live(['queues', 'global-dlq'], (family, data) => {
    if (family === 'queues') {
      banner('', 'dlq-queues');
      queues = data.queues || [];
      draw();
    } else globalTarget = data && data.target ? data.target : null;
    heard(family);
  }, { onError: (family, err) => {
    if (family === 'queues') banner('queue listing: ' + errorText(err), 'dlq-queues');
    heard(family);
  } });
  await firstListing;
  fillQueues();
  sourceFields(urlState.get('source', ''));
  $('#rd-reason').value = urlState.get('reason', '');
  $('#dlq-queue').addEventListener('change', () => {
    const [topic, group] = $('#dlq-queue').value.split('/');
    for (const k of ['partition', 'source', 'from', 'offset']) urlState.set(k, '');
    urlState.set('topic', topic);
    urlState.set('group', group);
    page = null;
    picked.clear();
    replace($('#dlq-insp-body'), el('p', { class: 'muted' }, 'Choose a copy\'s offset to see its headers and payload.'));
    fillQueues();
    load();
  });
  $('#dlq-partition').addEventListener('change', () => { urlState.set('partition', $('#dlq-partition').value === '0' ? '' : $('#dlq-partition').value); urlState.set('from', ''); picked.clear(); load(); });
  // The browse filter also fills the redrive form: what you see is what
  // a redrive would take (it then narrows or widens it as typed).
  $('#dlq-source').addEventListener('change', () => {
    const v = $('#dlq-source').value;
    urlState.set('source', v);
    sourceFields(v);
    draw();
  });
  $('#dlq-reason').addEventListener('change', () => { urlState.set('reason', $('#dlq-reason').value); $('#rd-reason').value = $('#dlq-reason').value; draw(); });
  $('#dlq-refresh').addEventListener('click', refresh);
  $('#dlq-first').addEventListener('click', () => { urlState.set('from', ''); load(); });
  $('#dlq-next').addEventListener('click', () => { if (page) { urlState.set('from', String(page.next_offset_hint)); load(); } });
  $('#dlq-redrive-form').addEventListener('submit', (ev) => { ev.preventDefault(); redrive(ev.submitter && ev.submitter.value === 'run'); });
  await Promise.all([load(), showInspector()]);
});
