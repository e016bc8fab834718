-- A starting point for a context-engine plugin (ctxhost / LibreFang script protocol).
--
-- The host runs `lua hooks/memory.lua` with cwd = the plugin dir, writes ONE JSON
-- request line on stdin, and reads the reply from the last JSON line on stdout.
-- stderr is for logs. One script serves two hooks, dispatching on the request's "type":
--   after_turn  appends the text of every user message to data/notes.jsonl
--   ingest      recalls the 3 most recent notes of the same agent, newest first
-- Lua has no JSON in its standard library: hooks/json.lua (next to this file) does it.
-- Replace the bodies of after_turn() and ingest() with your own logic; add more hooks
-- (assemble, compact, transform_tool_result, ...) in plugin.toml's [hooks] as you go.

-- Load json.lua from this script's own directory (arg[0] is the script path).
local script_dir = (arg and arg[0] or ""):match("^(.*)[/\\]") or "."
package.path = script_dir .. "/?.lua;" .. package.path
local json = require("json")

local NOTES_FILE = "data/notes.jsonl"
local MAX_RECALL = 3

local function log(line) io.stderr:write(line, "\n") end
local function reply(obj) io.stdout:write(json.encode(obj), "\n") end

-- A message's text: the string itself, or its text blocks joined with newlines.
local function text_of(content)
  if type(content) == "string" then return content end
  local parts = {}
  if json.is_array(content) then
    for _, b in ipairs(content) do
      if type(b) == "table" and b.type == "text" and type(b.text) == "string" then parts[#parts + 1] = b.text end
    end
  end
  return table.concat(parts, "\n")
end

local function after_turn(req)
  local lines = {}
  for _, msg in ipairs(json.is_array(req.messages) and req.messages or {}) do
    local text = text_of(msg.content)
    if msg.role == "user" and text:match("%S") then
      lines[#lines + 1] = json.encode({ agent_id = req.agent_id, content = text }) .. "\n"
    end
  end
  if #lines > 0 then
    local f = io.open(NOTES_FILE, "a")
    if not f then -- the first note: Lua's standard library cannot make a directory itself
      os.execute("mkdir -p data")
      f = assert(io.open(NOTES_FILE, "a"))
    end
    f:write(table.concat(lines))
    f:close()
  end
  reply({ type = "ok" })
end

local function ingest(req)
  local notes = {}
  local f = io.open(NOTES_FILE, "r")
  if f then
    for line in f:lines() do
      if line:match("%S") then notes[#notes + 1] = json.decode(line) end
    end
    f:close()
  end
  local recalled = json.array()
  for i = #notes, 1, -1 do -- newest first
    if notes[i].agent_id == req.agent_id and #recalled < MAX_RECALL then
      recalled[#recalled + 1] = { content = notes[i].content }
    end
  end
  log(("ingest: %d note(s) for agent %s"):format(#recalled, tostring(req.agent_id)))
  reply({ type = "ingest_result", memories = recalled })
end

local req = json.decode(io.read("l") or "{}")
if req.type == "after_turn" then
  after_turn(req)
elseif req.type == "ingest" then
  ingest(req)
else
  log("unsupported request type " .. tostring(req.type))
  os.exit(1)
end
