# A starting point for a context-engine plugin (ctxhost / LibreFang script protocol).
#
# The host runs `python3 hooks/memory.py` with cwd = the plugin dir, writes ONE JSON
# request line on stdin, and reads the reply from the last JSON line on stdout.
# stderr is for logs. One script serves two hooks, dispatching on the request's "type":
#   after_turn  appends the text of every user message to data/notes.jsonl
#   ingest      recalls the 3 most recent notes of the same agent, newest first
# Replace the bodies of after_turn() and ingest() with your own logic; add more hooks
# (assemble, compact, transform_tool_result, ...) in plugin.toml's [hooks] as you go.

import json
import os
import sys

NOTES_FILE = os.path.join("data", "notes.jsonl")
MAX_RECALL = 3


def log(line):
    print(line, file=sys.stderr, flush=True)


def reply(obj):
    # One compact JSON line, non-ASCII kept as UTF-8.
    sys.stdout.buffer.write((json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8"))
    sys.stdout.flush()


def text_of(content):
    """A message's text: the string itself, or its text blocks joined with newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def after_turn(req):
    agent_id = req.get("agent_id", "")
    lines = ""
    for msg in req.get("messages") or []:
        text = text_of(msg.get("content"))
        if msg.get("role") == "user" and text.strip():
            lines += json.dumps({"agent_id": agent_id, "content": text}, ensure_ascii=False) + "\n"
    if lines:
        os.makedirs("data", exist_ok=True)
        with open(NOTES_FILE, "a", encoding="utf-8") as f:
            f.write(lines)
    reply({"type": "ok"})


def ingest(req):
    agent_id = req.get("agent_id", "")
    notes = []
    if os.path.exists(NOTES_FILE):
        with open(NOTES_FILE, encoding="utf-8") as f:
            notes = [json.loads(line) for line in f if line.strip()]
    mine = [n["content"] for n in notes if n.get("agent_id") == agent_id]
    recalled = list(reversed(mine))[:MAX_RECALL]
    log("ingest: %d note(s) for agent %s" % (len(recalled), agent_id))
    reply({"type": "ingest_result", "memories": [{"content": c} for c in recalled]})


def main():
    req = json.loads(sys.stdin.readline() or "{}")
    hook = req.get("type")
    if hook == "after_turn":
        after_turn(req)
    elif hook == "ingest":
        ingest(req)
    else:
        log("unsupported request type %r" % hook)
        sys.exit(1)


main()
