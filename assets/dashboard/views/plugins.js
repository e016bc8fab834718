// Plugins: one row per plugin of `GET /api/plugins` — kind, version, status
// (with the full error and warnings), hooks, priority, grants, sandbox — and
// the actions: reload, enable/disable, test a hook, change the grant.

import { api, get, enc } from '../api.js';
import { h, fill, badge, note, pretty, ms, confirmAction, field, parseJson } from '../dom.js';

let examples = null;

/** The example request of each hook (docs/reference/hooks.md's). */
async function hookExamples() {
  if (!examples) examples = get('/dashboard/hooks.json').catch(() => ({}));
  return examples;
}

export function mount(main) {
  const state = { list: [], filter: '', open: new Map() };
  const summary = h('p.summary#plugins-summary', 'Loading plugins…');
  const message = h('div.message');
  const filter = h('input#plugin-filter', { type: 'search', placeholder: 'name, kind or status', autocomplete: 'off' });
  const body = h('tbody#plugin-rows');
  const table = h(
    'table.plugins#plugin-table',
    h('caption.visually-hidden', 'Plugins of this daemon'),
    h(
      'thead',
      h(
        'tr',
        ['Plugin', 'Kind', 'Status', 'Hooks', 'Priority', 'Grants', 'Sandbox', 'Actions'].map((c) => h('th', { scope: 'col' }, c)),
      ),
    ),
    body,
  );
  fill(
    main,
    h('section.view#view-plugins', h('div.bar', h('h2', 'Plugins'), field('Filter', filter),
      h('button', { type: 'button', onclick: () => load() }, 'Refresh')), summary, message, h('div.scroll', table)),
  );

  filter.addEventListener('input', () => {
    state.filter = filter.value.trim().toLowerCase();
    render();
  });
  body.addEventListener('click', (e) => {
    const button = e.target.closest('button[data-action]');
    if (button) act(button.dataset.action, button.dataset.plugin, button);
  });

  async function load() {
    try {
      state.list = (await get('/api/plugins')) || [];
      render();
    } catch (e) {
      summary.textContent = '';
      note(message, `Cannot list the plugins: ${e.message}`, 'bad');
    }
  }

  function render() {
    const counts = {};
    for (const p of state.list) counts[status(p)] = (counts[status(p)] || 0) + 1;
    summary.textContent = `${state.list.length} plugin${state.list.length === 1 ? '' : 's'}: ${
      Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(', ') || 'none installed'}`;
    const rows = [];
    for (const p of state.list) {
      if (state.filter && !`${p.name} ${kind(p)} ${status(p)}`.toLowerCase().includes(state.filter)) continue;
      rows.push(row(p));
      if (p.error || (p.warnings && p.warnings.length)) rows.push(problems(p));
      const open = state.open.get(p.name);
      if (open) rows.push(open.row);
    }
    fill(body, rows);
    if (!window.__ctxhostRendered) {
      window.__ctxhostRendered = true;
      performance.mark('ctxhost:plugins-rendered');
      document.body.dataset.rendered = 'plugins';
    }
  }

  function row(p) {
    const s = status(p);
    const enabled = s !== 'disabled';
    return h(
      'tr',
      { dataset: { plugin: p.name, status: s } },
      h('th', { scope: 'row' }, h('span.name', p.name), p.version ? h('span.version', ` ${p.version}`) : null),
      h('td', { 'data-label': 'Kind' }, kind(p)),
      h('td', { 'data-label': 'Status' }, badge(s, s === 'running' ? 'good' : s === 'error' ? 'bad' : 'neutral')),
      h('td.hooks', { 'data-label': 'Hooks' }, (p.hooks || []).join(', ') || '–'),
      h('td.num', { 'data-label': 'Priority' }, p.priority ?? '–'),
      h('td', { 'data-label': 'Grants' }, grantsText(p.grants)),
      h('td', { 'data-label': 'Sandbox' }, sandboxText(p.sandbox)),
      h(
        'td.actions',
        { 'data-label': 'Actions' },
        button('reload', p.name, 'Reload'),
        button(enabled ? 'disable' : 'enable', p.name, enabled ? 'Disable' : 'Enable'),
        button('test', p.name, 'Test hook', { 'aria-expanded': state.open.get(p.name)?.what === 'test' ? 'true' : 'false' }),
        button('grant', p.name, 'Grants', { 'aria-expanded': state.open.get(p.name)?.what === 'grant' ? 'true' : 'false' }),
      ),
    );
  }

  function problems(p) {
    return h(
      'tr.problems',
      { dataset: { plugin: p.name } },
      h(
        'td',
        { colspan: 8 },
        p.error ? h('pre.error', { 'data-error-of': p.name }, p.error) : null,
        p.warnings && p.warnings.length ? h('ul.warnings', p.warnings.map((w) => h('li', w))) : null,
      ),
    );
  }

  async function act(action, name, button) {
    const p = state.list.find((x) => x.name === name);
    if (!p) return;
    if (action === 'test' || action === 'grant') {
      const open = state.open.get(name);
      if (open && open.what === action) state.open.delete(name);
      else state.open.set(name, { what: action, row: action === 'test' ? await testRow(p) : grantRow(p) });
      render();
      const opened = state.open.get(name);
      if (opened) opened.row.querySelector('select, textarea, input')?.focus();
      else body.querySelector(`button[data-action="${action}"][data-plugin="${CSS.escape(name)}"]`)?.focus();
      return;
    }
    button.disabled = true;
    try {
      const reply = await api('POST', `/api/plugins/${enc(name)}/${action}`);
      const verb = { reload: 'Reloaded', enable: 'Enabled', disable: 'Disabled' }[action];
      note(message, `${verb} ${name}${reply && reply.error ? `: ${reply.error}` : '.'}`, 'good');
    } catch (e) {
      note(message, `${action} ${name} failed: ${e.message}`, 'bad');
    }
    await load();
    body.querySelector(`button[data-plugin="${CSS.escape(name)}"][data-action]`)?.focus();
  }

  async function testRow(p) {
    const ex = await hookExamples();
    const hooks = (p.hooks && p.hooks.length ? p.hooks : Object.keys(ex)).filter((x) => x);
    const select = h('select', { 'data-test-hook': p.name }, hooks.map((x) => h('option', { value: x }, x)));
    const editor = h('textarea.json', { rows: 12, spellcheck: 'false', 'data-test-input': p.name });
    const out = h('div.test-result', { 'aria-live': 'polite', 'data-test-result': p.name });
    const prefill = () => {
      const request = { ...(ex[select.value] || {}) };
      editor.value = pretty(request);
    };
    select.addEventListener('change', prefill);
    prefill();
    const run = h('button.primary', { type: 'submit', 'data-test-run': p.name }, 'Run');
    const form = h(
      'form.test',
      field('Hook', select),
      field('Request (JSON)', editor),
      h('div.buttons', run, h('button', { type: 'button', onclick: prefill }, 'Reset to example')),
      out,
    );
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const input = parseJson(editor.value);
      if (input instanceof Error) return note(out, input.message, 'bad');
      run.disabled = true;
      note(out, `Calling ${select.value}…`);
      try {
        const { status, body: reply } = await api('POST', `/api/plugins/${enc(p.name)}/test-hook`,
          { hook: select.value, input }, { raw: true });
        const ok = reply && reply.success;
        fill(
          out,
          h('p', badge(ok ? 'success' : `failed (${status})`, ok ? 'good' : 'bad'), ' elapsed ',
            h('span.elapsed', ms(reply && reply.elapsed_ms)), reply && reply.kind ? ` · ${reply.kind}` : ''),
          h('pre.reply', pretty(ok ? reply.output : reply && reply.error !== undefined ? reply.error : reply)),
        );
      } catch (err) {
        note(out, err.message, 'bad');
      } finally {
        run.disabled = false;
      }
    });
    return h('tr.expand', { dataset: { plugin: p.name } }, h('td', { colspan: 8 }, h('h3', `Test a hook of ${p.name}`), form));
  }

  function grantRow(p) {
    const g = p.grants || {};
    const network = h('input', { type: 'checkbox', checked: !!g.network, 'data-grant-network': p.name });
    const filesystem = h('input', { type: 'checkbox', checked: !!g.filesystem, 'data-grant-filesystem': p.name });
    const env = h('input', { type: 'text', value: (g.env || []).join(', '), 'data-grant-env': p.name,
      placeholder: 'VAR_ONE, VAR_TWO' });
    const out = h('div.grant-result', { 'aria-live': 'polite' });
    const save = h('button.primary', { type: 'submit' }, 'Change grant…');
    const form = h(
      'form.grant',
      h('p', 'In force: ', grantsText(g)),
      h('div.checks',
        h('label', network, ' network'),
        h('label', filesystem, ' the whole filesystem')),
      field('Host variables its [env] may read (comma separated)', env),
      h('div.buttons', save),
      out,
    );
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const wanted = {
        network: network.checked,
        filesystem: filesystem.checked,
        env: env.value.split(',').map((v) => v.trim()).filter(Boolean),
      };
      const path = `/api/plugins/${enc(p.name)}/grants`;
      save.disabled = true;
      try {
        // The daemon computes what the change opens (as `ctxhost plugin grant`); nothing is recorded yet.
        const preview = await api('PUT', path, { ...wanted, dry_run: true });
        const lines = [
          ...(preview.opens || []).map((o) => `Opens: ${o}`),
          ...(preview.changes || []).map((c) => `Changes: ${c}`),
        ];
        if (!lines.length) return note(out, `Nothing would change: ${preview.summary || grantsText(g)}.`, 'info');
        if (!(await confirmAction(`Change the grant of ${p.name}?`, lines, 'Change grant'))) {
          return note(out, 'Nothing changed.', 'info');
        }
        const reply = await api('PUT', path, wanted);
        const opened = reply.opens && reply.opens.length ? ` Opened: ${reply.opens.join(', ')}.` : '';
        note(out, `Grant changed (${reply.summary || 'recorded'}).${opened}${reply.reloaded ? ' Reloaded.' : ''}`, 'good');
        await load();
      } catch (err) {
        note(out, err.message, 'bad');
      } finally {
        save.disabled = false;
      }
    });
    return h('tr.expand', { dataset: { plugin: p.name } }, h('td', { colspan: 8 }, h('h3', `Grant of ${p.name}`), form));
  }

  load();
  return () => {};
}

function button(action, plugin, label, extra) {
  return h('button', { type: 'button', dataset: { action, plugin }, ...(extra || {}) }, label);
}

function status(p) {
  if (p.status) return p.status;
  if (p.state === 'loaded') return 'running';
  return p.state || (p.enabled === false ? 'disabled' : 'unknown');
}

function kind(p) {
  if (p.kind === 'script' && p.runtime) return `script (${p.runtime})`;
  return (p.kind || p.runtime || '?').replace(/_/g, '-');
}

function grantsText(g) {
  if (!g || typeof g !== 'object') return 'none recorded';
  const parts = [];
  if (g.network) parts.push('network');
  if (g.filesystem) parts.push('filesystem');
  for (const key of ['paths', 'readable_paths', 'writable_paths']) {
    const v = g[key];
    if (Array.isArray(v) && v.length) parts.push(`${key.replace('_', ' ')}: ${v.join(', ')}`);
    else if (v && typeof v === 'object') {
      for (const [k, list] of Object.entries(v)) if (Array.isArray(list) && list.length) parts.push(`${k}: ${list.join(', ')}`);
    }
  }
  if (Array.isArray(g.env) && g.env.length) parts.push(`env: ${g.env.join(', ')}`);
  return parts.length ? parts.join('; ') : 'none';
}

function sandboxText(s) {
  if (!s) return '–';
  if (Array.isArray(s.layers)) {
    const limits = Object.entries(s.limits || {}).map(([k, v]) => `${k.replace(/_/g, ' ')} ${v}`);
    return [s.layers.length ? s.layers.join(', ').replace(/_/g, ' ') : 'unconfined', ...limits].join('; ');
  }
  if (Array.isArray(s)) return s.join(', ') || 'none';
  if (typeof s === 'object') {
    const on = [];
    for (const [k, v] of Object.entries(s)) {
      if (v === true) on.push(k);
      else if (v && v !== false) on.push(`${k} ${typeof v === 'object' ? JSON.stringify(v) : v}`);
    }
    return on.join(', ') || 'none';
  }
  return String(s);
}
