"""Calculator: a FaustBot plugin giving the agent two arithmetic tools.

Written against FaustBot's plugin API (`faust_backend.plugin_system`) and the
Python standard library only.

- `register_tools` returns `add`, a plain function, and `divide`, wrapped in
  a `ToolSpec`; plugin.json grants both (`"permissions": ["tool:add",
  "tool:divide"]`). (FaustBot's own backend hands only LangChain tools to
  its agent: wrap them with `langchain.tools.tool` there.)
- `tool_call_pre` (sync) turns numeric strings into numbers for these two
  tools and refuses a call it cannot make sense of — a non-number, or a
  division by zero — by returning None; every other tool's args pass
  unchanged.
- `tool_call_post` (sync) rounds float results to 10 places, so
  0.1 + 0.2 comes back as 0.3.
"""

from faust_backend.plugin_system import FaustPlugin, PluginContext, ToolSpec, hookimpl

OWN_TOOLS = ("add", "divide")


def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


def _number(value):
    if isinstance(value, bool):
        raise ValueError("not a number: %r" % (value,))
    if isinstance(value, (int, float)):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        return float(text)


class Plugin(FaustPlugin):
    def __init__(self):
        self.ctx: PluginContext | None = None
        self.calls = 0
        self.refused = 0

    def startup(self, ctx: PluginContext) -> None:
        self.ctx = ctx

    @hookimpl
    def register_tools(self, ctx) -> list:
        def divide(dividend: float, divisor: float) -> float:
            """Divide dividend by divisor.

            Args:
                dividend: the number to divide
                divisor: the number to divide by (not zero)
            """
            self.calls += 1
            return dividend / divisor

        return [add, ToolSpec(name="divide", tool=divide, description="Divide one number by another.")]

    @hookimpl
    def tool_call_pre(self, name, args, ctx):
        if name not in OWN_TOOLS:
            return args  # not ours: unchanged (None would refuse the call)
        try:
            clean = {key: _number(value) for key, value in dict(args or {}).items()}
        except (TypeError, ValueError):
            self.refused += 1
            return None
        if name == "divide" and clean.get("divisor") == 0:
            self.refused += 1
            return None
        return clean

    @hookimpl
    def tool_call_post(self, name, args, result, ctx):
        if name in OWN_TOOLS and isinstance(result, float):
            rounded = round(result, 10)
            return int(rounded) if rounded.is_integer() else rounded
        return None  # unchanged

    def communicate_handler(self, payload, ctx):
        if (payload or {}).get("action") == "stats":
            return {"status": "ok", "divisions": self.calls, "refused": self.refused}
        return {"status": "error", "detail": "unknown action: %s" % (payload or {}).get("action")}

    def health_check(self):
        return {"status": "ok", "plugin": "calculator", "tools": list(OWN_TOOLS)}


def get_plugin():
    return Plugin()
