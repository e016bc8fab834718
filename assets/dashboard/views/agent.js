// Agent loop: each plugin's config as a form generated from its schema
// (types checked here, then by the daemon; saving fires `config_changed`),
// the triggers (list, create, delete, fired), the vfs tree (symbolic nodes
// marked, content viewable), the tools and the plugin owning each, and the
// FaustBot plugins' own frontend panels (in sandboxed frames: they never see
// the token).

import { api, get, withQuery, enc } from '../api.js';
import { h, fill, badge, note, pretty, confirmAction, field, parseJson } from '../dom.js';

export function mount(main) {
  const configs = h('div#config-forms');
  const triggers = h('div#triggers');
  const vfs = h('div#vfs');
  const tools = h('div#tools');
  const panels = h('div#panels');
  const sections = [
    ['config', 'Config', configs],
    ['triggers', 'Triggers', triggers],
    ['vfs', 'Virtual filesystem', vfs],
    ['tools', 'Tools', tools],
    ['panels', 'Plugin panels', panels],
  ];
  fill(
    main,
    h(
      'section.view#view-agent',
      h('div.bar', h('h2', 'Agent loop'),
        h('nav.sub', { 'aria-label': 'Agent loop sections' },
          sections.map(([id, title]) => h('a', { href: `#agent/${id}`, onclick: (e) => jump(e, id) }, title)))),
      sections.map(([id, title, body]) => h(`section.part#agent-${id}`, { 'aria-labelledby': `agent-${id}-title` },
        h(`h3#agent-${id}-title`, { tabindex: '-1' }, title), body)),
    ),
  );
  const stops = [loadConfigs(configs), loadTriggers(triggers), loadVfs(vfs), loadTools(tools), loadPanels(panels)];
  const wanted = location.hash.split('/')[1];
  if (wanted) requestAnimationFrame(() => document.getElementById(`agent-${wanted}-title`)?.scrollIntoView());
  return () => stops.forEach((s) => s && s());
}

function jump(e, id) {
  e.preventDefault();
  history.replaceState(null, '', `#agent/${id}`);
  const heading = document.getElementById(`agent-${id}-title`);
  heading.scrollIntoView();
  heading.focus({ preventScroll: true });
}

// ---- config forms ----

function loadConfigs(root) {
  get('/api/agent/plugins')
    .then(async (list) => {
      const loaded = (list || []).filter((p) => p.state !== 'error');
      const failed = (list || []).filter((p) => p.state === 'error');
      const forms = await Promise.all(loaded.map(configForm));
      fill(
        root,
        forms.filter(Boolean).length ? forms : h('p.empty', 'No agent-loop plugin declares a config.'),
        failed.map((p) => h('p.note.bad', `${p.name} did not start: ${p.error || 'unknown error'}`)),
      );
    })
    .catch((e) => note(root, `Cannot list the agent-loop plugins: ${e.message}`, 'bad'));
}

async function configForm(p) {
  let config;
  try {
    config = await get(`/api/plugins/${enc(p.name)}/config`);
  } catch (e) {
    return h('p.note.bad', `${p.name}: ${e.message}`);
  }
  const schema = (config && config.schema) || [];
  if (!schema.length) return null;
  let values = (config && config.values) || {};
  const out = h('div.form-result', { 'aria-live': 'polite' });
  const inputs = schema.map((f) => configInput(p.name, f, values[f.key] ?? f.default));
  const save = h('button.primary', { type: 'submit' }, 'Save');
  const form = h('form.config', { dataset: { configOf: p.name }, novalidate: true },
    h('fieldset', h('legend', p.name), inputs.map((i) => i.row)), h('div.buttons', save), out);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const changed = {};
    let bad = null;
    for (const i of inputs) {
      const v = i.read();
      if (v instanceof Error) {
        bad = bad || i;
        i.complain(v.message);
        continue;
      }
      i.complain('');
      if (JSON.stringify(v) !== JSON.stringify(values[i.key] ?? i.field.default)) changed[i.key] = v;
    }
    if (bad) {
      note(out, 'Not saved: fix the fields marked.', 'bad');
      return bad.focus();
    }
    if (!Object.keys(changed).length) return note(out, 'Nothing changed.', 'info');
    save.disabled = true;
    try {
      const reply = await api('PUT', `/api/plugins/${enc(p.name)}/config`, { values: changed });
      values = { ...values, ...((reply && reply.values) || changed) };
      note(out, `Saved ${Object.keys(changed).join(', ')}.`, 'good');
    } catch (err) {
      note(out, `Not saved: ${err.message}`, 'bad');
    } finally {
      save.disabled = false;
    }
  });
  return form;
}

/** One field of a schema as a form control, with its own check of the type. */
function configInput(plugin, f, value) {
  const id = `cfg-${plugin}-${f.key}`.replace(/[^A-Za-z0-9_-]/g, '_');
  const error = h('span.field-error', { id: `${id}-error`, 'aria-live': 'polite' });
  let control;
  if (f.type === 'bool') control = h('input', { type: 'checkbox', id, checked: !!value });
  else if (f.type === 'text' || f.type === 'json') {
    control = h('textarea', { id, rows: f.type === 'json' ? 4 : 3, spellcheck: 'false' });
    control.value = f.type === 'json' ? (value === null || value === undefined ? '' : pretty(value)) : value ?? '';
  } else {
    control = h('input', { type: 'text', id, inputmode: f.type === 'int' ? 'numeric' : f.type === 'float' ? 'decimal' : undefined });
    control.value = value === null || value === undefined ? '' : String(value);
  }
  control.dataset.configKey = f.key;
  control.setAttribute('aria-describedby', `${id}-error${f.description ? ` ${id}-help` : ''}`);
  const label = h('label', { for: id }, f.label || f.key, h('span.type', ` (${f.type})`));
  const row = h('div.field', { dataset: { key: f.key } }, label, control,
    f.description ? h('small', { id: `${id}-help` }, f.description) : null, error);
  const read = () => {
    const raw = control.value;
    switch (f.type) {
      case 'bool':
        return control.checked;
      case 'int':
        if (raw.trim() === '') return null;
        return /^[+-]?\d+$/.test(raw.trim()) ? Number(raw.trim()) : new Error(`${f.key} expects an integer, not "${raw}"`);
      case 'float':
        if (raw.trim() === '') return null;
        return raw.trim() !== '' && Number.isFinite(Number(raw)) ? Number(raw) : new Error(`${f.key} expects a number, not "${raw}"`);
      case 'json': {
        if (raw.trim() === '') return null;
        const v = parseJson(raw);
        return v instanceof Error ? new Error(`${f.key}: ${v.message}`) : v;
      }
      default:
        return raw;
    }
  };
  const complain = (text) => {
    error.textContent = text;
    control.setAttribute('aria-invalid', text ? 'true' : 'false');
  };
  return { key: f.key, field: f, row, read, complain, focus: () => control.focus() };
}

// ---- triggers ----

function loadTriggers(root) {
  const list = h('div.trigger-list');
  const fired = h('div.fired');
  const out = h('div.form-result', { 'aria-live': 'polite' });
  const id = h('input', { type: 'text', required: true, autocomplete: 'off', name: 'id' });
  const type = h('select', { name: 'type' }, ['interval', 'datetime', 'event'].map((t) => h('option', { value: t }, t)));
  const when = h('input', { type: 'text', required: true, autocomplete: 'off', name: 'when' });
  const whenField = field('Every (seconds)', when);
  const priority = h('input', { type: 'text', inputmode: 'numeric', value: '0', name: 'priority' });
  const payload = h('textarea', { rows: 3, spellcheck: 'false', name: 'payload' });
  payload.value = '{}';
  const setWhen = () => {
    whenField.querySelector('label').textContent = { interval: 'Every (seconds)', datetime: 'At (RFC 3339 time)', event: 'Event name' }[type.value];
  };
  type.addEventListener('change', setWhen);
  const form = h('form.trigger-create', { novalidate: true }, field('Id', id), field('Type', type), whenField, field('Priority', priority),
    field('Payload (JSON)', payload), h('div.buttons', h('button.primary', { type: 'submit' }, 'Create trigger')), out);
  fill(root, list, h('h4', 'New trigger'), form, h('h4', 'Fired'), fired);

  async function refresh() {
    try {
      const all = (await get('/api/triggers')) || [];
      fill(
        list,
        all.length
          ? h('div.scroll', h('table.triggers',
            h('thead', h('tr', ['Id', 'Type', 'When', 'Priority', 'Owner', 'Payload', ''].map((c) => h('th', { scope: 'col' }, c)))),
            h('tbody', all.map((t) => h('tr', { dataset: { trigger: t.id } },
              h('th', { scope: 'row' }, t.id), h('td', t.type), h('td', t.interval_seconds ? `every ${t.interval_seconds} s` : t.target || t.event_name || ''),
              h('td.num', t.priority ?? 0), h('td', t.plugin || 'host'),
              h('td', h('code', JSON.stringify(t.payload ?? {}))),
              h('td', h('button.danger', { type: 'button', onclick: () => remove(t.id) }, 'Delete…')))))))
          : h('p.empty', 'No triggers.'),
      );
      const done = (await get('/api/triggers/fired')) || [];
      fill(fired, done.length
        ? h('ol.fired-list', done.slice(-50).reverse().map((f) =>
          h('li', h('strong', f.id || 'trigger'), ` (${f.type || '?'}) `, h('code', JSON.stringify(f.payload ?? {})))))
        : h('p.empty', 'Nothing fired yet.'));
    } catch (e) {
      note(list, `Cannot read the triggers: ${e.message}`, 'bad');
    }
  }

  async function remove(tid) {
    if (!(await confirmAction(`Delete trigger ${tid}?`, [`The trigger ${tid} stops firing and is removed.`], 'Delete'))) return;
    try {
      await api('DELETE', `/api/triggers/${enc(tid)}`);
      note(out, `Deleted ${tid}.`, 'good');
    } catch (e) {
      note(out, e.message, 'bad');
    }
    refresh();
  }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { id: id.value.trim(), type: type.value };
    if (!body.id) return note(out, 'The trigger needs an id.', 'bad');
    const w = when.value.trim();
    if (type.value === 'interval') {
      if (!/^\d+$/.test(w) || Number(w) < 1) return note(out, 'Every: a whole number of seconds, 1 or more.', 'bad');
      body.interval_seconds = Number(w);
    } else if (type.value === 'datetime') {
      if (Number.isNaN(Date.parse(w))) return note(out, 'At: a time like 2026-12-24T18:00:00Z.', 'bad');
      body.target = w;
    } else {
      if (!w) return note(out, 'The event name is required.', 'bad');
      body.event_name = w;
    }
    if (!/^[+-]?\d+$/.test(priority.value.trim())) return note(out, 'Priority: an integer.', 'bad');
    body.priority = Number(priority.value.trim());
    const p = parseJson(payload.value || '{}');
    if (p instanceof Error) return note(out, `Payload: ${p.message}`, 'bad');
    body.payload = p;
    try {
      await api('POST', '/api/triggers', body);
      note(out, `Created ${body.id}.`, 'good');
      refresh();
    } catch (err) {
      note(out, `Not created: ${err.message}`, 'bad');
    }
  });
  refresh();
  const timer = setInterval(refresh, 3000);
  return () => clearInterval(timer);
}

// ---- vfs ----

function loadVfs(root) {
  const tree = h('ul.tree', { role: 'tree', 'aria-label': 'Virtual filesystem' });
  const content = h('div.vfs-content', h('p.quiet', 'Choose a file to see its content.'));
  fill(root, h('div.vfs-split', h('div.vfs-tree', tree), content));

  async function list(path, into) {
    try {
      const reply = await get(withQuery('/api/vfs', { path }));
      const entries = reply.entries || (reply.children || []).map((name) => ({ name, kind: 'unknown' }));
      fill(into, entries.length ? entries.map((e) => node(path, e)) : h('li.quiet', { role: 'none' }, 'empty'));
    } catch (e) {
      fill(into, h('li.note.bad', { role: 'none' }, e.message));
    }
  }

  function node(dir, e) {
    const path = dir === '/' ? `/${e.name}` : `${dir}/${e.name}`;
    const isDir = e.kind === 'dir';
    const children = h('ul', { role: 'group', hidden: true });
    const mark = e.kind === 'symbolic' ? badge(`symbolic · ${e.owner}`, 'warn') : null;
    const button = h('button.tree-item', { type: 'button', dataset: { path, kind: e.kind },
      'aria-expanded': isDir ? 'false' : undefined }, isDir ? '▸ ' : '', e.name, isDir ? '/' : '', mark ? ' ' : '', mark);
    button.addEventListener('click', async () => {
      if (isDir) {
        const open = button.getAttribute('aria-expanded') === 'true';
        button.setAttribute('aria-expanded', String(!open));
        button.firstChild.textContent = open ? '▸ ' : '▾ ';
        children.hidden = open;
        if (!open) await list(path, children);
        return;
      }
      fill(content, h('p.quiet', `Reading ${path}…`));
      try {
        const reply = await get(withQuery('/api/vfs', { path }));
        if (reply.children) {
          fill(content, h('p.quiet', `${path} is a directory.`));
        } else {
          fill(content, h('h4', path, reply.symbolic ? [' ', badge(`computed by ${reply.owner}`, 'warn')] : null),
            h('pre.vfs-text', reply.content ?? ''));
        }
      } catch (err) {
        fill(content, h('p.note.bad', `${path}: ${err.message}`));
      }
    });
    return h('li', { role: 'treeitem' }, button, children);
  }

  list('/', tree);
  return null;
}

// ---- tools ----

function loadTools(root) {
  get('/api/tools')
    .then((list) => {
      fill(root, list && list.length
        ? h('div.scroll', h('table.tools',
          h('thead', h('tr', ['Tool', 'Plugin', 'Description', 'Parameters'].map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', list.map((t) => h('tr', h('th', { scope: 'row' }, t.name), h('td', t.plugin), h('td', t.description || ''),
            h('td', h('details', h('summary', 'schema'), h('pre', pretty(t.parameters ?? {})))))))))
        : h('p.empty', 'No plugin registered a tool.'));
    })
    .catch((e) => note(root, `Cannot list the tools: ${e.message}`, 'bad'));
  return null;
}

// ---- FaustBot panels ----

function loadPanels(root) {
  // Each frame's plugin, by its window: a panel's message is answered only
  // for the plugin that frame was made for, whatever the message says.
  const frames = new Map();
  const onMessage = async (e) => {
    const id = frames.get(e.source);
    const d = e.data;
    if (!id || !d || d.ctxhost !== 'communicate' || typeof d.n !== 'number') return;
    let reply;
    try {
      const r = await api('POST', `/faust/plugins/${enc(id)}/communicate`, d.payload ?? {}, { raw: true });
      reply = { ctxhost: 'reply', n: d.n, status: r.status, body: r.body };
    } catch (err) {
      reply = { ctxhost: 'reply', n: d.n, status: 0, body: { error: err.message } };
    }
    // The frame's origin is opaque ("null"): '*' is the only target that
    // reaches it; the reply carries nothing but the plugin's own answer.
    e.source.postMessage(reply, '*');
  };
  window.addEventListener('message', onMessage);
  get('/faust/admin/plugins/assets')
    .then((reply) => {
      const byPlugin = new Map();
      for (const a of (reply && reply.assets) || []) {
        // Only the plugin's own frontend files (the daemon lists nothing else).
        if (!a.path.startsWith(`/faust/plugins/${a.plugin_id}/frontend/`)) continue;
        if (!byPlugin.has(a.plugin_id)) byPlugin.set(a.plugin_id, []);
        byPlugin.get(a.plugin_id).push(a);
      }
      if (!byPlugin.size) return fill(root, h('p.empty', 'No FaustBot plugin has frontend assets.'));
      fill(root, [...byPlugin].map(([id, assets]) => {
        const q = new URLSearchParams();
        q.set('plugin', id);
        for (const a of assets) q.append(a.type, a.path);
        const frame = h('iframe', { title: `Panel of ${id}`, sandbox: 'allow-scripts', src: `/dashboard/panel.html#${q}` });
        return h('details.panel', { dataset: { panel: id } }, h('summary', `${id} (${assets.length} file${assets.length === 1 ? '' : 's'})`), frame);
      }));
      // In the document now: each frame's window is known before its scripts run.
      for (const panel of root.querySelectorAll('details.panel')) {
        const frame = panel.querySelector('iframe');
        frames.set(frame.contentWindow, panel.dataset.panel);
      }
    })
    .catch((e) => note(root, `Cannot list the plugin panels: ${e.message}`, 'bad'));
  return () => window.removeEventListener('message', onMessage);
}
