// dash.js: what every page of the dashboard shares. A page's script imports
// what it needs from here and calls start(). Rules every page keeps:
//   - data comes from the admin API only (api()), one request per table,
//     never one per row;
//   - the DOM is built with el() and textContent, never innerHTML with data,
//     so a message payload or a client name can never become markup;
//   - live data comes from one server-sent event stream per page (live()),
//     falling back to polling the same endpoints when the stream fails;
//   - filters and sort orders live in the URL (urlState), so a link or a
//     reload shows the same view.

// ---- The API

// ApiError is an answer other than 2xx: status, the API's code and message,
// and current (the value in force, on a 409 stale_version).
export class ApiError extends Error {
  constructor(status, code, message, current) {
    super(message || code || ('HTTP ' + status));
    this.status = status;
    this.code = code || '';
    this.current = current;
  }
}

// apiTimeoutMs bounds one API request.
const apiTimeoutMs = 30_000;

// api sends one request to the admin API and answers the decoded JSON. A
// body is sent as JSON. A 401 sends the browser to the login page.
export async function api(method, path, body) {
  const init = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  // The API answers within its own deadlines (25 s at most, then 503); a
  // request still open past apiTimeoutMs is given up, so a stalled broker
  // cannot pile requests up in a tab.
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), apiTimeoutMs);
  init.signal = abort.signal;
  let resp, text;
  try {
    resp = await fetch(path, init);
    text = await resp.text();
  } catch (e) {
    throw new ApiError(0, 'unreachable', abort.signal.aborted ? 'the broker did not answer within ' + apiTimeoutMs / 1000 + ' s' : 'the broker did not answer (' + e.message + ')');
  } finally {
    clearTimeout(timer);
  }
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch (e) { data = { message: text }; }
  }
  if (resp.status === 401 && location.pathname !== '/login') {
    location.assign('/login?next=' + encodeURIComponent(location.pathname + location.search));
    throw new ApiError(401, 'unauthorized', 'log in to continue');
  }
  if (!resp.ok) {
    throw new ApiError(resp.status, data && data.code, data && data.message, data && data.current);
  }
  return data;
}

export const get = (path) => api('GET', path);
export const post = (path, body) => api('POST', path, body === undefined ? {} : body);
export const put = (path, body) => api('PUT', path, body);
export const del = (path) => api('DELETE', path);

// q builds a query string from an object, skipping empty values.
export function q(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') u.set(k, String(v));
  }
  const s = u.toString();
  return s ? '?' + s : '';
}

// ---- DOM

// el builds an element: el('td', {class: 'num'}, 'text', childNode, ...).
// Attributes starting with "on" are listeners; null/false attributes are
// skipped; children that are strings or numbers become text nodes.
export function el(tag, attrs, ...children) {
  const node = tag === 'svg' || tag === 'polyline' || tag === 'path' || tag === 'line' || tag === 'text' || tag === 'g' || tag === 'circle' || tag === 'rect' || tag === 'title'
    ? document.createElementNS('http://www.w3.org/2000/svg', tag)
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(node, c);
    else if (c instanceof Node) node.appendChild(c);
    else node.appendChild(document.createTextNode(String(c)));
  }
}

// $ finds one element by selector (by id when it starts with #).
export const $ = (sel, root) => (root || document).querySelector(sel);

// replace empties node and puts children in it.
export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

// update puts children in node only when they differ from what it holds
// (attributes and text compared, isEqualNode), so a tick that changed
// nothing leaves the DOM, the focus and a reader's selection alone. For
// static content only: listeners of the children are not compared.
export function update(node, ...children) {
  const next = node.cloneNode(false);
  append(next, children);
  if (!next.isEqualNode(node)) node.replaceChildren(...next.childNodes);
  return node;
}

// setText sets the text of the element with id, if it changed (no layout
// churn on a tick that changed nothing).
export function setText(id, text) {
  const node = typeof id === 'string' ? document.getElementById(id) : id;
  if (node && node.textContent !== String(text)) node.textContent = String(text);
}

// ---- Formatting

export const fmt = {
  num(n) {
    if (n === null || n === undefined || Number.isNaN(n)) return '–';
    return Number(n).toLocaleString('en-US', { maximumFractionDigits: 0 });
  },
  rate(n) {
    if (n === null || n === undefined) return '–';
    const v = Number(n);
    if (v === 0) return '0/s';
    if (v < 10) return v.toFixed(1) + '/s';
    return Math.round(v).toLocaleString('en-US') + '/s';
  },
  bytes(n) {
    if (n === null || n === undefined) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = Number(n), i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? v : v.toFixed(v < 10 ? 1 : 0)) + ' ' + units[i];
  },
  ms(n) {
    if (n === null || n === undefined) return '–';
    const v = Number(n);
    if (v < 1000) return v + ' ms';
    if (v < 60_000) return (v / 1000).toFixed(v < 10_000 ? 1 : 0) + ' s';
    if (v < 3_600_000) return Math.round(v / 60_000) + ' min';
    if (v < 86_400_000) return (v / 3_600_000).toFixed(1) + ' h';
    return (v / 86_400_000).toFixed(1) + ' d';
  },
  // ago: a Unix-ms time as "5 min ago".
  ago(atMs) {
    if (!atMs) return '–';
    const d = Date.now() - Number(atMs);
    return d < 0 ? 'just now' : fmt.ms(Math.max(0, Math.round(d))) + ' ago';
  },
  time(atMs) {
    if (!atMs) return '–';
    return new Date(Number(atMs)).toLocaleString();
  },
  queue(topic, group) {
    return group && group !== 'default' ? topic + ' / ' + group : topic;
  },
};

// queueHref links a queue's detail page.
export function queueHref(topic, group) {
  return '/admin/queue' + q({ topic, group: group && group !== 'default' ? group : '' });
}

// ---- URL state

export const urlState = {
  get(key, fallback) {
    const v = new URLSearchParams(location.search).get(key);
    return v === null ? (fallback === undefined ? '' : fallback) : v;
  },
  // set writes key=value into the URL without a reload ("" removes it).
  set(key, value) {
    const u = new URL(location.href);
    if (value === '' || value === null || value === undefined) u.searchParams.delete(key);
    else u.searchParams.set(key, String(value));
    history.replaceState(history.state, '', u.pathname + u.search + u.hash);
  },
};

// ---- Feedback

// toast shows a short message in the corner (role=status, read aloud).
export function toast(message, kind) {
  const box = document.getElementById('toasts');
  const t = el('div', { class: 'toast' + (kind === 'error' ? ' error' : '') }, message);
  box.appendChild(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000);
}

// banner shows (or, with '', withdraws) a message in the page's alert
// line. Each owner (key; the page's own by default, live() one per family)
// sets and clears its own message, so one owner never wipes another's; the
// line shows every standing message and is rewritten only when that
// changes (role=alert: a rewrite is read out).
const bannerMessages = new Map();
export function banner(message, key) {
  const owner = key || 'page';
  if (message) bannerMessages.set(owner, message);
  else bannerMessages.delete(owner);
  const b = document.getElementById('banner');
  if (!b) return;
  const text = [...bannerMessages.values()].join(' · ');
  b.hidden = !text;
  setText(b, text);
}

// confirmDialog asks a yes/no question in a modal and answers a promise of
// the choice. label names the confirming button (e.g. "Delete queue").
// The focus starts on Cancel: one Enter never runs an irreversible action,
// and the focus goes back where it was when the dialog closes. Each question
// is answered exactly once: a question asked while another is pending
// answers that one first (with what the user chose if the dialog has
// already closed, else "no"), and a close event that arrives while the
// dialog is open again belongs to an answered question and is ignored.
let pendingConfirm = null; // {resolve, before}
let confirmWired = false;
export function confirmDialog(text, label) {
  const d = document.getElementById('confirm');
  if (!confirmWired) {
    confirmWired = true;
    d.addEventListener('close', () => {
      if (d.open || !pendingConfirm) return;
      const { resolve, before } = pendingConfirm;
      pendingConfirm = null;
      if (before && before.isConnected && typeof before.focus === 'function') before.focus();
      resolve(d.returnValue === 'ok');
    });
  }
  let before = document.activeElement;
  if (pendingConfirm) {
    const earlier = pendingConfirm;
    pendingConfirm = null;
    earlier.resolve(!d.open && d.returnValue === 'ok');
    before = earlier.before;
  }
  setText('confirm-text', text);
  setText('confirm-ok', label || 'Confirm');
  return new Promise((resolve) => {
    pendingConfirm = { resolve, before };
    d.returnValue = '';
    if (!d.open) d.showModal();
    const cancel = d.querySelector('button[value="cancel"]');
    if (cancel) cancel.focus();
  });
}

// errorText says what an error means for a person.
export function errorText(err) {
  if (err instanceof ApiError) {
    return (err.code ? err.code + ': ' : '') + err.message;
  }
  return String(err && err.message ? err.message : err);
}

// bindForm calls submit(values) when form is submitted; values are the
// named fields (numbers for type=number, booleans for checkboxes). The
// status line below the form (an element with class form-status inside it,
// made if absent) says what happened; the button is disabled meanwhile.
export function bindForm(form, submit) {
  let status = form.querySelector('.form-status');
  if (!status) {
    status = el('div', { class: 'form-status', role: 'status', 'aria-live': 'polite' });
    form.appendChild(status);
  }
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const values = {};
    for (const input of form.querySelectorAll('input[name], select[name], textarea[name]')) {
      if (input.type === 'checkbox') values[input.name] = input.checked;
      else if (input.type === 'number') values[input.name] = input.value === '' ? undefined : Number(input.value);
      else values[input.name] = input.value;
    }
    const buttons = form.querySelectorAll('button');
    // Disabling the focused button drops the focus to <body>: it comes back
    // once the answer is in.
    const focused = document.activeElement;
    buttons.forEach((b) => { b.disabled = true; });
    status.className = 'form-status';
    status.textContent = '';
    try {
      const msg = await submit(values, ev.submitter);
      status.className = 'form-status form-ok';
      status.textContent = msg || 'Done.';
    } catch (err) {
      status.className = 'form-status form-error';
      status.textContent = errorText(err);
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
      if (focused && focused.isConnected && form.contains(focused) && document.activeElement === document.body) focused.focus();
    }
  });
}

// ---- Tables

// table renders rows into container as a sortable, filterable table:
//   columns: [{key, label, num, sort (value for sorting), render (cell
//             content: string or node), title}]
//   opts: {id (prefix of the URL keys: <id>.sort, <id>.q), filter (true to
//          show a filter box), empty (text with no rows), rowKey}
// It answers {update(rows)}: call it with fresh rows on every tick; the
// sort and filter survive. Sort and filter are kept in the URL.
export function table(container, columns, opts) {
  opts = opts || {};
  const id = opts.id || 't';
  let rows = [];
  let sortKey = urlState.get(id + '.sort', opts.sort || '');
  let filter = urlState.get(id + '.q', '');
  const tools = el('div', { class: 'table-tools' });
  let filterInput = null;
  if (opts.filter) {
    filterInput = el('input', { type: 'search', placeholder: opts.filterPlaceholder || 'Filter…', 'aria-label': opts.filterLabel || 'Filter rows', value: filter, id: id + '-filter' });
    filterInput.addEventListener('input', () => { filter = filterInput.value; urlState.set(id + '.q', filter); draw(); });
    tools.appendChild(filterInput);
  }
  const count = el('span', { class: 'muted', 'aria-live': 'polite' });
  tools.appendChild(count);
  if (opts.tools) append(tools, [opts.tools]);
  const thead = el('thead');
  const tbody = el('tbody');
  const tableNode = el('table', { id: id + '-table' }, opts.caption ? el('caption', { class: 'muted' }, opts.caption) : null, thead, tbody);
  replace(container, tools, el('div', { class: 'table-wrap' }, tableNode));

  // The header is built once; a sort only moves its aria-sort marks, so a
  // keyboard user on a sort button keeps the focus across ticks.
  const ths = columns.map((c) => {
    const th = el('th', { scope: 'col', class: c.num ? 'num' : null });
    if (c.nosort) th.appendChild(document.createTextNode(c.label));
    else {
      th.appendChild(el('button', { type: 'button', class: 'sort', onclick: () => {
        sortKey = sortKey === c.key ? '-' + c.key : c.key;
        urlState.set(id + '.sort', sortKey);
        draw();
      } }, c.label));
    }
    return th;
  });
  replace(thead, el('tr', {}, ths));
  function header() {
    columns.forEach((c, i) => {
      if (c.nosort) return;
      const mark = sortKey === c.key ? 'ascending' : sortKey === '-' + c.key ? 'descending' : 'none';
      if (ths[i].getAttribute('aria-sort') !== mark) ths[i].setAttribute('aria-sort', mark);
    });
  }

  function value(row, c) {
    if (c.sort) return c.sort(row);
    const v = row[c.key];
    return v === null || v === undefined ? '' : v;
  }

  function draw() {
    header();
    let shown = rows;
    if (filter) {
      const needle = filter.toLowerCase();
      shown = rows.filter((r) => columns.some((c) => !c.nofilter && String(value(r, c)).toLowerCase().includes(needle)));
    }
    if (sortKey) {
      const key = sortKey.replace(/^-/, ''), dir = sortKey.startsWith('-') ? -1 : 1;
      const c = columns.find((x) => x.key === key);
      if (c) {
        shown = shown.slice().sort((a, b) => {
          const va = value(a, c), vb = value(b, c);
          if (typeof va === 'number' && typeof vb === 'number') return (va - vb) * dir;
          return String(va).localeCompare(String(vb)) * dir;
        });
      }
    }
    setText(count, filter ? shown.length + ' of ' + rows.length : rows.length + (rows.length === 1 ? ' row' : ' rows'));
    if (shown.length === 0) {
      replace(tbody, el('tr', {}, el('td', { colspan: columns.length, class: 'empty' }, filter ? 'No row matches the filter.' : (opts.empty || 'Nothing here yet.'))));
      return;
    }
    const trs = shown.map((r) => el('tr', { dataset: opts.rowKey ? { key: opts.rowKey(r) } : {} },
      columns.map((c) => el('td', { class: c.num ? 'num' : null, title: c.title ? c.title(r) : null }, c.render ? c.render(r) : (c.num ? fmt.num(r[c.key]) : r[c.key])))));
    // Rows drawn exactly as before stay as they are (a tick that changed
    // nothing moves no focus and no selection).
    const next = tbody.cloneNode(false);
    append(next, trs);
    if (next.isEqualNode(tbody)) return;
    // A focused link or control in a row that is redrawn: the focus moves
    // to the same control of the row with the same key, if it is still
    // shown.
    const a = document.activeElement;
    let spot = null;
    if (a && tbody.contains(a)) {
      const tr = a.closest('tr'), td = a.closest('td');
      const inCell = [...td.querySelectorAll('a, button, input, select, textarea')].indexOf(a);
      spot = { key: tr.dataset.key, row: [...tbody.children].indexOf(tr), cell: [...tr.children].indexOf(td), inCell };
    }
    tbody.replaceChildren(...next.childNodes);
    if (spot) {
      const tr = spot.key !== undefined ? [...tbody.children].find((r) => r.dataset.key === spot.key) : tbody.children[spot.row];
      const td = tr && tr.children[spot.cell];
      const target = td && td.querySelectorAll('a, button, input, select, textarea')[spot.inCell];
      if (target) target.focus();
    }
  }

  // A redraw while the user is on a row's button would replace it under
  // the keyboard: it waits until the focus leaves the table.
  let pending = false;
  tableNode.addEventListener('focusout', () => {
    if (pending) setTimeout(() => { if (pending && !busy()) { pending = false; draw(); } }, 0);
  });
  function busy() {
    const a = document.activeElement;
    return tableNode.contains(a) && a.tagName === 'BUTTON' && !a.classList.contains('sort');
  }
  draw();
  return {
    update(next) {
      rows = next || [];
      if (busy()) { pending = true; return; }
      pending = false;
      draw();
    },
    get rows() { return rows; },
  };
}

// ---- Charts

const palette = ['--c1', '--c2', '--c3', '--c4', '--c5'];

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// lineChart draws series into the <svg> svg: series is [{name, points:
// [[atMs, value], ...]}], opts {unit (suffix of the axis labels)}. Drawn
// again on every call; theme colours are read from the CSS variables.
export function lineChart(svg, series, opts) {
  opts = opts || {};
  const w = svg.clientWidth || 600, h = svg.clientHeight || 180;
  const padL = 46, padR = 8, padT = 8, padB = 20;
  svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  svg.setAttribute('role', 'img');
  let tMin = Infinity, tMax = -Infinity, vMax = 0;
  for (const s of series) for (const [t, v] of s.points) {
    tMin = Math.min(tMin, t); tMax = Math.max(tMax, t); vMax = Math.max(vMax, v);
  }
  if (!Number.isFinite(tMin)) { tMin = Date.now() - 60_000; tMax = Date.now(); }
  if (tMax === tMin) tMax = tMin + 1;
  vMax = niceMax(vMax);
  const x = (t) => padL + (t - tMin) / (tMax - tMin) * (w - padL - padR);
  const y = (v) => padT + (1 - v / vMax) * (h - padT - padB);
  const nodes = [];
  for (let i = 0; i <= 4; i++) {
    const v = vMax * i / 4, yy = y(v);
    nodes.push(el('line', { class: 'grid-line', x1: padL, x2: w - padR, y1: yy, y2: yy }));
    nodes.push(el('text', { x: padL - 6, y: yy + 3, 'text-anchor': 'end' }, shortNum(v) + (opts.unit || '')));
  }
  const span = tMax - tMin;
  for (let i = 0; i <= 3; i++) {
    const t = tMin + span * i / 3;
    nodes.push(el('text', { x: x(t), y: h - 5, 'text-anchor': i === 0 ? 'start' : i === 3 ? 'end' : 'middle' },
      new Date(t).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: span < 600_000 ? '2-digit' : undefined })));
  }
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    const pts = s.points.map(([t, v]) => x(t).toFixed(1) + ',' + y(v).toFixed(1)).join(' ');
    nodes.push(el('polyline', { class: 'line', points: pts, stroke: cssVar(palette[i % palette.length]), dataset: { series: s.name } }));
  });
  const label = opts.label || series.map((s) => s.name + ' ' + (s.points.length ? shortNum(s.points[s.points.length - 1][1]) : '–')).join(', ');
  replace(svg, el('title', {}, label), ...nodes);
  if (opts.legend) {
    replace(opts.legend, ...series.map((s, i) => el('span', {}, el('i', { style: null, dataset: { c: i } }), s.name)));
    opts.legend.querySelectorAll('i').forEach((node, i) => { node.style.background = cssVar(palette[i % palette.length]); });
  }
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function shortNum(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(1).replace(/\.0$/, '') + 'G';
  if (v >= 1e6) return (v / 1e6).toFixed(1).replace(/\.0$/, '') + 'M';
  if (v >= 1e3) return (v / 1e3).toFixed(1).replace(/\.0$/, '') + 'k';
  return String(Math.round(v * 10) / 10);
}

// sparkline answers a small <svg> of values (oldest first), labelled.
export function sparkline(values, label) {
  const w = 90, h = 22;
  const max = Math.max(1, ...values);
  const pts = values.map((v, i) => ((values.length < 2 ? w : i / (values.length - 1) * w)).toFixed(1) + ',' + (h - 2 - v / max * (h - 4)).toFixed(1)).join(' ');
  return el('svg', { class: 'spark', viewBox: `0 0 ${w} ${h}`, role: 'img', 'aria-label': label || 'trend' },
    el('title', {}, label || 'trend'), el('polyline', { points: pts || `0,${h - 2} ${w},${h - 2}` }));
}

// ---- Live data

// The families the events endpoint serves, with the endpoint polled for
// each when the stream fails. Other families (added by the API) poll their
// own endpoint: /admin/api/<family>.
const pollPaths = {
  overview: '/admin/api/overview',
  history: '/admin/api/history',
  attention: '/admin/api/attention',
  connections: '/admin/api/connections',
  subscriptions: '/admin/api/subscriptions',
  audit: '/admin/api/audit?limit=50',
};

let liveState = 'connecting';
const liveListeners = [];

function setLive(state) {
  liveState = state;
  const node = document.getElementById('live');
  if (node) {
    node.dataset.state = state;
    setText(node, { live: 'live', polling: 'polling', down: 'broker unreachable', connecting: 'connecting' }[state] || state);
  }
  liveListeners.forEach((fn) => fn(state));
}

// onLive calls fn(state) when the live state changes (live, polling, down).
export function onLive(fn) { liveListeners.push(fn); fn(liveState); }

// live calls onEvent(family, data) with each family's value: first once
// from the endpoints at once (so the page fills before the first tick),
// then at every tick of the event stream, or every pollMs from the
// endpoints when the stream fails. The history family delivers the whole
// history first and then one {sample} per tick, as the stream does.
// opts.onError(family, err) hears a family that failed (an ApiError from a
// poll, or the stream's `event: error` {family, code, message}); without
// it the failure goes to the page's banner, and the banner clears once
// that family answers again.
export function live(families, onEvent, opts) {
  opts = opts || {};
  const pollMs = opts.pollMs || 2000;
  let source = null, pollTimer = null, failures = 0;
  const failing = new Set();

  function failed(family, err) {
    if (opts.onError) { opts.onError(family, err); return; }
    failing.add(family);
    banner(family + ': ' + errorText(err), 'live:' + family);
  }
  function answered(family) {
    if (failing.delete(family)) banner('', 'live:' + family);
  }
  function deliver(family, data, how) {
    answered(family);
    onEvent(family, data, how);
  }

  async function pollOnce() {
    let ok = true;
    await Promise.all(families.map(async (f) => {
      try {
        const data = await get(pollPaths[f] || ('/admin/api/' + f));
        deliver(f, data, 'poll');
      } catch (err) {
        ok = false;
        if (err.status === 0) setLive('down');
        else failed(f, err);
      }
    }));
    return ok;
  }

  // Polling waits for each round's answers before the next is due (no
  // stacking behind a slow broker) and tries the stream again every
  // streamRetryMs, so a broker back from a restart is live again.
  const streamRetryMs = 30_000;
  function startPolling() {
    if (pollTimer) return;
    setLive('polling');
    const since = Date.now();
    const round = async () => {
      const ok = await pollOnce();
      if (!opts.noStream && window.EventSource && Date.now() - since >= streamRetryMs) {
        pollTimer = null;
        startStream();
        return;
      }
      setLive(ok ? 'polling' : 'down');
      pollTimer = setTimeout(round, pollMs);
    };
    pollTimer = setTimeout(round, pollMs);
  }

  function startStream() {
    if (!window.EventSource || opts.noStream) { startPolling(); return; }
    source = new EventSource('/admin/api/events' + q({ families: families.join(',') }));
    source.addEventListener('open', () => { failures = 0; setLive('live'); });
    for (const f of families) {
      source.addEventListener(f, (ev) => {
        let data;
        try { data = JSON.parse(ev.data); } catch (e) { console.warn('dashboard: a bad event', f, e); return; }
        deliver(f, data, 'event');
      });
    }
    source.addEventListener('dropped', () => { source.close(); startStream(); });
    source.addEventListener('error', (ev) => {
      // The server's `event: error` names a family that failed this tick
      // (the stream itself is fine); EventSource's own error event, a
      // broken connection, carries no data.
      if (ev.data) {
        try {
          const e = JSON.parse(ev.data);
          failed(e.family, new ApiError(503, e.code, e.message));
        } catch (e) { console.warn('dashboard: a bad error event', e); }
        return;
      }
      // EventSource retries by itself; after three failures in a row, poll
      // (the listener may have too many watchers, or a proxy cuts streams).
      failures++;
      if (source.readyState === EventSource.CLOSED || failures >= 3) {
        source.close();
        startPolling();
      } else {
        setLive('connecting');
      }
    });
  }

  pollOnce().then((ok) => { if (!ok && liveState === 'connecting') setLive('down'); });
  startStream();
  return { refresh: pollOnce };
}

// ---- Liveness favicon

// The favicon is a dot: green while /readyz says ready, amber while
// degraded or polling, red while the broker is unreachable or not ready.
function favicon(color) {
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#2357c6"/><path d="M9 23V9h13v3.4h-9v2.6h8v3.3h-8V23z" fill="#fff"/><circle cx="25" cy="25" r="6.5" fill="${color}" stroke="#fff" stroke-width="2"/></svg>`;
  const link = document.getElementById('favicon');
  if (link) link.href = 'data:image/svg+xml,' + encodeURIComponent(svg);
}

let health = '';
async function checkHealth() {
  let next = 'down';
  try {
    const resp = await fetch('/readyz', { credentials: 'same-origin' });
    const text = await resp.text();
    next = resp.ok ? (text.includes('degraded') ? 'degraded' : 'ready') : 'not_ready';
  } catch (e) { next = 'down'; }
  if (next !== health) {
    health = next;
    document.documentElement.dataset.health = next;
    favicon({ ready: '#1f9d55', degraded: '#e0a800', not_ready: '#d93025', down: '#d93025' }[next]);
  }
}

// ---- Theme

function applyTheme(theme) {
  document.documentElement.setAttribute('data-theme', theme);
  const b = document.getElementById('theme-toggle');
  if (b) {
    setText(b, theme === 'dark' ? 'Light theme' : 'Dark theme');
    b.setAttribute('aria-label', theme === 'dark' ? 'Switch to the light theme' : 'Switch to the dark theme');
  }
  document.dispatchEvent(new CustomEvent('themechange', { detail: theme }));
}

export function setTheme(theme) {
  try { localStorage.setItem('fibril-theme', theme); } catch (e) { /* storage off */ }
  applyTheme(theme);
}

// ---- Command palette

const commands = [];

// addCommand adds an entry to the palette: {label, kind, href} or {label,
// kind, run}. Pages add their own actions; queues are added at open.
export function addCommand(cmd) { commands.push(cmd); }

function pageCommands() {
  return [...document.querySelectorAll('nav.side a[data-nav]')].map((a) => ({ label: a.textContent.trim(), kind: 'page', href: a.getAttribute('href') }));
}

function setupPalette() {
  const dialog = document.getElementById('palette');
  const input = document.getElementById('palette-input');
  const list = document.getElementById('palette-list');
  const opener = document.getElementById('palette-open');
  if (!dialog || !input) return;
  let items = [], selected = 0, queues = [];

  function all() {
    return [
      ...pageCommands(),
      { label: 'Switch theme', kind: 'action', run: () => setTheme(document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark') },
      ...commands,
      ...queues.map((x) => ({ label: fmt.queue(x.topic, x.group), kind: 'queue', href: queueHref(x.topic, x.group) })),
    ];
  }
  function render() {
    const needle = input.value.trim().toLowerCase();
    items = all().filter((c) => !needle || c.label.toLowerCase().includes(needle) || c.kind.includes(needle)).slice(0, 50);
    selected = Math.min(selected, Math.max(0, items.length - 1));
    replace(list, ...items.map((c, i) => el('li', { role: 'option', id: 'palette-opt-' + i, 'aria-selected': i === selected ? 'true' : 'false',
      onclick: () => choose(i) }, el('span', {}, c.label), el('span', { class: 'kind' }, c.kind))));
    if (items.length === 0) list.appendChild(el('li', { role: 'option', 'aria-disabled': 'true', 'aria-selected': 'false' }, 'Nothing matches'));
    input.setAttribute('aria-activedescendant', items.length ? 'palette-opt-' + selected : '');
  }
  function choose(i) {
    const c = items[i];
    if (!c) return;
    dialog.close();
    if (c.href) location.assign(c.href);
    else if (c.run) c.run();
  }
  async function open() {
    input.value = '';
    selected = 0;
    render();
    dialog.showModal();
    input.focus();
    try {
      const data = await get('/admin/api/queues');
      queues = data.queues || [];
      render();
    } catch (e) { /* the palette still lists the pages */ }
  }
  input.addEventListener('input', () => { selected = 0; render(); });
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'ArrowDown') { selected = Math.min(items.length - 1, selected + 1); render(); ev.preventDefault(); }
    else if (ev.key === 'ArrowUp') { selected = Math.max(0, selected - 1); render(); ev.preventDefault(); }
    else if (ev.key === 'Enter') { choose(selected); ev.preventDefault(); }
  });
  dialog.addEventListener('click', (ev) => { if (ev.target === dialog) dialog.close(); });
  if (opener) opener.addEventListener('click', open);
  document.addEventListener('keydown', (ev) => {
    if ((ev.ctrlKey || ev.metaKey) && ev.key.toLowerCase() === 'k') {
      ev.preventDefault();
      if (dialog.open) dialog.close(); else open();
    }
  });
}

// ---- Start

// start wires what every page has (theme, palette, favicon, log-out) and
// then runs the page's own init. An init that throws shows its error in the
// banner rather than leaving a blank page.
export function start(init) {
  // The frame's controls (theme, log-out, palette, its Ctrl+K) are wired at
  // once: they are cheap, and a key pressed before the page's init must work.
  const wire = () => {
    applyTheme(document.documentElement.dataset.theme || 'light');
    const toggle = document.getElementById('theme-toggle');
    if (toggle) toggle.addEventListener('click', () => setTheme(document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark'));
    const logout = document.getElementById('logout');
    if (logout) logout.addEventListener('click', async () => {
      try { await post('/logout'); } finally { location.assign('/login'); }
    });
    setupPalette();
    if (location.pathname !== '/login') {
      checkHealth();
      setInterval(checkHealth, 5000);
    }
    document.documentElement.dataset.wired = '1'; // for the browser tests
  };
  const go = async () => {
    try {
      await init();
    } catch (err) {
      console.error(err);
      banner(errorText(err));
    }
  };
  // The skeleton paints first: the page's work starts after the first
  // frame (a module runs before DOMContentLoaded, and without this a heavy
  // init would hold the first paint back), or after 100 ms in a tab that
  // draws no frames (a background tab: its favicon still goes live).
  let started = false;
  const once = () => { if (!started) { started = true; go(); } };
  const later = () => { wire(); requestAnimationFrame(() => setTimeout(once, 0)); setTimeout(once, 100); };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', later);
  else later();
}
