"""The worker's line to the ctxhost host: JSON-RPC 2.0 over a pair of pipes.

Owns: the connection (`Connection`: the JSON-RPC client of
guest-examples/rpc-clients, `ctxhost_rpc.Host`, which ctxhost writes beside
the worker, plus a lock), the state of the call being handled (which agent
it is for), and `maybe_awaitable`, which lets every `ctx.*` method work both
with and without `await`.

The wire (ctxhost `agent-hooks.md`): the host sends requests
`{"jsonrpc":"2.0","id":N,"method":"hook/<name>","params":{...}}`; while one
is being handled the worker may send its own requests
(`{"jsonrpc":"2.0","id":"w1","method":"config.get","params":{...}}`) and
reads the host's answer before replying. Outside a host request nobody
reads the worker's requests, so a service call from a background thread
between calls is refused with a clear RuntimeError instead of hanging.

Must never write anything but JSON-RPC lines to the protocol stream, and
never let a plugin's output reach it (the worker points fd 1 at stderr).
"""

import inspect
import sys
import threading

import ctxhost_rpc  # guest-examples/rpc-clients/ctxhost_rpc.py, written beside the worker by ctxhost

__all__ = ["Connection", "RpcError", "connection", "set_connection", "current_agent_id", "maybe_awaitable"]


class RpcError(ctxhost_rpc.RpcError, RuntimeError):
    """The host answered a service call with an `error`; `str()` is the host's message."""

    def __init__(self, code, message):
        ctxhost_rpc.RpcError.__init__(self, code, message)
        self.args = (message,)

    def __str__(self):
        return str(self.message)


class Connection(ctxhost_rpc.Host):
    """One worker's JSON-RPC connection: binary `rin` (host → worker), `wout`.

    The wire (framing, reading, a service call and its answer) is
    `ctxhost_rpc.Host`'s; this adds what the shim needs around it: a lock
    (a plugin's threads may log while a call runs), whether a host request
    is being handled, and the agent it is for.
    """

    def __init__(self, rin, wout):
        super().__init__(rin, wout)
        self.lock = threading.RLock()
        self.active = False  # a host request is being handled
        self.agent_id = None  # the agent of the request being handled

    def _send(self, message):
        with self.lock:
            super()._send(message)

    def send(self, message):
        self._send(message)

    def read(self):
        """The next JSON object on the input; None at its end."""
        return self._read()

    def error(self, request_id, code, message):
        self._error(request_id, code, message)

    def call(self, method, params=None):
        """Calls a host service; its `result`, or RpcError for its `error`."""
        with self.lock:
            if not self.active:
                raise RuntimeError(
                    "ctxhost: %s was called between the host's calls (from a background thread or task?); "
                    "the host's services are reachable only while it is calling this plugin "
                    "(a hook, a tool, a schedule, the heartbeat)" % method
                )
            try:
                return super().call(method, params)
            except ctxhost_rpc.RpcError as e:
                raise RpcError(e.code, e.message) from None

    def notify(self, method, params):
        self._send({"jsonrpc": "2.0", "method": method, "params": params})


_connection = None


def connection():
    """The worker's connection, or None outside ctxhost (e.g. a plugin's own unit tests)."""
    return _connection


def set_connection(conn):
    global _connection
    _connection = conn


def current_agent_id():
    """The agent of the host call being handled, or None."""
    return _connection.agent_id if _connection is not None else None


# --- with and without await ---------------------------------------------

_ASYNC_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


class Ready:
    """An awaitable whose work is already done: `await` gives `value`."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __await__(self):
        return self.value
        yield  # noqa: makes this a generator, as __await__ must return an iterator

    def __repr__(self):
        return "<ctxhost result %r (already done; await it or ignore it)>" % (self.value,)


_COMPREHENSIONS = ("<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>")


def caller_is_async(depth=2):
    """Whether the frame `depth` levels above the caller of this function runs a coroutine.

    A comprehension or generator expression (its own frame before Python
    3.12) counts as the code it runs in: `gather(*[ctx.get_config(k) for k in
    keys])` inside an `async def` gets awaitables.
    """
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    while frame is not None:
        if frame.f_code.co_flags & _ASYNC_FLAGS:
            return True
        if frame.f_code.co_name not in _COMPREHENSIONS:
            return False
        frame = frame.f_back
    return False


def maybe_awaitable(value, caller_async):
    """`value` for a sync caller; an awaitable giving it for an async one.

    The work was done eagerly, so a caller that forgets to `await` (FaustBot's
    older sync style inside an `async def`) still gets the side effect.
    """
    if caller_async:
        return value if inspect.isawaitable(value) else Ready(value)
    return value
