"""The `faust_backend` package in-process: exports, markers, ctx without a host, storage files, stubs."""

import asyncio
import importlib
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.dont_write_bytecode = True
from harness import SHIM  # noqa: E402

if str(SHIM) not in sys.path:
    sys.path.insert(0, str(SHIM))

from faust_backend.plugin_system import (  # noqa: E402
    CoreHooks,
    FaustPlugin,
    MiddlewareSpec,
    PluginContext,
    PluginManager,
    PluginManifest,
    PluginProtocol,
    ToolSpec,
    hookimpl,
    hookspec,
)
from faust_backend.plugin_system.interfaces import normalize_config_schema, normalize_vfs_path  # noqa: E402
from faust_backend.plugin_system.manager import PluginLoadError  # noqa: E402
from faust_backend.plugin_system.plugin_storage import PluginStorage  # noqa: E402


class Exports(unittest.TestCase):
    def test_import_forms(self):
        import faust_backend.plugin_system as ps
        from faust_backend.plugin_system.hooks import hookimpl as h2
        from faust_backend.plugin_system.interfaces import PluginContext as C2, PluginManifest as M2
        from faust_backend.plugin_system.plugin_base import FaustPlugin as F2

        self.assertEqual(
            sorted(ps.__all__),
            sorted(["PluginManager", "PluginContext", "PluginManifest", "PluginProtocol", "ToolSpec", "MiddlewareSpec", "CoreHooks", "hookspec", "hookimpl", "FaustPlugin"]),
        )
        self.assertIs(h2, hookimpl)
        self.assertIs(C2, PluginContext)
        self.assertIs(M2, PluginManifest)
        self.assertIs(F2, FaustPlugin)
        self.assertTrue(PluginProtocol and CoreHooks)
        with self.assertRaises(PluginLoadError):
            PluginManager()

    def test_dataclasses(self):
        m = PluginManifest(plugin_id="p", name="P")
        self.assertEqual((m.version, m.entry, m.permissions, m.priority, m.enabled), ("0.1.0", "main.py", [], 100, True))
        t = ToolSpec(name="t", tool=len)
        self.assertEqual((t.enabled_by_default, t.description), (True, ""))
        mw = MiddlewareSpec(name="m", middleware=None)
        self.assertEqual(mw.priority, 100)
        ctx = PluginContext(plugin_id="p", plugin_dir=Path("/x"))
        self.assertEqual((ctx.plugin_data_dir, ctx.config, ctx.storage), (None, {}, None))

    def test_markers(self):
        @hookimpl
        def bare():
            pass

        @hookimpl(tryfirst=True, specname="message_received")
        def opts():
            pass

        @hookspec(firstresult=True)
        def spec():
            pass

        self.assertEqual(bare.faustbot_impl, {"wrapper": False, "hookwrapper": False, "optionalhook": False, "tryfirst": False, "trylast": False, "specname": None})
        self.assertTrue(opts.faustbot_impl["tryfirst"])
        self.assertEqual(opts.faustbot_impl["specname"], "message_received")
        self.assertTrue(spec.faustbot_spec["firstresult"])
        self.assertTrue(CoreHooks.health_check.faustbot_spec["firstresult"])
        self.assertTrue(hasattr(FaustPlugin.message_received, "faustbot_impl"))
        self.assertIsNone(FaustPlugin().communicate_handler({}, None))

    def test_backend_internals_are_not_provided(self):
        for name in ("faust_backend.memory", "faust_backend.runtime.state", "faust_backend.processors"):
            with self.assertRaises(ImportError) as e:
                importlib.import_module(name)
            self.assertIn("ctxhost does not provide", str(e.exception))
            self.assertIn(name.split(".")[0] + "." + name.split(".")[1], str(e.exception))
        with self.assertRaises(ImportError):
            exec("from faust_backend.memory import get_memory", {})
        with self.assertRaises(ImportError):
            exec("from faust_backend import runtime", {})

    def test_logger_and_config_loader(self):
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "plugins" / "p1"
            code = (
                "import json, faust_backend.config_loader as c\n"
                "from faust_backend.logger import get_logger\n"
                "get_logger('faust.plugins.p1').info('to stderr')\n"
                "print(json.dumps([c.AGENT_NAME, c.PLUGIN_DATA_ROOT, c.CONFIG_ROOT, c.PROJECT_ROOT, c.AGENT_ROOT]))\n"
            )
            env = dict(os.environ, CTXHOST_FAUST_DATA_DIR=str(data), CTXHOST_FAUST_PLUGIN_ID="p1", PYTHONPATH=str(SHIM), PYTHONDONTWRITEBYTECODE="1")
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            agent, plugin_data_root, config_root, project_root, agent_root = json.loads(out.stdout)
            self.assertEqual(agent, "faust")
            self.assertEqual(Path(plugin_data_root) / "p1", data)
            self.assertEqual(config_root, str(data / ".faustbot"))
            self.assertEqual(project_root, str(SHIM))
            self.assertTrue(Path(agent_root).is_dir())
            self.assertIn("INFO faust.plugins.p1: to stderr", out.stderr)


class ConfigSchemas(unittest.TestCase):
    def test_forms(self):
        field = {"key": "K", "type": "integer?", "default": "x"}
        self.assertEqual(normalize_config_schema({"fields": [field]}), [{"key": "K", "type": "str", "label": "K", "description": "", "default": "x"}])
        self.assertEqual(normalize_config_schema({"items": [{"key": "N", "type": "INT", "default": "7"}]})[0]["default"], 7)
        self.assertEqual(normalize_config_schema([{"key": "M", "type": "llm"}, {"type": "str"}, "junk", 3])[0]["type"], "str")
        self.assertEqual(len(normalize_config_schema([{"key": "M", "type": "llm"}, {"type": "str"}, "junk", 3])), 1)
        self.assertEqual(normalize_config_schema(["X:float:Ex=1.5"])[0]["default"], 1.5)
        self.assertEqual(normalize_config_schema(None), [])
        booleans = normalize_config_schema([{"key": k, "type": "bool", "default": v} for k, v in (("a", "on"), ("b", "no"), ("c", 0), ("d", True))])
        self.assertEqual([f["default"] for f in booleans], [True, False, False, True])

    def test_vfs_paths(self):
        self.assertEqual(normalize_vfs_path("plugins\\a/./b/../c"), "/plugins/a/c")
        self.assertEqual(normalize_vfs_path("/../.."), "/")


class CtxWithoutHost(unittest.TestCase):
    """A plugin's own tests build a PluginContext with their own capability table (FaustBot's way)."""

    def setUp(self):
        self.seen = []

        def sync_cap(key, default=None):
            self.seen.append(key)
            return {"A": 1}.get(key, default)

        async def async_cap(path, default=""):
            return "async:" + path

        self.ctx = PluginContext(plugin_id="p", plugin_dir=Path("."), config={"plugin_config_get": sync_cap, "vfs_read_text": async_cap})

    def test_sync_caller_gets_value(self):
        self.assertEqual(self.ctx.get_config("A"), 1)
        self.assertEqual(self.ctx.get_config("B", 2), 2)

    def test_async_caller_awaits(self):
        async def main():
            a = await self.ctx.get_config("A")
            text = await self.ctx.vfs_read_text("/x")
            not_awaited = self.ctx.get_config("A")
            return a, text, not_awaited

        a, text, not_awaited = asyncio.run(main())
        self.assertEqual((a, text), (1, "async:/x"))
        self.assertEqual(type(not_awaited).__name__, "Ready")
        self.assertEqual(self.seen, ["A", "A"], "the work was done even when not awaited")

    def test_comprehensions_in_async_code_give_awaitables(self):
        async def main():
            listed = await asyncio.gather(*[self.ctx.get_config(k) for k in ("A", "B")])
            generated = await asyncio.gather(*(self.ctx.get_config(k, 0) for k in ("A", "B")))
            awaited = [await self.ctx.get_config(k) for k in ("A",)]
            return listed, generated, awaited

        self.assertEqual(asyncio.run(main()), ([1, None], [1, 0], [1]))

    def test_comprehensions_in_sync_code_give_values(self):
        self.assertEqual([self.ctx.get_config(k) for k in ("A", "B")], [1, None])
        self.assertEqual(list(self.ctx.get_config(k, 0) for k in ("A", "B")), [1, 0])

    def test_async_generator_caller_awaits(self):
        async def gen():
            yield await self.ctx.get_config("A")

        async def main():
            return [x async for x in gen()]

        self.assertEqual(asyncio.run(main()), [1])

    def test_missing_capability(self):
        with self.assertRaises(RuntimeError) as e:
            self.ctx.trigger_list()
        self.assertEqual(str(e.exception), "trigger_list is not available")

    def test_host_capabilities_outside_ctxhost_say_so(self):
        from faust_backend.plugin_system.interfaces import host_capabilities

        ctx = PluginContext(plugin_id="p", plugin_dir=Path("."), config=host_capabilities())
        with self.assertRaises(RuntimeError) as e:
            ctx.list_configs()
        self.assertIn("not running under ctxhost", str(e.exception))


class StorageFiles(unittest.TestCase):
    """Without a host, PluginStorage keeps FaustBot's files."""

    def test_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            s = PluginStorage("p", Path(tmp), agent_name="faust")
            s.register_defaults({"turns": []})
            self.assertEqual(s.get("session", "turns"), [])
            self.assertEqual(s.get("global", "nope", 5), 5)
            s.set("global", "g", {"a": 1})
            s.set("session", "turns", [1])
            self.assertEqual(json.loads((Path(tmp) / "storage" / "global.json").read_text()), {"g": {"a": 1}})
            self.assertEqual(json.loads((Path(tmp) / "storage" / "session_faust.json").read_text()), {"turns": [1]})
            s.delete("global", "g")
            self.assertIsNone(s.get("global", "g"))
            s.reset_session()
            self.assertEqual(json.loads((Path(tmp) / "storage" / "session_faust.json").read_text()), {"turns": []})
            with self.assertRaises(ValueError):
                s.set("other", "k", 1)
            with self.assertRaises(TypeError):
                s.set("global", "k", object())


if __name__ == "__main__":
    unittest.main()
