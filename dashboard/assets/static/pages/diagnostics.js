// Diagnostics: the quarantined partitions with a Repair each (confirmed,
// saying what a repair loses), the repairs made (from the audit), /readyz,
// the startup recovery, the recent partition loads, storage figures, group
// commits, idle eviction counters and the Go runtime. Live over the events
// stream: diagnostics, quarantine, audit; /readyz is polled (it is no
// API family: it answers text or JSON, 503 included, and needs no auth).
import { start, live, setText, fmt, el, replace, table, post, q, toast, banner, confirmDialog, errorText, $ } from '../dash.js';

// dur shows a duration given in microseconds (the API's unit for
// recovery timings).
export function dur(us) {
  if (us === null || us === undefined) return '–';
  const v = Number(us);
  if (v < 1000) return String(Math.round(v * 100) / 100) + ' µs';
  if (v < 1e6) return (v / 1000).toFixed(2) + ' ms';
  return (v / 1e6).toFixed(2) + ' s';
}

// partName names a partition as the API's messages do: topic/group/N, the
// default group as "default".
function partName(r) {
  return r.topic + '/' + (r.group || 'default') + '/' + r.partition;
}

// kv fills a <dl> with [label, value, id] rows; an id marks the value for
// the test and for a reader's bookmarks.
function kv(node, rows) {
  replace(node, ...rows.flatMap(([k, v, id]) => [el('dt', {}, k), el('dd', { id: id || null }, v === undefined || v === '' ? '–' : v)]));
}

let liveFeed = null;
let quarantineTable = null, loadsTable = null, partsTable = null;

function repairText(r) {
  const where = r.index > 0 ? 'at its last valid record, before index ' + fmt.num(r.index) : 'at the damage';
  return 'Repair partition ' + partName(r) + '? The repair cuts its log ' + where +
    ': the damaged record and every record after it are deleted for good, confirmed messages included. ' +
    'The partition then loads and serves what is left. This cannot be undone (deleting the queue is the other way out).';
}

async function repair(r, button) {
  const ok = await confirmDialog(repairText(r), 'Repair ' + partName(r));
  if (!ok) return;
  const status = $('#dg-repair-status');
  button.disabled = true;
  try {
    const ans = await post('/admin/api/quarantine/repair' + q({ topic: r.topic, group: r.group || 'default', partition: r.partition }));
    const cut = ans.repaired.truncated_entries;
    const msg = 'Repaired ' + partName(r) + ': cut ' + fmt.num(cut) + (cut === 1 ? ' record' : ' records') + '; it serves again.';
    status.className = 'form-status form-ok';
    setText(status, msg);
    toast(msg);
  } catch (err) {
    status.className = 'form-status form-error';
    setText(status, errorText(err));
    toast(errorText(err), 'error');
  } finally {
    button.disabled = false;
    // Leave the row's button, so the table may redraw without the row.
    status.focus();
    if (liveFeed) liveFeed.refresh();
    readyz();
  }
}

function showQuarantine(items) {
  setText('dg-quarantined', fmt.num(items.length));
  const badge = $('#dg-quarantine-badge');
  setText(badge, items.length === 0 ? 'none' : items.length + ' parked');
  badge.className = 'badge ' + (items.length ? 'critical' : 'ok');
  quarantineTable.update(items);
}

function showRepairs(entries) {
  const repairs = (entries || []).filter((e) => e.action === 'quarantine.repair');
  if (repairs.length === 0) {
    replace($('#dg-repairs'), el('li', { class: 'muted' }, 'No repair since the broker started.'));
    return;
  }
  replace($('#dg-repairs'), ...repairs.map((e) => el('li', { dataset: { target: e.target, outcome: e.outcome } },
    el('span', { class: 'badge ' + (e.outcome === 'ok' ? 'ok' : 'warning') }, e.outcome),
    el('span', {}, el('code', {}, e.target), ' ', e.detail || '', ' ',
      el('span', { class: 'muted' }, 'by ' + e.actor + ', ' + fmt.ago(e.at_ms))))));
}

function flags(l) {
  const out = [];
  if (l.repair) out.push('repair');
  if (l.reload) out.push('reload');
  if (l.torn_tail) out.push('torn tail cut');
  return out.join(', ');
}

function outcomeBadge(l) {
  const cls = { loaded: 'ok', quarantined: 'critical', failed: 'critical' }[l.outcome] || '';
  const title = l.damage ? l.damage.kind + ': ' + l.damage.reason : l.error || null;
  return el('span', { class: 'badge ' + cls, title }, l.outcome);
}

function showDiagnostics(d) {
  const s = d.startup || {}, nl = s.node_log || {};
  setText('dg-startup', dur(s.duration_us));
  setText('dg-startup-hint', 'node log: ' + fmt.num(nl.records) + ' records replayed');
  kv($('#dg-startup-kv'), [
    ['Started at', fmt.time(s.at_ms)],
    ['Whole start', dur(s.duration_us), 'dg-startup-total'],
    ['Node log read', dur(nl.read_us), 'dg-startup-read'],
    ['Node log replay', dur(nl.replay_us), 'dg-startup-replay'],
    ['Records replayed', fmt.num(nl.records), 'dg-startup-records'],
    ['Snapshot', nl.snapshot_index ? 'index ' + fmt.num(nl.snapshot_index) + ', ' + fmt.bytes(nl.snapshot_bytes) : 'none', 'dg-startup-snapshot'],
  ]);

  const loads = d.loads || { recent: [] };
  setText('dg-loads-total', fmt.num(loads.total));
  const last = loads.recent[0];
  setText('dg-loads-hint', last ? 'last: ' + partName(last) + ' in ' + dur(last.duration_us) : 'none since start (loads are lazy)');
  setText('dg-loads-kept', 'the newest ' + fmt.num(loads.recent.length) + ' of ' + fmt.num(loads.total) + ' (at most ' + fmt.num(loads.kept) + ' kept)');
  loadsTable.update(loads.recent);

  const st = d.storage || {}, fsys = st.filesystem, use = st.data_dir_usage;
  if (fsys) {
    setText('dg-disk-free', fmt.bytes(fsys.free_bytes));
    setText('dg-disk-hint', 'of ' + fmt.bytes(fsys.total_bytes) + ' (' + (fsys.total_bytes ? (fsys.free_bytes * 100 / fsys.total_bytes).toFixed(1) : '–') + ' % free)');
  }
  if (use) {
    setText('dg-datadir-bytes', fmt.bytes(use.bytes));
    setText('dg-datadir-hint', fmt.num(use.files) + ' files' + (use.complete ? '' : ' (walk incomplete)'));
  }
  kv($('#dg-storage-kv'), [
    ['Data directory', st.data_dir],
    ['Filesystem total', fsys ? fmt.bytes(fsys.total_bytes) : '–', 'dg-fs-total'],
    ['Filesystem used', fsys ? fmt.bytes(fsys.used_bytes) : '–', 'dg-fs-used'],
    ['Filesystem free', fsys ? fmt.bytes(fsys.free_bytes) : '–', 'dg-fs-free'],
    ['Data dir bytes', use ? fmt.num(use.bytes) + ' B (' + fmt.bytes(use.bytes) + ')' : '–', 'dg-datadir-exact'],
    ['How measured', use ? 'a walk of ' + fmt.num(use.files) + ' files and ' + fmt.num(use.dirs) + ' directories in ' + dur(use.walk_us) +
      ', ' + fmt.ago(use.walked_at_ms) + (use.complete ? '' : '; stopped at its bound, so a lower bound') + ' (kept 30 s)' : '–', 'dg-datadir-how'],
  ]);
  partsTable.update(use ? use.parts : []);

  const g = d.group_commit || {};
  kv($('#dg-commit-kv'), [
    ['Rounds (append + fsync)', fmt.num(g.rounds), 'dg-commit-rounds'],
    ['Entries made durable', fmt.num(g.entries), 'dg-commit-entries'],
    ['Mean round time', g.rounds ? dur(g.mean_round_us) : '–', 'dg-commit-mean'],
    ['Mean entries per round', g.rounds ? String(g.mean_entries_per_round) : '–', 'dg-commit-batch'],
  ]);

  const idle = d.idle;
  kv($('#dg-idle-kv'), idle ? [
    ['Idle cleanup', idle.enabled ? 'on' : 'off', 'dg-idle-enabled'],
    ['Evict after', fmt.ms(idle.evict_after_ms)],
    ['Sweep interval', fmt.ms(idle.sweep_interval_ms)],
    ['Evicted', fmt.num(idle.counters.evicted), 'dg-idle-evicted'],
    ['Skipped', fmt.num(idle.counters.skipped), 'dg-idle-skipped'],
    ['Reloaded', fmt.num(idle.counters.reloaded), 'dg-idle-reloaded'],
  ] : [['Idle eviction', 'the Node did not answer', 'dg-idle-enabled']]);

  // The partition budget: a declare past it is refused, so show how close.
  const parts = d.partitions;
  setText('dg-partitions', parts ? fmt.num(parts.declared) : '–');
  setText('dg-partitions-hint', parts ? 'of ' + fmt.num(parts.max) + ' allowed (limits.partitions_max)' : 'the Node did not answer');

  const rt = d.runtime || {};
  setText('dg-goroutines', fmt.num(rt.goroutines));
  setText('dg-heap', 'heap ' + fmt.bytes(rt.heap_bytes));
  kv($('#dg-runtime-kv'), [
    ['Go', rt.go_version],
    ['Goroutines', fmt.num(rt.goroutines), 'dg-rt-goroutines'],
    ['GOMAXPROCS', fmt.num(rt.gomaxprocs)],
    ['Heap (live objects)', fmt.bytes(rt.heap_bytes), 'dg-rt-heap'],
    ['Heap goal', fmt.bytes(rt.heap_goal_bytes)],
    ['GC cycles', fmt.num(rt.gc_cycles)],
  ]);
  // A part the broker could not read is named, the rest still shown.
  banner(d.problems && d.problems.length ? 'Part of the diagnostics could not be read: ' + d.problems.join('; ') : '');
}

// readyz reads /readyz as a probe would: "ok", degraded JSON, or a 503.
async function readyz() {
  let state = 'unreachable', hint = 'the broker did not answer';
  try {
    const resp = await fetch('/readyz', { credentials: 'same-origin' });
    const text = await resp.text();
    let body = null;
    try { body = JSON.parse(text); } catch (e) { body = null; }
    if (resp.ok && body && body.degraded) {
      state = 'degraded';
      hint = (body.quarantined || []).length + ' quarantined; serves the rest';
    } else if (resp.ok) {
      state = 'ready';
      hint = 'HTTP 200 ' + text.trim();
    } else {
      state = 'not ready';
      hint = 'HTTP ' + resp.status + (body && body.code ? ' ' + body.code : '');
    }
  } catch (e) { /* unreachable */ }
  setText('dg-ready', state);
  setText('dg-ready-hint', hint);
  $('#dg-ready').dataset.state = state;
}

start(() => {
  quarantineTable = table($('#dg-quarantine'), [
    { key: 'name', label: 'Partition', sort: partName, render: (r) => el('code', {}, partName(r)) },
    { key: 'partition_kind', label: 'Kind' },
    { key: 'kind', label: 'Found', render: (r) => el('span', { class: 'badge critical' }, r.kind) },
    { key: 'reason', label: 'What was found' },
    { key: 'index', label: 'First bad record', num: true, render: (r) => (r.index ? fmt.num(r.index) : '–') },
    { key: 'detected_at_ms', label: 'Detected', render: (r) => fmt.ago(r.detected_at_ms), title: (r) => fmt.time(r.detected_at_ms) },
    { key: 'refused', label: 'Policy', render: (r) => (r.refused ? 'refuse (not ready)' : 'quarantine') },
    { key: 'action', label: 'Action', nosort: true, nofilter: true, render: (r) => el('button', {
      type: 'button', class: 'danger small', 'aria-label': 'Repair ' + partName(r), dataset: { repair: partName(r) },
      onclick: (ev) => repair(r, ev.currentTarget) }, 'Repair') },
  ], { id: 'dgq', empty: 'No partition is quarantined.', rowKey: partName });

  loadsTable = table($('#dg-loads'), [
    { key: 'at_ms', label: 'When', render: (r) => fmt.time(r.at_ms) },
    { key: 'name', label: 'Partition', sort: partName, render: (r) => el('code', {}, partName(r)) },
    { key: 'kind', label: 'Kind' },
    { key: 'outcome', label: 'Outcome', render: outcomeBadge },
    { key: 'duration_us', label: 'Duration', num: true, render: (r) => dur(r.duration_us) },
    { key: 'read_us', label: 'Log read', num: true, render: (r) => dur(r.read_us) },
    { key: 'entries_replayed', label: 'Entries replayed', num: true },
    { key: 'snapshot_index', label: 'Snapshot', num: true, render: (r) => (r.snapshot_index ? fmt.num(r.snapshot_index) + ' (' + fmt.bytes(r.snapshot_bytes) + ')' : 'none') },
    { key: 'cut', label: 'Cut', sort: (r) => (r.cut ? r.cut.dropped_records : 0),
      render: (r) => (r.cut ? fmt.num(r.cut.dropped_records) + ' from index ' + fmt.num(r.cut.index) : '–') },
    { key: 'flags', label: 'Notes', sort: flags, render: flags },
  ], { id: 'dgl', filter: true, filterLabel: 'Filter partition loads', empty: 'No partition loaded since start: partitions load at their first use.',
    rowKey: (r) => r.at_ms + ':' + partName(r) });

  partsTable = table($('#dg-parts'), [
    { key: 'name', label: 'Part of the data dir', render: (r) => el('code', {}, r.name) },
    { key: 'bytes', label: 'Bytes', num: true, render: (r) => fmt.bytes(r.bytes), title: (r) => fmt.num(r.bytes) + ' B' },
    { key: 'files', label: 'Files', num: true },
  ], { id: 'dgp', empty: 'Nothing measured yet.' });

  liveFeed = live(['diagnostics', 'quarantine', 'audit'], (family, data) => {
    switch (family) {
      case 'diagnostics': showDiagnostics(data); break;
      case 'quarantine': showQuarantine(data.quarantined || []); break;
      case 'audit': showRepairs(data.entries); break;
    }
  });
  readyz();
  setInterval(readyz, 3000);
});
