#!/usr/bin/env bash
# A starting point for a context-engine plugin (ctxhost / LibreFang script protocol).
#
# The host runs this script with cwd = the plugin dir (runtime "bash": `bash hooks/memory.sh`;
# runtime "native": directly, through the shebang above), writes ONE JSON request line on
# stdin, and reads the reply from the last JSON line on stdout. stderr is for logs.
# One script serves two hooks, dispatching on the request's "type":
#   after_turn  appends the text of every user message to data/notes.jsonl
#   ingest      recalls the 3 most recent notes of the same agent, newest first
#
# Bash has no JSON parser, so this template pulls JSON string literals out of the request
# with grep and keeps them *escaped*: they go into notes.jsonl and back into the reply
# unchanged, never decoded. It sees user messages whose content is a plain string (how
# ctxhost and LibreFang send text; the key order role, content is theirs). For anything
# more, use jq, or see the full parser in ctxhost's guest-examples/bash-memory.
set -euo pipefail
export LC_ALL=C

NOTES_FILE=data/notes.jsonl
MAX_RECALL=3
STR='"([^"\\]|\\.)*"' # a JSON string literal
WS='[[:space:]]*'

log() { printf '%s\n' "$*" >&2; }

request=$(head -n 1)
# The literal of a top-level string field, e.g. field type -> "ingest" (quotes included).
field() { grep -oE "\"$1\"$WS:$WS$STR" <<<"$request" | head -n 1 | sed -E "s/^\"$1\"$WS:$WS//" || true; }
agent=$(field agent_id)
[[ -n $agent ]] || agent='""'

after_turn() {
  local notes
  # "role":"user","content":"..."  ->  {"agent_id":<agent>,"content":"..."}
  notes=$(grep -oE "\"role\"$WS:$WS\"user\"$WS,$WS\"content\"$WS:$WS$STR" <<<"$request" |
    sed -E "s/^.*\"content\"$WS:$WS//" | grep -vE '^"([[:space:]]|\\[nrt])*"$' |
    while IFS= read -r content; do printf '{"agent_id":%s,"content":%s}\n' "$agent" "$content"; done || true)
  if [[ -n $notes ]]; then
    mkdir -p data
    printf '%s\n' "$notes" >>"$NOTES_FILE"
  fi
  echo '{"type":"ok"}'
}

ingest() {
  local prefix="{\"agent_id\":$agent," memories="" sep="" line count=0
  if [[ -f $NOTES_FILE ]]; then
    # This agent's notes, newest first; each line is {"agent_id":…,"content":"…"}.
    while IFS= read -r line; do
      memories+="$sep{${line#"$prefix"}"
      sep=","
      ((++count))
    done < <(grep -F -- "$prefix" "$NOTES_FILE" | tail -n "$MAX_RECALL" | tac)
  fi
  log "ingest: $count note(s) for agent $agent"
  echo "{\"type\":\"ingest_result\",\"memories\":[$memories]}"
}

case $(field type) in
  '"after_turn"') after_turn ;;
  '"ingest"') ingest ;;
  *) log "unsupported request type: $(field type)"; exit 1 ;;
esac
