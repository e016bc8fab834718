"""ctxhost's worker for one FaustBot plugin: `python3 ctxhost_faust_worker.py <entry file>`.

Runs a FaustBot plugin (a directory with `plugin.json` and an entry file
written against `faust_backend.plugin_system`) unmodified, as a persistent
ctxhost JSON-RPC worker. Owns: loading the plugin (FaustBot's load
sequence), answering the host's `hook/<name>` and `vfs/read_symbolic`
requests by calling the plugin's methods, and turning FaustBot-style return
values into ctxhost decisions (`agent-hooks.md`, "FaustBot-style return
values").

Environment (set by ctxhost): `CTXHOST_FAUST_PLUGIN_ID` (the plugin id, its
directory name), `CTXHOST_FAUST_MANIFEST` (plugin.json, normalised, as JSON
text), `CTXHOST_FAUST_DATA_DIR` (the plugin's writable data dir). The cwd is
the plugin dir.

Differences from FaustBot, on purpose:
- the plugin dir is put on `sys.path` (FaustBot does not; multi-file plugins
  did it themselves, which still works);
- hooks receive the real `ctx` (FaustBot passes None to pluggy hooks);
- `plugin_loaded` reaches this plugin only (FaustBot broadcasts it), and
  `on_load` is called for every plugin that defines it;
- `startup` is retried without ctx only when it takes no parameter (FaustBot
  retries on any TypeError, running startup twice);
- `register_frontend`, `register_schedules` and `register_prompt_suffix` may
  be `async def`; `health_check` is awaited when async;
- a hook is "implemented" only when the plugin's own class defines it (for
  pluggy hooks: with `@hookimpl`), so FaustBot's no-op base never answers.

Must never: write anything but JSON-RPC to the protocol stream (fd 1 is
pointed at stderr before the plugin is imported, so `print` is safe), exit
because a plugin raised, or run the plugin's code before `hook/register`
(or the first hook, after a respawn).
"""

import asyncio
import copy
import inspect
import json
import math
import os
import sys
import traceback
import typing
from pathlib import Path

SHIM_DIR = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # never write __pycache__ into the shim or the plugin dir
if SHIM_DIR in sys.path:
    sys.path.remove(SHIM_DIR)
sys.path.insert(0, SHIM_DIR)

from ctxhost_hooks import AGENT_HOOKS  # noqa: E402  (written by ctxhost from its HookName)
from faust_backend.plugin_system import _host  # noqa: E402
from faust_backend.plugin_system.interfaces import (  # noqa: E402
    MiddlewareSpec,
    PluginContext,
    PluginManifest,
    ToolSpec,
    host_capabilities,
    symbolic_content,
    symbolic_nodes,
)
from faust_backend.plugin_system.manager import PluginLoadError  # noqa: E402
from faust_backend.plugin_system.plugin_base import FaustPlugin  # noqa: E402
from faust_backend.plugin_system.plugin_storage import PluginStorage  # noqa: E402

# The hooks FaustBot dispatches through pluggy: implemented only with @hookimpl.
PLUGGY_HOOKS = (
    "plugin_loaded",
    "plugin_unloaded",
    "message_received",
    "llm_request_pre",
    "tool_call_pre",
    "tool_call_post",
    "agent_event_sent",
    "memory_read_pre",
    "memory_read_post",
    "memory_write_pre",
    "memory_write_post",
    "trigger_append",
    "trigger_fire",
    "config_changed",
)

# ctxhost hook names, in the order the register reply lists them: every agent
# hook but `register` (the call that asks for this list).
HOOK_ORDER = tuple(name for name in AGENT_HOOKS if name != "register")

IGNORED = ("__IGNORED__", "__REMOVED__")
HEARTBEAT_SECS = 10
MIDDLEWARE_REASON = (
    "LangChain middleware is not supported by ctxhost; use the tool_call_pre/tool_call_post and "
    "llm_request_pre hooks instead (the rest of the plugin runs without it)"
)

PASS = {"action": "pass"}


def replace(value):
    return {"action": "replace", "value": value}


def block(reason):
    return {"action": "block", "reason": reason}


def describe(error):
    """`<Type>: <message>`; a missing module reads `ImportError: No module named 'x'`."""
    name = "ImportError" if isinstance(error, ImportError) else type(error).__name__
    text = str(error)
    return "%s: %s" % (name, text) if text else name


class MethodNotFound(Exception):
    pass


# --- calling plugin code ------------------------------------------------


def _parameters(fn):
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def call_named(fn, available):
    """pluggy's rule: pass only the arguments the implementation names."""
    params = _parameters(fn)
    if params is None:
        return fn(**available)
    args, kwargs = [], {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name not in available:
            continue
        if p.kind is p.POSITIONAL_ONLY:
            args.append(available[p.name])
        else:
            kwargs[p.name] = available[p.name]
    return fn(*args, **kwargs)


def call_positional(fn, *args):
    """FaustBot's direct calls (`startup(ctx)`, `communicate_handler(payload, ctx)`), cut to what `fn` takes."""
    params = _parameters(fn)
    if params is None:
        return fn(*args)
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return fn(*args)
    n = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return fn(*args[:n])


def jsonable(value):
    """`value` if it is JSON; else JSON with str() for what is not."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def _defined(obj, name):
    """Whether `obj` itself or its class (not just FaustPlugin's no-op base) defines `name`."""
    try:
        if name in vars(obj):
            return True
    except TypeError:
        pass
    for klass in type(obj).__mro__:
        if name in vars(klass):
            return klass not in (FaustPlugin, object)
    return False


# --- tools ---------------------------------------------------------------

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}
_SIMPLE_NAMES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "dict": "object",
    "list": "array",
    "tuple": "array",
    "set": "array",
}


def annotation_schema(ann):
    """A JSON Schema for a parameter annotation ({} when unknown: any value)."""
    if ann is inspect.Parameter.empty or ann is typing.Any or ann is None:
        return {}
    if isinstance(ann, str):
        text = ann.strip()
        base = text.split("[", 1)[0].strip().lower().replace("typing.", "")
        if base in ("list", "tuple", "set", "sequence"):
            schema = {"type": "array"}
            inner = text[text.find("[") + 1 : text.rfind("]")] if "[" in text else ""
            item = annotation_schema(inner) if inner and "," not in inner else {}
            if item:
                schema["items"] = item
            return schema
        if base in _SIMPLE_NAMES:
            return {"type": _SIMPLE_NAMES[base]}
        return {}
    if ann in _SIMPLE:
        return {"type": _SIMPLE[ann]}
    if ann in (list, tuple, set, frozenset):
        return {"type": "array"}
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin in (list, set, frozenset, tuple) or (
        origin is not None and getattr(origin, "__name__", "") in ("Sequence", "Iterable", "MutableSequence")
    ):
        schema = {"type": "array"}
        if args and origin is not tuple:
            item = annotation_schema(args[0])
            if item:
                schema["items"] = item
        return schema
    if origin is dict or (origin is not None and getattr(origin, "__name__", "") in ("Mapping", "MutableMapping")):
        return {"type": "object"}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is typing.Union or type(ann).__name__ == "UnionType":
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return annotation_schema(options[0])
        schemas = [annotation_schema(a) for a in options]
        return {"anyOf": schemas} if all(schemas) else {}
    return {}


def _docstring_args(doc):
    """Per-argument descriptions from a Google-style `Args:` section."""
    found = {}
    in_args = False
    for line in (doc or "").splitlines():
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:", "params:"):
            in_args = True
            continue
        if not in_args:
            continue
        if not stripped:
            continue
        if stripped.endswith(":") and " " not in stripped:
            in_args = False  # the next section (Returns:, ...)
            continue
        head, sep, rest = stripped.partition(":")
        name = head.split("(", 1)[0].strip()
        if sep and name.isidentifier():
            found[name] = rest.strip()
    return found


def function_schema(fn):
    """The JSON Schema of a plain function's arguments, from its signature and docstring."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable string annotations: read them as text
        hints = {}
    docs = _docstring_args(inspect.getdoc(fn))
    properties, required = {}, []
    for p in (_parameters(fn) or []):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in ("self", "cls"):
            continue
        schema = dict(annotation_schema(hints.get(p.name, p.annotation)))
        if p.name in docs and docs[p.name]:
            schema["description"] = docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        else:
            try:
                json.dumps(p.default, allow_nan=False)
                schema["default"] = p.default
            except (TypeError, ValueError):
                pass
        properties[p.name] = schema
    out = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _langchain_base_tool():
    try:
        from langchain_core.tools import BaseTool
    except Exception:
        return None
    return BaseTool


def langchain_schema(tool):
    schema = None
    args_schema = getattr(tool, "args_schema", None)
    if isinstance(args_schema, dict):
        schema = args_schema
    elif args_schema is not None:
        for method in ("model_json_schema", "schema"):
            f = getattr(args_schema, method, None)
            if callable(f):
                try:
                    schema = f()
                    break
                except Exception:
                    continue
    if schema is None:
        args = getattr(tool, "args", None)
        if isinstance(args, dict):
            schema = {"type": "object", "properties": args}
    if not isinstance(schema, dict):
        schema = {"type": "object", "properties": {}}
    schema = jsonable(schema)
    schema.setdefault("type", "object")
    return schema


class Tool:
    """One registered tool: what the host is told, and how to call it."""

    def __init__(self, name, description, parameters, target, langchain):
        self.name = name
        self.description = description
        self.parameters = parameters
        self.target = target
        self.langchain = langchain

    def declaration(self):
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def invoke(self, args):
        """The call (a value or an awaitable), run by the worker inside its loop."""
        if self.langchain:
            if getattr(self.target, "coroutine", None) is not None and getattr(self.target, "func", None) is None:
                return self.target.ainvoke(args)
            return self.target.invoke(args)
        return self.target(**args)


def make_tool(item):
    """A plugin's tool item as a Tool; raises ValueError naming what is wrong."""
    spec_name, spec_desc, target = None, "", item
    if isinstance(item, ToolSpec):
        spec_name, spec_desc, target = item.name, item.description or "", item.tool
    elif isinstance(item, dict):
        if item.get("tool") is None:
            raise ValueError("a tool dict needs a `tool`")
        spec_name, spec_desc, target = item.get("name"), str(item.get("description") or ""), item["tool"]
    base = _langchain_base_tool()
    if base is not None and isinstance(target, base):
        name = str(getattr(target, "name", None) or spec_name or "tool")
        description = str(getattr(target, "description", None) or spec_desc or "")
        return Tool(name, description, langchain_schema(target), target, True)
    if not callable(target):
        raise ValueError("not a ToolSpec, a {\"tool\": ...} dict, a function or a LangChain tool")
    name = str(spec_name or getattr(target, "name", None) or getattr(target, "__name__", None) or "tool")
    description = spec_desc or inspect.getdoc(target) or ""
    return Tool(name, description, function_schema(target), target, False)


def _item_name(item):
    """A name to show for a registration item that was refused."""
    if isinstance(item, str):
        return item[:80]
    value = getattr(item, "name", None)
    if isinstance(value, str) and value:
        return value
    if isinstance(item, dict):
        return str(item.get("name") or "?")
    return getattr(item, "__name__", None) or type(item).__name__


# --- the worker ----------------------------------------------------------


class Worker:
    def __init__(self, entry, conn):
        self.conn = conn
        self.entry = Path(entry).resolve()
        cwd = Path.cwd().resolve()
        self.plugin_dir = cwd if cwd in self.entry.parents else self.entry.parent
        self.plugin_id = os.environ.get("CTXHOST_FAUST_PLUGIN_ID") or self.plugin_dir.name
        try:
            manifest = json.loads(os.environ.get("CTXHOST_FAUST_MANIFEST") or "{}")
        except ValueError:
            manifest = {}
        self.manifest_json = manifest if isinstance(manifest, dict) else {}
        self.data_dir = Path(os.environ.get("CTXHOST_FAUST_DATA_DIR") or (self.plugin_dir / "data")).resolve()
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.plugin = None
        self.ctx = None
        self.reply = None
        self.load_error = None
        self.impls = {}
        self.tools = {}
        self.schedules = {}

    # --- running plugin code -------------------------------------------
    def run(self, thunk):
        """Runs `thunk()` inside the worker's event loop; awaits what it returns."""

        async def main():
            result = thunk()
            if inspect.isawaitable(result):
                result = await result
            return result

        return self.loop.run_until_complete(main())

    def stage(self, label, thunk):
        try:
            return self.run(thunk)
        except BaseException as e:  # noqa: B036 - a plugin's SystemExit must not end the worker
            if isinstance(e, KeyboardInterrupt):
                raise
            traceback.print_exc(file=sys.stderr)
            raise PluginLoadError("%s raised %s" % (label, describe(e))) from None

    def direct(self, *names):
        """The first of `names` the plugin defines itself (not only FaustPlugin's no-op)."""
        for name in names:
            if _defined(self.plugin, name):
                fn = getattr(self.plugin, name, None)
                if callable(fn):
                    return fn
        return None

    # --- loading -------------------------------------------------------
    def import_plugin(self):
        if str(self.plugin_dir) not in sys.path:
            sys.path.insert(1, str(self.plugin_dir))
        if not self.entry.is_file():
            raise PluginLoadError("PluginLoadError: Plugin entry not found: %s" % self.entry)
        import importlib.util

        module_name = "faust_plugin_%s" % self.plugin_id
        try:
            spec = importlib.util.spec_from_file_location(module_name, str(self.entry))
            if spec is None or spec.loader is None:
                raise PluginLoadError("cannot import %s" % self.entry)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        except BaseException as e:  # noqa: B036
            if isinstance(e, KeyboardInterrupt):
                raise
            sys.modules.pop(module_name, None)
            traceback.print_exc(file=sys.stderr)
            raise PluginLoadError(describe(e)) from None
        if callable(getattr(module, "get_plugin", None)):
            plugin = self.stage("get_plugin()", module.get_plugin)
        elif hasattr(module, "Plugin"):
            plugin = self.stage("Plugin()", module.Plugin)
        else:
            raise PluginLoadError("PluginLoadError: Plugin module must expose get_plugin() or Plugin class")
        if plugin is None:
            raise PluginLoadError("PluginLoadError: get_plugin() returned None")
        return plugin

    def make_manifest(self):
        m = self.manifest_json

        def text(key, default=""):
            value = m.get(key)
            return str(value) if value not in (None, "") else default

        try:
            priority = int(m.get("priority")) if m.get("priority") is not None else 100
        except (TypeError, ValueError):
            priority = 100
        return PluginManifest(
            plugin_id=self.plugin_id,
            name=text("name", self.plugin_id),
            version=text("version", "0.1.0"),
            description=text("description"),
            author=text("author"),
            homepage=text("homepage"),
            enabled=bool(m.get("enabled", True)),
            entry=text("entry", self.entry.name),
            permissions=list(m.get("permissions") or []),
            priority=priority,
        )

    def find_impls(self):
        """The pluggy hook implementations: decorated, and defined by the plugin itself."""
        impls = {}
        for name in PLUGGY_HOOKS:
            if not _defined(self.plugin, name):
                continue
            fn = getattr(self.plugin, name, None)
            opts = getattr(fn, "faustbot_impl", None)
            if callable(fn) and isinstance(opts, dict) and not opts.get("specname"):
                impls[name] = fn
        # `@hookimpl(specname="message_received") def on_message(...)`: read the class
        # dicts (not getattr on every name, which would run properties).
        namespaces = []
        try:
            namespaces.append(vars(self.plugin))
        except TypeError:
            pass
        for klass in type(self.plugin).__mro__:
            if klass in (FaustPlugin, object):
                break
            namespaces.append(vars(klass))
        seen = set()
        for namespace in namespaces:
            for attr, value in list(namespace.items()):
                if attr in seen:
                    continue
                seen.add(attr)
                raw = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
                opts = getattr(raw, "faustbot_impl", None) if callable(raw) else None
                if isinstance(opts, dict) and opts.get("specname") in PLUGGY_HOOKS:
                    fn = getattr(self.plugin, attr, None)
                    if callable(fn):
                        impls[opts["specname"]] = fn
        for name, fn in list(impls.items()):
            opts = getattr(fn, "faustbot_impl", {}) or {}
            if opts.get("wrapper") or opts.get("hookwrapper"):
                sys.stderr.write("ctxhost faust shim: %s is a hook wrapper; ctxhost does not run wrappers\n" % name)
                del impls[name]
        return impls

    def register(self):
        if self.reply is not None:
            return self.reply
        if self.load_error is not None:
            raise PluginLoadError(self.load_error)
        try:
            self.reply = self.load()
        except PluginLoadError as e:
            self.load_error = str(e)
            raise
        return self.reply

    def ensure_loaded(self):
        if self.reply is None and self.load_error is None:
            try:
                self.register()
            except PluginLoadError:
                pass
        if self.load_error is not None:
            raise PluginLoadError("the plugin did not load: %s" % self.load_error)

    def load(self):
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
        plugin = self.import_plugin()
        self.plugin = plugin
        if getattr(plugin, "manifest", None) is None:
            try:
                plugin.manifest = self.make_manifest()
            except Exception:
                pass
        ctx = PluginContext(
            plugin_id=self.plugin_id,
            plugin_dir=self.plugin_dir,
            plugin_data_dir=self.data_dir,
            config=host_capabilities(),
            storage=PluginStorage(self.plugin_id, self.data_dir, agent_name="faust"),
        )
        self.ctx = ctx
        self.impls = self.find_impls()
        refused = []

        if "plugin_loaded" in self.impls:
            self.stage("plugin_loaded", lambda: call_named(self.impls["plugin_loaded"], {"ctx": ctx}))
        on_load = self.direct("on_load")
        if on_load is not None:
            self.stage("on_load", lambda: call_positional(on_load, ctx))
        startup = self.direct("startup", "Startup")
        if startup is not None:
            self.stage("startup", lambda: call_positional(startup, ctx))

        # tools
        fn = self.direct("register_tools")
        items = self.stage("register_tools", lambda: call_positional(fn, ctx)) if fn else []
        tools = {}
        for item in _as_list(items):
            try:
                tool = make_tool(item)
            except Exception as e:
                refused.append({"kind": "tool", "name": _item_name(item), "reason": str(e)})
                continue
            tools[tool.name] = tool  # FaustBot: the later one of a name wins
        self.tools = tools

        # middlewares: all refused
        fn = self.direct("register_middlewares")
        items = self.stage("register_middlewares", lambda: call_positional(fn, ctx)) if fn else []
        middlewares = []
        for item in _as_list(items):
            if item is None:
                continue
            if isinstance(item, MiddlewareSpec):
                name = item.name
            elif isinstance(item, dict) and item.get("middleware") is not None:
                name = str(item.get("name") or type(item["middleware"]).__name__)
            else:
                name = type(item).__name__
            middlewares.append(name)
            refused.append({"kind": "middleware", "name": name, "reason": MIDDLEWARE_REASON})

        fn = self.direct("register_processors")
        if fn is not None:
            items = self.optional("register_processors", lambda: call_positional(fn, ctx))
            for item in _as_list(items):
                refused.append(
                    {
                        "kind": "processor",
                        "name": _item_name(item),
                        "reason": "FaustBot processors are not supported by ctxhost",
                    }
                )

        schedules = self.load_schedules(refused)
        frontend, assets = self.load_frontend()
        suffix = self.load_prompt_suffix()

        if self.direct("sse_communicate_handler") is not None:
            sys.stderr.write("ctxhost faust shim: sse_communicate_handler is not supported by ctxhost; ignored\n")

        hooks = self.implemented_hooks()
        return {
            "hooks": hooks,
            "tools": [t.declaration() for t in tools.values()],
            "schedules": schedules,
            "frontend": frontend,
            "frontend_assets": assets,
            "prompt_suffix": suffix,
            "heartbeat_secs": HEARTBEAT_SECS if "heartbeat" in hooks else None,
            "middlewares": middlewares,
            "refused": refused,
        }

    def optional(self, label, thunk):
        """A registration FaustBot swallows failures of: logged, then empty."""
        try:
            return self.run(thunk)
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            sys.stderr.write("ctxhost faust shim: %s raised %s; ignored\n" % (label, describe(e)))
            return []

    def load_schedules(self, refused):
        fn = self.direct("register_schedules")
        items = self.optional("register_schedules", fn) if fn else []
        out = []
        self.schedules = {}
        for index, s in enumerate(_as_list(items)):
            if not isinstance(s, dict):
                refused.append({"kind": "schedule", "name": _item_name(s), "reason": "a schedule is a dict"})
                continue
            sid = str(s.get("id") or "%s_%d" % (self.plugin_id, index))
            s["_plugin"] = self.plugin_id
            callback = s.get("callback")
            interval = s.get("interval", s.get("interval_secs"))
            if not callable(callback):
                refused.append({"kind": "schedule", "name": sid, "reason": "`callback` is not callable"})
                continue
            try:
                seconds = float(interval)
                if not math.isfinite(seconds) or seconds <= 0:
                    raise ValueError
            except (TypeError, ValueError):
                reason = (
                    "cron schedules are not supported by ctxhost (FaustBot never ran them either)"
                    if s.get("cron")
                    else "`interval` must be a number of seconds > 0"
                )
                refused.append({"kind": "schedule", "name": sid, "reason": reason})
                continue
            if sid in self.schedules:  # FaustBot: a later schedule of the same id wins
                out = [o for o in out if o["id"] != sid]
            self.schedules[sid] = callback
            out.append({"id": sid, "interval_secs": int(seconds) if seconds.is_integer() else seconds})
        return out

    def frontend_path(self, path):
        """`path` relative to the plugin's `frontend/` dir, or None when it is elsewhere."""
        p = path.split("?", 1)[0].split("#", 1)[0]
        prefixes = ["/faust/plugins/%s/frontend/" % self.plugin_id]
        declared = self.manifest_json.get("id")
        if isinstance(declared, str) and declared and declared != self.plugin_id:
            prefixes.append("/faust/plugins/%s/frontend/" % declared)
        prefixes += ["./frontend/", "frontend/"]
        for prefix in prefixes:
            if p.startswith(prefix):
                p = p[len(prefix) :]
                break
        else:
            if p.startswith("/") or "://" in p:
                return None
        parts = [x for x in p.split("/") if x not in ("", ".")]
        if not parts or ".." in parts:
            return None
        return "/".join(parts)

    def load_frontend(self):
        fn = self.direct("register_frontend")
        items = self.optional("register_frontend", fn) if fn else []
        frontend = {"js": [], "css": []}
        assets = []
        for a in _as_list(items):
            if not isinstance(a, dict):
                continue
            a.setdefault("plugin_id", self.plugin_id)
            assets.append(jsonable(a))
            kind = str(a.get("type") or "").lower()
            path = a.get("path")
            if kind in ("js", "css") and isinstance(path, str):
                rel = self.frontend_path(path)
                if rel is None:
                    sys.stderr.write(
                        "ctxhost faust shim: frontend asset %r is not under the plugin's frontend/ dir; "
                        "not served\n" % path
                    )
                elif rel not in frontend[kind]:
                    frontend[kind].append(rel)
        return frontend, assets

    def load_prompt_suffix(self):
        fn = self.direct("register_prompt_suffix")
        items = self.optional("register_prompt_suffix", fn) if fn else []
        if isinstance(items, str):
            items = [items]
        parts = [s for s in _as_list(items) if isinstance(s, str) and s.strip()]
        return "\n".join(parts) if parts else None

    def implemented_hooks(self):
        have = set(name for name in self.impls if name not in ("plugin_loaded", "plugin_unloaded"))
        if self.direct("filter_trigger_append"):
            have.add("trigger_append")
        if self.direct("filter_trigger_fire"):
            have.add("trigger_fire")
        if self.direct("Heartbeat", "heartbeat", "on_heartbeat"):
            have.add("heartbeat")
        if self.direct("health_check"):
            have.add("health_check")
        if self.direct("communicate_handler"):
            have.add("communicate")
        if self.schedules:
            have.add("run_schedule")
        if self.tools:
            have.add("call_tool")
        if symbolic_nodes or self._mentions("vfs_write_symbolic"):
            have.add("read_symbolic")
        if "plugin_unloaded" in self.impls or self.direct("on_unload"):
            have.add("unload")
        return [name for name in HOOK_ORDER if name in have]

    def _mentions(self, word):
        try:
            return word in self.entry.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False

    # --- the host's requests -------------------------------------------
    def handle(self, method, params):
        params = params if isinstance(params, dict) else {}
        if method == "hook/register":
            return self.register()
        if method == "vfs/read_symbolic":
            self.ensure_loaded()
            return self.read_symbolic(params)
        if not method.startswith("hook/"):
            raise MethodNotFound(method)
        name = method[len("hook/") :]
        handler = getattr(self, "hook_" + name, None)
        if handler is None:
            raise MethodNotFound(method)
        self.ensure_loaded()
        return handler(params)

    def call_impl(self, name, available):
        fn = self.impls.get(name)
        if fn is None:
            return None, False
        return self.run(lambda: call_named(fn, available)), True

    def hook_message_received(self, p):
        available = {"msg": p.get("text", p.get("msg")), "history": p.get("history") or [], "ctx": self.ctx}
        available["origin"] = p.get("origin") or "user"
        result, called = self.call_impl("message_received", available)
        if isinstance(result, str):
            if result in IGNORED:
                return block("ignored by %s" % self.plugin_id)
            return replace(result)
        return PASS

    def hook_llm_request_pre(self, p):
        result, _ = self.call_impl("llm_request_pre", {"messages": p.get("messages") or [], "ctx": self.ctx})
        if isinstance(result, list) and result:
            return replace(jsonable(result))
        return PASS

    def hook_tool_call_pre(self, p):
        result, called = self.call_impl("tool_call_pre", {"name": p.get("name"), "args": p.get("args"), "ctx": self.ctx})
        if not called:
            return PASS
        if result is None:
            return block("blocked by %s" % self.plugin_id)
        if isinstance(result, dict):
            return replace(result)
        return PASS

    def hook_tool_call_post(self, p):
        available = {
            "name": p.get("name"),
            "args": p.get("args"),
            "result": p.get("result"),
            "is_error": bool(p.get("is_error", False)),
            "ctx": self.ctx,
        }
        result, _ = self.call_impl("tool_call_post", available)
        if result is None:
            return PASS
        return replace(jsonable(result))

    def hook_agent_event_sent(self, p):
        available = {"event": p.get("event"), "current_history": p.get("current_history") or [], "ctx": self.ctx}
        result, _ = self.call_impl("agent_event_sent", available)
        if isinstance(result, str) and result in IGNORED:
            return block("suppressed by %s" % self.plugin_id)
        if isinstance(result, dict):
            return replace(jsonable(result))
        return PASS

    def hook_memory_read_pre(self, p):
        result, _ = self.call_impl("memory_read_pre", {"query": p.get("query"), "filters": p.get("filters"), "ctx": self.ctx})
        return replace(result) if isinstance(result, str) else PASS

    def hook_memory_read_post(self, p):
        result, _ = self.call_impl(
            "memory_read_post", {"query": p.get("query"), "results": p.get("results"), "ctx": self.ctx}
        )
        return replace(jsonable(result)) if isinstance(result, list) else PASS

    def hook_memory_write_pre(self, p):
        available = {"content": p.get("content"), "metadata": p.get("metadata"), "ctx": self.ctx}
        result, _ = self.call_impl("memory_write_pre", available)
        return replace(result) if isinstance(result, str) else PASS

    def hook_memory_write_post(self, p):
        available = {"content": p.get("content"), "metadata": p.get("metadata"), "id": p.get("id"), "ctx": self.ctx}
        self.call_impl("memory_write_post", available)
        return {}

    def _trigger(self, hook, legacy_name, p):
        payload = p.get("trigger", p.get("payload"))
        changed = False
        legacy = self.direct(legacy_name)
        if legacy is not None:
            # FaustBot's legacy filter: a dict replaces, anything else (or an exception) blocks.
            try:
                result = self.run(lambda: call_positional(legacy, copy.deepcopy(payload)))
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                return block("blocked by %s: %s raised %s" % (self.plugin_id, legacy_name, describe(e)))
            if not isinstance(result, dict):
                return block("blocked by %s" % self.plugin_id)
            payload, changed = result, True
        fn = self.impls.get(hook)
        if fn is not None:
            current = payload
            result = self.run(lambda: call_named(fn, {"payload": current, "ctx": self.ctx}))
            if result is None:
                return block("blocked by %s" % self.plugin_id)
            if isinstance(result, dict):
                payload, changed = result, True
        return replace(jsonable(payload)) if changed else PASS

    def hook_trigger_append(self, p):
        return self._trigger("trigger_append", "filter_trigger_append", p)

    def hook_trigger_fire(self, p):
        return self._trigger("trigger_fire", "filter_trigger_fire", p)

    def hook_config_changed(self, p):
        self.call_impl("config_changed", {"key": p.get("key"), "old": p.get("old"), "new": p.get("new"), "ctx": self.ctx})
        return {}

    def hook_heartbeat(self, p):
        fn = self.direct("Heartbeat", "heartbeat", "on_heartbeat")
        if fn is not None:
            self.run(lambda: call_positional(fn, self.ctx))
        return {}

    def hook_health_check(self, p):
        fn = self.direct("health_check")
        result = self.run(fn) if fn is not None else None
        if result is None:
            return {"status": "ok"}
        return jsonable(result)

    def hook_communicate(self, p):
        fn = self.direct("communicate_handler")
        if fn is None:
            raise PluginLoadError("Plugin does not support communicate: %s" % self.plugin_id)
        payload = p.get("payload")
        body = payload if isinstance(payload, dict) else {}
        result = self.run(lambda: call_positional(fn, body, self.ctx))
        if result is None:
            return {"status": "ok"}
        return jsonable(result)

    def hook_call_tool(self, p):
        name = p.get("name")
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return {
                "error": "LookupError: plugin '%s' has no tool %r (tools: %s)"
                % (self.plugin_id, name, ", ".join(sorted(self.tools)) or "none")
            }
        args = p.get("args")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return {"error": "TypeError: the arguments of %s must be an object" % name}
        try:
            result = self.run(lambda: tool.invoke(args))
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            return {"error": describe(e)}
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError):
            result = str(result)
        return {"result": result}

    def hook_run_schedule(self, p):
        sid = p.get("id")
        callback = self.schedules.get(sid) if isinstance(sid, str) else None
        if callback is None:
            raise LookupError(
                "plugin '%s' has no schedule %r (schedules: %s)"
                % (self.plugin_id, sid, ", ".join(sorted(self.schedules)) or "none")
            )
        self.run(lambda: call_positional(callback))
        return {}

    def hook_unload(self, p):
        if self.plugin is None:
            return {}
        if "plugin_unloaded" in self.impls:
            self.run(lambda: call_named(self.impls["plugin_unloaded"], {"ctx": self.ctx}))
        fn = self.direct("on_unload")
        if fn is not None:
            self.run(lambda: call_positional(fn, self.ctx))
        return {}

    def hook_register(self, p):  # reached only through handle(); kept for symmetry
        return self.register()

    def read_symbolic(self, p):
        from faust_backend.plugin_system.interfaces import normalize_vfs_path

        path = normalize_vfs_path(p.get("path") or "/")
        func = symbolic_nodes.get(path)
        if func is None:
            raise LookupError(
                "plugin '%s' has no symbolic node at %s (nodes: %s)"
                % (self.plugin_id, path, ", ".join(sorted(symbolic_nodes)) or "none")
            )
        return {"content": self.run(lambda: symbolic_content(func, path))}


def _as_list(items):
    if items is None:
        return []
    if isinstance(items, (list, tuple)):
        return list(items)
    if isinstance(items, (str, bytes, dict)):
        return [items]
    try:
        return list(items)
    except TypeError:
        return [items]


# --- the loop ------------------------------------------------------------


def protocol_streams():
    """The JSON-RPC pipes, taken off fds 0 and 1; the plugin's stdin becomes /dev/null, its stdout stderr."""
    rin = os.fdopen(os.dup(0), "rb")
    wout = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull, "r")
    sys.stdout = sys.stderr
    return rin, wout


def serve(worker, conn):
    while True:
        message = conn.read()
        if message is None:
            return
        method = message.get("method")
        if not isinstance(method, str) or "id" not in message:
            continue  # a notification or a stray response: nothing to answer
        request_id = message["id"]
        params = message.get("params")
        with conn.lock:
            conn.active = True
            agent = params.get("agent_id") if isinstance(params, dict) else None
            conn.agent_id = agent if isinstance(agent, str) and agent else None
        try:
            try:
                result = worker.handle(method, params)
                answer = {"jsonrpc": "2.0", "id": request_id, "result": result}
            except MethodNotFound:
                answer = {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": -32601, "message": "no handler for %s" % method},
                }
            except PluginLoadError as e:
                answer = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": str(e)}}
            except BaseException as e:  # noqa: B036 - the worker goes on
                if isinstance(e, KeyboardInterrupt):
                    raise
                traceback.print_exc(file=sys.stderr)
                answer = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": describe(e)}}
            with conn.lock:
                try:
                    conn.send(answer)
                except (TypeError, ValueError) as e:
                    conn.error(request_id, -32000, "the plugin's answer is not JSON: %s" % e)
        finally:
            with conn.lock:
                conn.active = False
                conn.agent_id = None
            sys.stderr.flush()


def main(argv):
    if len(argv) < 2:
        sys.stderr.write("usage: ctxhost_faust_worker.py <entry file of the FaustBot plugin>\n")
        return 2
    rin, wout = protocol_streams()
    conn = _host.Connection(rin, wout)
    _host.set_connection(conn)
    worker = Worker(argv[1], conn)
    try:
        serve(worker, conn)
    finally:
        try:
            worker.loop.close()
        except Exception:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
