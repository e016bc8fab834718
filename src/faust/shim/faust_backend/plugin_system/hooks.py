"""FaustBot's hook markers and hook specifications, without pluggy.

`hookimpl` and `hookspec` behave like `pluggy.HookimplMarker("faustbot")` and
`pluggy.HookspecMarker("faustbot")`: usable bare (`@hookimpl`) or with
options (`@hookimpl(tryfirst=True)`), they set `faustbot_impl` /
`faustbot_spec` (a dict of the options) on the function and return it
unchanged. ctxhost's worker reads `faustbot_impl` to decide which methods
are hook implementations (pluggy's rule: only decorated ones are).

`CoreHooks` lists every hookspec of FaustBot's newest `hooks.py`, for
reference and for plugins that import it; nothing here calls a hook.
"""

from typing import Any

__all__ = ["CoreHooks", "HookimplMarker", "HookspecMarker", "hookimpl", "hookspec", "PROJECT_NAME"]

PROJECT_NAME = "faustbot"


class HookimplMarker:
    """Marks a function as a hook implementation (`<project>_impl`)."""

    def __init__(self, project_name):
        self.project_name = project_name

    def __call__(
        self,
        function=None,
        hookwrapper=False,
        optionalhook=False,
        tryfirst=False,
        trylast=False,
        specname=None,
        wrapper=False,
    ):
        def mark(func):
            setattr(
                func,
                self.project_name + "_impl",
                {
                    "wrapper": bool(wrapper),
                    "hookwrapper": bool(hookwrapper),
                    "optionalhook": bool(optionalhook),
                    "tryfirst": bool(tryfirst),
                    "trylast": bool(trylast),
                    "specname": specname,
                },
            )
            return func

        if function is None:
            return mark
        return mark(function)


class HookspecMarker:
    """Marks a function as a hook specification (`<project>_spec`)."""

    def __init__(self, project_name):
        self.project_name = project_name

    def __call__(self, function=None, firstresult=False, historic=False, warn_on_impl=None, warn_on_impl_args=None):
        def mark(func):
            setattr(
                func,
                self.project_name + "_spec",
                {
                    "firstresult": bool(firstresult),
                    "historic": bool(historic),
                    "warn_on_impl": warn_on_impl,
                    "warn_on_impl_args": warn_on_impl_args,
                },
            )
            return func

        if function is None:
            return mark
        return mark(function)


hookspec = HookspecMarker(PROJECT_NAME)
hookimpl = HookimplMarker(PROJECT_NAME)


class CoreHooks:
    """FaustBot's hook specifications (newest `hooks.py`)."""

    @hookspec
    def plugin_loaded(self, ctx: Any) -> None:
        """Called after the plugin is registered."""

    @hookspec
    def plugin_unloaded(self, ctx: Any) -> None:
        """Called before the plugin is unregistered."""

    @hookspec
    def heartbeat(self, ctx: Any) -> None:
        """Called every heartbeat (10 s)."""

    @hookspec(firstresult=True)
    def health_check(self) -> "dict | None":
        """The plugin's health."""

    @hookspec
    def register_frontend(self) -> "list[dict]":
        """Frontend assets: [{"type": "js"|"css", "path": ...}]."""

    @hookspec(firstresult=True)
    def communicate_handler(self, payload: dict, ctx: Any) -> "dict | None":
        """POST /faust/plugins/{id}/communicate."""

    @hookspec(firstresult=True)
    def sse_communicate_handler(self, params: dict, ctx: Any) -> Any:
        """GET /faust/plugins/{id}/sse-communicate (an async generator)."""

    @hookspec
    def register_schedules(self) -> "list[dict]":
        """[{"id", "interval", "callback", "description"}]."""

    @hookspec
    def register_pip_deps(self) -> "list[str]":
        """pip requirements of the plugin."""

    @hookspec
    def register_tools(self, ctx: Any) -> list:
        """Tools for the agent."""

    @hookspec
    def register_middlewares(self, ctx: Any) -> list:
        """LangChain agent middlewares."""

    @hookspec
    def tool_call_pre(self, name: str, args: dict, ctx: Any) -> "dict | None":
        """Before a tool call."""

    @hookspec
    def tool_call_post(self, name: str, args: dict, result: Any, ctx: Any) -> Any:
        """After a tool call."""

    @hookspec
    def message_received(self, msg: Any, history: list, ctx: Any) -> "str | None":
        """A message for the agent."""

    @hookspec
    def agent_event_sent(self, event: dict, current_history: list, ctx: Any) -> "dict | None":
        """An event on its way to the frontend."""

    @hookspec
    def llm_request_pre(self, messages: list, ctx: Any) -> "list | None":
        """Before the LLM request."""

    @hookspec(firstresult=True)
    def tts_text(self, text: str, ctx: Any) -> "str | None":
        """Text about to be spoken."""

    @hookspec
    def tts_start(self, text: str, ctx: Any) -> None:
        """Speech starts."""

    @hookspec
    def tts_end(self, text: str, ctx: Any) -> None:
        """Speech ends."""

    @hookspec
    def memory_read_pre(self, query: str, filters: "dict | None", ctx: Any) -> "str | None":
        """Before a memory read."""

    @hookspec
    def memory_read_post(self, query: str, results: list, ctx: Any) -> "list | None":
        """After a memory read."""

    @hookspec
    def memory_write_pre(self, content: str, metadata: "dict | None", ctx: Any) -> "str | None":
        """Before a memory write."""

    @hookspec
    def memory_write_post(self, content: str, metadata: "dict | None", id: str, ctx: Any) -> None:
        """After a memory write."""

    @hookspec
    def trigger_append(self, payload: dict, ctx: Any) -> "dict | None":
        """A trigger is about to be stored."""

    @hookspec
    def trigger_fire(self, payload: dict, ctx: Any) -> "dict | None":
        """A trigger fires."""

    @hookspec
    def register_prompt_suffix(self) -> "list[str]":
        """Text appended to the system prompt."""

    @hookspec
    def config_changed(self, key: str, old: Any, new: Any, ctx: Any) -> None:
        """A config value changed."""
