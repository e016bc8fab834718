"""Every agent hook's mapping (FaustBot return values → ctxhost decisions), for a sync and an async plugin."""

import json
import unittest

from harness import FakeHost, HookError

PASS = {"action": "pass"}


def replace(value):
    return {"action": "replace", "value": value}


class HookMappings:
    """The same table, run against `fixture` (whose hooks tag their output with `tag`)."""

    fixture = None
    tag = None

    def setUp(self):
        self.host = FakeHost(self.fixture)
        self.addCleanup(self.host.close)
        self.host.register()

    def test_message_received(self):
        h = self.host
        got = h.hook("message_received", text="hi", origin="user", agent_id="a7", history=[{"role": "user"}])
        self.assertEqual(got, replace("hi [%s] h1" % self.tag))
        self.assertEqual(h.hook("message_received", text="drop", agent_id="a7"), {"action": "block", "reason": "ignored by %s" % self.fixture})
        self.assertEqual(h.hook("message_received", text="keep", agent_id="a7"), PASS)
        # session storage went to the agent of the call
        self.assertEqual(h.storage[("session", "a7", "turns")], ["hi"])
        self.assertEqual(h.calls_of("storage.get")[0], {"scope": "session", "key": "turns", "agent_id": "a7"})
        # outside an agent's call: the storage's agent name, "faust"
        self.assertEqual(h.hook("communicate", payload={"action": "turns"}), {"turns": []})
        self.assertEqual(h.calls_of("storage.get")[-1]["agent_id"], "faust")

    def test_llm_request_pre(self):
        messages = [{"role": "user", "content": "x"}]
        self.assertEqual(
            self.host.hook("llm_request_pre", messages=messages, agent_id="a1"),
            replace(messages + [{"role": "system", "content": self.tag}]),
        )
        self.assertEqual(self.host.hook("llm_request_pre", messages=[], agent_id="a1"), PASS)

    def test_tool_call_pre(self):
        h = self.host
        self.assertEqual(h.hook("tool_call_pre", name="t", args={"a": 1}, agent_id="a1"), replace({"a": 1, "checked": self.tag}))
        self.assertEqual(
            h.hook("tool_call_pre", name="deny", args={}, agent_id="a1"),
            {"action": "block", "reason": "blocked by %s" % self.fixture},
        )
        self.assertEqual(h.hook("tool_call_pre", name="odd", args={}, agent_id="a1"), PASS)

    def test_tool_call_post(self):
        h = self.host
        got = h.hook("tool_call_post", name="t", args={}, result="r", is_error=False, agent_id="a1")
        self.assertEqual(got, replace({"wrapped": "r", "by": self.tag}))
        self.assertEqual(h.hook("tool_call_post", name="keep", args={}, result="r", is_error=False), PASS)

    def test_agent_event_sent(self):
        h = self.host
        self.assertEqual(h.hook("agent_event_sent", event={"type": "delta", "content": "c"}), replace({"type": "delta", "content": "c", "seen": self.tag}))
        self.assertEqual(h.hook("agent_event_sent", event={"type": "secret"}), {"action": "block", "reason": "suppressed by %s" % self.fixture})
        self.assertEqual(h.hook("agent_event_sent", event={"type": "plain"}), PASS)

    def test_memory_hooks(self):
        h = self.host
        self.assertEqual(h.hook("memory_read_pre", query="notes", filters=None), replace("notes.md"))
        self.assertEqual(h.hook("memory_read_pre", query="keep", filters=None), PASS)
        self.assertEqual(h.hook("memory_read_post", query="q", results=[{"a": 1}, {"b": 2}]), replace([{"a": 1}]))
        self.assertEqual(h.hook("memory_read_post", query="keep", results=[]), PASS)
        self.assertEqual(h.hook("memory_write_pre", content="hello", metadata={}), replace("HELLO"))
        self.assertEqual(h.hook("memory_write_pre", content="keep", metadata={}), PASS)
        self.assertEqual(h.hook("memory_write_post", content="c", metadata={}, id="n42"), {})
        self.assertEqual(h.storage[("global", "last_write")], "n42")

    def test_trigger_hooks(self):
        h = self.host
        trigger = {"id": "t1", "type": "event", "event_name": "go"}
        self.assertEqual(h.hook("trigger_append", trigger=trigger), replace(dict(trigger, tagged=self.tag)))
        self.assertEqual(h.hook("trigger_append", trigger={"id": "blocked"}), {"action": "block", "reason": "blocked by %s" % self.fixture})
        self.assertEqual(h.hook("trigger_fire", trigger=trigger), replace(trigger))
        self.assertEqual(h.hook("trigger_fire", trigger={"id": "blocked"}), {"action": "block", "reason": "blocked by %s" % self.fixture})

    def test_config_changed(self):
        self.assertEqual(self.host.hook("config_changed", key="LIMIT", old=3, new=4), {})
        self.assertEqual(self.host.storage[("global", "changed")], ["LIMIT", 3, 4])

    def test_heartbeat_and_health(self):
        h = self.host
        self.assertEqual(h.hook("heartbeat"), {})
        self.assertEqual(h.hook("heartbeat"), {})
        self.assertEqual(h.storage[("global", "beats")], 2)
        self.assertEqual(h.hook("health_check"), {"status": "ok", "plugin": self.fixture, "beats": 2})

    def test_communicate(self):
        h = self.host
        self.assertEqual(h.hook("communicate", payload={"action": "none"}), {"status": "ok"})
        self.assertEqual(h.hook("communicate", payload={"action": "list"}), ["not", "a", "dict"])
        self.assertEqual(h.hook("communicate", payload={"action": "?"}), {"status": "error", "detail": "unknown action: ?"})
        self.assertEqual(h.hook("communicate", payload="not an object")["detail"], "unknown action: None")

    def test_call_tool(self):
        h = self.host
        self.assertEqual(h.hook("call_tool", name="lookup", args={"order_id": "o1"}, agent_id="a1"), {"result": {"order": "o1", "count": 1, "by": self.tag}})
        self.assertEqual(h.hook("call_tool", name="echo_tool", args={"text": "x"}), {"result": "x"})
        self.assertEqual(h.hook("call_tool", name="boom", args={}), {"error": "ValueError: tool failed"})
        self.assertIn(h.hook("call_tool", name="odd", args={}), ({"result": "{1, 2}"}, {"result": "{2, 1}"}))
        missing = h.hook("call_tool", name="nope", args={})
        self.assertTrue(missing["error"].startswith("LookupError: plugin '%s' has no tool 'nope'" % self.fixture), missing)
        bad = h.hook("call_tool", name="lookup", args={"wrong": 1})
        self.assertTrue(bad["error"].startswith("TypeError: "), bad)

    def test_run_schedule(self):
        h = self.host
        self.assertEqual(h.hook("run_schedule", id="poll"), {})
        self.assertEqual(h.hook("run_schedule", id=self.fixture + "_2"), {})
        self.assertEqual(h.hook("communicate", payload={"action": "state"})["state"]["polls"], 2)
        with self.assertRaises(HookError) as e:
            h.hook("run_schedule", id="cron-only")
        self.assertIn("has no schedule 'cron-only'", e.exception.message)

    def test_read_symbolic(self):
        h = self.host
        h.hook("heartbeat")
        got = h.read_symbolic("/plugins/%s/./state.json" % self.fixture)
        self.assertEqual(json.loads(got["content"])["heartbeats"], 1)
        # the plugin reading its own symbolic node computes it (the host refuses to)
        own = h.hook("communicate", payload={"action": "read_own"})
        self.assertEqual(json.loads(own["text"])["heartbeats"], 1)
        self.assertEqual(h.calls_of("vfs.read"), [])
        with self.assertRaises(HookError) as e:
            h.read_symbolic("/plugins/%s/other" % self.fixture)
        self.assertIn("no symbolic node at /plugins/%s/other" % self.fixture, e.exception.message)

    def test_unload(self):
        h = self.host
        self.assertEqual(h.hook("unload"), {})
        self.assertEqual(h.hook("communicate", payload={"action": "state"})["state"]["unloaded"], 1)


class SyncHooks(HookMappings, unittest.TestCase):
    fixture = "sync-all"
    tag = "sync"


class AsyncHooks(HookMappings, unittest.TestCase):
    fixture = "async-all"
    tag = "async"


class SubsetArguments(unittest.TestCase):
    """Implementations get only the arguments they name (pluggy), with the real ctx."""

    def setUp(self):
        self.host = FakeHost("subset")
        self.addCleanup(self.host.close)

    def test_register_and_calls(self):
        h = self.host
        reply = h.register()
        self.assertEqual(
            reply["hooks"],
            [
                "message_received",
                "tool_call_pre",
                "tool_call_post",
                "agent_event_sent",
                "memory_read_pre",
                "memory_write_pre",
                "trigger_append",
                "heartbeat",
                "config_changed",
                "communicate",
            ],
        )
        self.assertEqual(h.hook("message_received", text="m", origin="trigger_background", agent_id="a"), replace("m via trigger_background"))
        self.assertEqual(h.hook("message_received", text="m", agent_id="a"), replace("m via user"))
        self.assertEqual(h.hook("tool_call_pre", name="t", args={"x": 1}), replace({"only_name": "t"}))
        self.assertEqual(h.hook("tool_call_post", name="t", args={}, result=5, is_error=False), replace("post:5"))
        self.assertEqual(h.hook("agent_event_sent", event={"type": "delta"}), replace({"ctx_given": True, "type": "delta"}))
        self.assertEqual(h.hook("config_changed", key="K", old=1, new=2), {})
        self.assertEqual(h.hook("trigger_append", trigger={"id": "old"}), replace({"id": "fresh"}))
        self.assertEqual(h.hook("memory_read_pre", query="  q  ", filters=None), replace("q"))
        self.assertEqual(h.hook("memory_write_pre", content="hey", metadata=None), replace("hey!"))
        self.assertEqual(h.hook("heartbeat"), {})
        self.assertEqual(h.hook("communicate", payload={}), {"last": 2, "started_without_ctx": True, "beats": 1})


class OldStyle(unittest.TestCase):
    def test_legacy_filter_heartbeat_unload(self):
        h = FakeHost("oldstyle")
        self.addCleanup(h.close)
        h.register()
        self.assertEqual(h.hook("trigger_append", trigger={"id": "a"}), replace({"id": "a", "legacy": True}))
        self.assertEqual(h.hook("trigger_append", trigger={"id": "drop"}), {"action": "block", "reason": "blocked by oldstyle"})
        raised = h.hook("trigger_append", trigger={"id": "raise"})
        self.assertEqual(raised["action"], "block")
        self.assertIn("filter_trigger_append raised KeyError", raised["reason"])
        self.assertEqual(h.hook("heartbeat"), {})
        self.assertEqual(h.triggers["beat-1"], {"id": "beat-1", "type": "event", "event_name": "beat", "plugin": "oldstyle"})
        self.assertEqual(h.hook("unload"), {})
        self.assertEqual(h.storage[("global", "unloaded")], True)


class RaisingHook(unittest.TestCase):
    def test_error_then_going_on(self):
        h = FakeHost("raising-hook")
        self.addCleanup(h.close)
        h.register()
        with self.assertRaises(HookError) as e:
            h.hook("message_received", text="boom")
        self.assertEqual(e.exception.message, "RuntimeError: exploded on purpose")
        self.assertIn("exploded on purpose", h.wait_stderr("exploded on purpose"))
        with self.assertRaises(HookError) as e:
            h.hook("message_received", text="exit")
        self.assertEqual(e.exception.message, "SystemExit: 3")
        self.assertEqual(h.hook("message_received", text="fine"), replace("ok:fine"))
        # a reply that is not JSON is sent with str() for what is not
        got = h.hook("communicate", payload={})
        self.assertTrue(got["bad"].startswith("<object object at"), got)


if __name__ == "__main__":
    unittest.main()
