// guard-node: an agent-loop guard as a one-shot script (Node.js, no dependencies).
//
//   tool_call_pre     {"type":"tool_call_pre","name":s,"args":{...},"agent_id":s}
//                     a `shell_exec` call whose args.command contains BLOCK_PATTERN is blocked:
//                     {"action":"block","reason":"guard: refusing a command containing `<pattern>`"};
//                     anything else: {"action":"pass"}
//   memory_write_pre  {"type":"memory_write_pre","content":s,"metadata":{...}}
//                     every email address in the content becomes "[email]":
//                     {"action":"replace","value":"<new content>"}; no email: {"action":"pass"}
//
// BLOCK_PATTERN is the plugin's [agent_config] value, read from the JSON file named by
// LIBREFANG_PLUGIN_CONFIG (the host writes it when it loads the plugin); "rm -rf" without it.
// The same guard exists as a python JSON-RPC worker (guard-python) and as a Rust component; all
// three give the same replies.
//
// Try it by hand from the plugin dir:
//   echo '{"type":"tool_call_pre","name":"shell_exec","args":{"command":"rm -rf /"},"agent_id":"a"}' | node hooks/guard.js
'use strict';

const fs = require('fs');

const DEFAULT_PATTERN = 'rm -rf';
const EMAIL = /[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}/g;

function fail(message) {
  process.stderr.write('guard: error: ' + message + '\n');
  process.exit(1);
}

function blockPattern() {
  const file = process.env.LIBREFANG_PLUGIN_CONFIG;
  if (!file) return DEFAULT_PATTERN;
  let config;
  try {
    config = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    process.stderr.write(`guard: cannot read the config ${file}: ${e.message}; using the default\n`);
    return DEFAULT_PATTERN;
  }
  const pattern = config && config.BLOCK_PATTERN;
  return typeof pattern === 'string' ? pattern : DEFAULT_PATTERN;
}

function toolCallPre(request) {
  if (request.name !== 'shell_exec') return { action: 'pass' };
  const args = request.args;
  const command = args && typeof args === 'object' ? args.command : undefined;
  if (typeof command !== 'string') return { action: 'pass' };
  const pattern = blockPattern();
  if (command.includes(pattern)) {
    return { action: 'block', reason: 'guard: refusing a command containing `' + pattern + '`' };
  }
  return { action: 'pass' };
}

function memoryWritePre(request) {
  const content = request.content;
  if (typeof content !== 'string') return { action: 'pass' };
  let found = 0;
  const redacted = content.replace(EMAIL, () => {
    found += 1;
    return '[email]';
  });
  if (found === 0) return { action: 'pass' };
  return { action: 'replace', value: redacted };
}

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  let request;
  try {
    request = JSON.parse(input);
  } catch (e) {
    fail('the request is not JSON: ' + e.message);
  }
  if (request === null || typeof request !== 'object' || Array.isArray(request)) fail('the request is not an object');
  let reply;
  if (request.type === 'tool_call_pre') reply = toolCallPre(request);
  else if (request.type === 'memory_write_pre') reply = memoryWritePre(request);
  else fail('unexpected request type ' + JSON.stringify(request.type));
  process.stdout.write(JSON.stringify(reply) + '\n');
});
