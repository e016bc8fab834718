// Every request of the page goes through `api`: the daemon's ordinary JSON
// routes, with the bearer token once the operator typed it (kept in this
// tab's sessionStorage). A 401 asks for the token once and repeats the
// request; several requests waiting on it share the one question.

const KEY = 'ctxhost-token';
let asking = null;

export class ApiError extends Error {
  constructor(status, body, path) {
    const text = body && typeof body === 'object' ? body.error || body.detail || JSON.stringify(body) : String(body || '');
    super(status ? `${status}: ${text || 'request failed'}` : text);
    this.status = status;
    this.body = body;
    this.path = path;
  }
}

export function token() {
  try {
    return sessionStorage.getItem(KEY) || '';
  } catch {
    return '';
  }
}

function keep(value) {
  try {
    if (value) sessionStorage.setItem(KEY, value);
    else sessionStorage.removeItem(KEY);
  } catch {
    // Storage refused (private mode): the token lives until the page reloads.
  }
}

/** Shows the token dialog; resolves with the token, or '' when cancelled. */
function askToken(wrong) {
  if (asking) return asking;
  const dialog = document.getElementById('token-dialog');
  const input = document.getElementById('token-input');
  const why = document.getElementById('token-why');
  why.textContent = wrong
    ? 'The daemon refused that token. Type the token of this daemon (kept for this tab only).'
    : 'This daemon has a token. Type it once: it is kept for this tab only.';
  input.value = '';
  asking = new Promise((resolve) => {
    const cancel = document.getElementById('token-cancel');
    const onCancel = () => dialog.close('cancel');
    cancel.addEventListener('click', onCancel, { once: true });
    dialog.addEventListener(
      'close',
      () => {
        cancel.removeEventListener('click', onCancel);
        asking = null;
        const given = dialog.returnValue === 'ok' ? input.value.trim() : '';
        if (given) keep(given);
        resolve(given);
      },
      { once: true },
    );
    dialog.returnValue = '';
    dialog.showModal();
    input.focus();
  });
  return asking;
}

/**
 * `api('GET', '/api/plugins')` → the parsed JSON reply (null for 204).
 * Throws ApiError for any status but 2xx, with the daemon's message.
 * `{raw: true}` resolves with `{status, body}` whatever the status.
 */
export async function api(method, path, body, options = {}) {
  for (let attempt = 0; ; attempt++) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = `Bearer ${t}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: options.signal,
        cache: 'no-store',
      });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(0, `cannot reach the daemon (${e.message})`, path);
    }
    if (response.status === 401 && attempt < 3) {
      if (t) keep('');
      const given = await askToken(Boolean(t));
      if (given) continue;
    }
    const text = await response.text();
    let parsed = null;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = text;
      }
    }
    if (options.raw) return { status: response.status, body: parsed };
    if (!response.ok) throw new ApiError(response.status, parsed, path);
    return parsed;
  }
}

export const get = (path, options) => api('GET', path, undefined, options);

/** `/api/x` + `?a=1&b=…` from an object (empty values left out). */
export function withQuery(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

export const enc = encodeURIComponent;
