"""A fake ctxhost host for the shim's tests: starts the worker and plays the host over JSON-RPC.

`FakeHost(fixture)` starts `python3 <shim>/ctxhost_faust_worker.py <fixture>/<entry>` with the
environment ctxhost gives it, sends `hook/<name>` requests and answers the worker's
service calls (`config.*`, `vfs.*`, `trigger.*`, `storage.*`, `log`) from in-memory
state, with the parameter names and checks of ctxhost's `src/agent/services.rs`
`dispatch`. Every service call is recorded in `calls` as `(method, params)`.
"""

import copy
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True

TESTS = Path(__file__).resolve().parent
# The shim as ctxhost writes it (`faust::shim::install`: src/faust/shim, the
# JSON-RPC client of guest-examples/rpc-clients and the generated hook list),
# not this source dir, which lacks the last two.
if not os.environ.get("CTXHOST_FAUST_SHIM"):
    raise RuntimeError(
        "CTXHOST_FAUST_SHIM is not set: these tests run against the shim ctxhost writes; "
        "run them with `cargo test --test integration faust_shim`"
    )
SHIM = Path(os.environ["CTXHOST_FAUST_SHIM"]).resolve()
WORKER = SHIM / "ctxhost_faust_worker.py"
DEPS = SHIM / "deps.py"
FIXTURES = TESTS / "fixtures"


class HookError(Exception):
    """The worker answered a request with a JSON-RPC error."""

    def __init__(self, error):
        super().__init__(error.get("message"))
        self.code = error.get("code")
        self.message = error.get("message")


class ServiceError(Exception):
    def __init__(self, message, code=-32000):
        super().__init__(message)
        self.code = code
        self.message = message


def normalize(path):
    parts = []
    for part in str(path).replace("\\", "/").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


class FakeHost:
    def __init__(self, fixture, entry="impl.py", manifest=None, timeout=15):
        self.plugin_dir = FIXTURES / fixture
        self.plugin_id = fixture
        self.timeout = timeout
        self.tmp = tempfile.mkdtemp(prefix="faust-shim-test-")
        self.data_dir = Path(self.tmp) / "data" / fixture
        # host state
        self.schema = []
        self.values = {}
        self.vfs = {}  # path -> {"content": str} | {"symbolic": owner, "searchable": bool}
        self.triggers = {}
        self.storage = {}
        self.calls = []
        self.logs = []
        self.config_sets = []
        self.service_errors = {}  # method -> message, to make a service fail
        # the worker
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["CTXHOST_FAUST_PLUGIN_ID"] = fixture
        plugin_json = self.plugin_dir / "plugin.json"
        raw = json.loads(plugin_json.read_text("utf-8")) if plugin_json.is_file() else {}
        normalised = {
            "id": fixture,
            "name": raw.get("name") or fixture,
            "version": raw.get("version") or "0.1.0",
            "description": raw.get("description") or "",
            "author": raw.get("author") or "",
            "homepage": raw.get("homepage") or "",
            "enabled": raw.get("enabled", True),
            "entry": raw.get("entry") or entry,
            "permissions": raw.get("permissions") or [],
            "priority": raw.get("priority", 100),
        }
        if manifest:
            normalised.update(manifest)
        env["CTXHOST_FAUST_MANIFEST"] = json.dumps(normalised)
        env["CTXHOST_FAUST_DATA_DIR"] = str(self.data_dir)
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(self.plugin_dir / normalised["entry"])],
            cwd=str(self.plugin_dir),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.stderr_lines = []
        self._lines = queue.Queue()
        self._next = 0
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    # --- plumbing ----------------------------------------------------
    def _pump_stdout(self):
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode("utf-8", "replace"))

    def stderr(self):
        return "".join(self.stderr_lines)

    def wait_stderr(self, text, timeout=5.0):
        """The worker's stderr once it contains `text` (stderr is a second pipe: it may lag the answer)."""
        deadline = time.monotonic() + timeout
        while text not in self.stderr() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.stderr()

    def _write(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode("utf-8"))
        self.proc.stdin.flush()

    def send_raw(self, text):
        self.proc.stdin.write(text.encode("utf-8"))
        self.proc.stdin.flush()

    def request(self, method, params=None):
        """Sends a request; answers service calls until the response; the response."""
        self._next += 1
        my_id = self._next
        self._write({"jsonrpc": "2.0", "id": my_id, "method": method, "params": params or {}})
        while True:
            try:
                line = self._lines.get(timeout=self.timeout)
            except queue.Empty:
                raise AssertionError("no answer to %s within %ss; stderr:\n%s" % (method, self.timeout, self.stderr()))
            if line is None:
                raise AssertionError("the worker exited (%s) during %s; stderr:\n%s" % (self.proc.poll(), method, self.stderr()))
            message = json.loads(line)
            assert message.get("jsonrpc") == "2.0", message
            if "method" in message:
                if "id" not in message:
                    self.logs.append(message)
                    continue
                try:
                    result = self.service(message["method"], message.get("params") or {})
                    self._write({"jsonrpc": "2.0", "id": message["id"], "result": result})
                except ServiceError as e:
                    self._write({"jsonrpc": "2.0", "id": message["id"], "error": {"code": e.code, "message": e.message}})
                continue
            if message.get("id") != my_id:
                raise AssertionError("unexpected message %r" % message)
            return message

    def hook(self, hook_name, /, **fields):
        """`hook/<hook_name>` with `fields` (+ `type`); its result, or HookError."""
        params = dict(fields)
        params["type"] = hook_name
        message = self.request("hook/" + hook_name, params)
        if "error" in message:
            raise HookError(message["error"])
        return message["result"]

    def register(self):
        return self.hook("register")

    def read_symbolic(self, path):
        message = self.request("vfs/read_symbolic", {"path": path, "type": "read_symbolic"})
        if "error" in message:
            raise HookError(message["error"])
        return message["result"]

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
        return self.proc.returncode

    def calls_of(self, method):
        return [p for m, p in self.calls if m == method]

    # --- the services (ctxhost's dispatch, in memory) ----------------
    @staticmethod
    def _str(params, key):
        value = params.get(key)
        if not isinstance(value, str):
            raise ServiceError("`%s` must be a string" % key, -32602)
        return value

    def _own(self, path):
        root = "/plugins/" + self.plugin_id
        if path != root and not path.startswith(root + "/"):
            raise ServiceError("plugin '%s' may only write below %s, not %s" % (self.plugin_id, root, path))

    def _config_get(self, key, default):
        if key in self.values:
            return self.values[key]
        for field in self.schema:
            if field["key"] == key and field.get("default") is not None:
                return field["default"]
        return default

    def service(self, method, params):
        self.calls.append((method, copy.deepcopy(params)))
        if method in self.service_errors:
            raise ServiceError(self.service_errors[method])
        if not isinstance(params, dict):
            raise ServiceError("params must be an object", -32602)
        if method == "config.get":
            return self._config_get(self._str(params, "key"), params.get("default"))
        if method == "config.set":
            key = self._str(params, "key")
            if "value" not in params:
                raise ServiceError("`value` is missing", -32602)
            kinds = {f["key"]: f["type"] for f in self.schema}
            if key not in kinds:
                raise ServiceError("config key `%s` is not in the plugin's schema" % key)
            value = params["value"]
            if kinds[key] == "int":
                value = int(value)
            old = self.values.get(key)
            self.values[key] = value
            self.config_sets.append((key, old, value))
            return value
        if method == "config.list":
            return {"schema": copy.deepcopy(self.schema), "values": copy.deepcopy(self.values)}
        if method == "config.register":
            schema = params.get("schema")
            if not isinstance(schema, list):
                raise ServiceError("a schema is a list or a table", -32602)
            for field in schema:
                if not isinstance(field, dict) or not isinstance(field.get("key"), str):
                    raise ServiceError("not a schema field: %r" % (field,), -32602)
                if field.get("type") not in ("str", "int", "float", "bool", "json", "text"):
                    raise ServiceError("unknown variant %r" % field.get("type"), -32602)
            self.schema = copy.deepcopy(schema)
            for field in schema:
                if field["key"] not in self.values and field.get("default") is not None:
                    self.values[field["key"]] = field["default"]
            return copy.deepcopy(self.values)
        if method == "vfs.read":
            path = normalize(self._str(params, "path"))
            node = self.vfs.get(path)
            if node is None:
                return params.get("default")
            if "symbolic" in node:
                if node["symbolic"] == self.plugin_id:
                    raise ServiceError("%s is this plugin's own symbolic node: compute it directly" % path)
                return "symbolic of " + node["symbolic"]
            return node["content"]
        if method == "vfs.write":
            path = normalize(self._str(params, "path"))
            content = self._str(params, "content")
            self._own(path)
            self.vfs[path] = {"content": content}
            return path
        if method == "vfs.write_symbolic":
            path = normalize(self._str(params, "path"))
            self._own(path)
            self.vfs[path] = {"symbolic": self.plugin_id, "searchable": bool(params.get("searchable"))}
            return path
        if method == "vfs.delete":
            path = normalize(self._str(params, "path"))
            self._own(path)
            gone = [p for p in self.vfs if p == path or p.startswith(path.rstrip("/") + "/")]
            for p in gone:
                del self.vfs[p]
            return bool(gone)
        if method == "vfs.list":
            path = normalize(params.get("path") or "/")
            prefix = path.rstrip("/") + "/"
            names = set()
            for p in self.vfs:
                if p.startswith(prefix):
                    names.add(p[len(prefix) :].split("/", 1)[0])
            return sorted(names)
        if method == "trigger.create":
            trigger = params.get("trigger", params)
            if not isinstance(trigger, dict):
                raise ServiceError("`trigger` must be an object", -32602)
            if not isinstance(trigger.get("id"), str):
                raise ServiceError("a trigger needs an `id`")
            if trigger.get("id") == "refuse-me":
                raise ServiceError("plugin 'other' blocked it: no")
            stored = dict(trigger, plugin=self.plugin_id)
            self.triggers[trigger["id"]] = stored
            return copy.deepcopy(stored)
        if method == "trigger.get":
            return copy.deepcopy(self.triggers.get(self._str(params, "id")))
        if method == "trigger.list":
            return [copy.deepcopy(t) for t in self.triggers.values()]
        if method == "trigger.update":
            tid = self._str(params, "id")
            patch = params.get("patch")
            if not isinstance(patch, dict):
                raise ServiceError("`patch` must be an object", -32602)
            if tid not in self.triggers:
                raise ServiceError("no trigger `%s`" % tid)
            self.triggers[tid].update(patch)
            return copy.deepcopy(self.triggers[tid])
        if method == "trigger.delete":
            return self.triggers.pop(self._str(params, "id"), None) is not None
        if method in ("storage.get", "storage.set", "storage.delete"):
            key = self._str(params, "key")
            scope = params.get("scope", "global")
            if scope == "global":
                where = ("global",)
            elif scope == "session":
                agent = params.get("agent_id")
                if not agent:
                    raise ServiceError("`session` scope needs an agent", -32602)
                where = ("session", agent)
            else:
                raise ServiceError("`scope` must be global or session", -32602)
            if method == "storage.get":
                return copy.deepcopy(self.storage.get(where + (key,)))
            if method == "storage.set":
                self.storage[where + (key,)] = copy.deepcopy(params.get("value"))
                return None
            return self.storage.pop(where + (key,), None) is not None
        if method == "log":
            self.logs.append(params)
            return None
        raise ServiceError("no service method `%s`" % method, -32601)
