// A starting point for a context-engine plugin (ctxhost / LibreFang script protocol).
//
// The host runs `bun run hooks/memory.ts` with cwd = the plugin dir, writes ONE JSON
// request line on stdin, and reads the reply from the last JSON line on stdout.
// stderr is for logs. One script serves two hooks, dispatching on the request's "type":
//   after_turn  appends the text of every user message to data/notes.jsonl
//   ingest      recalls the 3 most recent notes of the same agent, newest first
// Replace the bodies of afterTurn() and ingest() with your own logic; add more hooks
// (assemble, compact, transform_tool_result, ...) in plugin.toml's [hooks] as you go.
import { appendFileSync, existsSync, mkdirSync, readFileSync } from "node:fs";

type Block = { type: string; text?: string };
type Message = { role: string; content: string | Block[] };
type Note = { agent_id: string; content: string };
type Request = { type?: string; agent_id?: string; message?: string; messages?: Message[] };

const NOTES_FILE = "data/notes.jsonl";
const MAX_RECALL = 3;

const log = (line: string) => console.error(line);
const reply = (obj: unknown) => console.log(JSON.stringify(obj));

// A message's text: the string itself, or its text blocks joined with newlines.
function textOf(content: Message["content"]): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.filter((b) => b.type === "text").map((b) => b.text ?? "").join("\n");
  return "";
}

function afterTurn(req: Request) {
  let lines = "";
  for (const msg of req.messages ?? []) {
    const text = textOf(msg.content);
    if (msg.role === "user" && text.trim() !== "") {
      lines += JSON.stringify({ agent_id: req.agent_id ?? "", content: text }) + "\n";
    }
  }
  if (lines) {
    mkdirSync("data", { recursive: true });
    appendFileSync(NOTES_FILE, lines);
  }
  reply({ type: "ok" });
}

function ingest(req: Request) {
  const text = existsSync(NOTES_FILE) ? readFileSync(NOTES_FILE, "utf8") : "";
  const recalled = text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as Note)
    .filter((note) => note.agent_id === (req.agent_id ?? ""))
    .map((note) => note.content)
    .reverse()
    .slice(0, MAX_RECALL);
  log(`ingest: ${recalled.length} note(s) for agent ${req.agent_id}`);
  reply({ type: "ingest_result", memories: recalled.map((content) => ({ content })) });
}

const input = await Bun.stdin.text();
const req: Request = JSON.parse(input.split("\n")[0] || "{}");
if (req.type === "after_turn") afterTurn(req);
else if (req.type === "ingest") ingest(req);
else {
  log(`unsupported request type ${JSON.stringify(req.type)}`);
  process.exit(1);
}
