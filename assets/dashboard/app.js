// The dashboard's shell: one view at a time, chosen by the URL's hash
// (#plugins, #health, …), each view a module with `mount(main) → stop()`.
// A view polls only while it is shown.

import * as plugins from './views/plugins.js';
import * as health from './views/health.js';
import * as logs from './views/logs.js';
import * as turns from './views/turns.js';
import * as memory from './views/memory.js';
import * as agent from './views/agent.js';

const VIEWS = { plugins, health, logs, turns, memory, agent };
const main = document.getElementById('main');
let current = null;

function show() {
  const wanted = location.hash.replace(/^#/, '').split('/')[0];
  const name = VIEWS[wanted] ? wanted : 'plugins';
  if (current && current.name === name) return;
  if (current && current.stop) current.stop();
  main.replaceChildren();
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `ctxhost · ${document.querySelector(`#nav a[data-view="${name}"]`).textContent}`;
  const stop = VIEWS[name].mount(main);
  current = { name, stop };
}

window.addEventListener('hashchange', () => {
  show();
  main.focus({ preventScroll: true });
});
window.addEventListener('error', (e) => {
  document.getElementById('status').textContent = `page error: ${e.message}`;
});
show();
