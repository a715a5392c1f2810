// payload.js: how the Messages and Dead letters pages show one message's
// payload preview (GET /admin/api/messages?include_payload=true answers
// the first payload_limit_bytes bytes as base64). Everything here is built
// with el() and textContent: a payload is data, never markup.
import { el, fmt } from '../dash.js';

// hexBytesMax bounds the hex dump: 64 KiB is 4096 lines, about what a
// browser lays out without a stall; the rest of a bigger preview is cut
// with a note (the preview itself may be up to 1 MiB, the API's cap).
export const hexBytesMax = 64 * 1024;

// decodeBase64 answers the bytes of a base64 string.
export function decodeBase64(text) {
  const bin = atob(text || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// utf8 answers the bytes as text, or null when they are not UTF-8 or hold
// control characters other than tab, newline and carriage return (text
// that would not read as text). A preview cut inside a multi-byte
// character is still text: the cut tail (at most 3 bytes) is dropped.
export function utf8(bytes, truncated) {
  const decoder = new TextDecoder('utf-8', { fatal: true });
  let text = null;
  for (let cut = 0; cut <= (truncated ? 3 : 0) && cut <= bytes.length; cut++) {
    try { text = decoder.decode(bytes.subarray(0, bytes.length - cut)); break; } catch (e) { text = null; }
  }
  if (text === null) return null;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/.test(text)) return null;
  return text;
}

// isJSONType says whether a content type names JSON.
export function isJSONType(ct) {
  return /(^|\/|\+)json(;|$)/i.test(ct || '');
}

// isBinaryType says whether a content type names bytes that are not text
// whatever they decode as.
function isBinaryType(ct) {
  return /^(application\/(msgpack|octet-stream|protobuf|x-protobuf)|image\/|audio\/|video\/)/i.test(ct || '');
}

// autoView picks how to show a payload: json when the content type says
// JSON (or none is given) and the whole payload parses; text when it is
// UTF-8; hex otherwise.
export function autoView(bytes, contentType, truncated) {
  if (isBinaryType(contentType)) return 'hex';
  const text = utf8(bytes, truncated);
  if (text === null) return 'hex';
  if (!truncated && (isJSONType(contentType) || !contentType || /^text\/plain/i.test(contentType))) {
    const t = text.trim();
    if ((isJSONType(contentType) || t.startsWith('{') || t.startsWith('[')) && parses(t)) return 'json';
  }
  return 'text';
}

function parses(text) {
  try { JSON.parse(text); return true; } catch (e) { return false; }
}

// hexDump answers the classic 16-bytes-a-line dump: offset, bytes, and the
// printable ASCII of them.
export function hexDump(bytes) {
  const lines = [];
  const n = Math.min(bytes.length, hexBytesMax);
  for (let off = 0; off < n; off += 16) {
    const row = bytes.subarray(off, Math.min(off + 16, n));
    let hex = '', ascii = '';
    for (let i = 0; i < 16; i++) {
      if (i < row.length) {
        hex += row[i].toString(16).padStart(2, '0') + ' ';
        ascii += row[i] >= 0x20 && row[i] < 0x7f ? String.fromCharCode(row[i]) : '.';
      } else hex += '   ';
      if (i === 7) hex += ' ';
    }
    lines.push(off.toString(16).padStart(8, '0') + '  ' + hex + ' |' + ascii + '|');
  }
  return lines.join('\n');
}

// render answers the payload's nodes: a note of what is shown (the
// preview's size against the whole payload, with the cap asked for), and
// the payload as view ('auto', 'text', 'json', 'hex'). It also answers
// which view it used.
export function render(item, view, previewLimit) {
  const bytes = decodeBase64(item.payload_base64);
  const total = item.payload_len || 0;
  const truncated = bytes.length < total;
  const chosen = view && view !== 'auto' ? view : autoView(bytes, item.content_type, truncated);
  const notes = [];
  notes.push(truncated
    ? el('span', { class: 'badge warning', id: 'payload-truncated' }, 'truncated')
    : el('span', { class: 'badge ok' }, 'complete'));
  notes.push(' ', truncated
    ? 'Preview of the first ' + fmt.num(bytes.length) + ' of ' + fmt.num(total) + ' bytes (payload_limit_bytes=' + fmt.num(previewLimit) + '; the API caps a preview at 1 MiB).'
    : 'All ' + fmt.num(total) + ' bytes (previews are cut at payload_limit_bytes=' + fmt.num(previewLimit) + ').');
  let body, note = null;
  if (chosen === 'hex') {
    body = hexDump(bytes);
    if (bytes.length > hexBytesMax) note = 'The hex dump shows the first ' + fmt.num(hexBytesMax) + ' bytes of the preview.';
  } else {
    const text = utf8(bytes, truncated);
    if (text === null) {
      body = hexDump(bytes);
      note = 'Not UTF-8 text: shown as hex.';
    } else if (chosen === 'json') {
      try { body = JSON.stringify(JSON.parse(text), null, 2); } catch (e) {
        body = text;
        note = truncated ? 'A truncated preview is not whole JSON: shown as text.' : 'Not valid JSON (' + e.message + '): shown as text.';
      }
    } else body = text;
  }
  const shownAs = note && note.endsWith('hex.') ? 'hex' : note && note.includes('shown as text') ? 'text' : chosen;
  return {
    view: shownAs,
    nodes: [
      el('p', { class: 'muted payload-note' }, ...notes),
      note ? el('p', { class: 'muted payload-note' }, note) : null,
      el('pre', { class: 'payload', id: 'payload-body', tabindex: '0', 'aria-label': 'Payload as ' + shownAs, dataset: { view: shownAs } }, body),
    ],
  };
}

// previewChoices are the payload_limit_bytes an inspector offers (the
// API's default, and its 1 MiB cap).
export const previewChoices = [1024, 4096, 65536, 1048576];

function kvRow(k, v) { return [el('dt', {}, k), el('dd', {}, v)]; }

// details answers an inspector's nodes for one browsed item (asked with
// include_payload): its facts, a headers table and the payload with the
// choice of view and preview size. opts: {prefix (of the element ids),
// view, preview, onView(value), onPreview(value), facts (extra rows)}.
export function details(m, opts) {
  const p = opts.prefix;
  const facts = [
    ...(opts.facts || []).flatMap(([k, v]) => kvRow(k, v)),
    ...kvRow('State', m.state), ...kvRow('Deliveries', fmt.num(m.delivery_count)),
    ...kvRow('Size', fmt.num(m.payload_len) + ' bytes'), ...kvRow('Content type', m.content_type || 'none'),
    ...kvRow('Not before', m.not_before_ms ? fmt.time(m.not_before_ms) : '–'),
    ...kvRow('Lease deadline', m.lease_deadline_ms ? fmt.time(m.lease_deadline_ms) : '–'),
    ...kvRow('Expires', m.expires_at_ms ? fmt.time(m.expires_at_ms) : '–'),
  ];
  const headers = Object.entries(m.headers || {}).sort(([a], [b]) => a.localeCompare(b));
  const headerTable = headers.length
    ? el('div', { class: 'table-wrap' }, el('table', { id: p + '-headers' },
      el('caption', { class: 'muted' }, headers.length + (headers.length === 1 ? ' header' : ' headers') + ' (the API shows at most 256)'),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Key'), el('th', { scope: 'col' }, 'Value'))),
      el('tbody', {}, ...headers.map(([k, v]) => el('tr', {}, el('td', { class: 'mono' }, k), el('td', { class: 'mono' }, v))))))
    : el('p', { class: 'muted', id: p + '-headers-none' }, 'No headers.');
  const shown = render(m, opts.view, opts.preview);
  const viewSelect = el('select', { id: p + '-view', onchange: (ev) => opts.onView(ev.target.value) },
    ...['auto', 'text', 'json', 'hex'].map((v) => el('option', { value: v }, v === 'auto' ? 'Automatic (' + shown.view + ')' : v === 'json' ? 'JSON, pretty-printed' : v === 'hex' ? 'Hex dump' : 'Text')));
  viewSelect.value = opts.view || 'auto';
  const previewSelect = el('select', { id: p + '-preview', onchange: (ev) => opts.onPreview(Number(ev.target.value)) },
    ...previewChoices.map((n) => el('option', { value: String(n) }, fmt.bytes(n))));
  previewSelect.value = String(opts.preview);
  return [
    el('dl', { class: 'kv', id: p + '-facts' }, ...facts),
    el('h3', { class: 'msg-h3' }, 'Headers'),
    headerTable,
    el('h3', { class: 'msg-h3' }, 'Payload'),
    el('div', { class: 'form-row' },
      el('div', { class: 'field' }, el('label', { for: p + '-view' }, 'Show as'), viewSelect),
      el('div', { class: 'field' }, el('label', { for: p + '-preview' }, 'Preview size (payload_limit_bytes)'), previewSelect)),
    ...shown.nodes,
  ];
}
