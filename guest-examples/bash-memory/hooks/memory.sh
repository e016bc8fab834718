# bash-memory: a minimal context-engine memory plugin in bash (no python, no jq).
#
# Shows: one script serving two hooks by dispatching on the request's "type".
#   after_turn  stores every user message of the turn as a note in ./memory.jsonl
#   ingest      recalls up to 3 notes of the same agent that share a word with the message
# The host runs it as `bash hooks/memory.sh` with cwd = the plugin dir (no executable bit
# needed), writes one JSON request line on stdin and reads one JSON reply line from stdout.
# stderr is for logs. Needs bash >= 4.4, grep (to split JSON into tokens) and dd.
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
#   - UTF-8 is passed through unchecked, except that 0xFE and 0xFF bytes (never valid in
#     UTF-8) are rejected in strings: the decoder uses them internally;
#   - it is slower than the other runtimes (tens of ms per call, more for long inputs).

set -u
# Byte-wise string handling and ASCII-only case mapping, whatever the caller's locale
# (this also applies to grep).
export LC_ALL=C

MEMORY_FILE=memory.jsonl
MAX_RECALL=3

log() { printf '%s\n' "$*" >&2; }
fail() { log "memory: error: $*"; exit 1; }

# ------------------------------------------------------------------------------ JSON parser
# json_tokenize splits JSON text (stdin) into tokens, one per array element, remembering the
# input line of each: grep does that in one linear pass, where walking the text byte by byte
# in bash would be quadratic. A token is a string literal, one of [ ] { } : , a bare word
# (number, true, false, null — checked by the parser), or any other single stray character
# (always an error). Whitespace between tokens is dropped.
_RE_TOKEN='"([^"\\]|\\.)*"|[][{}:,]|[A-Za-z0-9.+-]+|[^ '$'\t\r'']'
_RE_NUMBER='^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$'
_RE_HEX4='^[0-9a-fA-F]{4}$'
_CTRL=$'[\x01-\x1f]'
_T=()     # tokens
_L=()     # input line number of each token
declare -A _FIRST=() # line number -> index of its first token

json_tokenize() {
  local raw=() e i=0
  _T=() _L=() _FIRST=()
  mapfile -t raw < <(grep -noE "$_RE_TOKEN")
  for e in "${raw[@]}"; do
    _L[i]=${e%%:*}
    _T[i]=${e#*:}
    [[ -n ${_FIRST[${_L[i]}]-} ]] || _FIRST[${_L[i]}]=$i
    ((i++))
  done
}

# json_parse_line N flattens the JSON value on input line N into three associative arrays
# keyed by path ("$", "$.messages", "$.messages[0].content", ...):
#   JT[path]  type: object, array, string, number, true, false or null
#   JV[path]  decoded value of a string (or the text of a number)
#   JN[path]  number of elements of an array
# Returns 1 (with the reason in JSON_ERR) unless line N holds exactly one JSON value.
declare -A JT=() JV=() JN=()
JSON_ERR=""
_k=0    # index of the current token
_line=0 # line being parsed
_t=""   # current token ("" past the end of the line)
_s=""   # last string decoded by _json_string

_json_fail() { JSON_ERR="$1 (token $((_k + 1)): '${_t:0:40}')"; return 1; }

_json_tok() {
  if ((_k < ${#_T[@]})) && [[ ${_L[_k]} == "$_line" ]]; then _t=${_T[_k]}; else _t=""; fi
}

# Sets _ch to the UTF-8 encoding of code point $1.
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
  printf -v _ch '%b' "$esc"
}

# Decodes the string literal token _t into _s.
# Escapes are replaced string-wide rather than one at a time (which is quadratic in bash):
# first every "\\" becomes a 0xFF byte (a byte that never occurs in UTF-8, so it cannot
# clash with the text), then every remaining backslash starts a one-character escape; the
# \uXXXX ones are cut apart at 0xFE bytes (never in UTF-8 either) and decoded in order.
_json_string() {
  local s part hex cp lo i bs='\' fe=$'\xfe' ff=$'\xff' parts=()
  if ((${#_t} < 2)); then
    _json_fail "unterminated string"
    return 1
  fi
  s=${_t:1:${#_t}-2}
  if [[ $s == *$_CTRL* ]]; then
    _json_fail "control character in string"
    return 1
  elif [[ $s == *[$'\xfe\xff']* ]]; then
    _json_fail "invalid UTF-8 in string"
    return 1
  fi
  if [[ $s == *"$bs"* ]]; then
    s=${s//"$bs$bs"/"$ff"}
    if [[ $s == *"$bs"[^\"/bfnrtu]* || $s == *"$bs" ]]; then
      _json_fail "invalid escape"
      return 1
    fi
    s=${s//"$bs\""/\"}
    s=${s//"$bs/"//}
    s=${s//"${bs}b"/$'\b'}
    s=${s//"${bs}f"/$'\f'}
    s=${s//"${bs}n"/$'\n'}
    s=${s//"${bs}r"/$'\r'}
    s=${s//"${bs}t"/$'\t'}
    if [[ $s == *"${bs}u"* ]]; then
      # parts[0] is plain text; every later part starts with the 4 hex digits of an escape.
      mapfile -t -d "$fe" parts < <(printf '%s' "${s//"${bs}u"/"$fe"}")
      s=${parts[0]}
      for ((i = 1; i < ${#parts[@]}; i++)); do
        part=${parts[i]}
        hex=${part:0:4}
        [[ $hex =~ $_RE_HEX4 ]] || { _json_fail "invalid \\u escape"; return 1; }
        cp=$((16#$hex))
        if ((cp >= 0xD800 && cp <= 0xDBFF)); then
          # a high surrogate: join it with the low surrogate that should follow
          hex=${parts[i + 1]-}
          hex=${hex:0:4}
          if ((${#part} == 4)) && [[ $hex =~ $_RE_HEX4 ]] &&
            (((lo = 16#$hex) >= 0xDC00 && lo <= 0xDFFF)); then
            cp=$((0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)))
            part=${parts[++i]}
          else
            cp=0xFFFD
          fi
        elif ((cp >= 0xDC00 && cp <= 0xDFFF || cp == 0)); then
          cp=0xFFFD # a lone low surrogate, or NUL which bash cannot hold
        fi
        _json_utf8 "$cp"
        s+=$_ch${part:4}
      done
    fi
    s=${s//"$ff"/"$bs"}
  fi
  _s=$s
}

# Parses the value at token _k and records it under path $1.
_json_value() {
  local path=$1 key n=0
  _json_tok
  case $_t in
    '{')
      JT[$path]=object
      ((++_k))
      _json_tok
      if [[ $_t == '}' ]]; then
        ((++_k))
        return 0
      fi
      while :; do
        [[ $_t == '"'* ]] || { _json_fail "expected string key"; return 1; }
        _json_string || return 1
        key=$_s
        ((++_k))
        _json_tok
        [[ $_t == : ]] || { _json_fail "expected ':'"; return 1; }
        ((++_k))
        _json_value "$path.$key" || return 1
        _json_tok
        [[ $_t == '}' || $_t == , ]] || { _json_fail "expected ',' or '}'"; return 1; }
        ((++_k))
        [[ $_t == '}' ]] && return 0
        _json_tok
      done
      ;;
    '[')
      JT[$path]=array
      JN[$path]=0
      ((++_k))
      _json_tok
      if [[ $_t == ']' ]]; then
        ((++_k))
        return 0
      fi
      while :; do
        _json_value "$path[$n]" || return 1
        JN[$path]=$((++n))
        _json_tok
        [[ $_t == ']' || $_t == , ]] || { _json_fail "expected ',' or ']'"; return 1; }
        ((++_k))
        [[ $_t == ']' ]] && return 0
      done
      ;;
    '"'*)
      _json_string || return 1
      JT[$path]=string
      JV[$path]=$_s
      ((++_k))
      ;;
    true | false | null)
      JT[$path]=$_t
      ((++_k))
      ;;
    '')
      _json_fail "unexpected end of input"
      ;;
    *)
      [[ $_t =~ $_RE_NUMBER ]] || { _json_fail "unexpected token"; return 1; }
      JT[$path]=number
      JV[$path]=$_t
      ((++_k))
      ;;
  esac
}

json_parse_line() {
  JT=() JV=() JN=()
  JSON_ERR=""
  _line=$1
  _k=${_FIRST[$1]-${#_T[@]}}
  _json_value '$' || return 1
  _json_tok
  [[ -z $_t ]] || { _json_fail "trailing characters"; return 1; }
}

# Sets _r to the string at path $1, or to "" when there is no string there.
json_str() {
  if [[ ${JT[$1]-} == string ]]; then _r=${JV[$1]}; else _r=""; fi
}

# ----------------------------------------------------------------------------- JSON encoder
# Sets _q to $1 as a JSON string literal: '"', '\' and control characters are escaped,
# everything else (UTF-8 included) is copied as is.
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
  local agent_id=$1 agent_json i n=0 lines="" stored=0
  json_quote "$agent_id"
  agent_json=$_q
  [[ ${JT['$.messages']-} == array ]] && n=${JN['$.messages']}
  for ((i = 0; i < n; i++)); do
    json_str "\$.messages[$i].role"
    [[ $_r == user ]] || continue
    message_text "\$.messages[$i]"
    [[ -n ${_text//[$' \t\r\n']/} ]] || continue # empty or whitespace only
    json_quote "$_text"
    lines+="{\"agent_id\": $agent_json, \"content\": $_q}"$'\n'
    ((++stored))
  done
  if ((stored > 0)); then
    # One O_APPEND write(2) for all the lines, so concurrent hooks do not interleave them
    # (bash itself writes in 4 KiB pieces; dd collects the whole block first).
    printf '%s' "$lines" |
      dd of="$MEMORY_FILE" oflag=append conv=notrunc iflag=fullblock bs="${#lines}" count=1 status=none ||
      fail "cannot write $MEMORY_FILE"
  fi
  log "after_turn: stored $stored note(s) for agent $agent_id"
  printf '%s\n' '{"type":"ok"}'
}

ingest() {
  local agent_id=$1 message w k line last note haystack dup hit words=() found=()
  json_str '$.message'
  message=$_r
  # Words: runs of ASCII letters/digits, lowercased, at least 4 long.
  for w in ${message//[^A-Za-z0-9]/ }; do
    w=${w,,}
    ((${#w} >= 4)) && words+=("$w")
  done
  if ((${#words[@]} > 0)) && [[ -f $MEMORY_FILE ]]; then
    json_tokenize <"$MEMORY_FILE"
    last=${_L[${#_L[@]} - 1]-0}
    for ((line = last; line >= 1 && ${#found[@]} < MAX_RECALL; line--)); do # newest first
      [[ -n ${_FIRST[$line]-} ]] || continue # blank line
      json_parse_line "$line" || continue    # damaged line
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
  local line="" agent_id
  IFS= read -r line || [[ -n $line ]] || fail "empty request on stdin"
  [[ -n ${line//[$' \t\r\n']/} ]] || fail "empty request on stdin"
  json_tokenize < <(printf '%s\n' "$line")
  json_parse_line 1 || fail "request is not valid JSON: $JSON_ERR"
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
