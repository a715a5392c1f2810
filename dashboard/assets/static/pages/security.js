// Security: the certificate the broker presents (GET /admin/api/tls) with
// its validity, a validated reload (POST /admin/api/tls/reload), whether
// admin auth is on (from GET /admin/api/startup-config: what this process
// started with) and the wire-protocol users (GET|POST /admin/api/users,
// DELETE /admin/api/users/{name}). No password is ever shown or kept: the
// form's password field is emptied once the API has answered, a refusal
// too. "Change password" is for the user picked in the table only: the
// name is read-only then (the same POST would otherwise add whatever name
// was typed), and Cancel goes back to adding users.
import { start, live, get, post, del, el, replace, setText, fmt, table, bindForm, confirmDialog, toast, banner, errorText, ApiError, addCommand, $ } from '../dash.js';

const dayMs = 86_400_000;
// warnDays: a certificate this close to its end gets a warning; critDays:
// a critical one (the overview's attention item uses its own threshold).
const warnDays = 30, critDays = 7;

let startup = {}; // key -> {value, source, origin}
let cert = null;  // the last GET /admin/api/tls answer
let usersTable = null;

const conf = (key) => (startup[key] ? startup[key].value : undefined);

function origin(key) {
  const v = startup[key];
  if (!v) return '';
  return v.origin ? ' (' + v.origin + ')' : v.source === 'default' ? ' (default)' : ' (' + v.source + ')';
}

// expiry answers the days left and how to show them.
function expiry(notAfter) {
  const left = Math.floor((Date.parse(notAfter) - Date.now()) / dayMs);
  if (left < 0) return { left, kind: 'critical', text: 'expired' };
  if (left <= critDays) return { left, kind: 'critical', text: 'expires in ' + left + (left === 1 ? ' day' : ' days') };
  if (left <= warnDays) return { left, kind: 'warning', text: 'expires in ' + left + ' days' };
  return { left, kind: 'ok', text: 'valid, ' + fmt.num(left) + ' days left' };
}

function showCert(info) {
  cert = info;
  const e = expiry(info.not_after);
  const badge = $('#sec-cert-badge');
  badge.className = 'badge ' + e.kind;
  setText(badge, e.text);
  const tcpTLS = conf('tls.enabled');
  const rows = [
    ['Fingerprint (SHA-256)', el('span', { class: 'sec-fp', id: 'sec-fingerprint' }, info.fingerprint_sha256)],
    ['Subject', el('code', {}, info.subject)],
    ['Names (SANs)', el('span', { class: 'sec-sans', id: 'sec-sans' }, ...(info.sans || []).map((s) => el('span', { class: 'badge' }, s)))],
    ['Valid from', fmt.time(Date.parse(info.not_before))],
    ['Valid until', el('span', { id: 'sec-not-after' }, fmt.time(Date.parse(info.not_after)), ' ', el('span', { class: 'muted', id: 'sec-days-left' }, '(' + (e.left < 0 ? 'expired ' + -e.left + ' days ago' : fmt.num(e.left) + (e.left === 1 ? ' day' : ' days') + ' left') + ')'))],
    ['CA fingerprint (SHA-256)', el('span', { class: 'sec-fp', id: 'sec-ca' }, info.ca_fingerprint_sha256)],
    ['Served on', el('span', { id: 'sec-served' },
      tcpTLS === undefined ? 'TCP: –' : tcpTLS ? 'TCP with TLS' : 'TCP without TLS (tls.enabled is off)', '; QUIC (always TLS 1.3); ',
      info.admin_https ? 'this admin listener over HTTPS' : 'not this admin listener (HTTP)')],
  ];
  const parts = [el('dl', { class: 'kv' }, ...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]))];
  if (e.kind !== 'ok') {
    parts.push(el('p', { class: 'sec-expiry ' + e.kind, id: 'sec-expiry-warning', role: 'note' },
      'The certificate ' + (e.left < 0 ? 'has expired' : 'expires in ' + e.left + (e.left === 1 ? ' day' : ' days')) + ': put a new server.pem and server.key in ' +
      (conf('server.data_dir') || '<data_dir>') + '/tls, then press Reload certificate.'));
  }
  replace($('#sec-cert'), ...parts);
  $('#sec-reload').hidden = false;
}

function showNoTLS(err) {
  cert = null;
  const badge = $('#sec-cert-badge');
  badge.className = 'badge';
  setText(badge, 'TLS is off');
  replace($('#sec-cert'), el('p', { id: 'sec-tls-off' }, 'TLS is off: this admin listener was started without TLS material, so there is no certificate to show or reload.'),
    el('p', { class: 'muted' }, errorText(err)));
  $('#sec-reload').hidden = true;
}

async function loadCert() {
  try {
    showCert(await get('/admin/api/tls'));
  } catch (err) {
    if (err instanceof ApiError && err.status === 501) showNoTLS(err);
    else replace($('#sec-cert'), el('p', { class: 'form-error' }, errorText(err)));
  }
}

async function reload() {
  const status = $('#sec-reload-status'), button = $('#sec-reload');
  const before = cert ? cert.fingerprint_sha256 : '';
  button.disabled = true;
  status.className = 'form-status sec-result';
  setText(status, 'Reloading…');
  try {
    const got = await post('/admin/api/tls/reload');
    await loadCert();
    status.className = 'form-status form-ok sec-result';
    setText(status, got.fingerprint_sha256 === before
      ? 'Reloaded: the files hold the same certificate, ' + got.fingerprint_sha256 + '.'
      : 'Reloaded: new handshakes (TCP, QUIC, admin HTTPS) get ' + got.fingerprint_sha256 + ', valid until ' +
        fmt.time(Date.parse(got.not_after)) + '; it replaced ' + (before || 'the previous one') + '. Open connections keep theirs.');
    toast('Certificate reloaded.');
  } catch (err) {
    status.className = 'form-status form-error sec-result';
    setText(status, 'Refused: ' + errorText(err));
    toast('The certificate reload was refused; the old one keeps serving.', 'error');
  } finally {
    button.disabled = false;
  }
}

function showAccess() {
  const on = conf('admin.auth.enabled');
  const badge = $('#sec-auth-badge');
  badge.className = 'badge ' + (on ? 'ok' : 'warning');
  setText(badge, on ? 'auth on' : 'auth off');
  const https = conf('tls.enabled') && conf('tls.admin_enabled');
  const rows = [
    ['Admin auth', el('span', { id: 'sec-auth' }, on ? 'on, as ' + conf('admin.auth.username') + origin('admin.auth.username') : 'off' + origin('admin.auth.enabled'))],
    ['Admin listener', el('span', {}, el('code', {}, conf('admin.listener.bind') || '–'), https ? ' over HTTPS' : ' over HTTP')],
    ['Off loopback without auth', conf('admin.allow_unauthenticated') ? 'allowed (admin.allow_unauthenticated)' : 'refused at startup'],
  ];
  replace($('#sec-access'), ...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  setText('sec-access-note', on
    ? 'People log in at /login (a session of 12 h, kept in memory: a restart logs everyone out); scripts send basic auth. After 10 failed attempts in a minute an address is refused for the rest of that minute.'
    : 'Anyone who can reach this listener can read and change the broker. The broker allows that on a loopback address only; start it with --admin-auth, --admin-username and --admin-password (better: FIBRIL_ADMIN_AUTH_PASSWORD) to require a login.');
}

// ---- Users

let editing = '';

function editUser(name) {
  editing = name;
  $('#sec-user-name').value = name;
  $('#sec-user-name').readOnly = true;
  setText('sec-user-save', 'Change password');
  setText('sec-user-hint', 'Changing the password of ' + name + ': it takes effect for its next AUTH; sessions already open keep running. Cancel to add a user instead.');
  $('#sec-user-cancel').hidden = false;
  setText('sec-user-status', '');
  $('#sec-user-password').value = '';
  $('#sec-user-password').focus();
}

const addHint = 'A new name adds a user; an existing name gets the new password. Either takes effect for the next AUTH; sessions already open keep running.';

function stopEditing() {
  editing = '';
  $('#sec-user-name').value = '';
  $('#sec-user-name').readOnly = false;
  $('#sec-user-password').value = '';
  setText('sec-user-save', 'Add user');
  setText('sec-user-hint', addHint);
  $('#sec-user-cancel').hidden = true;
}

async function removeUser(name) {
  const ok = await confirmDialog('Remove user ' + name + '? Its next AUTH is refused; sessions already open keep running.', 'Remove user');
  if (!ok) return;
  try {
    await del('/admin/api/users/' + encodeURIComponent(name));
    toast('Removed user ' + name + '.');
    if (editing === name) stopEditing();
  } catch (err) {
    toast(errorText(err), 'error');
  }
  // The row's button is going away: focus a control that stays (the table
  // does not redraw under a focused row button).
  $('#users-filter').focus();
  await loadUsers();
}

async function loadUsers() {
  try {
    const data = await get('/admin/api/users');
    showUsers(data.users || []);
  } catch (err) {
    banner('Could not read the users: ' + errorText(err));
  }
}

function showUsers(users) {
  usersTable.update(users);
  // The user whose password was being changed was removed elsewhere: a
  // "change" now would add it back.
  if (editing && !users.some((u) => u.name === editing)) {
    const gone = editing;
    stopEditing();
    setText('sec-user-status', 'User ' + gone + ' was removed elsewhere; its password was not changed.');
  }
  const hasFibril = users.some((u) => u.name === 'fibril');
  setText('sec-default-login', conf('auth.allow_default_loopback') && !hasFibril
    ? 'While no user is named fibril, clients on loopback may also log in as fibril / fibril (auth.allow_default_loopback).' : '');
}

start(async () => {
  usersTable = table($('#sec-users'), [
    { key: 'name', label: 'Name', render: (u) => el('code', {}, u.name) },
    { key: 'actions', label: 'Actions', num: true, nosort: true, nofilter: true, render: (u) => el('div', { class: 'row-actions' },
      el('button', { type: 'button', class: 'ghost small', 'aria-label': 'Change the password of ' + u.name, dataset: { action: 'password' }, onclick: () => editUser(u.name) }, 'Change password'),
      el('button', { type: 'button', class: 'danger small', 'aria-label': 'Remove ' + u.name, dataset: { action: 'remove' }, onclick: () => removeUser(u.name) }, 'Remove')) },
  ], { id: 'users', filter: true, filterLabel: 'Filter users', filterPlaceholder: 'Filter users…', empty: 'No user yet: add one above.', rowKey: (u) => u.name, sort: 'name' });
  bindForm($('#sec-user-form'), async (v) => {
    let got;
    try {
      got = await post('/admin/api/users', { name: (editing || v.name).trim(), password: v.password });
    } finally {
      $('#sec-user-password').value = '';
    }
    stopEditing();
    await loadUsers();
    return got.created ? 'Added user ' + got.name + '; it can log in at once.' : 'Changed the password of ' + got.name + '; the old one no longer works.';
  });
  $('#sec-user-cancel').addEventListener('click', () => { stopEditing(); setText('sec-user-status', ''); $('#sec-user-name').focus(); });
  $('#sec-reload').addEventListener('click', reload);
  addCommand({ label: 'Reload the TLS certificate', kind: 'action', href: '/admin/security#sec-cert-title' });
  addCommand({ label: 'Add a user', kind: 'action', href: '/admin/security#sec-users-title' });

  try {
    const cfg = await get('/admin/api/startup-config');
    for (const v of cfg.values || []) startup[v.key] = v;
    showAccess();
  } catch (err) {
    banner('Could not read the startup configuration: ' + errorText(err));
  }
  await Promise.all([loadCert(), loadUsers()]);
  // Live from then on: a reload or a user change made elsewhere (fibrilctl,
  // another tab) shows here. The tls family only when there is TLS
  // material: without it the family would be an error every tick.
  live(cert ? ['users', 'tls'] : ['users'], (family, data) => {
    if (family === 'users') showUsers(data.users || []);
    else if (!cert || data.fingerprint_sha256 !== cert.fingerprint_sha256 || data.not_after !== cert.not_after) showCert(data);
  });
});
