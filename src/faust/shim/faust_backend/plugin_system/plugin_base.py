"""`FaustPlugin`: FaustBot's base class for "new style" plugins.

Every method is a decorated no-op, as in FaustBot. ctxhost's worker treats a
hook as implemented only when the plugin's own class (not just this base)
defines it — and, for the hooks FaustBot dispatches through pluggy, only
when that definition carries `@hookimpl` (an undecorated override shadows
the decorated no-op, so pluggy never calls it). Nothing here talks to the
host.
"""

from typing import Any

from .hooks import hookimpl
from .interfaces import PluginManifest

__all__ = ["FaustPlugin"]


class FaustPlugin:
    """Subclass it and override the hooks you need (decorate them with `@hookimpl`)."""

    manifest: "PluginManifest | None" = None

    @hookimpl
    def plugin_loaded(self, ctx) -> None:
        pass

    @hookimpl
    def plugin_unloaded(self, ctx) -> None:
        pass

    @hookimpl
    def heartbeat(self, ctx) -> None:
        pass

    @hookimpl
    def health_check(self) -> "dict | None":
        return None

    @hookimpl
    def register_frontend(self) -> "list[dict]":
        return []

    @hookimpl
    def communicate_handler(self, payload: dict, ctx) -> "dict | None":
        return None

    @hookimpl
    def register_schedules(self) -> "list[dict]":
        return []

    @hookimpl
    def register_pip_deps(self) -> "list[str]":
        return []

    @hookimpl
    def register_tools(self, ctx) -> list:
        return []

    @hookimpl
    def register_middlewares(self, ctx) -> list:
        return []

    @hookimpl
    def tool_call_pre(self, name: str, args: dict, ctx) -> "dict | None":
        return None

    @hookimpl
    def tool_call_post(self, name: str, args: dict, result: Any, ctx) -> Any:
        return None

    @hookimpl
    def message_received(self, msg: Any, history: list, ctx) -> "str | None":
        return None

    @hookimpl
    def agent_event_sent(self, event: dict, current_history: list, ctx) -> "dict | None":
        return None

    @hookimpl
    def memory_read_pre(self, query: str, filters: "dict | None", ctx) -> "str | None":
        return None

    @hookimpl
    def memory_read_post(self, query: str, results: list, ctx) -> "list | None":
        return None

    @hookimpl
    def memory_write_pre(self, content: str, metadata: "dict | None", ctx) -> "str | None":
        return None

    @hookimpl
    def memory_write_post(self, content: str, metadata: "dict | None", id: str, ctx) -> None:
        pass

    @hookimpl
    def trigger_append(self, payload: dict, ctx) -> "dict | None":
        return None

    @hookimpl
    def trigger_fire(self, payload: dict, ctx) -> "dict | None":
        return None

    @hookimpl
    def register_prompt_suffix(self) -> "list[str]":
        return []

    @hookimpl
    def config_changed(self, key: str, old: Any, new: Any, ctx) -> None:
        pass
