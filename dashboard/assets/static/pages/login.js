// Login: POST /login with the form as JSON (the API's own login), then back
// to the page that sent the browser here (a path on this origin only). The
// API's refusals are shown as they are meant: a wrong password says so,
// and the rate limit's 429 says how long to wait and keeps the button off
// until then (the limit refuses the right password too, so trying earlier
// only wastes attempts). The form itself posts to /login, so a submit
// before this script runs never puts the password in a URL.
import { start, el, setText, $ } from '../dash.js';

// nextPath is where to go after the login: a path on this origin, never an
// absolute URL, "//host" or "/\host" (browsers read both as another host):
// an open redirect would let a link log people in and send them elsewhere.
function nextPath() {
  const next = new URLSearchParams(location.search).get('next') || '/';
  if (!next.startsWith('/') || next.startsWith('//') || next.includes('\\')) return '/';
  try {
    const u = new URL(next, location.origin);
    if (u.origin !== location.origin || u.pathname === '/login') return '/';
    return u.pathname + u.search + u.hash;
  } catch (e) {
    return '/';
  }
}

function say(kind, text) {
  const status = $('#login-status');
  status.className = 'form-status ' + (kind === 'ok' ? 'form-ok' : kind === 'error' ? 'form-error' : '');
  setText(status, text);
}

// sentence capitalises the API's message and ends it with a full stop.
const sentence = (m) => m.charAt(0).toUpperCase() + m.slice(1) + (/[.!?]$/.test(m) ? '' : '.');

let waitTimer = null;

// holdOff keeps the form off for seconds, counting down.
function holdOff(seconds, message) {
  const button = $('#login-submit');
  clearInterval(waitTimer);
  let left = seconds;
  const tick = () => {
    if (left <= 0) {
      clearInterval(waitTimer);
      button.disabled = false;
      setText(button, 'Log in');
      say('', 'You may try again now.');
      return;
    }
    button.disabled = true;
    setText(button, 'Wait ' + left + ' s');
    left--;
  };
  say('error', message);
  tick();
  waitTimer = setInterval(tick, 1000);
}

async function login(ev) {
  ev.preventDefault();
  const button = $('#login-submit');
  if (button.disabled) return;
  const username = $('#login-username').value, password = $('#login-password').value;
  if (!username || !password) {
    say('error', 'Give a username and a password.');
    (username ? $('#login-password') : $('#login-username')).focus();
    return;
  }
  button.disabled = true;
  say('', 'Logging in…');
  let resp, body = {};
  try {
    resp = await fetch('/login', { method: 'POST', credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify({ username, password }) });
    try { body = await resp.json(); } catch (e) { body = {}; }
  } catch (e) {
    button.disabled = false;
    say('error', 'The broker did not answer (' + e.message + '). Is it running?');
    return;
  }
  if (resp.ok) {
    say('ok', 'Logged in as ' + (body.user || username) + '.');
    location.assign(nextPath());
    return;
  }
  const message = body.message || ('HTTP ' + resp.status);
  if (resp.status === 429) {
    // Retry-After is in seconds (admin/ratelimit.go).
    const wait = Math.max(1, parseInt(resp.headers.get('Retry-After') || '60', 10) || 60);
    holdOff(wait, sentence(message));
    return;
  }
  button.disabled = false;
  say('error', sentence(message));
  if (resp.status === 401) {
    $('#login-password').value = '';
    $('#login-password').focus();
  }
}

start(() => {
  $('#login-form').addEventListener('submit', login);
  const next = nextPath();
  if (next !== '/') {
    const why = $('#login-why');
    why.hidden = false;
    why.replaceChildren('Log in to open ', el('code', {}, next), '.');
  }
  $('#login-username').focus();
});
