// A starting point for a context-engine plugin (ctxhost / LibreFang script protocol).
//
// The host runs `deno run --allow-read --allow-env hooks/memory.ts` with cwd = the plugin
// dir, writes ONE JSON request line on stdin, and reads the reply from the last JSON line
// on stdout. stderr is for logs. One script serves two hooks, dispatching on "type":
//   after_turn  stores the text of every user message as a note
//   ingest      recalls the 3 most recent notes of the same agent, newest first
// Deno gets no --allow-write from the launcher, so the notes live in localStorage, which
// Deno persists per script under DENO_DIR (no permission needed). Replace the bodies of
// afterTurn() and ingest() with your own logic; add more hooks in plugin.toml's [hooks].

type Block = { type: string; text?: string };
type Message = { role: string; content: string | Block[] };
type Note = { agent_id: string; content: string };
type Request = { type?: string; agent_id?: string; message?: string; messages?: Message[] };

const MAX_RECALL = 3;
const NOTES_KEY = "notes";

const log = (line: string) => console.error(line);
const reply = (obj: unknown) => console.log(JSON.stringify(obj));

// A message's text: the string itself, or its text blocks joined with newlines.
function textOf(content: Message["content"]): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.filter((b) => b.type === "text").map((b) => b.text ?? "").join("\n");
  return "";
}

function loadNotes(): Note[] {
  return JSON.parse(localStorage.getItem(NOTES_KEY) ?? "[]");
}

function afterTurn(req: Request) {
  const notes = loadNotes();
  for (const msg of req.messages ?? []) {
    const text = textOf(msg.content);
    if (msg.role === "user" && text.trim() !== "") notes.push({ agent_id: req.agent_id ?? "", content: text });
  }
  localStorage.setItem(NOTES_KEY, JSON.stringify(notes));
  reply({ type: "ok" });
}

function ingest(req: Request) {
  const recalled = loadNotes()
    .filter((note) => note.agent_id === (req.agent_id ?? ""))
    .map((note) => note.content)
    .reverse()
    .slice(0, MAX_RECALL);
  log(`ingest: ${recalled.length} note(s) for agent ${req.agent_id}`);
  reply({ type: "ingest_result", memories: recalled.map((content) => ({ content })) });
}

const input = await new Response(Deno.stdin.readable).text();
const req: Request = JSON.parse(input.split("\n")[0] || "{}");
if (req.type === "after_turn") afterTurn(req);
else if (req.type === "ingest") ingest(req);
else {
  log(`unsupported request type ${JSON.stringify(req.type)}`);
  Deno.exit(1);
}
