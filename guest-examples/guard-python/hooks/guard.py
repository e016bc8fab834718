# guard-python: an agent-loop guard as a persistent JSON-RPC worker (Python, standard library only).
#
#   tool_call_pre     {"type":"tool_call_pre","name":s,"args":{...},"agent_id":s}
#                     a `shell_exec` call whose args.command contains BLOCK_PATTERN (the plugin's
#                     [agent_config], read from the host with `config.get` on every call) is
#                     blocked: {"action":"block","reason":"guard: refusing a command containing `<pattern>`"};
#                     anything else: {"action":"pass"}
#   memory_write_pre  {"type":"memory_write_pre","content":s,"metadata":{...}}
#                     every email address in the content becomes "[email]":
#                     {"action":"replace","value":"<new content>"}; no email: {"action":"pass"}
#
# The same guard exists as a node one-shot script (guard-node) and as a Rust component; all three
# give the same replies. hooks/ctxhost_rpc.py is a copy of guest-examples/rpc-clients/ctxhost_rpc.py.
#
# Try it by hand from the plugin dir (the config.get request it prints needs an answer, so
# give it one after the call):
#   printf '%s\n%s\n' \
#     '{"jsonrpc":"2.0","id":1,"method":"hook/tool_call_pre","params":{"type":"tool_call_pre","name":"shell_exec","args":{"command":"rm -rf /"},"agent_id":"a"}}' \
#     '{"jsonrpc":"2.0","id":"w1","result":"rm -rf"}' | python3 hooks/guard.py

import re

from ctxhost_rpc import host

DEFAULT_PATTERN = "rm -rf"
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


@host.hook("tool_call_pre")
def tool_call_pre(request):
    if request.get("name") != "shell_exec":
        return {"action": "pass"}
    args = request.get("args")
    command = args.get("command") if isinstance(args, dict) else None
    if not isinstance(command, str):
        return {"action": "pass"}
    pattern = host.call("config.get", {"key": "BLOCK_PATTERN", "default": DEFAULT_PATTERN})
    if not isinstance(pattern, str):
        pattern = DEFAULT_PATTERN
    if pattern in command:
        return {"action": "block", "reason": "guard: refusing a command containing `%s`" % pattern}
    return {"action": "pass"}


@host.hook("memory_write_pre")
def memory_write_pre(request):
    content = request.get("content")
    if not isinstance(content, str):
        return {"action": "pass"}
    redacted, count = EMAIL.subn("[email]", content)
    if count == 0:
        return {"action": "pass"}
    return {"action": "replace", "value": redacted}


host.run()
