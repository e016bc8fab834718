"""`faust_backend.logger.get_logger`: stdlib logging to stderr.

A FaustBot plugin's stdout is ctxhost's JSON-RPC channel, so nothing here
ever writes to stdout; the host streams the worker's stderr into its log.
"""

import logging
import sys

__all__ = ["get_logger"]

_configured = False


def _configure():
    global _configured
    if _configured:
        return
    _configured = True
    root = logging.getLogger("faust")
    if not root.handlers:
        handler = logging.StreamHandler(sys.__stderr__ or sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    if root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


def get_logger(name="faust"):
    """A logger writing to stderr; FaustBot's names (`faust.plugins.<id>`) work as they are."""
    _configure()
    logger = logging.getLogger(str(name or "faust"))
    if not logger.name.startswith("faust") and not logger.handlers:
        handler = logging.StreamHandler(sys.__stderr__ or sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    return logger
