# shorten-results: a transform_tool_result plugin (Python, standard library only).
#
# A tool result longer than MAX_CHARS reaches the model as its first lines (whole lines, at most
# MAX_CHARS characters) and a note of what was cut, so one verbose tool cannot fill the context
# window.
# Shorter results pass unchanged ({"type":"skip"}). The host writes one JSON request line on
# stdin and reads one JSON reply line from stdout.
#
# Try it by hand:
#   echo '{"type":"transform_tool_result","tool_name":"t","result":"short"}' | python3 hooks/shorten.py

import json
import sys

MAX_CHARS = 300


def reply(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def main():
    try:
        req = json.loads(sys.stdin.readline() or "{}")
    except ValueError:
        req = {}
    result = req.get("result") if isinstance(req, dict) else None
    if not isinstance(result, str) or len(result) <= MAX_CHARS:
        reply({"type": "skip"})
        return
    lines = result.split("\n")
    kept = []
    for line in lines:
        if kept and len("\n".join(kept + [line])) > MAX_CHARS:
            break
        kept.append(line)
    text = "\n".join(kept)[:MAX_CHARS]
    note = "\n[shortened by shorten-results: kept %d of %d lines, %d of %d characters]" % (
        len(kept),
        len(lines),
        len(text),
        len(result),
    )
    reply({"type": "transformed", "result": text + note})


if __name__ == "__main__":
    main()
