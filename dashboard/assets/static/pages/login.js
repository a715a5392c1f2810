// Login: POST /login with the form as JSON (the API's own login), then back
// to the page that sent the browser here (a same-origin path only).
import { start, bindForm, post, urlState, $ } from '../dash.js';

function nextPath() {
  const next = urlState.get('next', '/');
  // Only a path on this origin: never an absolute URL (an open redirect).
  return next.startsWith('/') && !next.startsWith('//') ? next : '/';
}

start(() => {
  bindForm($('#login-form'), async (v) => {
    await post('/login', { username: v.username, password: v.password });
    location.assign(nextPath());
    return 'Logged in.';
  });
  $('#login-username').focus();
});
