// Turns: pick an agent of `GET /api/agents` and see its recent turns from
// `GET /api/turns` (the daemon's bounded turn log): recalled memories with
// their sources, the assembled window with token counts and what was
// trimmed, compactions with their summary, tool results before and after
// transform, and each hook's timing.

import { get, withQuery } from '../api.js';
import { h, fill, badge, note, ms, time, field } from '../dom.js';

export function mount(main) {
  const agent = h('select#turn-agent', h('option', { value: '' }, 'choose an agent'));
  const limit = h('select#turn-limit', [5, 10, 32].map((n) => h('option', { value: n }, String(n))));
  limit.value = '10';
  const message = h('div.message');
  const list = h('div.turns#turn-list');
  fill(
    main,
    h(
      'section.view#view-turns',
      h('div.bar', h('h2', 'Turns'), field('Agent', agent), field('Turns', limit),
        h('button', { type: 'button', onclick: () => loadAgents().then(loadTurns) }, 'Refresh')),
      message,
      list,
    ),
  );

  async function loadAgents() {
    try {
      const reply = await get('/api/agents');
      const agents = (reply && reply.agents) || [];
      const chosen = agent.value;
      fill(agent, h('option', { value: '' }, agents.length ? 'choose an agent' : 'no agent has a turn yet'),
        agents.map((a) => h('option', { value: a.agent_id }, `${a.agent_id} (${a.turns} turn${a.turns === 1 ? '' : 's'})`)));
      if (chosen && agents.some((a) => a.agent_id === chosen)) agent.value = chosen;
      else if (agents.length) agent.value = agents[0].agent_id;
      note(message, '');
    } catch (e) {
      note(message, `Cannot list the agents: ${e.message}`, 'bad');
    }
  }

  async function loadTurns() {
    if (!agent.value) return fill(list);
    try {
      const reply = await get(withQuery('/api/turns', { agent: agent.value, limit: limit.value }));
      const turns = (reply && reply.turns) || [];
      fill(
        list,
        reply && reply.dropped ? h('p.note.warn', `${reply.dropped} turn events were not recorded (the log was full).`) : null,
        turns.length ? turns.map(turnView) : h('p.empty', 'No turns recorded for this agent.'),
      );
    } catch (e) {
      note(message, `Cannot read the turns: ${e.message}`, 'bad');
    }
  }

  agent.addEventListener('change', loadTurns);
  limit.addEventListener('change', loadTurns);
  loadAgents().then(loadTurns);
  return () => {};
}

function turnView(t) {
  const took = t.ended_ms && t.started_ms ? ` · ${ms(t.ended_ms - t.started_ms)}` : '';
  return h(
    'article.turn',
    { dataset: { turn: t.turn } },
    h('h3', `Turn ${t.turn}`, h('span.when', ` ${time(t.started_ms)}${took}`), t.truncated ? badge('truncated', 'warn') : null),
    t.message ? h('p.message', h('strong', 'Message: '), t.message) : null,
    section('Recalled memories', t.memories, (m) =>
      h('li.memory', h('span.content', m.content), ' ',
        h('span.sources', `from ${(m.sources && m.sources.length ? m.sources : [m.source]).join(', ')}`))),
    windowView(t.window),
    section('Compactions', t.compactions, (c) =>
      h('li', `${c.messages_in} → ${c.messages_out} messages, ${c.tokens_in} → ${c.tokens_out} tokens`,
        c.summary ? h('blockquote', c.summary) : null)),
    section('Tool results', t.tool_results, (r) =>
      h('li', h('strong', r.tool_name || 'tool'),
        h('div.compare', h('div', h('h5', 'before'), h('pre', r.before ?? '')),
          h('div', h('h5', 'after transform'), h('pre', r.after ?? ''))))),
    hooksView(t.hooks),
  );
}

function section(title, items, item) {
  if (!items || !items.length) return h('details', h('summary', `${title} (none)`));
  return h('details', { open: true }, h('summary', `${title} (${items.length})`), h('ul', items.map(item)));
}

function windowView(w) {
  if (!w) return h('details', h('summary', 'Window (no assemble this turn)'));
  const rows = (w.messages || []).map((m) =>
    h('tr', h('td', m.role), h('td.num', m.tokens), h('td.preview', m.preview ?? '')));
  const trimmed = (w.trimmed || []).map((m) =>
    h('tr.trimmed', h('td', m.role), h('td.num', m.tokens), h('td.preview', m.preview ?? '')));
  return h(
    'details',
    { open: true },
    h('summary', `Window: ${w.tokens_out ?? '?'} of ${w.window_tokens ?? '?'} tokens, ${w.messages_out ?? '?'} messages` +
      ` (${w.messages_in ?? '?'} in, ${w.tokens_in ?? '?'} tokens; system prompt ${w.system_prompt_tokens ?? '?'})`),
    h('table.window',
      h('thead', h('tr', h('th', { scope: 'col' }, 'Role'), h('th', { scope: 'col' }, 'Tokens'), h('th', { scope: 'col' }, 'Start'))),
      h('tbody', rows)),
    trimmed.length
      ? [h('h5', `Trimmed (${trimmed.length})`), h('table.window.trimmed', h('tbody', trimmed))]
      : h('p.quiet', 'Nothing was trimmed.'),
  );
}

function hooksView(hooks) {
  if (!hooks || !hooks.length) return h('details', h('summary', 'Hook timings (none)'));
  return h(
    'details',
    { open: true },
    h('summary', `Hook timings (${hooks.length})`),
    h('table.timings',
      h('thead', h('tr', ['Hook', 'Plugin', 'Elapsed', 'Outcome'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', hooks.map((x) => h('tr', h('td', x.hook), h('td', x.plugin), h('td.num', ms(x.elapsed_ms)),
        h('td', badge(x.outcome, x.outcome === 'success' ? 'good' : x.outcome === 'failure' ? 'bad' : 'warn')))))),
  );
}
