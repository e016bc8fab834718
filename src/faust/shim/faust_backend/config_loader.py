"""`faust_backend.config_loader`: the few paths and names FaustBot plugins read.

FaustBot's module reads `~/.faustbot` and the whole app config; under ctxhost
a plugin gets sensible values from the worker's environment instead:

- `PLUGIN_DATA_ROOT`: the parent of the plugin's data dir
  (`CTXHOST_FAUST_DATA_DIR`), so `PLUGIN_DATA_ROOT/<plugin id>` is that dir
  whenever the host names it after the plugin (it does).
- `CONFIG_ROOT`: `CTXHOST_FAUST_CONFIG_ROOT` if set, else a private
  `.faustbot` directory inside the plugin's data dir (writable; plugins
  such as emotion-engine write `CONFIG_ROOT/agents/<AGENT_NAME>/...`).
- `PROJECT_ROOT`: `CTXHOST_FAUST_PROJECT_ROOT` if set, else the shim's dir.
- `AGENT_NAME = "faust"` (FaustBot's default), `AGENT_ROOT`.

Values are strings, as in FaustBot (`os.path.join` results). Importing this
never fails: a directory that cannot be made is simply not made.
"""

import os

__all__ = ["AGENT_NAME", "AGENT_ROOT", "CONFIG_ROOT", "DATA_ROOT", "PLUGIN_DATA_ROOT", "PROJECT_ROOT", "WORKDIR_ROOT"]

_shim_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_plugin_id = os.environ.get("CTXHOST_FAUST_PLUGIN_ID") or "plugin"
_data_dir = os.environ.get("CTXHOST_FAUST_DATA_DIR") or os.path.join(os.getcwd(), "data")
_data_dir = os.path.abspath(_data_dir)

AGENT_NAME = "faust"
PLUGIN_DATA_ROOT = os.path.dirname(_data_dir)
CONFIG_ROOT = os.path.abspath(os.environ.get("CTXHOST_FAUST_CONFIG_ROOT") or os.path.join(_data_dir, ".faustbot"))
WORKDIR_ROOT = CONFIG_ROOT
DATA_ROOT = os.path.join(CONFIG_ROOT, "data")
PROJECT_ROOT = os.path.abspath(os.environ.get("CTXHOST_FAUST_PROJECT_ROOT") or _shim_dir)
AGENT_ROOT = os.path.join(CONFIG_ROOT, "agents", AGENT_NAME)

try:
    os.makedirs(AGENT_ROOT, exist_ok=True)
except OSError:
    pass
