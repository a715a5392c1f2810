// Settings: the runtime settings (GET|PUT /admin/api/runtime-settings) as a
// form with each key's range, the global dead-letter target
// (GET|PUT /admin/api/global-dlq), the live log level
// (GET|PUT /admin/api/log-level) and the startup configuration with each
// value's source (GET /admin/api/startup-config). Both versioned values
// send the version they were read at; a 409 stale_version is shown with
// what is in force now (the API's `current`), the user's edits are kept,
// and applying again names the new version. Nothing here refreshes under
// the user's hands: a form shows what was read until it is applied,
// refused or discarded.
import { start, live, get, put, el, replace, setText, fmt, queueHref, table, urlState, bindForm, confirmDialog, toast, banner, errorText, ApiError, addCommand, $ } from '../dash.js';

// keyInfo is what the page knows of each runtime key beyond the API's
// answer: a label, the range (docs/runtime-settings.md, the same bounds
// the Node checks; the API's refusal is still what the user sees) and when
// a change takes effect. A key the API answers that is not here is shown
// too, as a plain number.
const keyInfo = {
  'delivery.inflight_ttl_ms': { label: 'Inflight TTL (lease)', min: 1, max: 604800000, ms: true,
    help: 'Deliveries leased after the change; a lease already handed out keeps its deadline.' },
  'delivery.expiry_batch_max': { label: 'Expiry batch max', min: 1, max: 1048576,
    help: 'Expiries one partition handles per step, from its next expiry pass.' },
  'connection.reconnect_grace_ms': { label: 'Reconnect grace', min: 0, max: 3600000, ms: true,
    help: 'Disconnects after the change; a session already dormant keeps its grace. 0 disables.' },
  'connection.resume_session_restart_ttl_ms': { label: 'Resume after restart TTL', min: 0, max: 86400000, ms: true,
    help: 'At once: skeleton sessions are swept again under the new TTL. 0 disables.' },
  'partitioning.default_partition_count': { label: 'Default partition count', min: 1, max: 1024,
    help: 'Queues created after the change without a partition count.' },
  'idle_queue_cleanup.enabled': { label: 'Unload idle queues', bool: true,
    help: 'Unload queue partitions nobody uses; they load again on use, messages intact.' },
  'idle_queue_cleanup.evict_after_ms': { label: 'Evict after', min: 1000, max: 2592000000, ms: true,
    help: 'How long a partition stays unused before it is unloaded.' },
  'idle_queue_cleanup.sweep_interval_ms': { label: 'Sweep interval', min: 100, max: 86400000, ms: true,
    help: 'How often idle partitions are looked for.' },
};

const groupTitles = { delivery: 'Delivery', connection: 'Connection', partitioning: 'Partitioning', idle_queue_cleanup: 'Idle queue cleanup' };

// base is the runtime state the form was built from (or, after a 409, the
// state in force): its version is what the next PUT names.
let base = null;

const inputId = (name) => 'st-' + name.replace(/[._]/g, '-');

// flat lists a state's settings as [name, value] in the API's order.
function flat(state) {
  const out = [];
  for (const [group, keys] of Object.entries(state.settings || {})) {
    for (const [key, value] of Object.entries(keys || {})) out.push([group + '.' + key, value]);
  }
  return out;
}

function valueOf(state, name) {
  const [group, key] = name.split('.');
  return state.settings && state.settings[group] ? state.settings[group][key] : undefined;
}

const show = (name, v) => (v === undefined ? '–' : typeof v === 'boolean' ? (v ? 'on' : 'off') : keyInfo[name] && keyInfo[name].ms ? fmt.num(v) + ' ms (' + fmt.ms(v) + ')' : fmt.num(v));

// inputValue reads an input as the API's type (undefined when empty).
function inputValue(name) {
  const input = document.getElementById(inputId(name));
  if (!input) return undefined;
  if (input.type === 'checkbox') return input.checked;
  return input.value.trim() === '' ? undefined : Number(input.value);
}

function setInput(name, v) {
  const input = document.getElementById(inputId(name));
  if (!input) return;
  if (input.type === 'checkbox') input.checked = !!v;
  else input.value = v === undefined ? '' : String(v);
  input.removeAttribute('aria-invalid');
  human(name);
}

// human shows an ms value as a duration beside its input.
function human(name) {
  const info = keyInfo[name];
  if (!info || !info.ms) return;
  const v = inputValue(name);
  setText(inputId(name) + '-human', v === undefined || Number.isNaN(v) ? '' : '= ' + fmt.ms(v));
}

// buildForm renders one fieldset per group; a locked group is disabled (the
// fieldset and each input, which is what a disabled control's checks look
// at) and says why.
function buildForm(state) {
  const groups = [];
  for (const [group, keys] of Object.entries(state.settings || {})) {
    const locked = (state.locked || []).includes(group);
    const fields = Object.keys(keys || {}).map((key) => {
      const name = group + '.' + key;
      const info = keyInfo[name] || { label: key };
      const id = inputId(name);
      const range = info.bool ? 'on or off' : info.min !== undefined ? fmt.num(info.min) + ' … ' + fmt.num(info.max) + (info.ms ? ' ms' : '') : '';
      const input = info.bool
        ? el('input', { type: 'checkbox', id, name, disabled: locked, 'aria-describedby': id + '-help' })
        : el('input', { type: 'number', id, name, min: info.min, max: info.max, step: 1, inputmode: 'numeric', disabled: locked, 'aria-describedby': id + '-help' });
      input.addEventListener('input', () => { human(name); input.removeAttribute('aria-invalid'); dirty(); });
      input.addEventListener('change', dirty);
      return el('div', { class: 'field st-field' + (info.bool ? ' st-bool' : ''), dataset: { key: name } },
        info.bool ? el('div', { class: 'st-check' }, input, el('label', { for: id }, info.label, ' ', el('code', {}, name)))
          : [el('label', { for: id }, info.label, ' ', el('code', {}, name)), el('div', { class: 'st-input' }, input, el('span', { class: 'muted st-human', id: id + '-human' }))],
        el('div', { class: 'muted st-help', id: id + '-help' }, range ? 'Range ' + range + '. ' : '', info.help || ''),
        el('div', { class: 'st-now', id: id + '-now' }));
    });
    groups.push(el('fieldset', { class: 'st-group', disabled: locked, dataset: { group, locked: locked ? 'true' : 'false' } },
      el('legend', {}, groupTitles[group] || group, locked ? el('span', { class: 'badge warning st-lock' }, 'locked') : null),
      locked ? el('p', { class: 'st-locked-why', id: 'st-locked-' + group },
        'Locked at startup by runtime_locks.' + group + ': the API refuses changes to this group (403 locked). Restart the broker without the lock to change it.') : null,
      fields));
  }
  replace($('#st-groups'), ...groups);
  // Apply is off while there is no form (the first read failed); the
  // form may come later, from live()'s read or the stream.
  $('#st-apply').disabled = false;
}

// setBase takes state as what the form shows and the next PUT names.
function setBase(state, keepEdits) {
  const before = base;
  base = state;
  setText('st-version', 'version ' + state.version);
  for (const [name, v] of flat(state)) {
    // After a refusal the user's edits stay; the keys they did not touch
    // show what is in force now.
    const edited = keepEdits && before && inputValue(name) !== valueOf(before, name);
    if (!edited) setInput(name, v);
  }
  dirty();
}

// changes answers the edited keys as a patch and a list for the message.
function changes() {
  const patch = {}, list = [];
  for (const [name, was] of flat(base)) {
    const [group, key] = name.split('.');
    if ((base.locked || []).includes(group)) continue;
    const v = inputValue(name);
    if (v === was) continue;
    if (v === undefined || Number.isNaN(v)) {
      const input = document.getElementById(inputId(name));
      input.setAttribute('aria-invalid', 'true');
      input.focus();
      throw new Error((keyInfo[name] ? keyInfo[name].label : name) + ' (' + name + ') needs a value.');
    }
    (patch[group] = patch[group] || {})[key] = v;
    list.push([name, was, v]);
  }
  return { patch, list };
}

function dirty() {
  if (!base) return;
  let n = 0;
  for (const [name, was] of flat(base)) {
    const edited = inputValue(name) !== was;
    if (edited) n++;
    const field = document.querySelector('.st-field[data-key="' + name + '"]');
    if (field) field.classList.toggle('st-edited', edited);
  }
  setText('st-dirty', n === 0 ? '' : n + (n === 1 ? ' edit' : ' edits') + ' not applied yet');
}

// showConflict says that someone else changed the settings: what was read,
// what is in force now, and the user's edits, key by key. The form now
// names the current version, so applying again re-applies the edits on it.
function showConflict(current) {
  const read = base;
  const mine = {};
  for (const [name] of flat(read)) {
    const v = inputValue(name);
    if (v !== valueOf(read, name)) mine[name] = v;
  }
  setBase(current, true);
  const rows = flat(current).filter(([name, now]) => now !== valueOf(read, name) || name in mine);
  for (const [name] of flat(current)) setText(inputId(name) + '-now', '');
  for (const [name, now] of rows) {
    if (name in mine) setText(inputId(name) + '-now', 'In force now: ' + show(name, now));
  }
  const box = $('#st-conflict');
  replace(box,
    el('h3', {}, 'Someone else changed the runtime settings'),
    el('p', {}, 'Your changes were not applied: version ' + current.version + ' is in force now, and you started from version ' + read.version +
      '. The form shows the values in force now, with your edits kept.'),
    el('div', { class: 'table-wrap' }, el('table', { id: 'st-conflict-table' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Setting'), el('th', { scope: 'col', class: 'num' }, 'You read (v' + read.version + ')'),
        el('th', { scope: 'col', class: 'num' }, 'In force now (v' + current.version + ')'), el('th', { scope: 'col', class: 'num' }, 'Your edit'))),
      el('tbody', {}, ...rows.map(([name, now]) => el('tr', { dataset: { key: name } },
        el('td', {}, el('code', {}, name)), el('td', { class: 'num' }, show(name, valueOf(read, name))),
        el('td', { class: 'num st-current' }, show(name, now)), el('td', { class: 'num' }, name in mine ? show(name, mine[name]) : '–')))))),
    el('div', { class: 'form-row' },
      el('button', { type: 'submit', id: 'st-reapply' }, 'Re-apply my edits on version ' + current.version),
      el('button', { type: 'button', class: 'ghost', id: 'st-take-current', onclick: discard }, 'Keep the values in force')));
  box.hidden = false;
}

function hideConflict() {
  $('#st-conflict').hidden = true;
  replace($('#st-conflict'));
  if (base) for (const [name] of flat(base)) setText(inputId(name) + '-now', '');
}

function discard() {
  for (const [name, v] of flat(base)) setInput(name, v);
  hideConflict();
  dirty();
  setText('st-status', '');
}

// onRuntime takes the state the stream (or a poll) says is in force. A
// newer version replaces the form's values only while the form holds no
// edit; with edits, the page says a newer version exists and keeps the
// version they were made from, so applying them meets the 409 flow and
// shows what changed, rather than silently mixing two people's values.
function onRuntime(state) {
  if (!base) {
    buildForm(state);
    setBase(state, false);
    startupNotes();
    return;
  }
  if (state.version <= base.version) return;
  if ($('#st-dirty').textContent === '' && $('#st-conflict').hidden) {
    setBase(state, false);
    setText('st-newer', 'Updated to version ' + state.version + ', changed elsewhere ' + new Date().toLocaleTimeString() + '.');
  } else {
    setText('st-newer', 'Version ' + state.version + ' is in force now, changed elsewhere while you were editing version ' + base.version +
      ': applying shows you the differences first.');
  }
  startupNotes();
}

async function applyRuntime() {
  const { patch, list } = changes();
  if (list.length === 0) return 'Nothing to apply: the form holds the values in force (version ' + base.version + ').';
  let next;
  try {
    next = await put('/admin/api/runtime-settings', { expected_version: base.version, settings: patch });
  } catch (err) {
    if (err instanceof ApiError && err.status === 409 && err.current) {
      showConflict(err.current);
      setText('st-newer', '');
      $('#st-reapply').focus();
      throw new Error('Not applied: the settings changed since you read them (now version ' + err.current.version + '). Check the values in force, then re-apply.');
    }
    if (err instanceof ApiError && err.code === 'bad_setting') {
      const named = list.find(([name]) => err.message.startsWith(name));
      if (named) document.getElementById(inputId(named[0])).setAttribute('aria-invalid', 'true');
    }
    throw err;
  }
  hideConflict();
  setBase(next, false);
  setText('st-newer', '');
  startupNotes();
  const what = list.map(([name, was, v]) => name + ' ' + show(name, was) + ' → ' + show(name, v)).join('; ');
  toast('Runtime settings applied (version ' + next.version + ').');
  return 'Applied at version ' + next.version + ': ' + what + '.';
}

// ---- Global dead-letter queue

let dlq = null;

// onDLQ takes the target in force from the stream: shown at once, unless
// the user is typing a new one (then only noted, and their set meets the
// 409 flow).
function onDLQ(state) {
  if (dlq && state.version <= dlq.version) return;
  if (dlq && ($('#st-dlq-topic').value !== '' || $('#st-dlq-group').value !== '')) {
    setText('st-dlq-newer', 'Changed elsewhere to ' + targetText(state.target) + ' (version ' + state.version + ') while you were typing.');
    return;
  }
  setText('st-dlq-newer', '');
  showDLQ(state);
}

function showDLQ(state) {
  dlq = state;
  setText('st-dlq-version', 'version ' + state.version);
  const t = state.target;
  const node = $('#st-dlq-current');
  if (t) replace(node, el('code', {}, fmt.queue(t.topic, t.group)), ' ', el('a', { href: queueHref(t.topic, t.group) }, 'open the queue'));
  else replace(node, el('span', { class: 'muted' }, 'none: a queue with the policy global discards what it dead-letters'));
  $('#st-dlq-clear').disabled = !t;
}

const targetText = (t) => (t ? fmt.queue(t.topic, t.group) : 'none');

async function putDLQ(target) {
  // A PUT names the version it replaces: none to name before the target
  // has been read (the first read failed and the stream has not told yet).
  if (!dlq) throw new Error('The global dead-letter queue is still loading: nothing was changed; try again once its target shows.');
  try {
    showDLQ(await put('/admin/api/global-dlq', { expected_version: dlq.version, target }));
  } catch (err) {
    if (err instanceof ApiError && err.status === 409 && err.current) {
      showDLQ(err.current);
      setText('st-dlq-newer', '');
      throw new Error('Not changed: someone else set the target to ' + targetText(err.current.target) + ' (version ' + err.current.version +
        ') since you read it. Press ' + (target ? 'Set target' : 'Clear') + ' again to replace it.');
    }
    throw err;
  }
  return target ? 'Global dead-letter queue set to ' + targetText(target) + ' (version ' + dlq.version + ').' : 'Global dead-letter queue cleared (version ' + dlq.version + ').';
}

// clearDLQ is the Clear button (outside bindForm: it asks first). The
// question is asked while the button still has the focus, so the dialog
// gives it back there; the button is off only while the PUT is out. The
// outcome goes to the form's status line, and the focus, which the
// disabled button dropped, comes back to Clear, or to the topic when Clear
// is off (no target left).
async function clearDLQ(button) {
  const status = $('#st-dlq-status');
  const say = (kind, text) => { status.className = 'form-status' + (kind ? ' form-' + kind : ''); status.textContent = text; };
  if (!dlq) { say('error', 'The global dead-letter queue is still loading: there is nothing to clear yet.'); return; }
  if (!dlq.target) { say('ok', 'There is no target to clear.'); return; }
  const ok = await confirmDialog('Clear the global dead-letter queue (now ' + targetText(dlq.target) +
    ')? Queues whose dead-letter policy is global will discard what they dead-letter.', 'Clear target');
  if (!ok) return;
  button.disabled = true;
  say('', '');
  try {
    say('ok', await putDLQ(null));
  } catch (err) {
    say('error', errorText(err));
  } finally {
    button.disabled = !(dlq && dlq.target);
    const lost = !document.activeElement || document.activeElement === document.body;
    if (lost) (button.disabled ? $('#st-dlq-topic') : button).focus();
  }
}

// ---- Startup configuration

let startupDraw = null;

// startupNotes redraws the startup table's notes (they compare with the
// runtime values in force).
function startupNotes() { if (startupDraw) startupDraw(); }

function startupTable(values) {
  const sources = ['default', 'file', 'env', 'flag'];
  const select = el('select', { id: 'cfg-source', 'aria-label': 'Show values from one source' },
    el('option', { value: '' }, 'every source'), ...sources.map((s) => el('option', { value: s }, 'from ' + s)));
  select.value = urlState.get('cfg.source');
  const t = table($('#st-startup'), [
    { key: 'key', label: 'Key', render: (r) => el('code', {}, r.key) },
    { key: 'value', label: 'Value', sort: (r) => valueText(r.value), render: (r) => el('code', { class: 'st-value' }, valueText(r.value)) },
    { key: 'source', label: 'Source', render: (r) => el('span', { class: 'badge st-src-' + r.source }, r.source) },
    { key: 'origin', label: 'Set by', render: (r) => (r.origin ? el('code', {}, r.origin) : el('span', { class: 'muted' }, 'built-in default')) },
    { key: 'note', label: 'Note', nofilter: true, nosort: true, render: (r) => note(r) },
  ], { id: 'cfg', filter: true, filterLabel: 'Filter the startup configuration', filterPlaceholder: 'Filter keys, values, sources…', tools: select, rowKey: (r) => r.key });
  const draw = () => t.update(values.filter((v) => !select.value || v.source === select.value));
  select.addEventListener('change', () => { urlState.set('cfg.source', select.value); draw(); });
  startupDraw = draw;
  draw();
}

function valueText(v) {
  if (typeof v === 'string') return v === '' ? '""' : v;
  return JSON.stringify(v);
}

// note says when a startup value is not what is in force: the runtime keys
// seed the first boot only (docs/runtime-settings.md).
function note(row) {
  if (!keyInfo[row.key]) return '';
  const live = base ? valueOf(base, row.key) : undefined;
  if (live === undefined || live === row.value) return el('span', { class: 'muted' }, 'runtime setting');
  return el('span', { class: 'muted' }, 'runtime setting: ', el('strong', {}, show(row.key, live)), ' in force');
}

start(async () => {
  const form = $('#st-form');
  bindForm(form, applyRuntime);
  $('#st-reset').addEventListener('click', discard);
  bindForm($('#st-dlq-form'), (v) => putDLQ({ topic: v.topic.trim(), group: v.group.trim() }));
  $('#st-dlq-clear').addEventListener('click', (ev) => clearDLQ(ev.currentTarget));
  bindForm($('#st-log-form'), async (v) => {
    const got = await put('/admin/api/log-level', { level: v.level });
    setText('st-log-current', got.level);
    return 'The broker logs at ' + got.level + ' and above from now on.';
  });
  addCommand({ label: 'Edit runtime settings', kind: 'action', href: '/admin/settings#st-runtime-title' });

  // The runtime settings and the global target come live (the stream's
  // runtime-settings and global-dlq families, or polling); the log level
  // and the startup configuration are read once. A panel whose read fails
  // says so and the others still fill.
  const [rt, gd, lvl, cfg] = await Promise.allSettled([get('/admin/api/runtime-settings'), get('/admin/api/global-dlq'),
    get('/admin/api/log-level'), get('/admin/api/startup-config')]);
  if (rt.status === 'fulfilled') onRuntime(rt.value);
  else {
    replace($('#st-groups'), el('p', { class: 'form-error' }, 'Could not read the runtime settings: ' + errorText(rt.reason)));
    $('#st-apply').disabled = true;
  }
  if (gd.status === 'fulfilled') onDLQ(gd.value);
  else setText('st-dlq-current', 'Could not read the global dead-letter queue: ' + errorText(gd.reason));
  live(['runtime-settings', 'global-dlq'], (family, data) => {
    if (family === 'runtime-settings') onRuntime(data);
    else onDLQ(data);
  });
  if (lvl.status === 'fulfilled') { $('#st-log-level').value = lvl.value.level; setText('st-log-current', lvl.value.level); }
  else setText('st-log-status', 'Could not read the log level: ' + errorText(lvl.reason));
  if (cfg.status === 'fulfilled') startupTable(cfg.value.values || []);
  else {
    replace($('#st-startup'), el('p', { class: 'form-error' }, errorText(cfg.reason)));
    banner('Could not read the startup configuration: ' + errorText(cfg.reason));
  }
});
