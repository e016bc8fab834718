# bash-memory: a minimal context-engine memory plugin in pure bash (no python, no jq).
#
# Shows: one script serving two hooks by dispatching on the request's "type".
#   after_turn  stores every user message of the turn as a note in ./memory.jsonl
#   ingest      recalls up to 3 notes of the same agent that share a word with the message
# The host runs it as `bash hooks/memory.sh` with cwd = the plugin dir (no executable bit
# needed), writes one JSON request line on stdin and reads one JSON reply line from stdout.
# stderr is for logs. Uses only bash builtins (bash >= 4.4).
#
# Try it by hand from the plugin dir:
#   bash hooks/memory.sh < ../requests/after_turn.json
#   echo '{"type":"ingest","agent_id":"demo","message":"my garden?","peer_id":null}' | bash hooks/memory.sh
#
# JSON handling: a small, strict parser below (objects, arrays, strings with every escape
# including \uXXXX and surrogate pairs, numbers, true/false/null) and an encoder that
# escapes '"', '\' and control characters exactly like the other examples.
# Limitations:
#   - "\u0000" is stored as U+FFFD (a bash string cannot hold a NUL byte);
#   - bytes are passed through as they come: invalid UTF-8 is not rejected;
#   - every ingest parses memory.jsonl line by line, which is fine for a few thousand notes
#     but much slower than the other runtimes;
#   - an after_turn that stores more than ~4 KiB may reach the file in several writes, so
#     two such calls running at the same moment could interleave their lines.

set -u
# Byte-wise string handling and ASCII-only case mapping, whatever the caller's locale.
export LC_ALL=C

MEMORY_FILE=memory.jsonl
MAX_RECALL=3

log() { printf '%s\n' "$*" >&2; }
fail() { log "memory: error: $*"; exit 1; }

# ------------------------------------------------------------------------------ JSON parser
# json_parse TEXT flattens TEXT into three associative arrays keyed by path
# ("$", "$.messages", "$.messages[0].content", ...):
#   JT[path]  type: object, array, string, number, true, false or null
#   JV[path]  decoded value of a string (or the text of a number)
#   JN[path]  number of elements of an array
# Returns 1 (with the reason in JSON_ERR) when TEXT is not exactly one JSON value.
declare -A JT=() JV=() JN=()
JSON_ERR=""
_j="" # the text being parsed
_p=0  # current byte offset in _j
_s="" # last string decoded by _json_string

_RE_WS=$'^[ \t\n\r]+'
_RE_PLAIN=$'^[^"\\\\\x01-\x1f]+'
_RE_NUMBER='^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?'
_RE_HEX4='^[0-9a-fA-F]{4}$'

_json_fail() { JSON_ERR="$1 at byte $((_p + 1))"; return 1; }

# (The scanners below look at a bounded window of the text, never at all of the rest of
# it: copying the rest on every token would make parsing quadratic in the input size.)
_json_ws() {
  while [[ ${_j:_p:1} == [$' \t\n\r'] ]]; do
    if [[ ${_j:_p:256} =~ $_RE_WS ]]; then
      ((_p += ${#BASH_REMATCH[0]}))
    fi
  done
  return 0
}

# Appends the UTF-8 encoding of code point $1 to variable _s.
_json_utf8() {
  local cp=$1 esc
  if ((cp < 0x80)); then
    printf -v esc '\\x%02x' "$cp"
  elif ((cp < 0x800)); then
    printf -v esc '\\x%02x\\x%02x' $((0xC0 | cp >> 6)) $((0x80 | (cp & 0x3F)))
  elif ((cp < 0x10000)); then
    printf -v esc '\\x%02x\\x%02x\\x%02x' $((0xE0 | cp >> 12)) \
      $((0x80 | (cp >> 6 & 0x3F))) $((0x80 | (cp & 0x3F)))
  else
    printf -v esc '\\x%02x\\x%02x\\x%02x\\x%02x' $((0xF0 | cp >> 18)) \
      $((0x80 | (cp >> 12 & 0x3F))) $((0x80 | (cp >> 6 & 0x3F))) $((0x80 | (cp & 0x3F)))
  fi
  local ch
  printf -v ch '%b' "$esc"
  _s+=$ch
}

# Decodes the string literal at _p into _s.
_json_string() {
  local c hex cp lo
  _s=""
  ((_p++)) # opening quote
  while :; do
    while [[ ${_j:_p:1024} =~ $_RE_PLAIN ]]; do # runs of characters that need no decoding
      _s+=${BASH_REMATCH[0]}
      ((_p += ${#BASH_REMATCH[0]}))
    done
    c=${_j:_p:1}
    if [[ $c == '"' ]]; then
      ((_p++))
      return 0
    elif [[ $c != '\' ]]; then
      if [[ -z $c ]]; then _json_fail "unterminated string"; else _json_fail "control character in string"; fi
      return 1
    fi
    c=${_j:_p+1:1}
    case $c in
      '"' | '\' | /) _s+=$c ;;
      b) _s+=$'\b' ;;
      f) _s+=$'\f' ;;
      n) _s+=$'\n' ;;
      r) _s+=$'\r' ;;
      t) _s+=$'\t' ;;
      u)
        hex=${_j:_p+2:4}
        [[ $hex =~ $_RE_HEX4 ]] || { _json_fail "invalid \\u escape"; return 1; }
        cp=$((16#$hex))
        if ((cp >= 0xD800 && cp <= 0xDBFF)); then
          # a high surrogate: join it with the low surrogate that must follow
          hex=${_j:_p+8:4}
          if [[ ${_j:_p+6:2} == '\u' && $hex =~ $_RE_HEX4 ]] &&
            (((lo = 16#$hex) >= 0xDC00 && lo <= 0xDFFF)); then
            cp=$((0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)))
            ((_p += 6))
          else
            cp=0xFFFD
          fi
        elif ((cp >= 0xDC00 && cp <= 0xDFFF || cp == 0)); then
          cp=0xFFFD # lone low surrogate, or NUL which bash cannot hold
        fi
        _json_utf8 "$cp"
        ((_p += 4))
        ;;
      *)
        _json_fail "invalid escape"
        return 1
        ;;
    esac
    ((_p += 2))
  done
}

# Parses the value at _p and records it under path $1.
_json_value() {
  local path=$1 c key n
  _json_ws
  c=${_j:_p:1}
  case $c in
    '{')
      JT[$path]=object
      ((_p++))
      _json_ws
      if [[ ${_j:_p:1} == '}' ]]; then
        ((_p++))
        return 0
      fi
      while :; do
        _json_ws
        [[ ${_j:_p:1} == '"' ]] || { _json_fail "expected string key"; return 1; }
        _json_string || return 1
        key=$_s
        _json_ws
        [[ ${_j:_p:1} == ':' ]] || { _json_fail "expected ':'"; return 1; }
        ((_p++))
        _json_value "$path.$key" || return 1
        _json_ws
        c=${_j:_p:1}
        [[ $c == '}' || $c == ',' ]] || { _json_fail "expected ',' or '}'"; return 1; }
        ((_p++))
        [[ $c == '}' ]] && return 0
      done
      ;;
    '[')
      JT[$path]=array
      JN[$path]=0
      ((_p++))
      _json_ws
      if [[ ${_j:_p:1} == ']' ]]; then
        ((_p++))
        return 0
      fi
      n=0
      while :; do
        _json_value "$path[$n]" || return 1
        JN[$path]=$((++n))
        _json_ws
        c=${_j:_p:1}
        [[ $c == ']' || $c == ',' ]] || { _json_fail "expected ',' or ']'"; return 1; }
        ((_p++))
        [[ $c == ']' ]] && return 0
      done
      ;;
    '"')
      _json_string || return 1
      JT[$path]=string
      JV[$path]=$_s
      ;;
    t | f | n)
      for key in true false null; do
        if [[ ${_j:_p:${#key}} == "$key" ]]; then
          JT[$path]=$key
          ((_p += ${#key}))
          return 0
        fi
      done
      _json_fail "unexpected character"
      ;;
    *)
      if [[ ${_j:_p:1024} =~ $_RE_NUMBER ]]; then
        JT[$path]=number
        JV[$path]=${BASH_REMATCH[0]}
        ((_p += ${#BASH_REMATCH[0]}))
      elif [[ -z $c ]]; then
        _json_fail "unexpected end of input"
      else
        _json_fail "unexpected character"
      fi
      ;;
  esac
}

json_parse() {
  JT=() JV=() JN=()
  JSON_ERR=""
  _j=$1
  _p=0
  _json_value '$' || return 1
  _json_ws
  ((_p == ${#_j})) || { _json_fail "trailing characters"; return 1; }
}

# Sets _r to the string at path $1, or to "" when there is no string there.
json_str() {
  if [[ ${JT[$1]-} == string ]]; then _r=${JV[$1]}; else _r=""; fi
}

# ----------------------------------------------------------------------------- JSON encoder
# Sets _q to $1 as a JSON string literal: '"', '\' and control characters are escaped,
# everything else (UTF-8 included) is copied as is.
_CTRL=$'[\x01-\x1f]'
json_quote() {
  local s=$1 bs='\' dq='"' i c hex
  s=${s//"$bs"/"$bs$bs"}
  s=${s//"$dq"/"$bs$dq"}
  if [[ $s == *$_CTRL* ]]; then
    s=${s//$'\b'/"${bs}b"}
    s=${s//$'\f'/"${bs}f"}
    s=${s//$'\n'/"${bs}n"}
    s=${s//$'\r'/"${bs}r"}
    s=${s//$'\t'/"${bs}t"}
    for ((i = 1; i < 32; i++)); do
      [[ $s == *$_CTRL* ]] || break
      printf -v hex '\\x%02x' "$i"
      printf -v c '%b' "$hex"
      printf -v hex '\\u%04x' "$i"
      s=${s//"$c"/"$hex"}
    done
  fi
  _q="\"$s\""
}

# -------------------------------------------------------------------------------- the hooks

# Sets _text to the text of message $1 (a path): the content string, or the text of its
# text blocks joined with newlines. Other block types are ignored.
message_text() {
  local content="$1.content" key i n sep=""
  _text=""
  case ${JT[$content]-} in
    string) _text=${JV[$content]} ;;
    array)
      n=${JN[$content]}
      for ((i = 0; i < n; i++)); do
        json_str "$content[$i].type"
        key="$content[$i].text"
        [[ $_r == text && ${JT[$key]-} == string ]] || continue
        _text+=$sep${JV[$key]}
        sep=$'\n'
      done
      ;;
  esac
}

after_turn() {
  local agent_id=$1 i n lines="" stored=0
  json_quote "$agent_id"
  local agent_json=$_q
  [[ ${JT['$.messages']-} == array ]] && n=${JN['$.messages']} || n=0
  for ((i = 0; i < n; i++)); do
    json_str "\$.messages[$i].role"
    [[ $_r == user ]] || continue
    message_text "\$.messages[$i]"
    [[ -n ${_text//[$' \t\r\n']/} ]] || continue # empty or whitespace only
    json_quote "$_text"
    lines+="{\"agent_id\": $agent_json, \"content\": $_q}"$'\n'
    ((stored++))
  done
  if ((stored > 0)); then
    printf '%s' "$lines" >>"$MEMORY_FILE" || fail "cannot write $MEMORY_FILE"
  fi
  log "after_turn: stored $stored note(s) for agent $agent_id"
  printf '%s\n' '{"type":"ok"}'
}

ingest() {
  local agent_id=$1 message w i k words=() found=() note haystack dup hit
  json_str '$.message'
  message=$_r
  # Words: runs of ASCII letters/digits, lowercased, at least 4 long.
  for w in ${message//[^A-Za-z0-9]/ }; do
    w=${w,,}
    ((${#w} >= 4)) && words+=("$w")
  done
  if ((${#words[@]} > 0)) && [[ -f $MEMORY_FILE ]]; then
    local notes=()
    mapfile -t notes <"$MEMORY_FILE"
    for ((i = ${#notes[@]} - 1; i >= 0 && ${#found[@]} < MAX_RECALL; i--)); do # newest first
      json_parse "${notes[i]}" || continue # blank or damaged line
      [[ ${JT['$.agent_id']-} == string && ${JT['$.content']-} == string ]] || continue
      [[ ${JV['$.agent_id']} == "$agent_id" ]] || continue
      note=${JV['$.content']}
      dup=0
      for k in "${found[@]}"; do [[ $k == "$note" ]] && dup=1 && break; done
      ((dup)) && continue
      haystack=${note,,}
      hit=0
      for w in "${words[@]}"; do [[ $haystack == *"$w"* ]] && hit=1 && break; done
      ((hit)) && found+=("$note")
    done
  fi
  local out="" sep=""
  for note in "${found[@]}"; do
    json_quote "$note"
    out+="$sep{\"content\":$_q}"
    sep=","
  done
  log "ingest: ${#found[@]} memories for agent $agent_id"
  printf '%s\n' "{\"type\":\"ingest_result\",\"memories\":[$out]}"
}

main() {
  local line="" agent_id type
  IFS= read -r line || [[ -n $line ]] || fail "empty request on stdin"
  [[ -n ${line//[$' \t\r\n']/} ]] || fail "empty request on stdin"
  json_parse "$line" || fail "request is not valid JSON: $JSON_ERR"
  [[ ${JT['$']} == object ]] || fail "request is not a JSON object"
  json_str '$.agent_id'
  agent_id=$_r
  case ${JT['$.type']-}:${JV['$.type']-} in
    string:after_turn) after_turn "$agent_id" ;;
    string:ingest) ingest "$agent_id" ;;
    string:*)
      json_quote "${JV['$.type']}"
      fail "unsupported request type $_q"
      ;;
    *) fail "unsupported request type ${JT['$.type']-null}" ;;
  esac
}

main
