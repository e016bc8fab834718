// A starting point for a context-engine plugin (ctxhost / LibreFang script protocol).
//
// The host runs `go run hooks/memory.go` with cwd = the plugin dir (a single-file
// package main, standard library only, no go.mod needed), writes ONE JSON request line
// on stdin, and reads the reply from the last JSON line on stdout. stderr is for logs.
// One script serves two hooks, dispatching on the request's "type":
//
//	after_turn  appends the text of every user message to data/notes.jsonl
//	ingest      recalls the 3 most recent notes of the same agent, newest first
//
// Replace the bodies of afterTurn() and ingest() with your own logic; add more hooks
// (assemble, compact, transform_tool_result, ...) in plugin.toml's [hooks] as you go.
// `go run` compiles on every call (cached by Go); for speed, build a binary and switch
// the plugin to runtime "native".
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

const (
	notesFile = "data/notes.jsonl"
	maxRecall = 3
)

type request struct {
	Type     string    `json:"type"`
	AgentID  string    `json:"agent_id"`
	Message  string    `json:"message"`
	Messages []message `json:"messages"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a string, or a list of blocks
}

type note struct {
	AgentID string `json:"agent_id"`
	Content string `json:"content"`
}

type memory struct {
	Content string `json:"content"`
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func reply(v any) {
	out, _ := json.Marshal(v)
	fmt.Println(string(out))
}

func fail(err error) {
	logf("error: %v", err)
	os.Exit(1)
}

// textOf returns a message's text: the string itself, or its text blocks joined with newlines.
func textOf(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &blocks)
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func afterTurn(req request) {
	var lines strings.Builder
	for _, m := range req.Messages {
		text := textOf(m.Content)
		if m.Role == "user" && strings.TrimSpace(text) != "" {
			line, _ := json.Marshal(note{req.AgentID, text})
			lines.Write(line)
			lines.WriteByte('\n')
		}
	}
	if lines.Len() > 0 {
		if err := os.MkdirAll("data", 0o755); err != nil {
			fail(err)
		}
		f, err := os.OpenFile(notesFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		if _, err := f.WriteString(lines.String()); err != nil {
			fail(err)
		}
	}
	reply(map[string]string{"type": "ok"})
}

func ingest(req request) {
	recalled := []memory{}
	data, err := os.ReadFile(notesFile)
	if err != nil && !os.IsNotExist(err) {
		fail(err)
	}
	lines := strings.Split(string(data), "\n")
	for i := len(lines) - 1; i >= 0 && len(recalled) < maxRecall; i-- { // newest first
		var n note
		if json.Unmarshal([]byte(lines[i]), &n) == nil && n.AgentID == req.AgentID {
			recalled = append(recalled, memory{n.Content})
		}
	}
	logf("ingest: %d note(s) for agent %s", len(recalled), req.AgentID)
	reply(map[string]any{"type": "ingest_result", "memories": recalled})
}

func main() {
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	var req request
	if err := json.Unmarshal([]byte(line), &req); err != nil {
		fail(fmt.Errorf("request is not JSON: %w", err))
	}
	switch req.Type {
	case "after_turn":
		afterTurn(req)
	case "ingest":
		ingest(req)
	default:
		fail(fmt.Errorf("unsupported request type %q", req.Type))
	}
}
