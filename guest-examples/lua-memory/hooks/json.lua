-- json.lua: a small, strict JSON decoder/encoder for Lua 5.3/5.4, no dependencies.
-- Lua's standard library has no JSON, so the lua-memory example ships this file next to
-- its hook and loads it relative to the hook's own path.
--
--   local json = require("json")
--   local v = json.decode('{"a":[1,2,null],"s":"caf\\u00e9"}')   -- errors "json: ... at byte N"
--   print(json.encode(v))                                           --> {"a":[1,2,null],"s":"café"}
--
-- Mapping:
--   object <-> table with string keys (encoded with sorted keys, so output is deterministic)
--   array  <-> table marked with json.array() (decode marks every array; an unmarked table
--              is encoded as an array when its keys are exactly 1..n, else as an object,
--              and an unmarked empty table as {})
--   null   <-> json.null (a sentinel, so arrays keep their length and objects their keys)
--   string <-> Lua string holding UTF-8; \uXXXX escapes are decoded (surrogate pairs joined,
--              a lone surrogate becomes U+FFFD); encoding escapes only '"', '\' and control
--              characters, everything else is written as is
--   number <-> integer or float (NaN and infinities cannot be encoded)

local json = {}

local byte, char, find, format, sub = string.byte, string.char, string.find, string.format, string.sub

json.null = setmetatable({}, {
  __name = "json.null",
  __tostring = function() return "null" end,
})

local array_mt = { __name = "json.array" }

--- Marks t (or a new table) as a JSON array, so that an empty one encodes as [].
function json.array(t)
  return setmetatable(t or {}, array_mt)
end

function json.is_array(t)
  return type(t) == "table" and getmetatable(t) == array_mt
end

---------------------------------------------------------------------------- decoding

local function decode_error(pos, msg)
  error(format("json: %s at byte %d", msg, pos), 0)
end

local function skip_ws(str, pos)
  return find(str, "[^ \t\r\n]", pos) or #str + 1
end

local simple_escapes = {
  ['"'] = '"', ["\\"] = "\\", ["/"] = "/",
  b = "\b", f = "\f", n = "\n", r = "\r", t = "\t",
}

-- Reads the 4 hex digits after "\u" (pos is the index of the backslash).
local function read_hex4(str, pos)
  local hex = sub(str, pos + 2, pos + 5)
  if not find(hex, "^%x%x%x%x$") then
    decode_error(pos, "invalid \\u escape")
  end
  return tonumber(hex, 16)
end

-- Decodes a \u escape at pos (the backslash), joining surrogate pairs.
-- Returns the code point and the index after the escape(s).
local function read_unicode_escape(str, pos)
  local cp = read_hex4(str, pos)
  local after = pos + 6
  if cp >= 0xD800 and cp <= 0xDBFF then
    if sub(str, after, after + 1) == "\\u" then
      local lo = read_hex4(str, after)
      if lo >= 0xDC00 and lo <= 0xDFFF then
        return 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00), after + 6
      end
    end
    return 0xFFFD, after
  elseif cp >= 0xDC00 and cp <= 0xDFFF then
    return 0xFFFD, after
  end
  return cp, after
end

local function parse_string(str, pos) -- pos: the opening quote
  local parts, i = {}, pos + 1
  while true do
    local j = find(str, '["\\\0-\31]', i)
    if not j then
      decode_error(pos, "unterminated string")
    end
    parts[#parts + 1] = sub(str, i, j - 1)
    local c = byte(str, j)
    if c == 34 then -- closing quote
      return table.concat(parts), j + 1
    elseif c ~= 92 then
      decode_error(j, "control character in string")
    end
    local e = sub(str, j + 1, j + 1)
    if e == "u" then
      local cp
      cp, i = read_unicode_escape(str, j)
      parts[#parts + 1] = utf8.char(cp)
    elseif simple_escapes[e] then
      parts[#parts + 1] = simple_escapes[e]
      i = j + 2
    else
      decode_error(j, "invalid escape")
    end
  end
end

local function parse_number(str, pos)
  local _, e = find(str, "^-?%d+", pos)
  if not e then
    decode_error(pos, "unexpected character")
  end
  if find(str, "^-?0%d", pos) then
    decode_error(pos, "leading zero in number")
  end
  local j = e + 1
  local _, frac_end = find(str, "^%.%d+", j)
  if frac_end then
    j = frac_end + 1
  elseif sub(str, j, j) == "." then
    decode_error(j, "digit expected after '.'")
  end
  local _, exp_end = find(str, "^[eE][-+]?%d+", j)
  if exp_end then
    j = exp_end + 1
  elseif find(str, "^[eE]", j) then
    decode_error(j, "digit expected in exponent")
  end
  return tonumber(sub(str, pos, j - 1)), j
end

local parse_value

local function parse_array(str, pos) -- pos: the '['
  local arr, n = json.array(), 0
  pos = skip_ws(str, pos + 1)
  if sub(str, pos, pos) == "]" then
    return arr, pos + 1
  end
  while true do
    local v
    v, pos = parse_value(str, pos)
    n = n + 1
    arr[n] = v
    pos = skip_ws(str, pos)
    local c = sub(str, pos, pos)
    if c == "]" then
      return arr, pos + 1
    elseif c ~= "," then
      decode_error(pos, "expected ',' or ']'")
    end
    pos = pos + 1
  end
end

local function parse_object(str, pos) -- pos: the '{'
  local obj = {}
  pos = skip_ws(str, pos + 1)
  if sub(str, pos, pos) == "}" then
    return obj, pos + 1
  end
  while true do
    if sub(str, pos, pos) ~= '"' then
      decode_error(pos, "expected string key")
    end
    local key
    key, pos = parse_string(str, pos)
    pos = skip_ws(str, pos)
    if sub(str, pos, pos) ~= ":" then
      decode_error(pos, "expected ':'")
    end
    obj[key], pos = parse_value(str, pos + 1)
    pos = skip_ws(str, pos)
    local c = sub(str, pos, pos)
    if c == "}" then
      return obj, pos + 1
    elseif c ~= "," then
      decode_error(pos, "expected ',' or '}'")
    end
    pos = skip_ws(str, pos + 1)
  end
end

local literals = { t = { "true", true }, f = { "false", false }, n = { "null", json.null } }

parse_value = function(str, pos)
  pos = skip_ws(str, pos)
  local c = sub(str, pos, pos)
  if c == "{" then
    return parse_object(str, pos)
  elseif c == "[" then
    return parse_array(str, pos)
  elseif c == '"' then
    return parse_string(str, pos)
  elseif literals[c] then
    local word, value = literals[c][1], literals[c][2]
    if sub(str, pos, pos + #word - 1) ~= word then
      decode_error(pos, "unexpected character")
    end
    return value, pos + #word
  elseif c == "" then
    decode_error(pos, "unexpected end of input")
  end
  return parse_number(str, pos)
end

--- Parses one JSON text; raises "json: <reason> at byte <n>" on invalid input.
function json.decode(str)
  if type(str) ~= "string" then
    error("json: expected a string to decode, got " .. type(str), 2)
  end
  local value, pos = parse_value(str, 1)
  pos = skip_ws(str, pos)
  if pos <= #str then
    decode_error(pos, "trailing characters")
  end
  return value
end

---------------------------------------------------------------------------- encoding

local escape_map = {
  ['"'] = '\\"', ["\\"] = "\\\\",
  ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}

local function escape_char(c)
  return escape_map[c] or format("\\u%04x", byte(c))
end

local function encode_string(s)
  return '"' .. s:gsub('[\0-\31"\\]', escape_char) .. '"'
end

local function encode_number(n)
  if math.type(n) == "integer" then
    return format("%d", n)
  end
  if n ~= n or n == math.huge or n == -math.huge then
    error("json: cannot encode " .. tostring(n), 0)
  end
  -- Shortest of %.14g..%.17g that reads back as the same float.
  for digits = 14, 17 do
    local s = format("%." .. digits .. "g", n)
    if tonumber(s) == n then
      return s
    end
  end
end

local function is_sequence(t)
  local n = 0
  for _ in pairs(t) do
    n = n + 1
  end
  for i = 1, n do
    if t[i] == nil then
      return false
    end
  end
  return n > 0
end

local encode_value

local function encode_table(t, seen)
  if seen[t] then
    error("json: cannot encode a table that contains itself", 0)
  end
  seen[t] = true
  local out = {}
  if json.is_array(t) or is_sequence(t) then
    for i = 1, #t do
      out[i] = encode_value(t[i], seen)
    end
    seen[t] = nil
    return "[" .. table.concat(out, ",") .. "]"
  end
  local keys = {}
  for k in pairs(t) do
    if type(k) ~= "string" then
      error("json: object keys must be strings, got " .. type(k), 0)
    end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  for i, k in ipairs(keys) do
    out[i] = encode_string(k) .. ":" .. encode_value(t[k], seen)
  end
  seen[t] = nil
  return "{" .. table.concat(out, ",") .. "}"
end

encode_value = function(v, seen)
  local tv = type(v)
  if v == nil or v == json.null then
    return "null"
  elseif tv == "boolean" then
    return tostring(v)
  elseif tv == "number" then
    return encode_number(v)
  elseif tv == "string" then
    return encode_string(v)
  elseif tv == "table" then
    return encode_table(v, seen)
  end
  error("json: cannot encode a " .. tv, 0)
end

--- Renders a Lua value as compact JSON (one line).
function json.encode(value)
  return encode_value(value, {})
end

return json
