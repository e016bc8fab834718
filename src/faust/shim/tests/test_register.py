"""`hook/register`: the load sequence and the reply's shape."""

import sys
import unittest

from harness import SHIM, FakeHost, HookError

if str(SHIM) not in sys.path:
    sys.path.insert(0, str(SHIM))

from ctxhost_hooks import AGENT_HOOKS  # noqa: E402  (ctxhost's HookName::AGENT)

MIDDLEWARE_REASON_START = "LangChain middleware is not supported by ctxhost; "


class RegisterReply(unittest.TestCase):
    def check_reply(self, fixture, tag):
        host = FakeHost(fixture)
        self.addCleanup(host.close)
        reply = host.register()
        self.assertEqual(
            sorted(reply),
            sorted(
                [
                    "hooks",
                    "tools",
                    "schedules",
                    "frontend",
                    "frontend_assets",
                    "prompt_suffix",
                    "heartbeat_secs",
                    "middlewares",
                    "refused",
                ]
            ),
        )
        # Every agent hook but register itself, in ctxhost's order: the fixture implements them all.
        self.assertEqual(reply["hooks"], [name for name in AGENT_HOOKS if name != "register"])
        self.assertIn("message_received", reply["hooks"])
        # tools: a plain function (schema from the signature), a ToolSpec, a dict, a non-JSON one; junk refused
        tools = {t["name"]: t for t in reply["tools"]}
        self.assertEqual(sorted(tools), ["boom", "echo_tool", "lookup", "odd"])
        self.assertEqual(
            tools["lookup"]["parameters"],
            {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "description": "the order's id"},
                    "count": {"type": "integer", "description": "how many", "default": 1},
                    "tags": {"type": "array", "items": {"type": "string"}, "default": None},
                    "exact": {"type": "boolean", "default": False},
                    "ratio": {"type": "number", "default": 0.5},
                    "extra": {"type": "object", "default": None},
                },
                "required": ["order_id"],
            },
        )
        self.assertTrue(tools["lookup"]["description"].startswith("Find an order."))
        self.assertEqual(tools["echo_tool"]["description"], "Echo the text")
        self.assertEqual(
            tools["echo_tool"]["parameters"],
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        )
        self.assertEqual(tools["boom"]["parameters"], {"type": "object", "properties": {}})
        # schedules: ids (given or made up), intervals in seconds, a repeated id: the later wins; cron refused
        self.assertEqual(
            reply["schedules"],
            [{"id": "poll", "interval_secs": 30}, {"id": fixture + "_2", "interval_secs": 0.4}, {"id": "twice", "interval_secs": 6}],
        )
        # frontend: paths relative to frontend/, foreign URLs not served, assets verbatim with plugin_id
        self.assertEqual(reply["frontend"], {"js": ["panel.js", "app-hook.js"], "css": ["css/panel.css"]})
        self.assertEqual(len(reply["frontend_assets"]), 4)
        self.assertEqual(
            reply["frontend_assets"][0], {"type": "js", "path": "/faust/plugins/%s/frontend/panel.js" % fixture, "plugin_id": fixture}
        )
        self.assertEqual(reply["frontend_assets"][3], {"type": "js", "path": "app-hook.js", "extra": 1, "plugin_id": fixture})
        self.assertEqual(reply["prompt_suffix"], "\n[%s]\nfirst\nsecond" % tag)
        self.assertEqual(reply["heartbeat_secs"], 10)
        self.assertEqual(reply["middlewares"], ["GuardMiddleware", "named_mw"])
        refused = reply["refused"]
        self.assertEqual([(r["kind"], r["name"]) for r in refused if r["kind"] == "middleware"], [("middleware", "GuardMiddleware"), ("middleware", "named_mw")])
        for r in refused:
            if r["kind"] == "middleware":
                self.assertTrue(r["reason"].startswith(MIDDLEWARE_REASON_START), r)
        self.assertIn(("tool", "not a tool"), [(r["kind"], r["name"]) for r in refused])
        cron = [r for r in refused if r["kind"] == "schedule"]
        self.assertEqual(len(cron), 1)
        self.assertEqual(cron[0]["name"], "cron-only")
        self.assertIn("cron", cron[0]["reason"])
        # startup reached the host: config registered (defaults coerced), vfs written, symbolic declared
        self.assertEqual(host.values, {"SUFFIX": "[%s]" % tag.lower(), "LIMIT": 3})
        self.assertEqual(host.vfs["/plugins/%s/index.md" % fixture], {"content": "# " + tag.title()})
        self.assertEqual(host.vfs["/plugins/%s/state.json" % fixture], {"symbolic": fixture, "searchable": True})
        state = host.hook("communicate", payload={"action": "state"})
        self.assertEqual(state["limit"], 3, "get_config gave the plain value in startup")
        self.assertEqual(state["state"]["loaded"], 1, "plugin_loaded ran once, on this plugin")
        self.assertTrue(state["same_ctx"], "hooks get the real ctx, the one startup got")
        # a second register answers the same without running anything again
        self.assertEqual(host.register(), reply)
        self.assertEqual(host.hook("communicate", payload={"action": "state"})["state"]["loaded"], 1)
        return host, reply

    def test_sync_plugin_reply(self):
        host, _ = self.check_reply("sync-all", "Sync")
        self.assertIn("a plugin printing to stdout must not break the protocol", host.wait_stderr("a plugin printing to stdout must not break the protocol"))

    def test_async_plugin_reply(self):
        self.check_reply("async-all", "Async")

    def test_undecorated_overrides_do_not_count(self):
        host = FakeHost("undecorated")
        self.addCleanup(host.close)
        reply = host.register()  # the undecorated plugin_loaded would raise if called
        self.assertEqual(reply["hooks"], ["tool_call_post", "heartbeat"])
        self.assertEqual(reply["heartbeat_secs"], 10)
        self.assertEqual(reply["tools"], [])
        self.assertEqual(reply["prompt_suffix"], None)
        self.assertEqual(reply["frontend"], {"js": [], "css": []})
        self.assertEqual(host.hook("message_received", text="hi", agent_id="a1"), {"action": "pass"})
        with self.assertRaises(HookError) as e:
            host.hook("communicate", payload={})
        self.assertEqual(e.exception.message, "Plugin does not support communicate: undecorated")
        self.assertEqual(host.hook("health_check"), {"status": "ok"})
        self.assertIn("hook wrapper", host.wait_stderr("hook wrapper"))

    def test_old_style_plugin(self):
        host = FakeHost("oldstyle")
        self.addCleanup(host.close)
        reply = host.register()
        self.assertEqual(reply["hooks"], ["trigger_append", "heartbeat", "communicate", "unload"])
        got = host.hook("communicate", payload={})
        self.assertEqual(got, {"started": True, "beats": 0, "manifest": ["oldstyle", "Legacy Plugin", "2.0.0", 7]})

    def test_langchain_tools_and_sibling_module(self):
        host = FakeHost("langtool")
        self.addCleanup(host.close)
        reply = host.register()
        self.assertEqual(reply["hooks"], ["call_tool"])
        tools = {t["name"]: t for t in reply["tools"]}
        self.assertEqual(sorted(tools), ["shout", "whisper"])
        self.assertEqual(tools["shout"]["description"], "Shout the text.")
        self.assertEqual(
            tools["shout"]["parameters"],
            {"title": "Args", "type": "object", "properties": {"text": {"title": "Text", "type": "string"}}, "required": ["text"]},
        )
        self.assertEqual(host.hook("call_tool", name="shout", args={"text": "hi"}), {"result": "helper:HI"})
        self.assertEqual(host.hook("call_tool", name="whisper", args={"text": "Hi", "times": "2"}), {"result": "helper:hihi"})


class LoadFailures(unittest.TestCase):
    def test_missing_module_names_it(self):
        host = FakeHost("broken-import")
        self.addCleanup(host.close)
        with self.assertRaises(HookError) as e:
            host.register()
        self.assertEqual(e.exception.message, "ImportError: No module named 'definitely_missing_module_xyz'")
        with self.assertRaises(HookError) as e:
            host.hook("message_received", text="x")
        self.assertIn("did not load: ImportError", e.exception.message)
        self.assertIsNone(host.proc.poll(), "the worker keeps running")

    def test_startup_raising(self):
        host = FakeHost("startup-raises")
        self.addCleanup(host.close)
        with self.assertRaises(HookError) as e:
            host.register()
        self.assertEqual(e.exception.message, "startup raised ValueError: bad config (call 1)")
        with self.assertRaises(HookError) as e:
            host.register()
        self.assertEqual(e.exception.message, "startup raised ValueError: bad config (call 1)", "not run twice")
        self.assertIsNone(host.proc.poll())

    def test_module_without_plugin(self):
        host = FakeHost("no-plugin")
        self.addCleanup(host.close)
        with self.assertRaises(HookError) as e:
            host.register()
        self.assertEqual(e.exception.message, "PluginLoadError: Plugin module must expose get_plugin() or Plugin class")

    def test_hook_before_register_loads_first(self):
        # A respawned worker gets a hook without `register`: it loads on the first call.
        host = FakeHost("sync-all")
        self.addCleanup(host.close)
        self.assertEqual(host.hook("memory_write_pre", content="abc"), {"action": "replace", "value": "ABC"})
        self.assertEqual(host.values["LIMIT"], 3)

    def test_unknown_method(self):
        host = FakeHost("subset")
        self.addCleanup(host.close)
        message = host.request("hook/no_such_hook", {"type": "no_such_hook"})
        self.assertEqual(message["error"]["code"], -32601)
        message = host.request("elsewhere/x", {})
        self.assertEqual(message["error"]["code"], -32601)
        # junk and notifications are skipped
        host.send_raw("not json\n[1,2]\n{\"jsonrpc\":\"2.0\",\"method\":\"note\"}\n")
        self.assertEqual(host.hook("memory_read_pre", query=" q "), {"action": "replace", "value": "q"})


if __name__ == "__main__":
    unittest.main()
