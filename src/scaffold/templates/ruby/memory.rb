# A starting point for a context-engine plugin (ctxhost / LibreFang script protocol).
#
# The host runs `ruby hooks/memory.rb` with cwd = the plugin dir, writes ONE JSON
# request line on stdin, and reads the reply from the last JSON line on stdout.
# stderr is for logs. One script serves two hooks, dispatching on the request's "type":
#   after_turn  appends the text of every user message to data/notes.jsonl
#   ingest      recalls the 3 most recent notes of the same agent, newest first
# Replace the bodies of after_turn and ingest with your own logic; add more hooks
# (assemble, compact, transform_tool_result, ...) in plugin.toml's [hooks] as you go.

require "json"

NOTES_FILE = "data/notes.jsonl"
MAX_RECALL = 3

def log(line) = $stderr.puts(line)
def reply(obj) = $stdout.puts(JSON.generate(obj))

# A message's text: the string itself, or its text blocks joined with newlines.
def text_of(content)
  case content
  when String then content
  when Array then content.select { |b| b.is_a?(Hash) && b["type"] == "text" }.map { |b| b["text"].to_s }.join("\n")
  else ""
  end
end

def after_turn(req)
  lines = (req["messages"] || []).filter_map do |msg|
    text = text_of(msg["content"])
    JSON.generate({ "agent_id" => req["agent_id"].to_s, "content" => text }) + "\n" if msg["role"] == "user" && !text.strip.empty?
  end
  unless lines.empty?
    Dir.mkdir("data") unless Dir.exist?("data")
    File.write(NOTES_FILE, lines.join, mode: "a")
  end
  reply({ "type" => "ok" })
end

def ingest(req)
  notes = File.exist?(NOTES_FILE) ? File.readlines(NOTES_FILE, chomp: true).reject(&:empty?).map { |l| JSON.parse(l) } : []
  recalled = notes.select { |n| n["agent_id"] == req["agent_id"].to_s }.map { |n| n["content"] }.reverse.first(MAX_RECALL)
  log("ingest: #{recalled.size} note(s) for agent #{req['agent_id']}")
  reply({ "type" => "ingest_result", "memories" => recalled.map { |c| { "content" => c } } })
end

req = JSON.parse($stdin.gets || "{}")
case req["type"]
when "after_turn" then after_turn(req)
when "ingest" then ingest(req)
else
  log("unsupported request type #{req['type'].inspect}")
  exit 1
end
