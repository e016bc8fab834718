"""`python3 deps.py <entry file>`: a FaustBot plugin's pip requirements, read statically.

Prints one JSON object on stdout:

- `{"deps": ["feedparser>=6", ...]}` when the entry file has a
  `register_pip_deps` (a method of any class, or a module-level function)
  whose `return` statements all give a literal list (or tuple) of strings;
- `{"deps": null, "reason": "..."}` otherwise (no such function, a return
  that is not a literal list of strings, a file that cannot be read or
  parsed).

Reads the file with `ast` only: nothing of the plugin is imported or run
(FaustBot calls `register_pip_deps()` after importing the module, so a
plugin importing its dependency at module level could never load the first
time). Always exits 0 with an answer, except for a usage error (2).
"""

import ast
import json
import sys

__all__ = ["read_deps"]


def _functions(tree):
    """Every `register_pip_deps` definition: module level first, then in classes."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "register_pip_deps":
            found.append(node)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "register_pip_deps":
                    found.append(item)
    return found


def _returns(func):
    """The `return` statements of `func` itself (not of functions nested in it)."""
    out = []
    stack = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            out.append(node)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return out


def _literal(node):
    """The strings of a literal list/tuple of strings, else None."""
    if not isinstance(node, (ast.List, ast.Tuple)):
        return None
    items = []
    for elt in node.elts:
        if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
            items.append(elt.value)
        else:
            return None
    return items


def read_deps(source, filename="<entry>"):
    """`(deps, reason)`: the list, or None and why."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        return None, "cannot parse %s: %s (line %s)" % (filename, e.msg, e.lineno)
    functions = _functions(tree)
    if not functions:
        return None, "no register_pip_deps in %s" % filename
    func = functions[0]
    returns = _returns(func)
    if not returns:
        return None, "register_pip_deps (line %d) has no return statement" % func.lineno
    deps = []
    for ret in returns:
        items = _literal(ret.value) if ret.value is not None else None
        if items is None:
            return None, (
                "register_pip_deps (line %d) does not return a literal list of strings; "
                "give the plugin a requirements.txt" % ret.lineno
            )
        for item in items:
            item = item.strip()
            if item and item not in deps:
                deps.append(item)
    return deps, None


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: deps.py <entry file>\n")
        return 2
    path = argv[1]
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        answer = {"deps": None, "reason": "cannot read %s: %s" % (path, e.strerror or e)}
    else:
        deps, reason = read_deps(source, filename=path)
        answer = {"deps": deps} if reason is None else {"deps": None, "reason": reason}
    sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
