// Small DOM helpers. Text from the daemon (plugin names, errors, stderr,
// memories) is always set as text, never parsed as HTML.

/** h('tag.class#id', {attr: value, onclick: fn}, ...children) */
export function h(spec, attrs, ...children) {
  const [tagAndClasses, id] = spec.split('#');
  const [tag, ...classes] = tagAndClasses.split('.');
  const el = document.createElement(tag || 'div');
  if (id) el.id = id;
  if (classes.length) el.className = classes.join(' ');
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** An SVG element (charts). */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) if (c) el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

export function pretty(value) {
  return JSON.stringify(value, null, 2);
}

export function ms(value) {
  if (value === undefined || value === null || Number.isNaN(value)) return '–';
  const n = Number(value);
  return n >= 100 ? `${n.toFixed(0)} ms` : n >= 10 ? `${n.toFixed(1)} ms` : `${n.toFixed(2)} ms`;
}

export function time(ts) {
  if (ts === undefined || ts === null) return '';
  // Seconds or milliseconds since the epoch, or an RFC 3339 string.
  const d = typeof ts === 'number' ? new Date(ts < 1e12 ? ts * 1000 : ts) : new Date(ts);
  return Number.isNaN(d.getTime()) ? String(ts) : d.toLocaleTimeString();
}

/** A small status badge. */
export function badge(text, tone) {
  return h(`span.badge.${tone || 'neutral'}`, text);
}

/** A message line that replaces itself (errors and results of actions). */
export function note(el, text, tone) {
  fill(el, text ? h(`span.note.${tone || 'info'}`, { role: tone === 'bad' ? 'alert' : 'status' }, text) : null);
}

/**
 * Asks the operator to confirm; `lines` name what the action does.
 * Resolves true only for "Yes".
 */
export function confirmAction(title, lines, yesLabel) {
  const dialog = document.getElementById('confirm-dialog');
  document.getElementById('confirm-title').textContent = title;
  fill(document.getElementById('confirm-text'), h('ul', lines.map((l) => h('li', l))));
  document.getElementById('confirm-yes').textContent = yesLabel || 'Yes';
  dialog.returnValue = '';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'yes'), { once: true });
    dialog.showModal();
  });
}

/** A labelled field: `field('Query', input)`. */
export function field(label, input) {
  if (!input.id) input.id = `f-${Math.random().toString(36).slice(2, 9)}`;
  return h('div.field', h('label', { for: input.id }, label), input);
}

/** The JSON of a `<textarea>`, or an Error naming what is wrong. */
export function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch (e) {
    return new Error(`not valid JSON: ${e.message}`);
  }
}
