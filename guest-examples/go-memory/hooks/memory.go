// go-memory: a minimal context-engine memory plugin (Go, standard library only).
//
// Shows: one script serving two hooks by dispatching on the request's "type".
//
//	after_turn  stores every user message of the turn as a note in ./memory.jsonl
//	ingest      recalls up to 3 notes of the same agent that share a word with the message
//
// The host runs it as `go run hooks/memory.go` with cwd = the plugin dir (a single-file
// `package main`, no go.mod needed), writes one JSON request line on stdin and reads one
// JSON reply line from stdout. stderr is for logs.
//
// Try it by hand from the plugin dir:
//
//	go run hooks/memory.go < ../requests/after_turn.json
//	echo '{"type":"ingest","agent_id":"demo","message":"my garden?","peer_id":null}' | go run hooks/memory.go
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

const (
	memoryFile = "memory.jsonl"
	maxRecall  = 3
)

// request holds the fields of both hook requests that this plugin uses.
type request struct {
	Type     string            `json:"type"`
	AgentID  string            `json:"agent_id"`
	Message  string            `json:"message"`
	Messages []json.RawMessage `json:"messages"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// note is one line of memory.jsonl; the field order is the line's key order.
type note struct {
	AgentID string `json:"agent_id"`
	Content string `json:"content"`
}

func logf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func fail(format string, args ...interface{}) {
	logf("memory: error: "+format, args...)
	os.Exit(1)
}

// quote renders s as a JSON string. Only '"', '\\' and control characters are escaped;
// everything else stays UTF-8, so the output is byte-for-byte what the other examples
// write (encoding/json would also escape <, >, &, U+2028 and U+2029: valid, but different).
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// reply writes the one-line JSON reply on stdout.
func reply(line string) {
	os.Stdout.WriteString(line + "\n")
}

// asciiLower lowercases A-Z only, so every runtime compares text the same way.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// words returns the distinct lowercased runs of ASCII letters/digits of length >= 4.
func words(s string) []string {
	var out []string
	seen := map[string]bool{}
	for i := 0; i < len(s); {
		if !isWordByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isWordByte(s[j]) {
			j++
		}
		if w := asciiLower(s[i:j]); len(w) >= 4 && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
		i = j
	}
	return out
}

// textOf returns a message's text: the string itself, or its text blocks joined with newlines.
func textOf(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var blocks []json.RawMessage
	if json.Unmarshal(content, &blocks) != nil {
		return ""
	}
	var parts []string
	for _, raw := range blocks {
		var b block
		if json.Unmarshal(raw, &b) == nil && b.Type == "text" && b.Text != nil {
			parts = append(parts, *b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func afterTurn(req request) {
	var lines strings.Builder
	stored := 0
	for _, raw := range req.Messages {
		var m message
		if json.Unmarshal(raw, &m) != nil || m.Role != "user" {
			continue
		}
		text := textOf(m.Content)
		if strings.Trim(text, " \t\r\n") == "" {
			continue
		}
		lines.WriteString(`{"agent_id": ` + quote(req.AgentID) + `, "content": ` + quote(text) + "}\n")
		stored++
	}
	if stored > 0 {
		// One O_APPEND write per call, so concurrent hooks do not interleave lines.
		f, err := os.OpenFile(memoryFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fail("%v", err)
		}
		if _, err := f.WriteString(lines.String()); err != nil {
			fail("%v", err)
		}
		if err := f.Close(); err != nil {
			fail("%v", err)
		}
	}
	logf("after_turn: stored %d note(s) for agent %s", stored, req.AgentID)
	reply(`{"type":"ok"}`)
}

func loadNotes() []note {
	data, err := os.ReadFile(memoryFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		fail("%v", err)
	}
	var notes []note
	for _, line := range strings.Split(string(data), "\n") {
		var fields map[string]interface{}
		if json.Unmarshal([]byte(line), &fields) != nil {
			continue // blank or damaged line
		}
		agentID, ok1 := fields["agent_id"].(string)
		content, ok2 := fields["content"].(string)
		if ok1 && ok2 {
			notes = append(notes, note{agentID, content})
		}
	}
	return notes
}

func ingest(req request) {
	ws := words(req.Message)
	var found []string
	if len(ws) > 0 {
		notes := loadNotes()
		seen := map[string]bool{}
		for i := len(notes) - 1; i >= 0 && len(found) < maxRecall; i-- { // newest first
			n := notes[i]
			if n.AgentID != req.AgentID || seen[n.Content] {
				continue
			}
			haystack := asciiLower(n.Content)
			for _, w := range ws {
				if strings.Contains(haystack, w) {
					seen[n.Content] = true
					found = append(found, n.Content)
					break
				}
			}
		}
	}
	logf("ingest: %d memories for agent %s", len(found), req.AgentID)
	memories := make([]string, len(found))
	for i, content := range found {
		memories[i] = `{"content":` + quote(content) + `}`
	}
	reply(`{"type":"ingest_result","memories":[` + strings.Join(memories, ",") + `]}`)
}

func main() {
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && err != io.EOF {
		fail("cannot read stdin: %v", err)
	}
	if strings.TrimSpace(line) == "" {
		fail("empty request on stdin")
	}
	// Decode loosely first so a wrong-typed field is ignored rather than fatal.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &fields); err != nil {
		fail("request is not a valid JSON object: %v", err)
	}
	var req request
	for key, dst := range map[string]interface{}{
		"type": &req.Type, "agent_id": &req.AgentID, "message": &req.Message, "messages": &req.Messages,
	} {
		if raw, ok := fields[key]; ok {
			_ = json.Unmarshal(raw, dst) // leaves the zero value on a type mismatch
		}
	}
	switch req.Type {
	case "after_turn":
		afterTurn(req)
	case "ingest":
		ingest(req)
	default:
		typ, ok := fields["type"]
		if !ok {
			typ = json.RawMessage("null")
		}
		fail("unsupported request type %s", typ)
	}
}
