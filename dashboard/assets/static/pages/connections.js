// Connections: every connection the broker holds and every dormant
// session, joined with the subscriptions listing (prefetch and held per
// session), a summary by transport, TLS and state, filters kept in the URL,
// and force-close through POST /admin/api/connections/close. Live over the
// events stream (families connections and subscriptions, one stream).
import { start, live, post, el, replace, setText, fmt, table, toast, confirmDialog, errorText, urlState, addCommand, $, update } from '../dash.js';
import { subsBySession, bindSelect, plural, staleWatch } from '../lib/clients.js';

let conns = null; // null until the first answer: "loading", not "nobody"
let subs = [];
let view = null;
let feed = null;
// currentJoin is the join the columns read: one Map, refilled on each tick.
const currentJoin = new Map();
const filters = { transport: '', tls: '', state: '' };

// rowKey names a row for the page and the tests: c<id> for a connection,
// s<session> for a dormant session (it has no connection id).
const rowKey = (r) => (r.dormant ? 's' + r.session : 'c' + r.id);

// field wraps a cell's value so a test (or a person's devtools) can find it.
const field = (name, ...children) => el('span', { dataset: { f: name } }, ...children);

function columns(joined) {
  const agg = (r) => joined.get(r.session) || { count: 0, prefetch: 0, held: 0, subs: [] };
  // Ten columns fit 1280 px beside the sidebar: the version sits under the
  // name, TLS beside the transport, auth under the state, the session
  // under the connection id (each still its own field, sortable where it
  // matters).
  return [
    { key: 'client_name', label: 'Client', sort: (r) => (r.client_name || '') + ' ' + (r.client_version || ''), render: (r) => [field('name', el('strong', { class: 'nowrap' }, r.client_name || '–')),
      el('span', { class: 'cn-line muted' }, 'version ', field('version', r.client_version || '–'))] },
    { key: 'transport', label: 'Transport', sort: (r) => (r.transport || '') + (r.tls ? ' tls' : ''),
      render: (r) => el('span', { class: 'nowrap' }, field('transport', (r.transport || '–').toUpperCase()), ' ',
        field('tls', el('span', { class: r.tls ? 'badge ok' : 'muted' }, r.tls ? 'TLS' : 'plaintext'))) },
    { key: 'remote', label: 'Remote', render: (r) => field('remote', el('code', {}, r.remote || '–')) },
    { key: 'since_ms', label: 'Connected', sort: (r) => Number(r.since_ms) || 0, nofilter: true,
      title: (r) => fmt.time(r.since_ms), render: (r) => field('since', fmt.ago(r.since_ms)) },
    { key: 'state', label: 'State', sort: (r) => (r.dormant ? 'dormant' : 'connected'),
      render: (r) => [field('state', el('span', { class: 'badge ' + (r.dormant ? 'warning' : 'ok') }, r.dormant ? 'dormant' : 'connected')),
        el('span', { class: 'cn-line' + (r.authenticated ? ' muted' : ' cn-anon') }, field('auth', r.authenticated ? 'authenticated' : 'not authenticated'))] },
    { key: 'subscriptions', label: 'Subs', num: true, sort: (r) => Number(r.subscriptions) || 0, nofilter: true,
      render: (r) => field('subs', r.subscriptions > 0 && r.session
        ? el('a', { href: '/admin/subscriptions?session=' + r.session, 'aria-label': plural(r.subscriptions, 'subscription') + ' of session ' + r.session }, fmt.num(r.subscriptions))
        : fmt.num(r.subscriptions)) },
    { key: 'prefetch', label: 'Prefetch', num: true, sort: (r) => agg(r).prefetch, nofilter: true,
      title: (r) => agg(r).subs.map((s) => s.topic + (s.group && s.group !== 'default' ? '/' + s.group : '') + ' p' + s.partition + ': ' + s.prefetch).join('\n') || null,
      render: (r) => field('prefetch', fmt.num(agg(r).prefetch)) },
    { key: 'held', label: 'Held', num: true, sort: (r) => agg(r).held, nofilter: true, render: (r) => field('held', fmt.num(agg(r).held)) },
    { key: 'id', label: 'ID', num: true, sort: (r) => Number(r.id) || 0,
      render: (r) => [field('id', r.id ? String(r.id) : '–'), el('span', { class: 'cn-line muted nowrap' }, 'session ', field('session', r.session ? String(r.session) : '–'))] },
    { key: 'actions', label: 'Actions', nosort: true, nofilter: true, render: (r) => closeButton(r, agg(r)) },
  ];
}

function closeButton(r, agg) {
  if (!r.session && !r.id) return '';
  // The accessible name starts with the visible word (WCAG 2.5.3).
  const what = r.dormant ? 'End session ' + r.session : 'Close connection ' + r.id;
  return el('div', { class: 'row-actions' }, el('button', {
    type: 'button', class: 'danger small', dataset: { close: rowKey(r) },
    'aria-label': what + ' of ' + (r.client_name || 'an unnamed client'),
    onclick: () => forceClose(r, agg),
  }, r.dormant ? 'End' : 'Close'));
}

// forceClose asks, then closes through the API and says what happened in
// the result line (focused, so the table below it can redraw: it does not
// while a button in it has the focus).
async function forceClose(r, agg) {
  const name = r.client_name ? '“' + r.client_name + '”' : 'an unnamed client';
  const consequence = plural(agg.count, 'subscription') + ' end' + (agg.count === 1 ? 's' : '') +
    ' and the unsettled deliveries go back to other consumers at once.';
  const text = r.dormant
    ? 'End dormant session ' + r.session + ' of ' + name + '? It will not resume: its ' + consequence
    : 'Force-close connection ' + r.id + ' of ' + name + ' (' + (r.transport || '').toUpperCase() + (r.tls ? ' with TLS' : '') + ', ' + r.remote +
      ')? The client is told GOING_AWAY and its session ' + r.session + ' ends, without dormancy: its ' + consequence;
  if (!await confirmDialog(text, r.dormant ? 'End session' : 'Force-close')) return;
  const result = $('#cn-result');
  const body = r.dormant ? { session: r.session } : { id: r.id };
  try {
    const out = await post('/admin/api/connections/close', body);
    const msg = out.was_dormant
      ? 'Ended dormant session ' + r.session + ' of ' + name + '.'
      : 'Closed connection ' + out.connection + ' of ' + name + '; its session ' + r.session + ' ended.';
    result.className = 'form-status form-ok';
    setText(result, msg);
    toast(msg);
  } catch (err) {
    const msg = (r.dormant ? 'Could not end session ' + r.session : 'Could not close connection ' + r.id) + ': ' + errorText(err);
    result.className = 'form-status form-error';
    setText(result, msg);
    toast(msg, 'error');
  }
  result.focus();
  feed.refresh();
}

function matches(r) {
  const only = urlState.get('session', ''), onlyID = urlState.get('id', '');
  if (only && String(r.session) !== only) return false;
  if (onlyID && String(r.id) !== onlyID) return false;
  if (filters.transport && r.transport !== filters.transport) return false;
  if (filters.tls && (r.tls ? 'yes' : 'no') !== filters.tls) return false;
  if (filters.state && (r.dormant ? 'dormant' : 'open') !== filters.state) return false;
  return true;
}

function showSummary() {
  const open = conns.filter((c) => !c.dormant);
  const count = (pred) => open.filter(pred).length;
  const dormant = conns.length - open.length;
  const n = (id, v) => el('strong', { id }, fmt.num(v));
  update($('#cn-summary'),
    n('cn-sum-open', open.length), open.length === 1 ? ' connection (' : ' connections (',
    n('cn-sum-tcp', count((c) => c.transport === 'tcp')), ' TCP, ',
    n('cn-sum-quic', count((c) => c.transport === 'quic')), ' QUIC; ',
    n('cn-sum-tls', count((c) => c.tls)), ' with TLS) · ',
    n('cn-sum-dormant', dormant), dormant === 1 ? ' dormant session · ' : ' dormant sessions · ',
    n('cn-sum-subs', subs.length), subs.length === 1 ? ' subscription' : ' subscriptions');
}

function showOnly() {
  const only = urlState.get('session', ''), onlyID = urlState.get('id', '');
  $('#cn-only').hidden = !only && !onlyID;
  setText('cn-only-text', only ? 'Showing session ' + only + ' only.' : onlyID ? 'Showing connection ' + onlyID + ' only.' : '');
}

const tableOpts = { id: 'cn', filter: true, filterLabel: 'Filter connections', filterPlaceholder: 'Filter by name, remote, version…',
  sort: 'since_ms', rowKey, empty: 'Loading…' };

function draw() {
  if (conns === null) return;
  showSummary();
  showOnly();
  // The columns read the join through agg(); rebuilding the table for it
  // would lose the filter box's focus, so the join is refilled in place.
  currentJoin.clear();
  for (const [k, v] of subsBySession(subs)) currentJoin.set(k, v);
  const onlyID = urlState.get('id', ''), only = urlState.get('session', '');
  tableOpts.empty = onlyID ? 'Connection ' + onlyID + ' is not connected (any more).'
    : only ? 'Session ' + only + ' is not held (any more).'
      : conns.length ? 'No connection matches the filters.' : 'No client is connected.';
  view.update(conns.filter(matches));
}

start(() => {
  for (const key of Object.keys(filters)) {
    filters[key] = bindSelect('cn-' + key, key, (v) => { filters[key] = v; draw(); }).value;
  }
  $('#cn-only-clear').addEventListener('click', () => { urlState.set('session', ''); urlState.set('id', ''); draw(); $('#cn-filter') && $('#cn-filter').focus(); });
  view = table($('#cn-list'), columns(currentJoin), tableOpts);
  addCommand({ label: 'Connections: dormant sessions', kind: 'filter', href: '/admin/connections?state=dormant' });
  addCommand({ label: 'Connections: QUIC clients', kind: 'filter', href: '/admin/connections?transport=quic' });
  const fresh = staleWatch('/admin/api/connections', (data) => { conns = data.connections || []; draw(); });
  feed = live(['connections', 'subscriptions'], (family, data) => {
    if (family === 'connections') { conns = data.connections || []; fresh(); }
    else subs = data.subscriptions || [];
    draw();
  });
});
