-- lua-memory: a minimal context-engine memory plugin (Lua 5.4, standard library only).
--
-- Shows: one script serving two hooks by dispatching on the request's "type".
--   after_turn  stores every user message of the turn as a note in ./memory.jsonl
--   ingest      recalls up to 3 notes of the same agent that share a word with the message
-- The host runs it as `lua hooks/memory.lua` with cwd = the plugin dir, writes one JSON
-- request line on stdin and reads one JSON reply line from stdout. stderr is for logs.
-- Lua has no JSON in its standard library: hooks/json.lua (shipped alongside) does it.
--
-- Try it by hand from the plugin dir:
--   lua hooks/memory.lua < ../requests/after_turn.json
--   echo '{"type":"ingest","agent_id":"demo","message":"my garden?","peer_id":null}' | lua hooks/memory.lua

-- Load json.lua from this script's own directory (arg[0] is the script path), ahead of any
-- other "json" module on LUA_PATH.
local script_dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = script_dir .. "/?.lua;" .. package.path
local json = require("json")

local MEMORY_FILE = "memory.jsonl"
local MAX_RECALL = 3

local function log(line)
  io.stderr:write(line, "\n")
end

local function reply(line)
  io.stdout:write(line, "\n")
  io.stdout:flush()
end

local function fail(msg)
  log("memory: error: " .. msg)
  os.exit(1)
end

-- Lowercases A-Z only, so every runtime compares text the same way.
local function ascii_lower(s)
  return (s:gsub("[A-Z]+", string.lower))
end

-- A message's text: the string itself, or its text blocks joined with newlines.
local function text_of(content)
  if type(content) == "string" then
    return content
  end
  local parts = {}
  if json.is_array(content) then
    for _, b in ipairs(content) do
      if type(b) == "table" and b.type == "text" and type(b.text) == "string" then
        parts[#parts + 1] = b.text
      end
    end
  end
  return table.concat(parts, "\n")
end

local function after_turn(req, agent_id)
  local lines = {}
  if json.is_array(req.messages) then
    for _, msg in ipairs(req.messages) do
      if type(msg) == "table" and msg.role == "user" then
        local text = text_of(msg.content)
        if text:find("[^ \t\r\n]") then
          lines[#lines + 1] = '{"agent_id": ' .. json.encode(agent_id)
            .. ', "content": ' .. json.encode(text) .. "}\n"
        end
      end
    end
  end
  if #lines > 0 then
    local data = table.concat(lines)
    local f, err = io.open(MEMORY_FILE, "a")
    if not f then
      fail(err)
    end
    -- Unbuffered, one f:write is one O_APPEND write(2), so concurrent hooks do not
    -- interleave lines (a buffered stream would flush in 4 KiB pieces).
    f:setvbuf("no")
    local ok, werr = f:write(data)
    f:close()
    if not ok then
      fail(werr)
    end
  end
  log(string.format("after_turn: stored %d note(s) for agent %s", #lines, agent_id))
  reply('{"type":"ok"}')
end

local function load_notes()
  local notes = {}
  local f, err, code = io.open(MEMORY_FILE, "r")
  if not f then
    if code == 2 then -- ENOENT: nothing stored yet
      return notes
    end
    fail(err)
  end
  for line in f:lines() do
    local ok, note = pcall(json.decode, line)
    -- (a blank or damaged line is skipped)
    if ok and type(note) == "table" and type(note.agent_id) == "string"
        and type(note.content) == "string" then
      notes[#notes + 1] = note
    end
  end
  f:close()
  return notes
end

local function ingest(req, agent_id)
  local message = type(req.message) == "string" and req.message or ""
  local words, seen_word = {}, {}
  for w in message:gmatch("[A-Za-z0-9]+") do
    w = ascii_lower(w)
    if #w >= 4 and not seen_word[w] then
      seen_word[w] = true
      words[#words + 1] = w
    end
  end
  local found, seen = {}, {}
  if #words > 0 then
    local notes = load_notes()
    for i = #notes, 1, -1 do -- newest first
      local note = notes[i]
      if note.agent_id == agent_id and not seen[note.content] then
        local haystack = ascii_lower(note.content)
        for _, w in ipairs(words) do
          if haystack:find(w, 1, true) then
            seen[note.content] = true
            found[#found + 1] = '{"content":' .. json.encode(note.content) .. "}"
            break
          end
        end
        if #found == MAX_RECALL then
          break
        end
      end
    end
  end
  log(string.format("ingest: %d memories for agent %s", #found, agent_id))
  reply('{"type":"ingest_result","memories":[' .. table.concat(found, ",") .. "]}")
end

local function main()
  local line = io.read("l")
  if not line or not line:find("%S") then
    fail("empty request on stdin")
  end
  local ok, req = pcall(json.decode, line)
  if not ok then
    fail("request is not valid JSON: " .. tostring(req))
  end
  if type(req) ~= "table" or json.is_array(req) or req == json.null then
    fail("request is not a JSON object")
  end
  local agent_id = type(req.agent_id) == "string" and req.agent_id or ""
  if req.type == "after_turn" then
    after_turn(req, agent_id)
  elseif req.type == "ingest" then
    ingest(req, agent_id)
  else
    fail("unsupported request type " .. json.encode(req.type))
  end
end

main()
