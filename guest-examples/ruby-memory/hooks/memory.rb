# ruby-memory: a minimal context-engine memory plugin (Ruby, standard library only).
#
# Shows: one script serving two hooks by dispatching on the request's "type".
#   after_turn  stores every user message of the turn as a note in ./memory.jsonl
#   ingest      recalls up to 3 notes of the same agent that share a word with the message
# The host runs it as `ruby hooks/memory.rb` with cwd = the plugin dir, writes one JSON
# request line on stdin and reads one JSON reply line from stdout. stderr is for logs.
#
# Try it by hand from the plugin dir:
#   ruby hooks/memory.rb < ../requests/after_turn.json
#   echo '{"type":"ingest","agent_id":"demo","message":"my garden?","peer_id":null}' | ruby hooks/memory.rb

require "json"

MEMORY_FILE = "memory.jsonl"
MAX_RECALL = 3

# The host clears the environment (no LANG), so say explicitly that all I/O is UTF-8.
Encoding.default_external = Encoding::UTF_8
Encoding.default_internal = nil

def log(line)
  $stderr.write(line + "\n")
  $stderr.flush
end

# JSON.generate is compact and keeps non-ASCII as UTF-8.
def reply(obj)
  $stdout.write(JSON.generate(obj) + "\n")
  $stdout.flush
end

def fail!(msg)
  log("memory: error: #{msg}")
  exit 1
end

# A message's text: the string itself, or its text blocks joined with newlines.
def text_of(content)
  case content
  when String then content
  when Array
    content.select { |b| b.is_a?(Hash) && b["type"] == "text" && b["text"].is_a?(String) }
           .map { |b| b["text"] }
           .join("\n")
  else ""
  end
end

def after_turn(req, agent_id)
  messages = req["messages"].is_a?(Array) ? req["messages"] : []
  lines = []
  messages.each do |msg|
    next unless msg.is_a?(Hash) && msg["role"] == "user"
    text = text_of(msg["content"])
    next if text.delete(" \t\r\n").empty?
    lines << %({"agent_id": #{JSON.generate(agent_id)}, "content": #{JSON.generate(text)}}\n)
  end
  unless lines.empty?
    # One O_APPEND write per call, so concurrent hooks do not interleave lines.
    File.open(MEMORY_FILE, "a", encoding: "UTF-8") { |f| f.syswrite(lines.join) }
  end
  log("after_turn: stored #{lines.size} note(s) for agent #{agent_id}")
  reply({ "type" => "ok" })
end

def load_notes
  return [] unless File.exist?(MEMORY_FILE)
  File.read(MEMORY_FILE, encoding: "UTF-8").split("\n").filter_map do |line|
    note = begin
      JSON.parse(line)
    rescue JSON::ParserError
      next # blank or damaged line
    end
    note if note.is_a?(Hash) && note["agent_id"].is_a?(String) && note["content"].is_a?(String)
  end
end

def ingest(req, agent_id)
  message = req["message"].is_a?(String) ? req["message"] : ""
  words = message.scan(/[A-Za-z0-9]+/).select { |w| w.length >= 4 }.map { |w| w.downcase(:ascii) }.uniq
  found = []
  unless words.empty?
    load_notes.reverse_each do |note| # newest first
      next if note["agent_id"] != agent_id || found.include?(note["content"])
      haystack = note["content"].downcase(:ascii)
      next unless words.any? { |w| haystack.include?(w) }
      found << note["content"]
      break if found.size == MAX_RECALL
    end
  end
  log("ingest: #{found.size} memories for agent #{agent_id}")
  reply({ "type" => "ingest_result", "memories" => found.map { |c| { "content" => c } } })
end

def main
  line = ($stdin.gets || "").force_encoding(Encoding::UTF_8)
  fail!("empty request on stdin") if line.strip.empty?
  req = begin
    JSON.parse(line)
  rescue JSON::ParserError => e
    fail!("request is not valid JSON: #{e.message}")
  end
  fail!("request is not a JSON object") unless req.is_a?(Hash)
  agent_id = req["agent_id"].is_a?(String) ? req["agent_id"] : ""
  case req["type"]
  when "after_turn" then after_turn(req, agent_id)
  when "ingest" then ingest(req, agent_id)
  else fail!("unsupported request type #{JSON.generate(req['type'])}")
  end
end

main
