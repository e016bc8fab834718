<?php
// A starting point for a context-engine plugin (ctxhost / LibreFang script protocol).
//
// The host runs `php hooks/memory.php` with cwd = the plugin dir, writes ONE JSON
// request line on stdin, and reads the reply from the last JSON line on stdout.
// stderr is for logs. One script serves two hooks, dispatching on the request's "type":
//   after_turn  appends the text of every user message to data/notes.jsonl
//   ingest      recalls the 3 most recent notes of the same agent, newest first
// Replace the bodies of after_turn() and ingest() with your own logic; add more hooks
// (assemble, compact, transform_tool_result, ...) in plugin.toml's [hooks] as you go.

const NOTES_FILE = 'data/notes.jsonl';
const MAX_RECALL = 3;
const JSON_FLAGS = JSON_UNESCAPED_UNICODE | JSON_UNESCAPED_SLASHES;

function log_line(string $line): void { fwrite(STDERR, $line . "\n"); }
function reply($obj): void { echo json_encode($obj, JSON_FLAGS), "\n"; }

// A message's text: the string itself, or its text blocks joined with newlines.
function text_of($content): string {
    if (is_string($content)) return $content;
    if (!is_array($content)) return '';
    $parts = [];
    foreach ($content as $b) {
        if (is_array($b) && ($b['type'] ?? '') === 'text') $parts[] = (string)($b['text'] ?? '');
    }
    return implode("\n", $parts);
}

function after_turn(array $req): void {
    $lines = '';
    foreach ($req['messages'] ?? [] as $msg) {
        $text = text_of($msg['content'] ?? '');
        if (($msg['role'] ?? '') === 'user' && trim($text) !== '') {
            $lines .= json_encode(['agent_id' => (string)($req['agent_id'] ?? ''), 'content' => $text], JSON_FLAGS) . "\n";
        }
    }
    if ($lines !== '') {
        if (!is_dir('data')) mkdir('data', 0755, true);
        file_put_contents(NOTES_FILE, $lines, FILE_APPEND | LOCK_EX);
    }
    reply(['type' => 'ok']);
}

function ingest(array $req): void {
    $agent = (string)($req['agent_id'] ?? '');
    $lines = is_file(NOTES_FILE) ? file(NOTES_FILE, FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES) : [];
    $recalled = [];
    foreach (array_reverse($lines) as $line) { // newest first
        $note = json_decode($line, true);
        if (is_array($note) && ($note['agent_id'] ?? null) === $agent) $recalled[] = ['content' => $note['content']];
        if (count($recalled) === MAX_RECALL) break;
    }
    log_line('ingest: ' . count($recalled) . " note(s) for agent $agent");
    reply(['type' => 'ingest_result', 'memories' => $recalled]);
}

$req = json_decode(fgets(STDIN) ?: '{}', true);
switch (is_array($req) ? ($req['type'] ?? null) : null) {
    case 'after_turn': after_turn($req); break;
    case 'ingest': ingest($req); break;
    default:
        log_line('unsupported or invalid request');
        exit(1);
}
