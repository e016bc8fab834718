"""`deps.py <entry>`: register_pip_deps read statically with ast."""

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from harness import DEPS


def read(source):
    with tempfile.TemporaryDirectory() as tmp:
        entry = Path(tmp) / "impl.py"
        entry.write_text(source, encoding="utf-8")
        out = subprocess.run([sys.executable, str(DEPS), str(entry)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class Deps(unittest.TestCase):
    def test_method_list(self):
        src = (
            "import feedparser\n"  # never imported: the reader does not run the plugin
            "class Plugin:\n"
            "    def register_pip_deps(self) -> list[str]:\n"
            "        return ['feedparser>=6.0', 'aiohttp', 'pkg[extra]~=1.2']\n"
        )
        self.assertEqual(read(src), {"deps": ["feedparser>=6.0", "aiohttp", "pkg[extra]~=1.2"]})

    def test_module_function_tuple_async(self):
        self.assertEqual(read("def register_pip_deps():\n    return ('a', 'b')\n"), {"deps": ["a", "b"]})
        self.assertEqual(read("class P:\n    async def register_pip_deps(self):\n        return []\n"), {"deps": []})

    def test_several_returns_merge(self):
        src = "class P:\n    def register_pip_deps(self):\n        if X:\n            return ['a']\n        return ['a', 'b']\n"
        self.assertEqual(read(src), {"deps": ["a", "b"]})

    def test_not_a_literal(self):
        got = read("DEPS = ['a']\nclass P:\n    def register_pip_deps(self):\n        return DEPS\n")
        self.assertIsNone(got["deps"])
        self.assertIn("does not return a literal list of strings", got["reason"])
        got = read("class P:\n    def register_pip_deps(self):\n        return ['a', VERSION]\n")
        self.assertIsNone(got["deps"])

    def test_none(self):
        got = read("class P:\n    pass\n")
        self.assertEqual(got["deps"], None)
        self.assertIn("no register_pip_deps", got["reason"])
        got = read("class P:\n    def register_pip_deps(self):\n        pass\n")
        self.assertIn("no return statement", got["reason"])

    def test_syntax_error_and_missing_file(self):
        got = read("def broken(:\n")
        self.assertIsNone(got["deps"])
        self.assertIn("cannot parse", got["reason"])
        out = subprocess.run([sys.executable, str(DEPS), "/nonexistent/impl.py"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0)
        self.assertIn("cannot read", json.loads(out.stdout)["reason"])
        usage = subprocess.run([sys.executable, str(DEPS)], capture_output=True, text=True, timeout=30)
        self.assertEqual(usage.returncode, 2)


if __name__ == "__main__":
    unittest.main()
