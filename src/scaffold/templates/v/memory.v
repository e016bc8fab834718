// A starting point for a context-engine plugin (ctxhost / LibreFang script protocol).
//
// The host runs `v -no-retry-compilation run hooks/memory.v` with cwd = the plugin dir,
// writes ONE JSON request line on stdin, and reads the reply from the last JSON line on
// stdout. stderr is for logs. One script serves two hooks, dispatching on "type":
//   after_turn  appends the text of every user message to data/notes.jsonl
//   ingest      recalls the 3 most recent notes of the same agent, newest first
// This template reads messages whose content is a plain string (how ctxhost and LibreFang
// send text); a message made of content blocks decodes with an empty content here.
// Replace the bodies of after_turn() and ingest() with your own logic; add more hooks
// (assemble, compact, transform_tool_result, ...) in plugin.toml's [hooks] as you go.
module main

import json
import os

const notes_file = 'data/notes.jsonl'
const max_recall = 3

struct Message {
	role    string
	content string
}

struct Request {
	typ      string @[json: 'type']
	agent_id string
	message  string
	messages []Message
}

struct Note {
	agent_id string
	content  string
}

struct Memory {
	content string
}

struct IngestReply {
	typ      string @[json: 'type']
	memories []Memory
}

@[noreturn]
fn fail(message string) {
	eprintln('error: ${message}')
	exit(1)
}

fn after_turn(req Request) ! {
	mut lines := []string{}
	for msg in req.messages {
		if msg.role == 'user' && msg.content.trim_space() != '' {
			lines << json.encode(Note{ agent_id: req.agent_id, content: msg.content })
		}
	}
	if lines.len > 0 {
		os.mkdir_all('data')!
		mut f := os.open_append(notes_file)!
		f.write_string(lines.join('\n') + '\n')!
		f.close()
	}
	println('{"type":"ok"}')
}

fn ingest(req Request) ! {
	mut recalled := []Memory{}
	lines := if os.exists(notes_file) { os.read_lines(notes_file)! } else { []string{} }
	for i := lines.len - 1; i >= 0 && recalled.len < max_recall; i-- { // newest first
		note := json.decode(Note, lines[i]) or { continue }
		if note.agent_id == req.agent_id {
			recalled << Memory{ content: note.content }
		}
	}
	eprintln('ingest: ${recalled.len} note(s) for agent ${req.agent_id}')
	println(json.encode(IngestReply{ typ: 'ingest_result', memories: recalled }))
}

fn main() {
	req := json.decode(Request, os.get_line()) or { fail('request is not valid JSON: ${err}') }
	match req.typ {
		'after_turn' {
			after_turn(req) or { fail(err.msg()) }
		}
		'ingest' {
			ingest(req) or { fail(err.msg()) }
		}
		else {
			fail('unsupported request type "${req.typ}"')
		}
	}
}
