#!/usr/bin/env python3
"""Tool-call accuracy of Warden against llama.cpp on the same GGUF.

Run with the bench venv (see tests/bench/README.md):

    tests/bench/.venv/bin/python tests/bench/tool_calls.py [--warden target/release/warden]
    tests/bench/.venv/bin/python tests/bench/tool_calls.py --url http://127.0.0.1:8080/v1 --token wdn_...

Every case of tests/bench/tool_cases.jsonl (one JSON object a line: `id`, `category`,
`messages`, `tools`, `expected` = a list of {name, arguments} or the string "no call") is
sent to each side with `tool_choice` left to its default ("auto"), greedy decoding.

Sides:
  * warden: `POST /v1/chat/completions` of a server this script starts (a fresh data folder,
    an admin and a token made with the warden CLI) or of `--url` with `--token`.
  * warden-required: the same with `tool_choice: "required"`, on the cases that expect
    calls only: how good the constrained calls are once the model must call.
  * llama.cpp (llama-cpp-python): `create_chat_completion(tools=…, tool_choice="auto")` with
    `chat_format="chatml-function-calling"`, llama-cpp-python's own tool-calling handler for
    ChatML models such as SmolLM2 (its prompt lists the functions, a grammar constrains the
    arguments).
  * llama.cpp-same-prompt: the GGUF's own chat template with Warden's tool instructions in
    the system message (the text `tool_instructions` in src/engine/chat_template.rs writes),
    unconstrained greedy generation, `<tool_call>{…}</tool_call>` blocks parsed from the
    text: what the model does with Warden's prompt but without constrained decoding.

Scoring, per case: a case expecting calls is right when the calls made equal the expected
ones (names and arguments, compared as parsed JSON, in any order); a "no call" case is right
when no call is made. Also reported: `decision` (call vs no call right), `names` (the set
of called names right), `valid_json` (every call's arguments parse as a JSON object).

A request that fails (HTTP error, exception) counts as wrong.

stdout: one JSON object {"cases", "model", "sides": {side: {"cases", "accuracy", …,
"by_category"}}, "failures": {side: [case ids]}}. Progress goes to stderr.
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GGUF = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
CASES = ROOT / "tests" / "bench" / "tool_cases.jsonl"
DEFAULT_SYSTEM = "You are a helpful assistant."
MAX_TOKENS = 128
STARTUP_TIMEOUT_S = 180
REQUEST_TIMEOUT_S = 300
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def log(message):
    print(f"tool_calls: {message}", file=sys.stderr, flush=True)


def load_cases(path, limit):
    cases = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                case = json.loads(line)
                missing = {"id", "messages", "tools", "expected"} - set(case)
                if missing:
                    raise SystemExit(f"{path}:{number}: case lacks {sorted(missing)}")
                cases.append(case)
    return cases[:limit] if limit else cases


def with_system(messages):
    """The case's messages, with a default system message when it has none (llama.cpp's
    function-calling prompt lists the tools inside the system message)."""
    if messages and messages[0]["role"] == "system":
        return messages
    return [{"role": "system", "content": DEFAULT_SYSTEM}, *messages]


# --- scoring ------------------------------------------------------------------------------


def canonical(arguments):
    """Arguments as comparable JSON text, or None when they do not parse to an object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def score(case, calls):
    """calls: [(name, arguments as JSON text or object)]."""
    expected = case["expected"]
    made = [(name, canonical(arguments)) for name, arguments in calls]
    valid_json = all(text is not None for _, text in made)
    if expected == "no call":
        right = not made
        return {"right": right, "decision": right, "names": right, "valid_json": valid_json}
    wanted = sorted((call["name"], canonical(call["arguments"])) for call in expected)
    return {
        "right": sorted(made, key=str) == sorted(wanted, key=str),
        "decision": bool(made),
        "names": sorted(name for name, _ in made) == sorted(name for name, _ in wanted),
        "valid_json": valid_json,
    }


def summarise(results):
    def rate(items, key):
        return round(sum(1 for r in items if r[key]) / len(items), 3) if items else None

    by_category = {}
    for result in results:
        by_category.setdefault(result["category"], []).append(result)
    return {
        "cases": len(results),
        "accuracy": rate(results, "right"),
        "decision": rate(results, "decision"),
        "names": rate(results, "names"),
        "valid_json": rate(results, "valid_json"),
        "right": sum(1 for r in results if r["right"]),
        "errors": sum(1 for r in results if r.get("error")),
        "seconds": round(sum(r["seconds"] for r in results), 1),
        "by_category": {name: rate(items, "right") for name, items in sorted(by_category.items())},
    }


def run_side(name, cases, ask):
    results = []
    for case in cases:
        began = time.perf_counter()
        error = None
        try:
            calls = ask(case)
        except Exception as err:  # noqa: BLE001 - a failed request is a wrong answer
            calls, error = [], f"{type(err).__name__}: {err}"
        result = score(case, calls)
        if error:
            # A failed request answers nothing: wrong whatever the case expects.
            result.update(right=False, decision=False, names=False)
        result.update(
            id=case["id"],
            category=case.get("category", "other"),
            seconds=time.perf_counter() - began,
            calls=[[n, a if isinstance(a, str) else json.dumps(a)] for n, a in calls],
        )
        if error:
            result["error"] = error[:300]
        mark = "ok " if result["right"] else "BAD"
        log(f"{name:22} {mark} {case['id']:28} {json.dumps(result['calls'])[:160]}{' ' + error if error else ''}")
        results.append(result)
    return results


# --- warden -------------------------------------------------------------------------------


class WardenServer:
    """A warden server in a fresh data folder, with an admin and an API token."""

    def __init__(self, binary, models, threads):
        self.data = Path(tempfile.mkdtemp(prefix="warden-tool-bench-"))
        self.binary = str(binary)
        self.process = None
        subprocess.run(
            [self.binary, "user", "add", "bench", "--role", "admin", "--password-stdin", "--data", str(self.data)],
            input="tool-bench-password\n", text=True, check=True, capture_output=True,
        )
        created = subprocess.run(
            [self.binary, "token", "create", "--user", "bench", "--data", str(self.data)],
            text=True, check=True, capture_output=True,
        )
        found = re.search(r"wdn_[A-Za-z0-9_]+", created.stdout)
        if not found:
            raise SystemExit(f"no token in `warden token create` output: {created.stdout!r}")
        self.token = found.group(0)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        command = [self.binary, "serve", "--addr", f"127.0.0.1:{port}", "--data", str(self.data),
                   "--models", str(models), "--sample-kb", str(self.data / "no-sample-kb")]
        if threads:
            command += ["--threads", str(threads)]
        environment = {**os.environ, "WARDEN_LOG": "warn"}
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=environment)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"warden serve exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.25)
        raise SystemExit("warden serve did not come up")

    def close(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.data, ignore_errors=True)


def warden_asker(url, token, tool_choice=None):
    def ask(case):
        body = {
            "messages": with_system(case["messages"]),
            "tools": case["tools"],
            "temperature": 0,
            "max_tokens": MAX_TOKENS,
        }
        if tool_choice:
            body["tool_choice"] = tool_choice
        request = urllib.request.Request(
            f"{url.rstrip('/')}/chat/completions",
            data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as err:
            raise RuntimeError(f"HTTP {err.code}: {err.read()[:200]!r}") from err
        message = answer["choices"][0]["message"]
        return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]

    return ask


# --- llama.cpp ----------------------------------------------------------------------------


def tool_instructions(tools):
    """Warden's tool prompt for templates without tool support (src/engine/chat_template.rs)."""
    listed = "\n".join(
        json.dumps({"type": "function", "function": {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "parameters": t["function"].get("parameters", {"type": "object", "properties": {}}),
        }}, separators=(",", ":"))
        for t in tools
    )
    return (
        f"You can call these tools:\n{listed}\n"
        'To call a tool, reply with <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>.'
    )


def llama_function_calling_asker(gguf, threads):
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=4096, n_threads=threads, n_threads_batch=threads,
                chat_format="chatml-function-calling", seed=0, verbose=False)

    def ask(case):
        answer = llm.create_chat_completion(
            messages=with_system(case["messages"]), tools=case["tools"], tool_choice="auto",
            temperature=0.0, max_tokens=MAX_TOKENS,
        )
        message = answer["choices"][0]["message"]
        return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]

    return ask


def llama_same_prompt_asker(gguf, threads):
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_ctx=4096, n_threads=threads, n_threads_batch=threads, seed=0, verbose=False)

    def ask(case):
        messages = [dict(m) for m in with_system(case["messages"])]
        messages[0]["content"] = f"{messages[0]['content']}\n\n{tool_instructions(case['tools'])}"
        answer = llm.create_chat_completion(messages=messages, temperature=0.0, max_tokens=MAX_TOKENS)
        text = answer["choices"][0]["message"]["content"] or ""
        calls = []
        for block in TOOL_CALL.findall(text):
            try:
                value = json.loads(block)
            except json.JSONDecodeError:
                calls.append(("", block))
                continue
            if isinstance(value, dict):
                calls.append((str(value.get("name", "")), value.get("arguments", {})))
            else:
                calls.append(("", block))
        return calls

    return ask


# --- main ---------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--gguf", type=Path, default=GGUF, help="the GGUF llama.cpp loads (the server's default chat model for Warden)")
    parser.add_argument("--warden", type=Path, default=ROOT / "target" / "release" / "warden", help="binary to start a server with")
    parser.add_argument("--models", type=Path, default=ROOT / "models", help="models folder for the started server")
    parser.add_argument("--url", help="an already running Warden's /v1 base URL (then --token)")
    parser.add_argument("--token", default=os.environ.get("WARDEN_API_KEY"), help="API token for --url (default $WARDEN_API_KEY)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="only the first N cases")
    parser.add_argument("--skip-warden", action="store_true")
    parser.add_argument("--skip-llama", action="store_true")
    args = parser.parse_args()

    cases = load_cases(args.cases, args.limit)
    log(f"{len(cases)} cases from {args.cases}")
    results = {}

    if not args.skip_warden:
        server = None
        try:
            if args.url:
                if not args.token:
                    raise SystemExit("--url needs --token (or WARDEN_API_KEY)")
                url, token = args.url, args.token
            else:
                if not args.warden.is_file():
                    raise SystemExit(f"{args.warden} is missing: cargo build --release, or give --url")
                server = WardenServer(args.warden, args.models, args.threads)
                url, token = server.url, server.token
            results["warden"] = run_side("warden", cases, warden_asker(url, token))
            calling = [case for case in cases if case["expected"] != "no call"]
            results["warden-required"] = run_side("warden-required", calling, warden_asker(url, token, "required"))
        finally:
            if server:
                server.close()

    if not args.skip_llama:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            log("llama-cpp-python is not installed: llama.cpp sides skipped (see tests/bench/README.md)")
        else:
            results["llama.cpp"] = run_side("llama.cpp", cases, llama_function_calling_asker(args.gguf, args.threads))
            results["llama.cpp-same-prompt"] = run_side(
                "llama.cpp-same-prompt", cases, llama_same_prompt_asker(args.gguf, args.threads)
            )

    report = {
        "cases": len(cases),
        "model": args.gguf.name,
        "sides": {side: summarise(items) for side, items in results.items()},
        "failures": {side: [r["id"] for r in items if not r["right"]] for side, items in results.items()},
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
