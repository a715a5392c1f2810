// Activity: the audit ring (GET /admin/api/audit, then the events stream's
// audit family, the newest 50 each tick, merged by seq). Filters by action,
// actor and outcome, kept in the URL; each entry links to what it names
// where a page exists; refused actions stand out (a red row and badge).
import { start, live, get, el, replace, fmt, table, urlState, queueHref, banner, errorText, q, $, update } from '../dash.js';
import { bindSelect, setOptions, staleWatch } from '../lib/clients.js';

// entriesMax is the ring's size (admin/audit.go auditRingSize).
const entriesMax = 512;
const bySeq = new Map();
let loaded = false;
let view = null;
const filters = { action: '', outcome: '', actor: '' };

const field = (name, ...children) => el('span', { dataset: { f: name } }, ...children);

// splitQueue reads a "topic/group" target.
function splitQueue(target) {
  const i = target.lastIndexOf('/');
  return i < 0 ? [target, ''] : [target.slice(0, i), target.slice(i + 1)];
}

// targetHref says which page shows what an entry names, or null. A queue
// deleted successfully has no page left to show.
function targetHref(e) {
  const t = e.target || '';
  switch (e.action) {
    case 'queue.create': case 'queue.purge': case 'queue.publish': case 'queue.dlq': case 'dlq.replay': case 'dlq.redrive':
      return t ? queueHref(...splitQueue(t)) : null;
    case 'queue.delete':
      return t && e.outcome !== 'ok' ? queueHref(...splitQueue(t)) : null;
    case 'connection.close': {
      const [kind, n] = t.split('/');
      return n ? '/admin/connections' + q(kind === 'session' ? { session: n } : { id: n }) : null;
    }
    case 'quarantine.repair': return '/admin/diagnostics';
    case 'user.put': case 'user.delete': case 'tls.reload': return '/admin/security';
    case 'runtime_settings.put': case 'global_dlq.put': case 'log.level': return '/admin/settings';
    default: return null;
  }
}

const refused = (e) => e.outcome !== 'ok';

const columns = [
  { key: 'seq', label: '#', num: true, sort: (e) => Number(e.seq), render: (e) => field('seq', String(e.seq)) },
  { key: 'at_ms', label: 'When', sort: (e) => Number(e.at_ms), nofilter: true, title: (e) => fmt.ago(e.at_ms),
    render: (e) => field('time', fmt.time(e.at_ms)) },
  { key: 'actor', label: 'Actor', render: (e) => field('actor', el('code', {}, e.actor || '–')) },
  { key: 'action', label: 'Action', render: (e) => field('action', el('code', {}, e.action)) },
  { key: 'target', label: 'Target', render: (e) => {
    const href = targetHref(e);
    return field('target', !e.target ? el('span', { class: 'muted' }, '–') : href ? el('a', { href }, e.target) : e.target);
  } },
  { key: 'outcome', label: 'Outcome', render: (e) => field('outcome', refused(e)
    ? el('span', { class: 'badge critical au-refused' }, 'refused: ' + e.outcome)
    : el('span', { class: 'badge ok' }, 'ok')) },
  { key: 'detail', label: 'Detail', render: (e) => field('detail', e.detail || '') },
];

function matches(e) {
  if (filters.action && e.action !== filters.action) return false;
  if (filters.outcome === 'refused' ? !refused(e) : filters.outcome && e.outcome !== filters.outcome) return false;
  if (filters.actor && !(e.actor || '').toLowerCase().includes(filters.actor.toLowerCase())) return false;
  return true;
}

// merge adds entries (any order) and forgets the oldest past entriesMax.
function merge(entries) {
  for (const e of entries || []) bySeq.set(e.seq, e);
  if (bySeq.size > entriesMax) {
    const keep = [...bySeq.keys()].sort((a, b) => b - a).slice(0, entriesMax);
    const set = new Set(keep);
    for (const k of bySeq.keys()) if (!set.has(k)) bySeq.delete(k);
  }
}

function newestSeq() {
  let m = 0;
  for (const k of bySeq.keys()) m = Math.max(m, k);
  return m;
}

function draw() {
  if (!loaded) return;
  const all = [...bySeq.values()];
  const refusedCount = all.filter(refused).length;
  const actors = new Set(all.map((e) => e.actor)).size;
  update($('#au-summary'), el('strong', { id: 'au-sum-total' }, fmt.num(all.length)), all.length === 1 ? ' action' : ' actions',
    ' by ', el('strong', { id: 'au-sum-actors' }, fmt.num(actors)), actors === 1 ? ' actor · ' : ' actors · ',
    el('strong', { id: 'au-sum-refused', class: refusedCount ? 'au-refused-text' : null }, fmt.num(refusedCount)), ' refused');
  setOptions($('#au-action'), 1, all.map((e) => e.action));
  setOptions($('#au-outcome'), 3, all.filter(refused).map((e) => e.outcome), (v) => 'refused: ' + v);
  const filtered = filters.action || filters.outcome || filters.actor;
  tableOpts.empty = filtered ? 'No action matches the filters.' : 'No operator action since the broker started.';
  view.update(all.filter(matches));
}

const tableOpts = { id: 'au', filter: true, filterLabel: 'Filter actions', filterPlaceholder: 'Filter by target, detail…',
  sort: '-seq', rowKey: (e) => String(e.seq), empty: 'Loading…' };

start(async () => {
  bindSelect('au-action', 'action', (v) => { filters.action = v; draw(); });
  bindSelect('au-outcome', 'outcome', (v) => { filters.outcome = v; draw(); });
  filters.action = urlState.get('action', '');
  filters.outcome = urlState.get('outcome', '');
  const actor = $('#au-actor');
  actor.value = filters.actor = urlState.get('actor', '');
  actor.addEventListener('input', () => { filters.actor = actor.value; urlState.set('actor', actor.value); draw(); });
  view = table($('#au-list'), columns, tableOpts);
  // The whole ring once; then the stream's newest 50 each tick. More than
  // 50 actions within one tick leave a gap: it is filled with ?after=.
  try {
    merge((await get('/admin/api/audit')).entries);
    loaded = true;
    draw();
  } catch (err) {
    banner('The audit ring did not load: ' + errorText(err));
  }
  const fresh = staleWatch('/admin/api/audit?limit=50', (data) => { merge(data.entries); loaded = true; draw(); });
  live(['audit'], async (family, data) => {
    fresh();
    const entries = data.entries || [];
    const known = newestSeq();
    const oldest = entries.length ? Math.min(...entries.map((e) => e.seq)) : 0;
    if (loaded && known && oldest > known + 1) {
      try { merge((await get('/admin/api/audit' + q({ after: known }))).entries); } catch (err) { banner(errorText(err)); }
    }
    merge(entries);
    loaded = true;
    draw();
  });
});
