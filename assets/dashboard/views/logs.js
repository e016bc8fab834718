// Logs: a live tail of plugin stderr, filtered by plugin. First the lines
// the daemon's bounded ring holds (`GET /api/logs`, which also asks for the
// token and counts the lines the ring let go), then each new line as it is
// written, read from `GET /api/logs/stream` with `fetch` (server-sent
// events; EventSource cannot send the token). A stream that ends or fails is
// opened again after the last line shown, so nothing is shown twice; lines
// a stream had to skip are counted. The page keeps the last MAX lines.

import { get, withQuery, token } from '../api.js';
import { h, fill, note, time, field } from '../dom.js';

const MAX = 2000;
const RETRY_MS = 1000;

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
  let after = 0;
  let lost = { ring: 0, missed: 0, skipped: 0 };
  let run = null;

  get('/api/plugins')
    .then((list) => {
      for (const p of list || []) plugin.appendChild(h('option', { value: p.name }, p.name));
    })
    .catch(() => {});

  function showLost() {
    const parts = [
      lost.ring ? `${lost.ring} dropped by the daemon` : '',
      lost.missed ? `${lost.missed} missed` : '',
      lost.skipped ? `${lost.skipped} skipped by the stream` : '',
    ].filter(Boolean);
    dropped.textContent = parts.length ? `Lines lost: ${parts.join(', ')}` : '';
  }

  function add(lines) {
    const items = [];
    for (const l of lines) {
      if (typeof l.seq !== 'number' || l.seq <= after) continue;
      after = l.seq;
      items.push(
        h('li', { dataset: { seq: l.seq, plugin: l.plugin } },
          h('span.ts', time(l.ts_ms ?? l.ts)), h('span.who', `${l.plugin}${l.hook ? ` ${l.hook}` : ''}`), h('span.line', l.line)),
      );
    }
    if (items.length) {
      tail.querySelector('li.empty')?.remove();
      tail.append(...items);
      while (tail.childElementCount > MAX) tail.firstElementChild.remove();
      if (follow.checked) tail.scrollTop = tail.scrollHeight;
    }
    if (!tail.childElementCount) fill(tail, h('li.empty', 'No stderr lines yet.'));
  }

  /** One stream's events, until it ends, fails or `signal` aborts it. */
  async function stream(signal) {
    const headers = { Accept: 'text/event-stream' };
    const t = token();
    if (t) headers.Authorization = `Bearer ${t}`;
    const response = await fetch(withQuery('/api/logs/stream', { plugin: plugin.value, after }), { headers, signal, cache: 'no-store' });
    if (!response.ok || !response.body) throw new Error(`the stream answered ${response.status}`);
    note(message, '');
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = 'message';
        let data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) event = line.slice(6).trim();
          else if (line.startsWith('data:')) data += (data ? '\n' : '') + line.slice(5).replace(/^ /, '');
        }
        if (!data) continue;
        let parsed;
        try {
          parsed = JSON.parse(data);
        } catch {
          continue;
        }
        if (event === 'line') add([parsed]);
        else if (event === 'dropped') {
          lost.skipped += Number(parsed.dropped) || 0;
          showLost();
        }
      }
    }
  }

  /** The held lines, then the stream, opened again until stopped. */
  function start() {
    const control = new AbortController();
    const mine = { control, stopped: false };
    (async () => {
      while (!mine.stopped) {
        try {
          // Through `api`: a 401 asks for the token here, once.
          const reply = await get(withQuery('/api/logs', { plugin: plugin.value, after, limit: 500 }), { signal: control.signal });
          if (mine.stopped) return;
          lost.ring = Number(reply && reply.dropped) || 0;
          lost.missed += Number(reply && reply.missed) || 0;
          showLost();
          add((reply && reply.lines) || []);
          await stream(control.signal);
        } catch (e) {
          if (mine.stopped || e.name === 'AbortError') return;
          note(message, `Cannot read the logs: ${e.message}; trying again.`, 'bad');
        }
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      }
    })();
    return () => {
      mine.stopped = true;
      control.abort();
    };
  }

  function restart() {
    if (run) run();
    after = 0;
    lost = { ring: 0, missed: 0, skipped: 0 };
    showLost();
    tail.replaceChildren();
    run = start();
  }

  plugin.addEventListener('change', restart);
  restart();
  return () => run && run();
}
