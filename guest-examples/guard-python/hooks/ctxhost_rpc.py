"""ctxhost_rpc: a JSON-RPC 2.0 client for ctxhost persistent workers (Python, stdlib only).

For a plugin with `persistent_subprocess = true` and `worker_protocol = "jsonrpc"`: every line
on stdin and stdout is one JSON-RPC 2.0 message. The host calls a hook as a request
`{"jsonrpc":"2.0","id":7,"method":"hook/tool_call_pre","params":{...}}` (params: the request a
one-shot script would read on stdin; the symbolic vfs read is `vfs/read_symbolic`). While
handling it, the worker may call the host's services and read the answer before replying.

Copy this one file next to your hook script (python puts the script's directory on sys.path):

    from ctxhost_rpc import host

    @host.hook("tool_call_pre")              # a decorator ...
    def tool_call_pre(request):
        pattern = host.call("config.get", {"key": "BLOCK_PATTERN"})
        host.log("checking " + request["name"])
        return {"action": "pass"}            # the reply; None is sent as null

    def read_symbolic(request):              # ... or a function: host.on(name, fn)
        return "computed content of " + request["path"]
    host.on("read_symbolic", read_symbolic)  # `vfs/read_symbolic` reaches "read_symbolic"

    host.run()                               # answer requests until stdin ends

API (also as module functions: `hook`, `on`, `call`, `log`, `run`):
- `host.hook(name)` / `host.on(name, fn)`: `fn(params)` answers `hook/<name>`; `name` is the
  hook's name (`tool_call_pre`) or a full method (`hook/tool_call_pre`, `vfs/read_symbolic`).
- `host.call(method, params=None)`: a service call (`config.get/set/list/register`,
  `vfs.read/write/delete/list/write_symbolic`, `trigger.create/get/list/update/delete`,
  `storage.get/set/delete`); returns the host's `result`, raises `RpcError` (`.code`,
  `.message`) for its `error`. Ids are "w1", "w2", ... Only from a handler, one at a time
  (not thread-safe): the host sends no new hook request before the current one is answered.
- `host.log(message, level="info")`: a `log` notification (levels error, warn, info, debug);
  the host logs it as the plugin's. Never print anything else to stdout: use stderr.
- `host.run()`: the main loop. A handler's exception becomes a JSON-RPC error (code -32000,
  "<Type>: <message>", traceback on stderr) and the worker goes on; an unknown method is
  -32601. A line that is not a request (a stray response, junk) is skipped.
"""

import json
import sys
import traceback

__all__ = ["Host", "RpcError", "host", "hook", "on", "call", "log", "run"]


class RpcError(Exception):
    """The host's JSON-RPC error answer to a service call."""

    def __init__(self, code, message):
        super().__init__("%s (code %s)" % (message, code))
        self.code = code
        self.message = message


class Host:
    """One worker's connection to the host over a pair of binary streams."""

    def __init__(self, stdin=None, stdout=None):
        self._in = stdin if stdin is not None else sys.stdin.buffer
        self._out = stdout if stdout is not None else sys.stdout.buffer
        self._handlers = {}
        self._next_id = 0

    # --- handlers -------------------------------------------------------

    @staticmethod
    def _method(name):
        if "/" in name:
            return name
        if name == "read_symbolic":
            return "vfs/read_symbolic"
        return "hook/" + name

    def on(self, name, fn):
        """Registers `fn(params)` as the handler of hook `name`; returns `fn`."""
        self._handlers[self._method(name)] = fn
        return fn

    def hook(self, name):
        """Decorator form of `on`."""
        return lambda fn: self.on(name, fn)

    # --- the wire -------------------------------------------------------

    def _send(self, message):
        # Compact, and json escapes every newline inside strings: one message, one line.
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"
        self._out.write(line.encode("utf-8"))
        self._out.flush()

    def _read(self):
        """The next JSON-RPC message on stdin; None at end of input."""
        while True:
            line = self._in.readline()
            if not line:
                return None
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                sys.stderr.write("ctxhost_rpc: skipped a line that is not JSON\n")
                continue
            if isinstance(message, dict):
                return message
            sys.stderr.write("ctxhost_rpc: skipped a JSON line that is not an object\n")

    # --- services -------------------------------------------------------

    def call(self, method, params=None):
        """Calls a host service and waits for its answer."""
        self._next_id += 1
        my_id = "w%d" % self._next_id
        self._send({"jsonrpc": "2.0", "id": my_id, "method": method, "params": params if params is not None else {}})
        while True:
            message = self._read()
            if message is None:
                raise RpcError(-32000, "the host closed stdin before answering %s" % method)
            if "method" in message:
                # The host never calls while a hook is pending; answer, never hang.
                if "id" in message:
                    self._error(message["id"], -32000, "the worker is waiting for the host's answer to " + my_id)
                continue
            if message.get("id") != my_id:
                continue
            if "error" in message:
                error = message["error"] if isinstance(message["error"], dict) else {}
                raise RpcError(error.get("code", -32000), error.get("message", str(message["error"])))
            return message.get("result")

    def log(self, message, level="info"):
        """Sends a `log` notification (no answer)."""
        self._send({"jsonrpc": "2.0", "method": "log", "params": {"message": str(message), "level": level}})

    # --- the loop -------------------------------------------------------

    def _error(self, request_id, code, message):
        self._send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def run(self):
        """Answers the host's requests until stdin ends."""
        while True:
            message = self._read()
            if message is None:
                return
            method = message.get("method")
            if not isinstance(method, str) or "id" not in message:
                continue  # a stray response, or a notification: nothing to answer
            request_id = message["id"]
            handler = self._handlers.get(method)
            if handler is None:
                self._error(request_id, -32601, "no handler for %s (registered: %s)"
                            % (method, ", ".join(sorted(self._handlers)) or "none"))
                continue
            try:
                result = handler(message.get("params"))
            except Exception as e:  # the worker goes on
                traceback.print_exc(file=sys.stderr)
                sys.stderr.flush()
                self._error(request_id, -32000, "%s: %s" % (type(e).__name__, e))
                continue
            try:
                self._send({"jsonrpc": "2.0", "id": request_id, "result": result})
            except (TypeError, ValueError) as e:
                self._error(request_id, -32000, "the handler's result is not JSON: %s" % e)


host = Host()
hook = host.hook
on = host.on
call = host.call
log = host.log
run = host.run
