// Overview: totals and rates, the rate chart over the history ring, the
// attention items (each linking to where it is fixed), the node's facts and
// the newest operator actions. Live over the events stream: overview,
// history, attention, audit.
import { start, live, setText, fmt, el, lineChart, $, update } from '../dash.js';

// history holds the samples the chart draws (the API keeps 360, 30 min).
let samples = [];
const samplesMax = 360;

// fixAt says where an attention item is dealt with.
function fixAt(item) {
  switch (item.kind) {
    case 'quarantined': return ['/admin/diagnostics', 'repair'];
    case 'cert_expiring': return ['/admin/security', 'certificate'];
    case 'disk_low': return ['/admin/diagnostics', 'storage'];
    case 'no_consumer':
    case 'backlog_rising': {
      const [topic, group] = item.subject.split('/');
      return ['/admin/queue?topic=' + encodeURIComponent(topic) + (group && group !== 'default' ? '&group=' + encodeURIComponent(group) : ''), 'queue'];
    }
    default: return [null, null];
  }
}

function showOverview(ov) {
  const t = ov.totals || {};
  setText('ov-published', fmt.num(t.published));
  setText('ov-delivered', fmt.num(t.delivered));
  setText('ov-acked', fmt.num(t.acked));
  setText('ov-redelivered', fmt.num(t.redelivered));
  setText('ov-dead-lettered', fmt.num(t.dead_lettered));
  const r = ov.rates_per_s || {};
  setText('ov-publish-rate', fmt.rate(r.publish) + ' now');
  setText('ov-deliver-rate', fmt.rate(r.deliver) + ' now');
  setText('ov-ack-rate', fmt.rate(r.ack) + ' now');
  setText('ov-connections', fmt.num(ov.connections));
  setText('ov-subscriptions', fmt.num(ov.subscriptions) + ' subscriptions');
  const m = ov.memory || {};
  setText('ov-rss', fmt.bytes(m.rss_bytes));
  setText('ov-heap', 'Go heap ' + fmt.bytes(m.heap_bytes));
  if (ov.disk) {
    setText('ov-disk-free', fmt.bytes(ov.disk.free_bytes));
    setText('ov-disk-used', fmt.bytes(ov.disk.used_bytes) + ' used of ' + fmt.bytes(ov.disk.total_bytes));
  }
  const q = ov.queues || {};
  const rows = [
    ['Node', ov.node], ['Version', ov.version], ['Data directory', ov.data_dir],
    ['Up for', fmt.ms(ov.uptime_ms) + ' (since ' + fmt.time(ov.started_at_ms) + ')'],
    ['Queues declared', q.declared === undefined ? '–' : fmt.num(q.declared)],
    ['Partitions loaded', fmt.num(q.loaded_partitions)],
    ...(ov.listeners || []).map((l) => ['Listener ' + l.kind, l.addr]),
  ];
  update($('#ov-node'), ...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v === undefined || v === '' ? '–' : v)]));
}

// rates derives the per-second series the chart draws from the samples:
// the broker's own rates for publish, deliver and ack, and the differences
// of the totals for redelivered and dead-lettered.
function drawRates() {
  const series = [
    { name: 'published', points: samples.map((s) => [s.at_ms, s.publish_rate]) },
    { name: 'delivered', points: samples.map((s) => [s.at_ms, s.deliver_rate]) },
    { name: 'acked', points: samples.map((s) => [s.at_ms, s.ack_rate]) },
    { name: 'redelivered', points: perSecond('redelivered') },
    { name: 'dead-lettered', points: perSecond('dead_lettered') },
  ];
  lineChart($('#ov-rates'), series, { unit: '/s', legend: $('#ov-rates-legend') });
  setText('ov-samples', samples.length + (samples.length === 1 ? ' sample' : ' samples') + ' of 5 s');
}

function perSecond(key) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].at_ms - samples[i - 1].at_ms) / 1000;
    out.push([samples[i].at_ms, dt > 0 ? Math.max(0, samples[i][key] - samples[i - 1][key]) / dt : 0]);
  }
  return out;
}

function showAttention(items) {
  setText('ov-attention-count', items.length === 0 ? 'all clear' : items.length + (items.length === 1 ? ' item' : ' items'));
  $('#ov-attention-count').className = 'badge ' + (items.some((i) => i.severity === 'critical') ? 'critical' : items.length ? 'warning' : 'ok');
  if (items.length === 0) {
    update($('#ov-attention'), el('li', { class: 'muted' }, 'Nothing needs attention.'));
    return;
  }
  update($('#ov-attention'), ...items.map((item) => {
    const [href, what] = fixAt(item);
    return el('li', { dataset: { kind: item.kind } },
      el('span', { class: 'badge ' + item.severity }, item.severity),
      el('span', {}, el('strong', {}, item.kind.replace(/_/g, ' ')), ' ', el('code', {}, item.subject), ': ', item.message,
        ' ', el('span', { class: 'muted' }, '(since ' + fmt.ago(item.since_ms) + ')')),
      href ? el('a', { href }, 'go to ' + what) : null);
  }));
}

function showAudit(entries) {
  const newest = (entries || []).slice(0, 6);
  if (newest.length === 0) {
    update($('#ov-audit'), el('li', { class: 'muted' }, 'No operator action since the broker started.'));
    return;
  }
  update($('#ov-audit'), ...newest.map((e) => el('li', {},
    el('span', { class: 'badge ' + (e.outcome === 'ok' ? 'ok' : 'warning') }, e.outcome),
    el('span', {}, el('code', {}, e.action), ' ', e.target || '', ' ', el('span', { class: 'muted' }, 'by ' + e.actor + ', ' + fmt.ago(e.at_ms))))));
}

start(() => {
  live(['overview', 'history', 'attention', 'audit'], (family, data) => {
    switch (family) {
      case 'overview': showOverview(data); break;
      case 'history':
        if (data.samples) samples = data.samples.slice(-samplesMax);
        else if (data.sample && (samples.length === 0 || samples[samples.length - 1].at_ms < data.sample.at_ms)) {
          samples.push(data.sample);
          if (samples.length > samplesMax) samples.shift();
        }
        drawRates();
        break;
      case 'attention': showAttention(data.items || []); break;
      case 'audit': showAudit(data.entries); break;
    }
  });
  document.addEventListener('themechange', drawRates);
  window.addEventListener('resize', drawRates);
});
