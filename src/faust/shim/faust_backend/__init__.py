"""ctxhost's stand-in for FaustBot's `faust_backend` package.

Provided: `faust_backend.plugin_system` (the plugin API, every `ctx.*` call
forwarded to the ctxhost host), `faust_backend.logger` and
`faust_backend.config_loader` (small stubs). Everything else FaustBot's
backend has (`memory`, `runtime`, `processors`, ...) is deliberately not
here: importing it fails with an ImportError that names the module and says
ctxhost does not provide it, instead of a bare "No module named".

This package must never start anything or talk to the host at import time.
"""

import importlib.abc
import sys

__all__ = []

_PROVIDED = ("logger", "config_loader", "plugin_system")


class _NotProvided(importlib.abc.MetaPathFinder):
    """Last on `sys.meta_path`: reached only when no real module was found."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(__name__ + "."):
            return None
        raise ModuleNotFoundError(
            "No module named %r: ctxhost does not provide %s (FaustBot backend internals; ctxhost's "
            "faust_backend has only plugin_system, logger and config_loader)" % (fullname, fullname),
            name=fullname,
        )


if not any(isinstance(f, _NotProvided) for f in sys.meta_path):
    sys.meta_path.append(_NotProvided())
