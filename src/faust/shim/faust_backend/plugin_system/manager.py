"""`faust_backend.plugin_system.manager`: what plugins import from it.

Under ctxhost the host manages plugins; a plugin gets `PluginLoadError` (the
exception FaustBot's routes catch) and a `PluginManager` name that exists
for imports but refuses to be used inside a plugin.
"""

__all__ = ["PluginLoadError", "PluginManager"]


class PluginLoadError(RuntimeError):
    """A plugin cannot be loaded (FaustBot's manager raises it; so does ctxhost's worker)."""


class PluginManager:
    """FaustBot's plugin manager is ctxhost itself; it cannot be built inside a plugin."""

    def __init__(self, *args, **kwargs):
        raise PluginLoadError(
            "ctxhost manages plugins itself: faust_backend.plugin_system.PluginManager cannot be used inside a plugin"
        )
