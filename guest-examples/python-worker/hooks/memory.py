# python-worker: the python-memory example as a persistent worker (Python, standard library only).
#
# Same behaviour as guest-examples/python-memory:
#   after_turn  stores every user message of the turn as a note in ./memory.jsonl
#   ingest      recalls up to 3 notes of the same agent that share a word with the message
# The difference is main(): it answers every request line on stdin until EOF, one compact
# JSON reply line each, flushed at once. With `persistent_subprocess = true` the host keeps
# this process and writes one line per call; one-shot (the default) the host writes one line
# and closes stdin, so the same loop answers once and ends. stdout carries replies only:
# logs go to stderr. In a worker LIBREFANG_AGENT_ID and LIBREFANG_MESSAGE are empty; read the
# request's "agent_id" and "message" instead (this script always does).
#
# Try it by hand from the plugin dir (two requests, two replies):
#   printf '%s\n%s\n' "$(cat ../requests/after_turn.json)" \
#     '{"type":"ingest","agent_id":"demo","message":"my garden?","peer_id":null}' | python3 hooks/memory.py

import json
import os
import re
import sys

MEMORY_FILE = "memory.jsonl"
MAX_RECALL = 3
WORD_RE = re.compile(r"[A-Za-z0-9]+")
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def log(line):
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def reply(obj):
    # Compact JSON, non-ASCII kept as UTF-8, one line.
    line = json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"
    sys.stdout.buffer.write(line.encode("utf-8"))
    sys.stdout.flush()


def fail(msg):
    log("memory: error: " + msg)
    sys.exit(1)


def text_of(content):
    """A message's text: the string itself, or its text blocks joined with newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        return "\n".join(parts)
    return ""


def after_turn(req, agent_id):
    messages = req.get("messages")
    lines = []
    for msg in messages if isinstance(messages, list) else []:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        text = text_of(msg.get("content"))
        if text.strip(" \t\r\n") == "":
            continue
        note = {"agent_id": agent_id, "content": text}
        lines.append(json.dumps(note, ensure_ascii=False) + "\n")
    if lines:
        # One O_APPEND write per call, so concurrent hooks do not interleave lines.
        fd = os.open(MEMORY_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, "".join(lines).encode("utf-8"))
        finally:
            os.close(fd)
    log("after_turn: stored %d note(s) for agent %s" % (len(lines), agent_id))
    reply({"type": "ok"})


def load_notes():
    try:
        with open(MEMORY_FILE, "r", encoding="utf-8") as f:
            raw = f.read().split("\n")
    except FileNotFoundError:
        return []
    notes = []
    for line in raw:
        try:
            note = json.loads(line)
        except ValueError:
            continue  # blank or damaged line
        if (
            isinstance(note, dict)
            and isinstance(note.get("agent_id"), str)
            and isinstance(note.get("content"), str)
        ):
            notes.append(note)
    return notes


def ingest(req, agent_id):
    message = req.get("message")
    message = message if isinstance(message, str) else ""
    words = {w.translate(ASCII_LOWER) for w in WORD_RE.findall(message) if len(w) >= 4}
    found = []
    if words:
        for note in reversed(load_notes()):  # newest first
            if note["agent_id"] != agent_id or note["content"] in found:
                continue
            haystack = note["content"].translate(ASCII_LOWER)
            if any(w in haystack for w in words):
                found.append(note["content"])
                if len(found) == MAX_RECALL:
                    break
    log("ingest: %d memories for agent %s" % (len(found), agent_id))
    reply({"type": "ingest_result", "memories": [{"content": c} for c in found]})


def answer(line):
    """Answers one request line (exits on a bad request: the host then starts a new worker)."""
    try:
        req = json.loads(line)
    except ValueError as e:
        fail("request is not valid JSON: %s" % e)
    if not isinstance(req, dict):
        fail("request is not a JSON object")
    try:  # json.loads accepts "\ud800" alone, which cannot be written out as UTF-8
        json.dumps(req, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        fail("request contains an unpaired UTF-16 surrogate")
    agent_id = req.get("agent_id")
    agent_id = agent_id if isinstance(agent_id, str) else ""
    kind = req.get("type")
    if kind == "after_turn":
        after_turn(req, agent_id)
    elif kind == "ingest":
        ingest(req, agent_id)
    else:
        fail("unsupported request type %s" % json.dumps(kind, ensure_ascii=False))


def main():
    answered = 0
    # readline, not `for line in sys.stdin`: the iterator reads ahead in blocks
    # and would wait for more input before answering.
    while True:
        raw = sys.stdin.buffer.readline()
        if not raw:
            break
        line = raw.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        answer(line)
        answered += 1
    if answered == 0:
        fail("empty request on stdin")


if __name__ == "__main__":
    main()
