// Memory: search an agent's built-in memory (`GET /api/memory/{agent}`) and
// delete an entry (`DELETE /api/memory/{agent}/{id}`) after a confirmation
// that shows it.

import { api, get, withQuery, enc } from '../api.js';
import { h, fill, note, time, confirmAction, field } from '../dom.js';

export function mount(main) {
  const agents = h('datalist#memory-agents');
  const agent = h('input#memory-agent', { type: 'text', list: 'memory-agents', required: true, autocomplete: 'off',
    placeholder: 'a1' });
  const q = h('input#memory-q', { type: 'search', placeholder: 'empty: most recent first', autocomplete: 'off' });
  const message = h('div.message');
  const results = h('div#memory-results');
  const form = h('form.memory-search', field('Agent', agent), field('Search', q), h('button.primary', { type: 'submit' }, 'Search'));
  fill(main, h('section.view#view-memory', h('div.bar', h('h2', 'Memory')), form, agents, message, results));

  get('/api/agents')
    .then((reply) => {
      const list = (reply && reply.agents) || [];
      fill(agents, list.map((a) => h('option', { value: a.agent_id })));
      if (!agent.value && list.length) agent.value = list[0].agent_id;
    })
    .catch(() => {});

  async function search() {
    const who = agent.value.trim();
    if (!who) return;
    try {
      const reply = await get(withQuery(`/api/memory/${enc(who)}`, { q: q.value.trim(), limit: 100 }));
      const memories = (reply && reply.memories) || [];
      note(message, `${memories.length} shown of ${reply.total ?? memories.length} for ${who}.`);
      fill(
        results,
        memories.length
          ? h('ul.memories', memories.map((m) => item(who, m)))
          : h('p.empty', 'No memory matches.'),
      );
    } catch (e) {
      note(message, `Cannot search the memory: ${e.message}`, 'bad');
    }
  }

  function item(who, m) {
    const remove = h('button.danger', { type: 'button', dataset: { deleteMemory: m.id } }, 'Delete…');
    const li = h(
      'li.memory',
      { dataset: { id: m.id } },
      h('p.content', m.content),
      h('p.meta', [`id ${m.id}`, m.source ? `from ${m.source}` : '', m.tags && m.tags.length ? `tags ${m.tags.join(', ')}` : '',
        m.peer_id ? `peer ${m.peer_id}` : '', m.created_ms ? time(m.created_ms) : ''].filter(Boolean).join(' · ')),
      remove,
    );
    remove.addEventListener('click', async () => {
      const ok = await confirmAction(`Delete this memory of ${who}?`, [m.content, `id ${m.id}: it is gone for good.`], 'Delete');
      if (!ok) return remove.focus();
      try {
        await api('DELETE', `/api/memory/${enc(who)}/${enc(m.id)}`);
        note(message, `Deleted memory ${m.id}.`, 'good');
        const next = li.nextElementSibling || li.previousElementSibling;
        li.remove();
        (next ? next.querySelector('button') : q).focus();
      } catch (e) {
        note(message, `Cannot delete: ${e.message}`, 'bad');
      }
    });
    return li;
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    search();
  });
  return () => {};
}
