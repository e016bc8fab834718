// ctxhost_rpc: a JSON-RPC 2.0 client for ctxhost persistent workers (Node.js, no dependencies).
//
// For a plugin with `persistent_subprocess = true` and `worker_protocol = "jsonrpc"`: every line
// on stdin and stdout is one JSON-RPC 2.0 message. The host calls a hook as a request
// {"jsonrpc":"2.0","id":7,"method":"hook/tool_call_pre","params":{...}} (params: the request a
// one-shot script would read on stdin; the symbolic vfs read is `vfs/read_symbolic`). While
// handling it, the worker may call the host's services and await the answer before replying.
//
// Copy this one file next to your hook script:
//
//   const { host } = require('./ctxhost_rpc');
//
//   host.on('tool_call_pre', async (request) => {
//     const pattern = await host.call('config.get', { key: 'BLOCK_PATTERN' });
//     host.log('checking ' + request.name);
//     return { action: 'pass' };               // the reply (a value or a promise of one)
//   });
//   host.on('read_symbolic', (request) => 'computed content of ' + request.path);
//
//   host.run();                                // answer requests until stdin ends
//
// API:
// - host.on(name, fn) (alias host.hook): fn(params) answers `hook/<name>`; `name` is the hook's
//   name ('tool_call_pre') or a full method ('hook/tool_call_pre', 'vfs/read_symbolic';
//   'read_symbolic' means the latter). fn may be async.
// - host.call(method, params = {}): a service call (config.get/set/list/register,
//   vfs.read/write/delete/list/write_symbolic, trigger.create/get/list/update/delete,
//   storage.get/set/delete); a promise of the host's `result`, rejected with an RpcError
//   (.code, .message) for its `error`. Ids are "w1", "w2", ...
// - host.log(message, level = 'info'): a `log` notification (levels error, warn, info,
//   debug); the host logs it as the plugin's. Never write anything else to stdout: use stderr
//   (console.error).
// - host.run(): the main loop; a promise that resolves when stdin ends. A handler's throw (or
//   rejection) becomes a JSON-RPC error (code -32000, "<Name>: <message>", stack on stderr) and
//   the worker goes on; an unknown method is -32601. A line that is not a request or an answer
//   to a pending call is skipped.
'use strict';

const readline = require('readline');

class RpcError extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'RpcError';
    this.code = code;
  }
}

function methodOf(name) {
  if (name.includes('/')) return name;
  if (name === 'read_symbolic') return 'vfs/read_symbolic';
  return 'hook/' + name;
}

class Host {
  constructor(input = process.stdin, output = process.stdout) {
    this.input = input;
    this.output = output;
    this.handlers = new Map();
    this.pending = new Map();
    this.nextId = 0;
  }

  on(name, fn) {
    this.handlers.set(methodOf(name), fn);
    return fn;
  }

  hook(name, fn) {
    return this.on(name, fn);
  }

  send(message) {
    // JSON.stringify is compact and escapes every newline inside strings: one message, one line.
    this.output.write(JSON.stringify(message) + '\n');
  }

  call(method, params = {}) {
    this.nextId += 1;
    const id = 'w' + this.nextId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.send({ jsonrpc: '2.0', id, method, params });
    });
  }

  log(message, level = 'info') {
    this.send({ jsonrpc: '2.0', method: 'log', params: { message: String(message), level } });
  }

  error(id, code, message) {
    this.send({ jsonrpc: '2.0', id, error: { code, message } });
  }

  async answer(id, method, params) {
    const handler = this.handlers.get(method);
    if (!handler) {
      const known = [...this.handlers.keys()].sort().join(', ') || 'none';
      this.error(id, -32601, `no handler for ${method} (registered: ${known})`);
      return;
    }
    let result;
    try {
      result = await handler(params);
    } catch (e) {
      console.error(e && e.stack ? e.stack : String(e));
      const name = e && e.name ? e.name : 'Error';
      const text = e && e.message !== undefined ? e.message : String(e);
      this.error(id, -32000, `${name}: ${text}`);
      return;
    }
    let line;
    try {
      line = JSON.stringify({ jsonrpc: '2.0', id, result: result === undefined ? null : result });
    } catch (e) {
      this.error(id, -32000, `the handler's result is not JSON: ${e.message}`);
      return;
    }
    this.output.write(line + '\n');
  }

  onLine(line) {
    if (!line.trim()) return;
    let message;
    try {
      message = JSON.parse(line);
    } catch (e) {
      console.error('ctxhost_rpc: skipped a line that is not JSON');
      return;
    }
    if (message === null || typeof message !== 'object' || Array.isArray(message)) return;
    if (typeof message.method === 'string') {
      if ('id' in message) this.answer(message.id, message.method, message.params);
      return;
    }
    const waiting = this.pending.get(message.id);
    if (!waiting) return; // an answer to nothing pending: skipped
    this.pending.delete(message.id);
    if ('error' in message) {
      const err = message.error && typeof message.error === 'object' ? message.error : {};
      const code = err.code !== undefined ? err.code : -32000;
      const text = err.message !== undefined ? err.message : String(message.error);
      waiting.reject(new RpcError(code, text));
    } else {
      waiting.resolve(message.result === undefined ? null : message.result);
    }
  }

  run() {
    return new Promise((resolve) => {
      const lines = readline.createInterface({ input: this.input, crlfDelay: Infinity, terminal: false });
      lines.on('line', (line) => this.onLine(line));
      lines.on('close', () => {
        for (const [, waiting] of this.pending) {
          waiting.reject(new RpcError(-32000, `the host closed stdin before answering ${waiting.method}`));
        }
        this.pending.clear();
        resolve();
      });
    });
  }
}

const host = new Host();

module.exports = { Host, RpcError, host };
