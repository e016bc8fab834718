// Logs: a live tail of plugin stderr from `GET /api/logs?after=<seq>`
// (the daemon's bounded ring; lines it had to drop are counted there and
// shown here), filtered by plugin. Polled every second while shown; the page
// keeps the last MAX lines.

import { get, withQuery } from '../api.js';
import { h, fill, note, time, field } from '../dom.js';

const POLL_MS = 1000;
const MAX = 2000;

export function mount(main) {
  const plugin = h('select#log-plugin', h('option', { value: '' }, 'every plugin'));
  const follow = h('input#log-follow', { type: 'checkbox', checked: true });
  const message = h('div.message');
  const dropped = h('span.dropped#log-dropped');
  const tail = h('ol.log#log-lines', { 'aria-live': 'off', tabindex: '0', 'aria-label': 'Plugin stderr lines' });
  fill(
    main,
    h(
      'section.view#view-logs',
      h('div.bar', h('h2', 'Logs'), field('Plugin', plugin), h('label', follow, ' follow'),
        h('button', { type: 'button', onclick: () => tail.replaceChildren() }, 'Clear'), dropped),
      message,
      tail,
    ),
  );
  let after = null;
  let timer = null;
  let stopped = false;
  let generation = 0;

  get('/api/plugins')
    .then((list) => {
      for (const p of list || []) plugin.appendChild(h('option', { value: p.name }, p.name));
    })
    .catch(() => {});

  async function poll() {
    const mine = generation;
    try {
      const reply = await get(withQuery('/api/logs', { plugin: plugin.value, after }));
      if (mine !== generation) return;
      const lines = Array.isArray(reply) ? reply : (reply && reply.lines) || [];
      if (reply && (reply.dropped || reply.missed)) {
        const lost = [reply.dropped ? `${reply.dropped} dropped by the daemon` : '', reply.missed ? `${reply.missed} missed` : ''];
        dropped.textContent = `Lines lost: ${lost.filter(Boolean).join(', ')}`;
      }
      const items = [];
      for (const l of lines) {
        if (after !== null && l.seq <= after) continue;
        after = l.seq;
        items.push(
          h('li', { dataset: { seq: l.seq, plugin: l.plugin } },
            h('span.ts', time(l.ts_ms ?? l.ts)), h('span.who', `${l.plugin}${l.hook ? ` ${l.hook}` : ''}`), h('span.line', l.line)),
        );
      }
      if (reply && typeof reply.next === 'number') after = Math.max(after ?? 0, reply.next);
      if (items.length) {
        tail.append(...items);
        while (tail.childElementCount > MAX) tail.firstElementChild.remove();
        if (follow.checked) tail.scrollTop = tail.scrollHeight;
      }
      if (!tail.childElementCount) fill(tail, h('li.empty', 'No stderr lines yet.'));
      else tail.querySelector('li.empty')?.remove();
      note(message, '');
    } catch (e) {
      note(message, `Cannot read the logs: ${e.message}`, 'bad');
    }
    if (!stopped && mine === generation) timer = setTimeout(poll, POLL_MS);
  }

  function restart() {
    generation++;
    clearTimeout(timer);
    after = null;
    tail.replaceChildren();
    poll();
  }

  plugin.addEventListener('change', restart);
  poll();
  return () => {
    stopped = true;
    generation++;
    clearTimeout(timer);
  };
}
