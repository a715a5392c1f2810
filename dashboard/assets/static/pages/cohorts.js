// Consumer groups: every cohort the Node holds (GET /admin/api/cohorts),
// each with its generation and a grid of members by partitions: which
// partitions each member subscribes to and which it owns now. Live over the
// events stream (family cohorts). The filter is kept in the URL (co.q).
import { start, live, setText, fmt, el, replace, urlState, queueHref, get, banner, errorText, $, update } from '../dash.js';

// gridMax: past this many partitions a cohort lists owned partitions as
// ranges instead of a grid (a 4096-column grid helps nobody).
const gridMax = 64;

let cohorts = [];
let filter = urlState.get('co.q', '');

// ranges writes [0,1,2,5] as "0-2, 5".
function ranges(ps) {
  const out = [];
  for (let i = 0; i < ps.length; i++) {
    let j = i;
    while (j + 1 < ps.length && ps[j + 1] === ps[j] + 1) j++;
    out.push(i === j ? String(ps[i]) : ps[i] + '-' + ps[j]);
    i = j;
  }
  return out.length ? out.join(', ') : 'none';
}

const shortID = (id) => id.slice(0, 8);
const cohortKey = (c) => c.topic + '/' + (c.group || 'default') + '/' + c.consumer_group;

function memberGrid(c, idx) {
  const n = c.partition_count;
  const head = el('tr', {}, el('th', { scope: 'col' }, 'Member'), el('th', { scope: 'col', class: 'num' }, 'Session'),
    el('th', { scope: 'col', class: 'num' }, 'Owns'), el('th', { scope: 'col', class: 'num' }, 'Target'),
    n <= gridMax
      ? Array.from({ length: n }, (_, p) => el('th', { scope: 'col', class: 'num co-p' }, 'P' + p))
      : el('th', { scope: 'col' }, 'Owned partitions'));
  const rows = c.members.map((m) => {
    const owned = new Set(m.owned_partitions), subscribed = new Set(m.subscribed_partitions);
    const cells = n <= gridMax
      ? Array.from({ length: n }, (_, p) => {
        const state = owned.has(p) ? 'owned' : subscribed.has(p) ? 'subscribed' : 'none';
        return el('td', { class: 'co-cell ' + state, dataset: { partition: p, state },
          title: 'partition ' + p + ': ' + (state === 'owned' ? 'owned' : state === 'subscribed' ? 'subscribed, owned by another member' : 'not subscribed') },
        state === 'owned' ? '●' : state === 'subscribed' ? '○' : '');
      })
      : el('td', { class: 'mono' }, ranges(m.owned_partitions));
    return el('tr', { dataset: { member: m.member_id } },
      el('td', {}, el('code', { title: m.member_id }, shortID(m.member_id))),
      el('td', { class: 'num' }, String(m.session)),
      el('td', { class: 'num co-owns' }, fmt.num(m.owned_partitions.length)),
      el('td', { class: 'num' }, m.consumer_target === null ? '–' : fmt.num(m.consumer_target)),
      cells);
  });
  return el('div', { class: 'table-wrap' }, el('table', { class: 'co-grid', id: 'co-grid-' + idx },
    el('caption', { class: 'muted' }, '● owns the partition now · ○ subscribed, another member owns it'),
    el('thead', {}, head), el('tbody', {}, rows)));
}

function cohortPanel(c, idx) {
  const ownedBy = new Set(c.members.flatMap((m) => m.owned_partitions));
  const unowned = [];
  for (let p = 0; p < c.partition_count; p++) if (!ownedBy.has(p)) unowned.push(p);
  const titleID = 'co-title-' + idx;
  return el('section', { class: 'panel co-cohort', 'aria-labelledby': titleID, dataset: { cohort: cohortKey(c) } },
    el('header', {},
      el('h2', { id: titleID }, c.consumer_group),
      el('span', { class: 'muted' }, 'on queue '), el('a', { href: queueHref(c.topic, c.group) }, fmt.queue(c.topic, c.group)),
      el('span', { class: 'spacer' }),
      c.pending ? el('span', { class: 'badge warning' }, 'rebalancing') : null,
      el('span', { class: 'badge' }, 'generation ', el('span', { class: 'co-gen' }, String(c.generation)))),
    el('dl', { class: 'kv co-facts' },
      el('dt', {}, 'Members'), el('dd', { class: 'co-member-count' }, fmt.num(c.members.length)),
      el('dt', {}, 'Partitions'), el('dd', {}, fmt.num(c.partition_count)),
      el('dt', {}, 'Without an owner'), el('dd', { class: 'co-unowned' }, unowned.length ? ranges(unowned) : 'none')),
    c.members.length ? memberGrid(c, idx) : el('p', { class: 'muted' }, 'No member holds a subscription; the group goes once its partitions are released.'));
}

function matches(c) {
  if (!filter) return true;
  const needle = filter.toLowerCase();
  return [c.topic, c.group, c.consumer_group, ...c.members.map((m) => m.member_id)].some((s) => String(s).toLowerCase().includes(needle));
}

function draw() {
  setText('co-count', fmt.num(cohorts.length));
  setText('co-members', fmt.num(cohorts.reduce((n, c) => n + c.members.length, 0)));
  const owned = cohorts.reduce((n, c) => n + c.members.reduce((k, m) => k + m.owned_partitions.length, 0), 0);
  const total = cohorts.reduce((n, c) => n + c.partition_count, 0);
  setText('co-owned', fmt.num(owned));
  setText('co-unowned', 'of ' + fmt.num(total) + ' in these queues');
  $('#co-none').hidden = cohorts.length > 0;
  const shown = cohorts.filter(matches);
  setText('co-shown', filter ? shown.length + ' of ' + cohorts.length : '');
  update($('#co-list'), ...shown.map(cohortPanel),
    cohorts.length && !shown.length ? el('p', { class: 'panel empty' }, 'No consumer group matches the filter.') : null);
}

start(() => {
  const input = $('#co-filter');
  input.value = filter;
  input.addEventListener('input', () => { filter = input.value; urlState.set('co.q', filter); draw(); });
  live(['cohorts'], (_, data) => {
    cohorts = data.cohorts || [];
    draw();
  });
  // live() polls quietly; a view the API refuses is said in the banner.
  get('/admin/api/cohorts').then(() => banner(''), (err) => banner('Consumer groups: ' + errorText(err)));
});
