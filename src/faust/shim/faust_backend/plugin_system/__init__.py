"""`faust_backend.plugin_system` as ctxhost provides it: FaustBot's plugin API.

Same exports as FaustBot's newest package. The plugin runs inside ctxhost's
worker (`ctxhost_faust_worker.py`), which loads it, calls its hooks and
answers the host; `PluginContext` methods reach the host's services.
"""

from .hooks import CoreHooks, hookimpl, hookspec
from .interfaces import MiddlewareSpec, PluginContext, PluginManifest, PluginProtocol, ToolSpec
from .manager import PluginManager
from .plugin_base import FaustPlugin

__all__ = [
    "PluginManager",
    "PluginContext",
    "PluginManifest",
    "PluginProtocol",
    "ToolSpec",
    "MiddlewareSpec",
    "CoreHooks",
    "hookspec",
    "hookimpl",
    "FaustPlugin",
]
