// payload.js: how the Messages and Dead letters pages show one message's
// payload preview (GET /admin/api/messages?include_payload=true answers
// the first payload_limit_bytes bytes as base64). Everything here is built
// with el() and textContent: a payload is data, never markup.
import { el, fmt, replace } from '../dash.js';

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
  // ignoreBOM: a byte order mark is kept in the text (and said above the
  // payload), not dropped where the reader cannot see that it was there.
  const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
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
    // JSON's own whitespace only: String.trim would also drop a BOM.
    const t = text.replace(/^[ \t\n\r]+/, '');
    if ((isJSONType(contentType) || t.startsWith('{') || t.startsWith('[')) && isJSON(text)) return 'json';
  }
  return 'text';
}

// isJSON says whether text is one whole JSON value (RFC 8259).
export function isJSON(text) {
  try { scanJSON(text, false); return true; } catch (e) { return false; }
}

// prettyJSON re-indents JSON text by two spaces a level and answers it;
// every literal (string with its escapes, number, true/false/null) is kept
// byte for byte as written. JSON.parse then JSON.stringify would not:
// 12345678901234567890 became 12345678901234567000, 1.50 became 1.5,
// "\u003c" became "<" and a repeated key kept only its last value, so the
// page showed a payload that is not the one stored. It throws a
// SyntaxError saying where the text is not JSON, and a RangeError past
// prettyCharsMax (a deep nesting indents quadratically).
export function prettyJSON(text) {
  return scanJSON(text, true);
}

// prettyCharsMax bounds prettyJSON's answer (16 M characters).
export const prettyCharsMax = 16 * 1024 * 1024;

// The tokens of JSON, as sticky expressions (one match at lastIndex).
const jsonString = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
const jsonNumber = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

// scanJSON checks text (and, with pretty, answers it re-indented) with a
// loop over the tokens and a stack of the open containers: no recursion,
// so a deep nesting cannot overflow the call stack.
function scanJSON(text, pretty) {
  const out = [];
  let outChars = 0;
  const emit = (s) => {
    if (!pretty) return;
    outChars += s.length;
    if (outChars > prettyCharsMax) throw new RangeError('the pretty-printed text would be over ' + prettyCharsMax + ' characters');
    out.push(s);
  };
  const stack = []; // '{' or '['
  const indents = [];
  const newline = () => indents[stack.length] || (indents[stack.length] = '\n' + '  '.repeat(stack.length));
  // expect: 'value', 'value-or-]' (after '['), 'key-or-}' (after '{'),
  // 'key' (after ',' in an object), ':' (after a key), 'next' (after a
  // value: ',' or the container's end, or the end of the text).
  let expect = 'value';
  let i = 0;
  const fail = (what) => {
    throw new SyntaxError(what + ' at character ' + (i + 1) + (i < text.length ? ' (' + JSON.stringify(text.slice(i, i + 12)) + ')' : ''));
  };
  const token = (re) => {
    re.lastIndex = i;
    const m = re.exec(text);
    return m && m[0].length ? m[0] : null;
  };
  for (;;) {
    for (let ch = text.charCodeAt(i); ch === 32 || ch === 10 || ch === 13 || ch === 9; ch = text.charCodeAt(++i));
    if (i >= text.length) {
      if (expect === 'next' && stack.length === 0) return out.join('');
      fail(stack.length ? 'the text ends inside ' + (stack[stack.length - 1] === '{' ? 'an object' : 'an array') : 'no JSON value');
    }
    const c = text[i];
    if (expect === 'next') {
      if (stack.length === 0) fail('text after the JSON value');
      const open = stack[stack.length - 1];
      if (c === ',') { i++; emit(',' + newline()); expect = open === '{' ? 'key' : 'value'; continue; }
      if (c === (open === '{' ? '}' : ']')) { i++; stack.pop(); emit(newline() + c); continue; }
      fail(open === '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    if (expect === ':') {
      if (c !== ':') fail("expected ':'");
      i++; emit(': '); expect = 'value'; continue;
    }
    if (expect === 'key-or-}' || expect === 'value-or-]') {
      const close = expect === 'key-or-}' ? '}' : ']';
      if (c === close) { i++; stack.pop(); emit(close); expect = 'next'; continue; }
      emit(newline());
      expect = close === '}' ? 'key' : 'value';
    }
    if (expect === 'key') {
      const s = c === '"' ? token(jsonString) : null;
      if (s === null) fail(c === '"' ? 'a bad string' : 'expected a key (a string)');
      i += s.length; emit(s); expect = ':'; continue;
    }
    // expect === 'value'
    if (c === '{' || c === '[') {
      i++; emit(c); stack.push(c); expect = c === '{' ? 'key-or-}' : 'value-or-]'; continue;
    }
    let v = null;
    if (c === '"') v = token(jsonString);
    else if (c === '-' || (c >= '0' && c <= '9')) v = token(jsonNumber);
    else if (c === 't' || c === 'f' || c === 'n') v = [c === 't' ? 'true' : c === 'f' ? 'false' : 'null'].find((lit) => text.startsWith(lit, i)) || null;
    if (v === null) fail(c === '"' ? 'a bad string' : 'expected a value');
    i += v.length; emit(v); expect = 'next';
  }
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
      try { body = prettyJSON(text); } catch (e) {
        body = text;
        note = truncated ? 'A truncated preview is not whole JSON: shown as text.'
          : e instanceof RangeError ? 'Too deeply nested to pretty-print (' + e.message + '): shown as text.'
            : 'Not valid JSON (' + e.message + '): shown as text.';
      }
    } else body = text;
    if (text !== null && text.startsWith('\ufeff')) {
      notes.push(' ', el('span', { id: 'payload-bom' }, 'The payload starts with a byte order mark (EF BB BF), kept in the text below.'));
    }
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
export const previewDefault = 4096;

// previewSize reads the preview size from the URL's value: a whole number
// of bytes from 1 to 1 MiB (the API's bounds), else the default (a hand-
// edited "preview=abc" would send NaN, which the API refuses).
export function previewSize(raw) {
  const n = Number(raw);
  return raw !== '' && Number.isInteger(n) && n >= 1 && n <= 1048576 ? n : previewDefault;
}

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
    ...[...new Set([...previewChoices, opts.preview])].sort((a, b) => a - b).map((n) => el('option', { value: String(n) }, fmt.bytes(n))));
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

// replaceKeepingFocus is replace() for an inspector redrawn under the
// reader: a control of it that had the focus (the view or preview select,
// rebuilt with the same id) has it again afterwards, rather than the focus
// falling to the page's body.
export function replaceKeepingFocus(box, nodes) {
  const had = box.contains(document.activeElement) ? document.activeElement.id : '';
  replace(box, ...nodes);
  const again = had ? document.getElementById(had) : null;
  if (again && box.contains(again)) again.focus();
}
