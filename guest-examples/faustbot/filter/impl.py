"""Filter: a FaustBot plugin guarding what reaches the agent and its memory.

Written against FaustBot's plugin API (`faust_backend.plugin_system`) and the
Python standard library only. Sync and `async def` hooks side by side, as
FaustBot allows; every hook uses `self.ctx` kept by `startup` (pluggy hands
hooks `ctx=None`). Priority 50: it runs before plugins of the default 100.

- `message_received` (sync): collapses runs of whitespace; drops a message
  containing a spam word, or repeating the previous message of the same
  session, by returning "__IGNORED__". The previous message is kept in
  `ctx.storage` (session scope); counters in the global scope.
- `memory_write_pre` (async): e-mail addresses and phone numbers become
  "[redacted]".
- `memory_write_post`: counts the writes.
- `memory_read_pre`: collapses whitespace in the query.
- `memory_read_post`: drops results marked "#private".
- `agent_event_sent`: suppresses `reasoning_delta` events (config
  HIDE_REASONING) and shortens long `tool_result` outputs.
- `trigger_append`: refuses a trigger whose description contains a spam
  word (returning None), and lets every other trigger through.
- communicate `{"action": "stats"}`: the counters.
"""

import re

from faust_backend.plugin_system import FaustPlugin, PluginContext, hookimpl

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
PHONE = re.compile(r"\+?\d[\d ()-]{7,}\d")
COUNTERS = ("ignored", "repeats", "redactions", "writes", "hidden", "refused_triggers")


class Plugin(FaustPlugin):
    def __init__(self):
        self.ctx: PluginContext | None = None
        self._configs_cache = {}

    async def startup(self, ctx: PluginContext):
        self.ctx = ctx
        ctx.storage.register_defaults({"last_message": None})
        await ctx.register_config(
            [
                {
                    "key": "SPAM_WORDS",
                    "type": "str",
                    "label": "Spam words (comma separated)",
                    "default": "buy now,free money",
                },
                {"key": "HIDE_REASONING", "type": "bool", "label": "Hide the model's reasoning", "default": True},
                {"key": "MAX_TOOL_OUTPUT", "type": "int", "label": "Longest tool output shown", "default": 80},
            ]
        )
        self._configs_cache = await ctx.list_configs()

    @hookimpl
    async def config_changed(self, key, old, new, ctx):
        self._configs_cache = await self.ctx.list_configs()

    # --- helpers -------------------------------------------------------------
    def _spam_words(self):
        raw = str(self._configs_cache.get("SPAM_WORDS") or "")
        return [w.strip().lower() for w in raw.split(",") if w.strip()]

    def _count(self, counter, n=1):
        stats = dict(self.ctx.storage.get("global", "stats") or {})
        stats[counter] = int(stats.get(counter) or 0) + n
        self.ctx.storage.set("global", "stats", stats)

    # --- messages --------------------------------------------------------------
    @hookimpl
    def message_received(self, msg, history, ctx):
        text = " ".join(str(msg or "").split())
        lowered = text.lower()
        if any(word in lowered for word in self._spam_words()):
            self._count("ignored")
            return "__IGNORED__"
        storage = self.ctx.storage
        if text and storage.get("session", "last_message") == text:
            self._count("repeats")
            return "__IGNORED__"
        storage.set("session", "last_message", text)
        return text if text != msg else None

    # --- memory ----------------------------------------------------------------
    @hookimpl
    async def memory_write_pre(self, content, metadata, ctx):
        text = str(content or "")
        redacted, n_email = EMAIL.subn("[redacted]", text)
        redacted, n_phone = PHONE.subn("[redacted]", redacted)
        if n_email + n_phone == 0:
            return None
        self._count("redactions", n_email + n_phone)
        return redacted

    @hookimpl
    def memory_write_post(self, content, metadata, id, ctx):
        self._count("writes")

    @hookimpl
    def memory_read_pre(self, query, filters, ctx):
        cleaned = " ".join(str(query or "").split())
        return cleaned if cleaned != query else None

    @hookimpl
    def memory_read_post(self, query, results, ctx):
        kept = [r for r in (results or []) if "#private" not in str(r)]
        return kept if len(kept) != len(results or []) else None

    # --- events and triggers -----------------------------------------------------
    @hookimpl
    def agent_event_sent(self, event, current_history, ctx):
        kind = (event or {}).get("type")
        if kind == "reasoning_delta" and self._configs_cache.get("HIDE_REASONING", True):
            self._count("hidden")
            return "__IGNORED__"
        if kind == "tool_result" and isinstance(event.get("output"), str):
            limit = int(self._configs_cache.get("MAX_TOOL_OUTPUT") or 80)
            if len(event["output"]) > limit:
                return dict(event, output=event["output"][:limit] + "…", truncated=True)
        return None

    @hookimpl
    def trigger_append(self, payload, ctx):
        description = str((payload or {}).get("recall_description") or "").lower()
        if any(word in description for word in self._spam_words()):
            self._count("refused_triggers")
            return None  # refuse it
        return payload

    def communicate_handler(self, payload, ctx):
        if (payload or {}).get("action") == "stats":
            stats = self.ctx.storage.get("global", "stats") or {}
            return {"status": "ok", "stats": {c: int(stats.get(c) or 0) for c in COUNTERS}}
        return {"status": "error", "detail": "unknown action: %s" % (payload or {}).get("action")}


def get_plugin():
    return Plugin()
