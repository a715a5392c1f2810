// clients.js: what the Connections, Subscriptions and Activity pages share.
// The connections and subscriptions families are two listings of the same
// sessions; they are joined here by session (a dormant session has no
// connection id, and a connection in its handshake has no session, so the
// session is the one key both rows carry when there is something to join).
import { urlState, el, get, banner, errorText } from '../dash.js';

// subsBySession groups subscription rows by session: {count, prefetch,
// held, subs} each, prefetch and held summed over the session's rows.
export function subsBySession(subs) {
  const out = new Map();
  for (const s of subs) {
    let agg = out.get(s.session);
    if (!agg) { agg = { count: 0, prefetch: 0, held: 0, subs: [] }; out.set(s.session, agg); }
    agg.count++;
    agg.prefetch += Number(s.prefetch) || 0;
    agg.held += Number(s.held) || 0;
    agg.subs.push(s);
  }
  return out;
}

// connectionsBySession indexes connection rows by session (rows still in
// their handshake, session 0, are left out: nothing can name them yet).
export function connectionsBySession(conns) {
  const out = new Map();
  for (const c of conns) if (c.session) out.set(c.session, c);
  return out;
}

// bindSelect keeps the <select id> and the URL key in step: the URL's value
// is chosen at load (kept as an option even if the page does not list it
// yet, so a shared link never silently widens), and a change writes the URL
// and calls onChange.
export function bindSelect(id, key, onChange) {
  const node = document.getElementById(id);
  const want = urlState.get(key, '');
  if (want && ![...node.options].some((o) => o.value === want)) node.appendChild(el('option', { value: want }, want));
  node.value = want;
  node.addEventListener('change', () => { urlState.set(key, node.value); onChange(node.value); });
  return node;
}

// setOptions replaces the options of a <select> after its fixed first ones
// (fixed: how many to keep), keeping the chosen value.
export function setOptions(node, fixed, values, label) {
  const chosen = node.value;
  const have = [...node.options].slice(fixed).map((o) => o.value).join('\n');
  const next = [...new Set([...values, ...(chosen && [...node.options].slice(0, fixed).every((o) => o.value !== chosen) ? [chosen] : [])])].sort();
  if (have === next.join('\n')) return;
  while (node.options.length > fixed) node.remove(fixed);
  for (const v of next) node.appendChild(el('option', { value: v }, label ? label(v) : v));
  node.value = chosen;
}

// plural: "1 row", "2 rows".
export function plural(n, one, many) {
  return Number(n).toLocaleString('en-US') + ' ' + (n === 1 ? one : (many || one + 's'));
}

// connectionHref links a session's row on the Connections page.
export function connectionHref(session) {
  return '/admin/connections?session=' + encodeURIComponent(session);
}

// staleWatch shows the API's own message when a page's live data stops
// coming: live() polls quietly and the stream's error events carry no
// family to the page, so a listing the broker refuses would otherwise leave
// the page on its last (or its loading) state without a word. Every
// checkMs, if no data came for staleMs, it asks path once itself: an error
// goes to the banner, an answer goes to onData and clears the banner. It
// costs nothing while data flows. Answers fresh(): call it on each datum.
export function staleWatch(path, onData, opts) {
  const staleMs = (opts && opts.staleMs) || 6000;
  const checkMs = (opts && opts.checkMs) || 5000;
  let last = Date.now(), failed = false;
  setInterval(async () => {
    if (Date.now() - last < staleMs) return;
    try {
      const data = await get(path);
      last = Date.now();
      if (failed) { failed = false; banner(''); }
      onData(data);
    } catch (err) {
      failed = true;
      if (err.status !== 401) banner('The broker did not answer ' + path + ': ' + errorText(err));
    }
  }, checkMs);
  return () => {
    last = Date.now();
    if (failed) { failed = false; banner(''); }
  };
}
