// node-worker: the node-memory example as a persistent worker (Node.js, standard library only).
//
// Same behaviour as guest-examples/node-memory:
//   after_turn  stores every user message of the turn as a note in ./memory.jsonl
//   ingest      recalls up to 3 notes of the same agent that share a word with the message
// The difference is main(): it answers every request line on stdin until EOF, one JSON reply
// line each. With `persistent_subprocess = true` the host keeps this process and writes one
// line per call; one-shot (the default) the host writes one line and closes stdin, so the
// same loop answers once and ends. stdout carries replies only (writes to a pipe are
// synchronous on Linux, so each reply leaves at once); logs go to stderr. In a worker
// LIBREFANG_AGENT_ID and LIBREFANG_MESSAGE are empty; read the request's "agent_id" and
// "message" instead (this script always does).
//
// Try it by hand from the plugin dir (two requests, two replies):
//   printf '%s\n%s\n' "$(cat ../requests/after_turn.json)" \
//     '{"type":"ingest","agent_id":"demo","message":"my garden?","peer_id":null}' | node hooks/memory.js
"use strict";

const fs = require("fs");
const readline = require("readline");

const MEMORY_FILE = "memory.jsonl";
const MAX_RECALL = 3;

const log = (line) => process.stderr.write(line + "\n");
// JSON.stringify is compact and keeps non-ASCII as UTF-8.
const reply = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const asciiLower = (s) => s.replace(/[A-Z]+/g, (m) => m.toLowerCase());
const isString = (v) => typeof v === "string";
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

function fail(msg) {
  log("memory: error: " + msg);
  process.exit(1);
}

// A message's text: the string itself, or its text blocks joined with newlines.
function textOf(content) {
  if (isString(content)) return content;
  if (Array.isArray(content)) {
    return content
      .filter((b) => isObject(b) && b.type === "text" && isString(b.text))
      .map((b) => b.text)
      .join("\n");
  }
  return "";
}

function afterTurn(req, agentId) {
  const messages = Array.isArray(req.messages) ? req.messages : [];
  const lines = [];
  for (const msg of messages) {
    if (!isObject(msg) || msg.role !== "user") continue;
    const text = textOf(msg.content);
    if (text.replace(/[ \t\r\n]/g, "") === "") continue;
    lines.push(`{"agent_id": ${JSON.stringify(agentId)}, "content": ${JSON.stringify(text)}}\n`);
  }
  // One O_APPEND write per call, so concurrent hooks do not interleave lines.
  if (lines.length > 0) fs.appendFileSync(MEMORY_FILE, lines.join(""), "utf8");
  log(`after_turn: stored ${lines.length} note(s) for agent ${agentId}`);
  reply({ type: "ok" });
}

function loadNotes() {
  let raw;
  try {
    raw = fs.readFileSync(MEMORY_FILE, "utf8");
  } catch (e) {
    if (e.code === "ENOENT") return [];
    throw e;
  }
  const notes = [];
  for (const line of raw.split("\n")) {
    let note;
    try {
      note = JSON.parse(line);
    } catch (e) {
      continue; // blank or damaged line
    }
    if (isObject(note) && isString(note.agent_id) && isString(note.content)) notes.push(note);
  }
  return notes;
}

function ingest(req, agentId) {
  const message = isString(req.message) ? req.message : "";
  const words = [...new Set((message.match(/[A-Za-z0-9]+/g) || [])
    .filter((w) => w.length >= 4)
    .map(asciiLower))];
  const found = [];
  if (words.length > 0) {
    for (const note of loadNotes().reverse()) { // newest first
      if (note.agent_id !== agentId || found.includes(note.content)) continue;
      const haystack = asciiLower(note.content);
      if (words.some((w) => haystack.includes(w))) {
        found.push(note.content);
        if (found.length === MAX_RECALL) break;
      }
    }
  }
  log(`ingest: ${found.length} memories for agent ${agentId}`);
  reply({ type: "ingest_result", memories: found.map((content) => ({ content })) });
}

// Answers one request line (exits on a bad request: the host then starts a new worker).
function answer(line) {
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    fail("request is not valid JSON: " + e.message);
  }
  if (!isObject(req)) fail("request is not a JSON object");
  const agentId = isString(req.agent_id) ? req.agent_id : "";
  if (req.type === "after_turn") afterTurn(req, agentId);
  else if (req.type === "ingest") ingest(req, agentId);
  else fail("unsupported request type " + JSON.stringify(req.type === undefined ? null : req.type));
}

async function main() {
  let answered = 0;
  // One line at a time, in order; the loop ends at EOF (one-shot: after the only line).
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === "") continue;
    answer(line);
    answered += 1;
  }
  if (answered === 0) fail("empty request on stdin");
}

main();
