"""`ctx.*` with and without await, from sync and async code, and the host services each reaches."""

import time
import unittest

from harness import FakeHost


class CtxThroughTheHost(unittest.TestCase):
    def setUp(self):
        self.host = FakeHost("ctxstyles")
        self.addCleanup(self.host.close)
        self.host.register()

    def ask(self, action, **extra):
        return self.host.hook("communicate", payload=dict(extra, action=action))

    def test_legacy_schema_string_registered_sync(self):
        schema = self.host.calls_of("config.register")[0]["schema"]
        self.assertEqual(
            schema,
            [
                {"key": "A", "type": "int", "label": "Alpha", "description": "", "default": 1},
                {"key": "B", "type": "str", "label": "Beta=x", "description": "", "default": "y"},
                {"key": "C", "type": "str", "label": "Gamma", "description": "", "default": None},
                {"key": "D", "type": "bool", "label": "Delta", "description": "", "default": True},
                {"key": "E", "type": "json", "label": "Eps", "description": "", "default": {"k": [1]}},
                {"key": "F", "type": "int", "label": "Bad", "description": "", "default": None},
            ],
        )
        registered = self.ask("registered")["registered"]
        self.assertEqual(registered["values"], {"A": 1, "B": "y", "D": True, "E": {"k": [1]}})
        self.assertEqual([f["key"] for f in registered["schema"]], ["A", "B", "C", "D", "E", "F"])

    def test_sync_helper_in_async_code_gets_the_value(self):
        self.assertEqual(self.ask("sync_in_async"), {"value": 1})

    def test_await_in_async_code(self):
        self.assertEqual(self.ask("await"), {"value": 1})

    def test_not_awaited_in_async_code_still_does_the_work(self):
        self.assertEqual(self.ask("no_await_in_async"), {"type": "Ready"})
        self.assertEqual(self.host.vfs["/plugins/ctxstyles/n.md"], {"content": "written without await"})

    def test_gather_takes_the_awaitables(self):
        got = self.ask("gather")
        self.assertEqual(got["values"], [1, {"A": 1, "B": "y", "D": True, "E": {"k": [1]}}])

    def test_sync_hook_without_await(self):
        self.assertEqual(self.host.hook("heartbeat"), {})
        self.assertEqual(self.host.triggers["hb"]["event_name"], "beat")

    def test_config(self):
        self.assertEqual(self.ask("config"), {"list": {"A": 1, "B": "y", "D": True, "E": {"k": [1]}}, "missing": "dflt"})
        self.assertEqual(self.host.calls_of("config.get")[-1], {"key": "NOPE", "default": "dflt"})
        self.assertEqual(self.ask("set"), {"set": 5})
        self.assertEqual(self.host.calls_of("config.set"), [{"key": "A", "value": "5"}])

    def test_triggers(self):
        got = self.ask("triggers")
        self.assertEqual(got["created"], {"id": "t1", "type": "event", "event_name": "go", "plugin": "ctxstyles"})
        self.assertEqual(got["got"]["recall_description"], "merged", "trigger_update merges")
        self.assertEqual(got["got"]["event_name"], "go")
        self.assertEqual(len(got["listed"]), 1)
        self.assertTrue(got["deleted"])
        self.assertIsNone(got["gone"])
        self.assertEqual(got["refused"], "plugin 'other' blocked it: no", "a refused trigger raises ValueError")
        self.assertEqual(self.host.calls_of("trigger.update"), [{"id": "t1", "patch": {"recall_description": "merged"}}])
        self.assertEqual(self.host.calls_of("trigger.create")[0], {"trigger": {"id": "t1", "type": "event", "event_name": "go"}})

    def test_vfs(self):
        got = self.ask("vfs")
        self.assertEqual(got["listed"], ["b.md", "c.md"])
        self.assertEqual(got["text"], "B")
        self.assertEqual(got["missing"], "dflt")
        self.assertTrue(got["deleted"])
        self.assertEqual(got["after"], [])
        self.assertIn("may only write below /plugins/ctxstyles", got["foreign"])
        writes = self.host.calls_of("vfs.write")
        self.assertEqual(writes[1], {"path": "/plugins/ctxstyles/a/c.md", "content": "C", "description": ""})

    def test_storage(self):
        got = self.ask("session", v=[1, 2])
        self.assertEqual(got, {"k": [1, 2], "g": [1, 2], "missing": "dflt"})
        self.assertEqual(self.host.storage[("session", "faust", "k")], [1, 2])
        self.assertEqual(self.host.storage[("global", "g")], [1, 2])
        self.assertEqual(self.ask("bad_scope"), {"error": "未知存储作用域: weird（可选 global/session）"})

    def test_not_provided(self):
        self.assertIn("ctxhost does not provide FaustBot's processors", self.ask("processor")["error"])
        self.assertEqual(self.ask("missing_cap"), {"error": "vfs_list is not available"})

    def test_background_thread_between_calls_is_refused(self):
        self.assertEqual(self.ask("thread_later"), {})
        deadline = time.monotonic() + 10
        error = None
        while error is None and time.monotonic() < deadline:
            time.sleep(0.5)  # idle between calls: the thread (0.3 s) must hit a gap, not a call
            error = self.ask("thread_result")["error"]
        self.assertIsNotNone(error, "the thread's call came back")
        self.assertIn("config.get was called between the host's calls", error)


if __name__ == "__main__":
    unittest.main()
