// Health: per plugin and hook, the last minutes of `GET /api/health/series`
// (calls, failures, fallbacks, p50, p99 per sample), the breaker and worker
// respawns now; polled every few seconds while shown.

import { get, withQuery } from '../api.js';
import { h, fill, badge, note, ms, field } from '../dom.js';
import { spark } from '../chart.js';

const POLL_MS = 3000;

export function mount(main) {
  const minutes = h('select#health-minutes', [5, 10, 15].map((m) => h('option', { value: m }, `${m} min`)));
  const message = h('div.message');
  const updated = h('span.updated', { 'aria-live': 'off' });
  const grid = h('div.health#health-series');
  fill(
    main,
    h('section.view#view-health', h('div.bar', h('h2', 'Health'), field('Window', minutes), updated), message, grid),
  );
  let timer = null;
  let stopped = false;

  async function poll() {
    try {
      const reply = await get(withQuery('/api/health/series', { minutes: minutes.value }));
      render(reply);
      note(message, '');
      updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      note(message, `Cannot read the health series: ${e.message}`, 'bad');
    }
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  }

  function render(reply) {
    const series = seriesOf(reply);
    if (!series.length) {
      fill(grid, h('p.empty', 'No hook has been called yet.'));
      return;
    }
    const rows = series.map((s) => {
      const samples = s.samples || [];
      const last = samples[samples.length - 1] || {};
      const totals = s.totals || {};
      const total = (key) => totals[key] ?? samples.reduce((n, x) => n + (Number(x[key]) || 0), 0);
      const pts = (key) => samples.map((x) => [tOf(x), Number(pick(x, key)) || 0]);
      const breaker = s.breaker || 'closed';
      return h(
        'tr',
        { dataset: { plugin: s.plugin, hook: s.hook } },
        h('th', { scope: 'row' }, s.plugin, h('span.hook', ` ${s.hook}`)),
        h('td.num', total('calls')),
        h('td.num', total('failures')),
        h('td.num', total('fallbacks')),
        h('td.num', ms(pick(last, 'p50') ?? pick(totals, 'p50'))),
        h('td.num', ms(pick(last, 'p99') ?? pick(totals, 'p99'))),
        h('td', badge(breaker, breaker === 'closed' ? 'good' : breaker === 'open' ? 'bad' : 'warn')),
        h('td.num', s.respawns ?? 0),
        h('td.chart', spark(pts('calls'), { label: `${s.plugin} ${s.hook} calls` })),
        h('td.chart', spark(pts('failures'), { label: `${s.plugin} ${s.hook} failures`, tone: 'bad' })),
        h('td.chart', spark(pts('p99'), { label: `${s.plugin} ${s.hook} p99`, unit: ' ms', tone: 'warn' })),
      );
    });
    fill(
      grid,
      h(
        'div.scroll',
        h(
          'table.health-table',
          h('caption.visually-hidden', 'Calls per plugin and hook over the window'),
          h('thead', h('tr', ['Plugin / hook', 'Calls', 'Failures', 'Fallbacks', 'p50', 'p99', 'Breaker', 'Worker respawns',
            'Calls per sample', 'Failures per sample', 'p99 over time'].map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', rows),
        ),
      ),
    );
  }

  minutes.addEventListener('change', () => {
    clearTimeout(timer);
    poll();
  });
  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function seriesOf(reply) {
  if (!reply) return [];
  const list = Array.isArray(reply) ? reply : reply.series || [];
  const respawns = (reply && reply.respawns) || {};
  const breakers = (reply && reply.breakers) || {};
  return list.map((s) => ({
    ...s,
    respawns: s.worker_respawns ?? s.respawns ?? (typeof respawns[s.plugin] === 'object' ? respawns[s.plugin][s.hook] : respawns[s.plugin]),
    breaker: s.breaker ?? (typeof breakers[s.plugin] === 'object' ? breakers[s.plugin][s.hook] : breakers[s.plugin]),
  }));
}

function pick(sample, key) {
  return sample[key] ?? sample[`${key}_ms`];
}

function tOf(sample) {
  const t = sample.t_ms ?? sample.t ?? sample.ts ?? 0;
  return typeof t === 'number' ? t : Date.parse(t) || 0;
}
