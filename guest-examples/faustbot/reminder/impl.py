"""Reminder: a FaustBot plugin keeping reminders as triggers.

Written against FaustBot's plugin API (`faust_backend.plugin_system`, the
newest async `PluginContext`) and the Python standard library only, in the
style of FaustBot's own rss-watcher: `startup` keeps the ctx, registers the
config, writes the VFS index; hooks use `self.ctx` (pluggy hands them
`ctx=None`).

- communicate actions: `remind` {text, in_seconds?}, `list`, `cancel` {id},
  `get_state`, `ack` (clears the fired list; answers nothing, so the route
  says {"status": "ok"}).
- A reminder is a `datetime` trigger with id `reminder::<n>`; when it fires,
  `trigger_fire` moves it to the fired list.
- faustbot://plugins/reminder/index.md lists the pending reminders (rewritten
  by the sweep schedule and the heartbeat); faustbot://plugins/reminder/status.json
  is computed on every read.
"""

import json
import time
from datetime import datetime, timezone

from faust_backend.plugin_system import FaustPlugin, PluginContext, hookimpl

PLUGIN_ID = "reminder"
ID_PREFIX = "reminder::"
INDEX_PATH = "/plugins/reminder/index.md"
STATUS_PATH = "/plugins/reminder/status.json"
FIRED_KEPT = 20

CONFIG_SCHEMA = [
    {
        "key": "DEFAULT_DELAY_SEC",
        "type": "int",
        "label": "Default delay (seconds)",
        "default": 60,
        "description": "Used when a reminder is created without in_seconds.",
    },
    {"key": "PREFIX", "type": "str", "label": "Reminder prefix", "default": "Reminder"},
    {
        "key": "SWEEP_INTERVAL_SEC",
        "type": "int",
        "label": "Sweep interval (seconds)",
        "default": 1,
        "description": "How often the plugin drops reminders whose trigger is gone (read at load).",
    },
]


def _iso(ts):
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Plugin(FaustPlugin):
    def __init__(self):
        self.ctx: PluginContext | None = None
        self._configs_cache = {}
        self.reminders = {}  # id -> {"id", "text", "due"}
        self.fired = []
        self.heartbeats = 0
        self.sweeps = 0
        self.config_changes = []
        self._counter = 0
        self._dirty = False

    # --- lifecycle -------------------------------------------------------
    async def startup(self, ctx: PluginContext):
        self.ctx = ctx
        await ctx.register_config(CONFIG_SCHEMA)
        self._configs_cache = await ctx.list_configs()
        # Reminders survive a restart: they are triggers, kept by the host.
        for trigger in await ctx.trigger_list() or []:
            tid = str(trigger.get("id") or "")
            if tid.startswith(ID_PREFIX):
                self.reminders[tid] = {
                    "id": tid,
                    "text": str(trigger.get("recall_description") or "").split(": ", 1)[-1],
                    "due": trigger.get("target"),
                }
        await ctx.vfs_write(
            INDEX_PATH, self._render_index(), description="Pending reminders of the Reminder plugin"
        )
        await ctx.vfs_write_symbolic(
            STATUS_PATH,
            lambda _path: json.dumps(self._status(), ensure_ascii=False),
            should_be_included_in_search=False,
            description="Reminder plugin status, computed on read",
        )

    def register_schedules(self):
        interval = int(self._configs_cache.get("SWEEP_INTERVAL_SEC") or 30)
        return [
            {
                "id": "reminder-sweep",
                "interval": interval,
                "callback": self._sweep,
                "description": "Drop reminders whose trigger is gone; refresh the index",
            }
        ]

    def register_frontend(self):
        return [
            {"type": "js", "path": "/faust/plugins/reminder/frontend/panel.js"},
            {"type": "css", "path": "/faust/plugins/reminder/frontend/panel.css"},
        ]

    def register_prompt_suffix(self):
        return [
            "[Reminder] Pending reminders are listed in faustbot://plugins/reminder/index.md; "
            "a fired reminder arrives as a trigger whose description starts with its prefix."
        ]

    def health_check(self):
        return {"status": "ok", "plugin": PLUGIN_ID, "pending": len(self.reminders)}

    # --- hooks -------------------------------------------------------------
    @hookimpl
    def trigger_fire(self, payload, ctx):
        tid = str((payload or {}).get("id") or "")
        if tid.startswith(ID_PREFIX):
            reminder = self.reminders.pop(tid, None) or {"id": tid, "text": payload.get("recall_description")}
            self.fired.append(dict(reminder, fired_at=int(time.time())))
            del self.fired[:-FIRED_KEPT]
            self._dirty = True
        # Let the trigger through unchanged (every plugin's triggers pass here).
        return payload

    @hookimpl
    async def config_changed(self, key, old, new, ctx):
        # The hook's ctx may be None: use the one startup kept.
        if self.ctx is not None:
            self._configs_cache = await self.ctx.list_configs()
        self.config_changes.append({"key": key, "old": old, "new": new})

    @hookimpl
    async def heartbeat(self, ctx):
        self.heartbeats += 1
        if self._dirty:
            await self._write_index()

    async def communicate_handler(self, payload, ctx):
        action = str((payload or {}).get("action") or "").strip().lower()
        if action == "remind":
            return await self._remind(payload)
        if action == "list":
            return {"status": "ok", "reminders": self._pending()}
        if action == "cancel":
            tid = str(payload.get("id") or "")
            if tid not in self.reminders:
                return {"status": "error", "detail": f"no reminder {tid!r}"}
            await self.ctx.trigger_delete(tid)
            del self.reminders[tid]
            await self._write_index()
            return {"status": "ok", "cancelled": tid}
        if action == "get_state":
            return {"status": "ok", "state": self._status()}
        if action == "ack":
            self.fired.clear()
            return None
        return {"status": "error", "detail": f"unknown action: {action}"}

    # --- helpers -------------------------------------------------------------
    async def _remind(self, payload):
        text = str(payload.get("text") or "").strip()
        if not text:
            return {"status": "error", "detail": "text is required"}
        try:
            delay = int(payload.get("in_seconds") or self._configs_cache.get("DEFAULT_DELAY_SEC") or 60)
        except (TypeError, ValueError):
            return {"status": "error", "detail": "in_seconds must be a whole number"}
        prefix = await self.ctx.get_config("PREFIX", "Reminder")
        self._counter += 1
        tid = f"{ID_PREFIX}{int(time.time() * 1000)}-{self._counter}"
        due = int(time.time()) + max(delay, 1)
        try:
            await self.ctx.trigger_create(
                {"id": tid, "type": "datetime", "target": _iso(due), "recall_description": f"{prefix}: {text}"}
            )
        except ValueError as e:  # refused by a trigger_append filter, or invalid
            return {"status": "error", "detail": str(e)}
        self.reminders[tid] = {"id": tid, "text": text, "due": due}
        await self._write_index()
        return {"status": "ok", "id": tid, "due": due}

    async def _sweep(self):
        self.sweeps += 1
        alive = {str(t.get("id")) for t in (await self.ctx.trigger_list() or [])}
        gone = [tid for tid in self.reminders if tid not in alive]
        for tid in gone:
            del self.reminders[tid]
        if gone or self._dirty:
            await self._write_index()

    async def _write_index(self):
        self._dirty = False
        await self.ctx.vfs_write(INDEX_PATH, self._render_index())

    def _pending(self):
        return sorted(self.reminders.values(), key=lambda r: (str(r.get("due")), r["id"]))

    def _render_index(self):
        lines = ["# Reminders", ""]
        pending = self._pending()
        if not pending:
            lines.append("No pending reminders.")
        for r in pending:
            due = r.get("due")
            lines.append(f"- {r['text']} (due {_iso(due) if isinstance(due, (int, float)) else due})")
        return "\n".join(lines) + "\n"

    def _status(self):
        return {
            "config": dict(self._configs_cache),
            "pending": len(self.reminders),
            "fired": list(self.fired),
            "heartbeats": self.heartbeats,
            "sweeps": self.sweeps,
            "config_changes": list(self.config_changes),
        }


def get_plugin() -> Plugin:
    return Plugin()
