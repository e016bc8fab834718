"""FaustBot's plugin data classes and `PluginContext`, backed by the ctxhost host.

`PluginManifest`, `ToolSpec` and `MiddlewareSpec` are FaustBot's dataclasses.
`PluginContext` has FaustBot's fields (`plugin_id`, `plugin_dir`,
`plugin_data_dir`, `config` — the capability table, not settings — and
`storage`) and every method of FaustBot's newest interface. Each method
looks up its capability in `ctx.config` (`RuntimeError("<key> is not
available")` when missing), calls it, and:

- does the work **eagerly**, when called;
- returns the plain value to a synchronous caller (FaustBot's older sync
  style: `ctx.register_config([...])`), and an awaitable that gives the value
  to a caller running a coroutine (the newest async style:
  `await ctx.get_config("K")`). The caller is told apart by its code flags.

`host_capabilities()` builds the table the ctxhost worker puts in
`ctx.config`: every entry forwards to the host's services (`trigger.*`,
`config.*`, `vfs.*`) over the worker's JSON-RPC line. Plugins' own tests
can still build a `PluginContext` with their own table, as in FaustBot.

Never talks to the host except inside a capability call.
"""

import functools
import inspect
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import _host

__all__ = [
    "MiddlewareSpec",
    "PluginContext",
    "PluginManifest",
    "PluginProtocol",
    "ToolSpec",
    "host_capabilities",
    "normalize_config_schema",
    "normalize_vfs_path",
]


@dataclass
class PluginManifest:
    plugin_id: str
    name: str
    version: str = "0.1.0"
    description: str = ""
    author: str = ""
    homepage: str = ""
    enabled: bool = True
    entry: str = "main.py"
    permissions: list = field(default_factory=list)
    priority: int = 100


@dataclass
class ToolSpec:
    name: str
    tool: Any
    enabled_by_default: bool = True
    description: str = ""


@dataclass
class MiddlewareSpec:
    name: str
    middleware: Any
    priority: int = 100
    enabled_by_default: bool = True
    description: str = ""


def _dual(fn):
    """The value for a sync caller, an awaitable of it for an async one (work done now)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        caller_async = _host.caller_is_async(2)
        return _host.maybe_awaitable(fn(*args, **kwargs), caller_async)

    return wrapper


@dataclass
class PluginContext:
    plugin_id: str
    plugin_dir: Path
    plugin_data_dir: "Path | None" = None
    config: dict = field(default_factory=dict)
    storage: Any = None

    def _cap(self, key):
        fn = self.config.get(key) if isinstance(self.config, dict) else None
        if not callable(fn):
            raise RuntimeError(f"{key} is not available")
        return fn

    # --- triggers -----------------------------------------------------
    @_dual
    def trigger_create(self, payload):
        return self._cap("trigger_create")(payload)

    @_dual
    def trigger_list(self):
        return self._cap("trigger_list")()

    @_dual
    def trigger_get(self, trigger_id):
        return self._cap("trigger_get")(trigger_id)

    @_dual
    def trigger_update(self, trigger_id, payload):
        return self._cap("trigger_update")(trigger_id, payload)

    @_dual
    def trigger_delete(self, trigger_id):
        return self._cap("trigger_delete")(trigger_id)

    # --- plugin config ------------------------------------------------
    @_dual
    def register_config(self, schema):
        return self._cap("plugin_config_register")(schema)

    @_dual
    def get_config(self, key, default=None):
        return self._cap("plugin_config_get")(key, default)

    @_dual
    def set_config(self, key, value):
        return self._cap("plugin_config_set")(key, value)

    @_dual
    def list_configs(self):
        return self._cap("plugin_config_list")()

    # --- processors (not provided by ctxhost) -------------------------
    @_dual
    def processor_invoke(self, name, data, *, config=None, timeout=None, wait_timeout=None):
        return self._cap("processor_invoke")(name, data, config=config, timeout=timeout, wait_timeout=wait_timeout)

    @_dual
    def processor_status(self, name):
        return self._cap("processor_status")(name)

    # --- vfs ----------------------------------------------------------
    @_dual
    def vfs_read_text(self, path, default=""):
        return self._cap("vfs_read_text")(path, default=default)

    @_dual
    def vfs_write(self, path, content, description=""):
        return self._cap("vfs_write")(path, content, description=description)

    @_dual
    def vfs_write_symbolic(self, path, func, should_be_included_in_search=True, writable=False, description=""):
        return self._cap("vfs_write_symbolic")(
            path,
            func,
            should_be_included_in_search=should_be_included_in_search,
            writable=writable,
            description=description,
        )

    @_dual
    def vfs_set_write_handler(self, path, func):
        return self._cap("vfs_set_write_handler")(path, func)

    @_dual
    def vfs_set_edit_handler(self, path, func):
        return self._cap("vfs_set_edit_handler")(path, func)

    @_dual
    def vfs_delete(self, path):
        return self._cap("vfs_delete")(path)

    @_dual
    def vfs_list(self, path="/"):
        return self._cap("vfs_list")(path)


class PluginProtocol(Protocol):
    """What FaustBot documents a plugin may define (documentation only)."""

    manifest: Any

    def plugin_loaded(self, ctx) -> None: ...
    def plugin_unloaded(self, ctx) -> None: ...
    def startup(self, ctx) -> None: ...
    def on_load(self, ctx) -> None: ...
    def on_unload(self, ctx) -> None: ...
    def heartbeat(self, ctx) -> None: ...
    def health_check(self) -> "dict | None": ...
    def register_frontend(self) -> list: ...
    def communicate_handler(self, payload: dict, ctx) -> "dict | None": ...
    def register_schedules(self) -> list: ...
    def register_pip_deps(self) -> list: ...
    def register_tools(self, ctx) -> list: ...
    def register_middlewares(self, ctx) -> list: ...
    def tool_call_pre(self, name: str, args: dict, ctx) -> "dict | None": ...
    def tool_call_post(self, name: str, args: dict, result: Any, ctx) -> Any: ...
    def message_received(self, msg: Any, history: list, ctx) -> "str | None": ...
    def agent_event_sent(self, event: dict, current_history: list, ctx) -> "dict | None": ...
    def llm_request_pre(self, messages: list, ctx) -> "list | None": ...
    def tts_text(self, text: str, ctx) -> "str | None": ...
    def tts_start(self, text: str, ctx) -> None: ...
    def tts_end(self, text: str, ctx) -> None: ...
    def memory_read_pre(self, query: str, filters, ctx) -> "str | None": ...
    def memory_read_post(self, query: str, results: list, ctx) -> "list | None": ...
    def memory_write_pre(self, content: str, metadata, ctx) -> "str | None": ...
    def memory_write_post(self, content: str, metadata, id: str, ctx) -> None: ...
    def register_prompt_suffix(self) -> list: ...
    def filter_trigger_append(self, payload: dict) -> "dict | None": ...
    def filter_trigger_fire(self, payload: dict) -> "dict | None": ...
    def trigger_append(self, payload: dict, ctx) -> "dict | None": ...
    def trigger_fire(self, payload: dict, ctx) -> "dict | None": ...
    def config_changed(self, key: str, old: Any, new: Any, ctx) -> None: ...


# --- config schemas (FaustBot's normalisation, sent to the host clean) ---

_TYPES = {
    "str": "str",
    "string": "str",
    "text": "text",
    "int": "int",
    "float": "float",
    "bool": "bool",
    "json": "json",
    # FaustBot's newest "llm"/"model" fields hold a model spec string; ctxhost
    # has no main-model fallback for them, so they are plain strings here.
    "llm": "str",
    "model": "str",
}

_TRUE = {"1", "true", "yes", "on", "y"}


def _coerce(kind, value):
    """FaustBot's `_coerce_config_value` (raises on a bad value)."""
    if kind in ("str", "text"):
        return "" if value is None else str(value)
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return bool(value)
        return str(value).strip().lower() in _TRUE
    if kind == "json":
        if isinstance(value, (dict, list)):
            return value
        if value is None or value == "":
            return None
        return json.loads(str(value))
    return value


def _legacy_lines(text):
    items = []
    for raw in str(text).splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        key, kind, label_part = (p.strip() for p in parts)
        default = None
        if "=" in label_part:
            label_part, default = label_part.rsplit("=", 1)
            label_part, default = label_part.strip(), default.strip()
            if default == "":
                default = None
        items.append({"key": key, "type": kind, "label": label_part or key, "default": default})
    return items


def normalize_config_schema(schema):
    """FaustBot's schema forms (a list, `{"fields"|"items": [...]}`, legacy lines) as clean fields.

    Each field is `{"key","type","label","description","default"}`; items
    without a key are dropped, unknown types become `str`, a default that
    cannot be coerced becomes None — FaustBot's rules.
    """
    if schema is None:
        return []
    if isinstance(schema, str):
        items = _legacy_lines(schema)
    elif isinstance(schema, dict):
        if isinstance(schema.get("fields"), list):
            items = schema["fields"]
        elif isinstance(schema.get("items"), list):
            items = schema["items"]
        else:  # {KEY: {type, label, default}}
            items = [dict(v, key=k) for k, v in schema.items() if isinstance(v, dict)]
    elif isinstance(schema, (list, tuple)):
        items = []
        for item in schema:
            if isinstance(item, str):
                items.extend(_legacy_lines(item))
            else:
                items.append(item)
    else:
        raise TypeError("a config schema is a list of fields or legacy lines, not %s" % type(schema).__name__)
    fields = []
    for item in items:
        if not isinstance(item, dict):
            continue
        key = str(item.get("key") or "").strip()
        if not key:
            continue
        kind = _TYPES.get(str(item.get("type") or "str").strip().lower(), "str")
        default = item.get("default")
        if default is not None:
            try:
                default = _coerce(kind, default)
            except (TypeError, ValueError):
                default = None
        fields.append(
            {
                "key": key,
                "type": kind,
                "label": str(item.get("label") or key),
                "description": str(item.get("description") or ""),
                "default": default,
            }
        )
    return fields


# --- vfs paths and the plugin's symbolic nodes ---------------------------


def normalize_vfs_path(path):
    """The host's normalisation: `\\` → `/`, a leading `/`, `.` dropped, `..` clamped at the root."""
    parts = []
    for part in str(path).replace("\\", "/").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


# path -> the function computing its content; read by the worker's `vfs/read_symbolic`
symbolic_nodes = {}
write_handlers = {}
edit_handlers = {}


def _text(content):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (bytes, bytearray)):
        return bytes(content).decode("utf-8", "replace")
    return str(content)


def _call(method, params=None):
    conn = _host.connection()
    if conn is None:
        raise RuntimeError("ctxhost: %s needs the ctxhost host (this plugin is not running under ctxhost)" % method)
    return conn.call(method, params)


def _trigger_payload(payload):
    if isinstance(payload, (str, bytes)):
        payload = json.loads(payload)
    if not isinstance(payload, dict):
        raise ValueError("a trigger is a dict (or its JSON text), not %s" % type(payload).__name__)
    return payload


_warned = set()


def _warn_once(what, message):
    if what not in _warned:
        _warned.add(what)
        sys.stderr.write("ctxhost faust shim: %s\n" % message)


def host_capabilities():
    """The `ctx.config` table of a plugin running under ctxhost: every entry forwards to the host."""

    @_dual
    def trigger_create(payload):
        try:
            return _call("trigger.create", {"trigger": _trigger_payload(payload)})
        except _host.RpcError as e:
            # FaustBot raises ValueError for a blocked or invalid trigger.
            raise ValueError(e.message) from None

    @_dual
    def trigger_list():
        return _call("trigger.list")

    @_dual
    def trigger_get(trigger_id):
        return _call("trigger.get", {"id": str(trigger_id)})

    @_dual
    def trigger_update(trigger_id, payload):
        patch = dict(_trigger_payload(payload))
        patch.pop("id", None)
        return _call("trigger.update", {"id": str(trigger_id), "patch": patch})

    @_dual
    def trigger_delete(trigger_id):
        return _call("trigger.delete", {"id": str(trigger_id)})

    @_dual
    def plugin_config_register(schema):
        fields = normalize_config_schema(schema)
        values = _call("config.register", {"schema": fields})
        snapshot = _call("config.list")
        if isinstance(snapshot, dict) and "schema" in snapshot:
            return {"schema": snapshot.get("schema"), "values": snapshot.get("values", values)}
        return {"schema": fields, "values": values}

    @_dual
    def plugin_config_get(key, default=None):
        return _call("config.get", {"key": str(key), "default": default})

    @_dual
    def plugin_config_set(key, value):
        return _call("config.set", {"key": str(key), "value": value})

    @_dual
    def plugin_config_list():
        snapshot = _call("config.list")
        if isinstance(snapshot, dict) and isinstance(snapshot.get("values"), dict):
            return dict(snapshot["values"])
        return {}

    def processor_invoke(name, data, *, config=None, timeout=None, wait_timeout=None):
        raise RuntimeError("processor_invoke is not available: ctxhost does not provide FaustBot's processors")

    def processor_status(name):
        raise RuntimeError("processor_status is not available: ctxhost does not provide FaustBot's processors")

    @_dual
    def vfs_read_text(path, default=""):
        norm = normalize_vfs_path(path)
        func = symbolic_nodes.get(norm)
        if func is not None:
            # The host refuses to ask a plugin for its own node: compute it here.
            return symbolic_content(func, norm)
        got = _call("vfs.read", {"path": norm, "default": default})
        return default if got is None else got

    @_dual
    def vfs_write(path, content, description=""):
        norm = normalize_vfs_path(path)
        written = _call("vfs.write", {"path": norm, "content": _text(content), "description": str(description or "")})
        key = written if isinstance(written, str) else norm
        symbolic_nodes.pop(key, None)
        return None

    @_dual
    def vfs_write_symbolic(path, func, should_be_included_in_search=True, writable=False, description=""):
        if not callable(func):
            raise TypeError("vfs_write_symbolic needs a function computing the content, not %s" % type(func).__name__)
        norm = normalize_vfs_path(path)
        written = _call(
            "vfs.write_symbolic",
            {
                "path": norm,
                "searchable": bool(should_be_included_in_search),
                "writable": bool(writable),
                "description": str(description or ""),
            },
        )
        symbolic_nodes[written if isinstance(written, str) else norm] = func
        if writable:
            _warn_once("writable", "writable symbolic nodes: ctxhost does not send the agent's writes to the plugin")
        return None

    @_dual
    def vfs_set_write_handler(path, func):
        write_handlers[normalize_vfs_path(path)] = func
        _warn_once("handlers", "vfs write/edit handlers are kept but ctxhost never calls them")
        return None

    @_dual
    def vfs_set_edit_handler(path, func):
        edit_handlers[normalize_vfs_path(path)] = func
        _warn_once("handlers", "vfs write/edit handlers are kept but ctxhost never calls them")
        return None

    @_dual
    def vfs_delete(path):
        norm = normalize_vfs_path(path)
        deleted = _call("vfs.delete", {"path": norm})
        for known in list(symbolic_nodes):
            if known == norm or known.startswith(norm.rstrip("/") + "/"):
                del symbolic_nodes[known]
        return deleted

    @_dual
    def vfs_list(path="/"):
        return _call("vfs.list", {"path": normalize_vfs_path(path)})

    return {
        "trigger_create": trigger_create,
        "trigger_list": trigger_list,
        "trigger_get": trigger_get,
        "trigger_update": trigger_update,
        "trigger_delete": trigger_delete,
        "plugin_config_register": plugin_config_register,
        "processor_invoke": processor_invoke,
        "processor_status": processor_status,
        "plugin_config_get": plugin_config_get,
        "plugin_config_set": plugin_config_set,
        "plugin_config_list": plugin_config_list,
        "vfs_read_text": vfs_read_text,
        "vfs_write": vfs_write,
        "vfs_write_symbolic": vfs_write_symbolic,
        "vfs_set_write_handler": vfs_set_write_handler,
        "vfs_set_edit_handler": vfs_set_edit_handler,
        "vfs_delete": vfs_delete,
        "vfs_list": vfs_list,
    }


def symbolic_content(func, path):
    """`func(path)` as text (an awaitable result is handed back for the caller to await)."""
    try:
        params = [
            p
            for p in inspect.signature(func).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
        takes_path = bool(params)
    except (TypeError, ValueError):
        takes_path = True
    result = func(path) if takes_path else func()
    if inspect.isawaitable(result):

        async def finish():
            return _text(await result)

        return finish()
    return _text(result)
