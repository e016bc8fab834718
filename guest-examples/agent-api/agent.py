#!/usr/bin/env python3
"""A tiny agent that uses ctxhost as its context engine over HTTP.

Standard library only. Start the daemon (`ctxhost serve`), then:

    python3 agent.py --url http://127.0.0.1:4545 --agent demo

Each turn calls the agent API (`POST /api/agents/{agent_id}/{hook}`):
ingest (what should the model remember?), assemble (what does the model
see?), then after_turn (learn from the finished turn). The "model" here is a
stand-in that echoes; put your LLM call where `fake_model` is.
"""

import argparse
import json
import sys
import urllib.error
import urllib.request


class ContextEngine:
    """The agent API of one agent."""

    def __init__(self, url, agent_id, token=None):
        self.base = f"{url.rstrip('/')}/api/agents/{agent_id}"
        self.token = token

    def call(self, hook, body):
        request = urllib.request.Request(
            f"{self.base}/{hook}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            raise SystemExit(f"{hook} failed with HTTP {e.code}: {detail}") from None

    def ingest(self, message):
        return self.call("ingest", {"message": message})["memories"]

    def assemble(self, system_prompt, messages):
        return self.call("assemble", {"system_prompt": system_prompt, "messages": messages})["messages"]

    def after_turn(self, messages):
        self.call("after_turn", {"messages": messages})


def fake_model(system_prompt, messages):
    last = messages[-1]["content"]
    return f"(model) You said: {last}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:4545")
    parser.add_argument("--agent", default="demo")
    parser.add_argument("--token", default=None, help="bearer token, when the daemon has one")
    args = parser.parse_args()

    engine = ContextEngine(args.url, args.agent, args.token)
    history = []
    for user_text in ["My favourite colour is teal.", "What is my favourite colour?"]:
        print(f"user: {user_text}")
        memories = engine.ingest(user_text)
        for m in memories:
            print(f"  recalled [{m['source']}] {m['content']}")
        system_prompt = "You are helpful."
        if memories:
            system_prompt += "\nYou remember:\n" + "\n".join(f"- {m['content']}" for m in memories)
        history.append({"role": "user", "content": user_text})
        window = engine.assemble(system_prompt, history)
        print(f"  assembled {len(window)} messages")
        answer = fake_model(system_prompt, window)
        print(f"assistant: {answer}")
        history.append({"role": "assistant", "content": answer})
        engine.after_turn(history[-2:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
