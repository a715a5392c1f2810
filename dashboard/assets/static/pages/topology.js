// Topology: the node (name, advertise address, owner id, standalone) and
// every queue and stream with its partitions and their owner, from GET
// /admin/api/topology, as a list (?view=list) or a diagram (?view=diagram,
// an SVG drawn with el()), filtered by kind and name (kept in the URL).
// The topology is read every topologyPollMs and on Refresh: it is no
// events family, and each read is one listing of the catalogue. The
// overview family (live) adds how many partitions are loaded.
import { start, live, get, setText, fmt, el, replace, table, urlState, queueHref, banner, errorText, $ } from '../dash.js';

const topologyPollMs = 10_000;
// diagramRowsMax bounds the entries drawn, diagramPartsMax the partition
// marks drawn per entry (the rest are counted in a label): a catalogue of
// thousands stays a readable, light picture; the list shows them all.
const diagramRowsMax = 120;
const diagramPartsMax = 48;

let rows = [];
let node = null;
let listTable = null;

function rowsOf(topo) {
  const out = [];
  for (const x of topo.queues || []) {
    out.push({ kind: 'queue', topic: x.topic, group: x.group || '', name: fmt.queue(x.topic, x.group), partitions: x.partitions.length,
      owners: [...new Set(x.partitions.map((p) => p.owner))] });
  }
  for (const x of topo.streams || []) {
    out.push({ kind: 'stream', topic: x.topic, group: '', name: x.topic, partitions: x.partitions.length,
      owners: [...new Set(x.partitions.map((p) => p.owner))] });
  }
  return out;
}

function shown() {
  const kind = urlState.get('kind'), needle = urlState.get('q').toLowerCase();
  return rows.filter((r) => (!kind || r.kind === kind) && (!needle || r.name.toLowerCase().includes(needle)));
}

function shortOwner(id) { return id ? id.slice(0, 8) + '…' : '–'; }

function showNode(n) {
  replace($('#tp-node'), ...[
    ['Name', n.name, 'tp-node-name'],
    ['Advertise address', n.advertise_address, 'tp-node-addr'],
    ['Owner id', n.owner_id, 'tp-node-owner'],
    ['Standalone', n.standalone ? 'yes: this node owns every partition' : 'no: partitions are spread over the cluster', 'tp-node-standalone'],
  ].flatMap(([k, v, id]) => [el('dt', {}, k), el('dd', { id }, v === undefined || v === '' ? '–' : el('code', {}, String(v)))]));
}

function showTotals() {
  const queues = rows.filter((r) => r.kind === 'queue'), streams = rows.filter((r) => r.kind === 'stream');
  const sum = (xs) => xs.reduce((a, r) => a + r.partitions, 0);
  setText('tp-queues', fmt.num(queues.length));
  setText('tp-queue-parts', fmt.num(sum(queues)) + ' partitions');
  setText('tp-streams', fmt.num(streams.length));
  setText('tp-stream-parts', fmt.num(sum(streams)) + ' partitions');
  setText('tp-partitions', fmt.num(sum(rows)));
  const owners = new Set(rows.flatMap((r) => r.owners));
  if (node) owners.add(node.owner_id);
  setText('tp-owners', fmt.num(owners.size));
  setText('tp-mode', node && node.standalone ? 'standalone' : 'cluster');
}

function draw() {
  const view = urlState.get('view', 'list') === 'diagram' ? 'diagram' : 'list';
  $('#tp-view-list').setAttribute('aria-pressed', String(view === 'list'));
  $('#tp-view-diagram').setAttribute('aria-pressed', String(view === 'diagram'));
  $('#tp-list').hidden = view !== 'list';
  $('#tp-diagram').hidden = view !== 'diagram';
  const list = shown();
  setText('tp-count', list.length === rows.length ? fmt.num(rows.length) + ' shown' : fmt.num(list.length) + ' of ' + fmt.num(rows.length) + ' shown');
  if (view === 'list') listTable.update(list);
  else drawDiagram(list);
}

// drawDiagram draws the node on the left and one row per queue or stream
// on the right, linked to it, each with a mark per partition.
function drawDiagram(list) {
  const box = $('#tp-diagram');
  if (list.length === 0) {
    replace(box, el('p', { class: 'empty' }, rows.length ? 'No queue or stream matches the filter.' : 'No queue or stream is declared yet.'));
    return;
  }
  const drawn = list.slice(0, diagramRowsMax);
  const w = Math.max(640, box.clientWidth || 900);
  const rowH = 30, top = 12, nodeW = 190, nodeH = 64, entryX = nodeW + 90, labelW = 220, part = 10, gap = 3;
  const h = Math.max(nodeH + 2 * top, top * 2 + drawn.length * rowH);
  const nodeY = top;
  const kids = [el('title', { id: 'tp-diagram-title' }, 'Node ' + (node ? node.name : '') + ' and ' + drawn.length + ' of its queues and streams with their partitions')];
  const nodeMidY = nodeY + nodeH / 2;
  drawn.forEach((r, i) => {
    const y = top + i * rowH + rowH / 2;
    kids.push(el('path', { class: 'tp-link', d: `M${16 + nodeW},${nodeMidY} C${16 + nodeW + 45},${nodeMidY} ${entryX - 45},${y} ${entryX},${y}` }));
  });
  kids.push(el('g', { class: 'tp-node-box' },
    el('title', {}, 'node ' + (node ? node.name + ', owner ' + node.owner_id : '')),
    el('rect', { x: 16, y: nodeY, width: nodeW, height: nodeH, rx: 8 }),
    el('text', { x: 28, y: nodeY + 24, class: 'tp-strong' }, node ? node.name : 'node'),
    el('text', { x: 28, y: nodeY + 44 }, node ? node.advertise_address : '')));
  const partsX = entryX + labelW;
  const partsRoom = Math.max(1, Math.floor((w - partsX - 70) / (part + gap)));
  drawn.forEach((r, i) => {
    const y = top + i * rowH;
    const marks = Math.min(r.partitions, diagramPartsMax, partsRoom);
    const g = el('g', { class: 'tp-entry', dataset: { kind: r.kind, name: r.name, partitions: r.partitions } },
      el('title', {}, r.kind + ' ' + r.name + ': ' + r.partitions + (r.partitions === 1 ? ' partition' : ' partitions') + ', owner ' + r.owners.map(shortOwner).join(', ')),
      el('rect', { class: 'tp-entry-box ' + r.kind, x: entryX, y: y + 3, width: labelW - 10, height: rowH - 6, rx: 5 }),
      el('text', { x: entryX + 8, y: y + rowH / 2 + 4 }, (r.kind === 'stream' ? '≋ ' : '▤ ') + clipLabel(r.name)));
    for (let p = 0; p < marks; p++) {
      g.appendChild(el('rect', { class: 'tp-part ' + r.kind, x: partsX + p * (part + gap), y: y + rowH / 2 - part / 2, width: part, height: part, rx: 2 }));
    }
    g.appendChild(el('text', { x: partsX + marks * (part + gap) + 6, y: y + rowH / 2 + 4, class: 'tp-count' },
      marks < r.partitions ? '+' + (r.partitions - marks) + ' (' + r.partitions + ')' : String(r.partitions)));
    kids.push(g);
  });
  const svg = el('svg', { class: 'tp-svg', viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: 'img', 'aria-labelledby': 'tp-diagram-title' }, ...kids);
  const legend = el('p', { class: 'muted' }, 'Each square is a partition, owned by ' + (node ? shortOwner(node.owner_id) : 'this node') + ':',
    el('span', { class: 'tp-key queue' }), '▤ queue', el('span', { class: 'tp-key stream' }), '≋ stream');
  replace(box, svg, legend, drawn.length < list.length
    ? el('p', { class: 'muted' }, 'Drawn: the first ' + drawn.length + ' of ' + list.length + '; filter to narrow, or use the list.') : null);
}

function clipLabel(s) { return s.length > 28 ? s.slice(0, 27) + '…' : s; }

async function refresh() {
  try {
    const topo = await get('/admin/api/topology');
    node = topo.node;
    rows = rowsOf(topo);
    showNode(node);
    showTotals();
    draw();
    banner('');
    setText('tp-updated', 'read ' + new Date().toLocaleTimeString());
  } catch (err) {
    banner('The topology could not be read: ' + errorText(err));
  }
}

start(async () => {
  listTable = table($('#tp-list'), [
    { key: 'kind', label: 'Kind', render: (r) => el('span', { class: 'badge' }, r.kind) },
    { key: 'name', label: 'Name', render: (r) => (r.kind === 'queue' ? el('a', { href: queueHref(r.topic, r.group) }, r.name) : el('code', {}, r.name)) },
    { key: 'partitions', label: 'Partitions', num: true },
    { key: 'owner', label: 'Owner', sort: (r) => r.owners.join(','), render: (r) => el('code', { title: r.owners.join(', ') }, r.owners.map(shortOwner).join(', ')) },
  ], { id: 'tpl', empty: 'No queue or stream matches.', rowKey: (r) => r.kind + ':' + r.name });

  const filter = $('#tp-filter'), kind = $('#tp-kind');
  filter.value = urlState.get('q');
  kind.value = urlState.get('kind');
  filter.addEventListener('input', () => { urlState.set('q', filter.value); draw(); });
  kind.addEventListener('change', () => { urlState.set('kind', kind.value); draw(); });
  $('#tp-view-list').addEventListener('click', () => { urlState.set('view', 'list'); draw(); });
  $('#tp-view-diagram').addEventListener('click', () => { urlState.set('view', 'diagram'); draw(); });
  $('#tp-refresh').addEventListener('click', refresh);
  window.addEventListener('resize', () => { if (urlState.get('view') === 'diagram') draw(); });

  live(['overview'], (family, ov) => {
    const q = ov.queues || {};
    setText('tp-loaded', fmt.num(q.loaded_partitions) + ' loaded now');
  });
  await refresh();
  setInterval(refresh, topologyPollMs);
});
