"""`PluginStorage` (`ctx.storage`): FaustBot's per-plugin key-value store.

Scopes `global` and `session` (per agent). Under ctxhost every call goes to
the host's `storage.get/set/delete` with `scope` and, for the session
scope, `agent_id` = the agent of the host call being handled (or the
storage's `agent_name`, "faust", outside an agent's call). Outside ctxhost
(a plugin's own tests) it keeps FaustBot's files
`<data_dir>/storage/global.json` and `session_<agent>.json`.

All methods are synchronous, as in FaustBot. Differences, on purpose: a
missing session key falls back to the default registered with
`register_defaults` (FaustBot only writes those on `reset_session`); under
ctxhost `reset_session` clears the session keys this worker has set or
registered (the host has no "clear a scope" service).
"""

import copy
import json
import os
import threading
from pathlib import Path

from . import _host

__all__ = ["PluginStorage"]

_SCOPES = ("global", "session")


class PluginStorage:
    _file_lock = threading.RLock()

    def __init__(self, plugin_id, data_dir, agent_name="faust"):
        self.plugin_id = str(plugin_id)
        self.data_dir = Path(data_dir)
        self.agent_name = str(agent_name or "faust")
        self.storage_dir = self.data_dir / "storage"
        self.global_file = self.storage_dir / "global.json"
        self.session_file = self.storage_dir / f"session_{self.agent_name}.json"
        self._defaults = {}
        self._session_keys = set()

    # --- helpers ------------------------------------------------------
    @staticmethod
    def _check_scope(scope):
        if scope not in _SCOPES:
            raise ValueError(f"未知存储作用域: {scope}（可选 global/session）")

    def _params(self, scope, key):
        params = {"scope": scope, "key": str(key)}
        if scope == "session":
            params["agent_id"] = _host.current_agent_id() or self.agent_name
        return params

    def _file(self, scope):
        return self.global_file if scope == "global" else self.session_file

    def _load(self, scope):
        path = self._file(scope)
        if not path.exists():
            return {}
        return json.loads(path.read_text(encoding="utf-8") or "{}")

    def _save(self, scope, data):
        path = self._file(scope)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
        os.replace(tmp, path)

    # --- FaustBot's API -----------------------------------------------
    def register_defaults(self, defaults):
        """Session-scope defaults (used for missing keys and by `reset_session`)."""
        self._defaults = copy.deepcopy(dict(defaults or {}))

    def get(self, scope, key, default=None):
        self._check_scope(scope)
        conn = _host.connection()
        if conn is not None:
            value = conn.call("storage.get", self._params(scope, key))
            found = value is not None
        else:
            with self._file_lock:
                data = self._load(scope)
            found = key in data
            value = data.get(key)
        if found:
            return value
        if scope == "session" and key in self._defaults:
            return copy.deepcopy(self._defaults[key])
        return default

    def set(self, scope, key, value):
        self._check_scope(scope)
        json.dumps(value, ensure_ascii=False)  # FaustBot's rule: values are JSON (raises TypeError otherwise)
        conn = _host.connection()
        if scope == "session":
            self._session_keys.add(key)
        if conn is not None:
            params = self._params(scope, key)
            params["value"] = value
            conn.call("storage.set", params)
            return None
        with self._file_lock:
            data = self._load(scope)
            data[key] = value
            self._save(scope, data)
        return None

    def delete(self, scope, key):
        self._check_scope(scope)
        conn = _host.connection()
        if conn is not None:
            conn.call("storage.delete", self._params(scope, key))
            return None
        with self._file_lock:
            data = self._load(scope)
            if key in data:
                del data[key]
                self._save(scope, data)
        return None

    def reset_session(self):
        """Clears the session scope and writes the registered defaults."""
        conn = _host.connection()
        if conn is not None:
            for key in sorted(self._session_keys | set(self._defaults)):
                conn.call("storage.delete", self._params("session", key))
            self._session_keys = set()
            for key, value in self._defaults.items():
                self.set("session", key, copy.deepcopy(value))
            return None
        with self._file_lock:
            try:
                self.session_file.unlink()
            except FileNotFoundError:
                pass
            if self._defaults:
                self._save("session", copy.deepcopy(self._defaults))
        return None
