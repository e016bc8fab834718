<?php
// php-memory: a minimal context-engine memory plugin (PHP, standard library only).
//
// Shows: one script serving two hooks by dispatching on the request's "type".
//   after_turn  stores every user message of the turn as a note in ./memory.jsonl
//   ingest      recalls up to 3 notes of the same agent that share a word with the message
// The host runs it as `php hooks/memory.php` with cwd = the plugin dir, writes one JSON
// request line on stdin and reads one JSON reply line from stdout. stderr is for logs.
//
// Try it by hand from the plugin dir:
//   php hooks/memory.php < ../requests/after_turn.json
//   echo '{"type":"ingest","agent_id":"demo","message":"my garden?","peer_id":null}' | php hooks/memory.php

declare(strict_types=1);

const MEMORY_FILE = 'memory.jsonl';
const MAX_RECALL = 3;
// Compact JSON with non-ASCII (U+2028/U+2029 included) kept as UTF-8 and "/" left alone.
const JSON_FLAGS = JSON_UNESCAPED_UNICODE | JSON_UNESCAPED_LINE_TERMINATORS | JSON_UNESCAPED_SLASHES
    | JSON_THROW_ON_ERROR;

function log_line(string $line): void
{
    fwrite(STDERR, $line . "\n");
}

function encode(mixed $value): string
{
    return json_encode($value, JSON_FLAGS);
}

function reply(array $obj): void
{
    fwrite(STDOUT, encode($obj) . "\n");
}

function fail(string $msg): never
{
    log_line('memory: error: ' . $msg);
    exit(1);
}

// A message's text: the string itself, or its text blocks joined with newlines.
function text_of(mixed $content): string
{
    if (is_string($content)) {
        return $content;
    }
    if (!is_array($content)) {
        return '';
    }
    $parts = [];
    foreach ($content as $b) {
        if (is_array($b) && ($b['type'] ?? null) === 'text' && is_string($b['text'] ?? null)) {
            $parts[] = $b['text'];
        }
    }
    return implode("\n", $parts);
}

function after_turn(array $req, string $agentId): void
{
    $messages = is_array($req['messages'] ?? null) ? $req['messages'] : [];
    $lines = '';
    $stored = 0;
    foreach ($messages as $msg) {
        if (!is_array($msg) || ($msg['role'] ?? null) !== 'user') {
            continue;
        }
        $text = text_of($msg['content'] ?? null);
        if (trim($text, " \t\r\n") === '') {
            continue;
        }
        $lines .= '{"agent_id": ' . encode($agentId) . ', "content": ' . encode($text) . "}\n";
        $stored++;
    }
    if ($stored > 0) {
        // One O_APPEND write per call, so concurrent hooks do not interleave lines.
        if (file_put_contents(MEMORY_FILE, $lines, FILE_APPEND) === false) {
            fail('cannot write ' . MEMORY_FILE);
        }
    }
    log_line("after_turn: stored $stored note(s) for agent $agentId");
    reply(['type' => 'ok']);
}

/** @return list<array{agent_id: string, content: string}> */
function load_notes(): array
{
    if (!file_exists(MEMORY_FILE)) {
        return [];
    }
    $notes = [];
    foreach (explode("\n", (string) file_get_contents(MEMORY_FILE)) as $line) {
        $note = json_decode($line, true);  // null for a blank or damaged line
        if (is_array($note) && is_string($note['agent_id'] ?? null) && is_string($note['content'] ?? null)) {
            $notes[] = $note;
        }
    }
    return $notes;
}

function ingest(array $req, string $agentId): void
{
    $message = is_string($req['message'] ?? null) ? $req['message'] : '';
    preg_match_all('/[A-Za-z0-9]+/', $message, $m);
    $words = [];
    foreach ($m[0] as $w) {
        if (strlen($w) >= 4) {
            $words[strtolower($w)] = true;  // strtolower is ASCII-only since PHP 8.2
        }
    }
    $found = [];
    if ($words) {
        foreach (array_reverse(load_notes()) as $note) {  // newest first
            if ($note['agent_id'] !== $agentId || in_array($note['content'], $found, true)) {
                continue;
            }
            $haystack = strtolower($note['content']);
            foreach (array_keys($words) as $w) {
                if (str_contains($haystack, (string) $w)) {
                    $found[] = $note['content'];
                    break;
                }
            }
            if (count($found) === MAX_RECALL) {
                break;
            }
        }
    }
    log_line('ingest: ' . count($found) . " memories for agent $agentId");
    reply(['type' => 'ingest_result', 'memories' => array_map(fn ($c) => ['content' => $c], $found)]);
}

function main(): void
{
    $line = fgets(STDIN);
    if ($line === false || trim($line) === '') {
        fail('empty request on stdin');
    }
    try {
        $req = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
    } catch (JsonException $e) {
        fail('request is not valid JSON: ' . $e->getMessage());
    }
    // A JSON object decodes to an array with string keys (or [] for "{}").
    if (!is_array($req) || ($req !== [] && array_is_list($req))) {
        fail('request is not a JSON object');
    }
    $agentId = is_string($req['agent_id'] ?? null) ? $req['agent_id'] : '';
    match ($req['type'] ?? null) {
        'after_turn' => after_turn($req, $agentId),
        'ingest' => ingest($req, $agentId),
        default => fail('unsupported request type ' . encode($req['type'] ?? null)),
    };
}

main();
