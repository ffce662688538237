#!/usr/bin/env python3
"""Answer quality of llama.cpp on Warden's own answer prompts, scored as Warden scores.

Run with the bench venv (see tests/bench/README.md, section 6):

    target/release/warden eval answers kb tests/data/answers/ops-en.jsonl --transcript /tmp/t-en.jsonl --json
    tests/bench/.venv/bin/python tests/bench/answers_side_by_side.py /tmp/t-en.jsonl

The transcript (`warden eval answers … --transcript FILE`) holds one JSON object a line:
`id`, `question`, `answers` (gold strings), `answerable`, `messages` (the exact chat prompt
of Warden's answer call, built from the top retrieved passages), `schema` (the JSON schema of
the answer object `{"answer": str, "citations": [passage numbers]}`), `passages` (the text
of passage 1, 2, … in prompt order) and `warden` (`answer`, `basis`, `cited` texts).

Sides:
  * llama.cpp: llama-cpp-python on the same GGUF, the same messages through the GGUF's own
    chat template, greedy (temperature 0, repeat penalty 1.1, at most 320 new tokens),
    constrained to the case's schema (`response_format` json_object + schema). The raw model
    output is scored, with no gate: the answer and citations are read from the JSON (if it
    does not parse, the answer is the raw text and nothing is cited). The schema offers no
    abstention of its own, so llama.cpp abstains when its answer is empty or is the prompt's
    NOT_FOUND (whatever it cites then is not counted).
  * warden: recomputed from the transcript's `warden` fields (abstained = basis
    "abstained", cited = the cited passage texts).

Scoring (as src/cli/eval_answers.rs): an answerable case's answer is right when it has at
most 80 words and contains a gold string (normalised, on whole-token boundaries); its
citation is right when a cited passage contains a gold string; an unanswerable case is
right when the engine abstained and cited nothing; a false abstention is an answerable case
where the engine abstained.

stdout: one JSON object {"transcript", "model", "cases", "sides": {"llama.cpp": {…,
"latency", "engine"}, "warden": {…}}, "failures": {side: [...]}}. Progress goes to stderr.
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GGUF = ROOT / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MAX_TOKENS = 320
REPEAT_PENALTY = 1.1
N_CTX = 4096
MAX_ANSWER_WORDS = 80
ARTICLES = {"a", "an", "the"}

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def log(message):
    print(f"answers_side_by_side: {message}", file=sys.stderr, flush=True)


# --- scoring, exactly as src/cli/eval_answers.rs ---------------------------------------


def is_cjk(c):
    return "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf"


def normalise(text):
    """Lower case, non-alphanumerics to spaces, articles dropped, whitespace collapsed; no
    space kept between two words where a CJK ideograph meets a CJK ideograph."""
    # Rust keeps the first char of a char's lower case (`to_lowercase().next()`).
    spaced = "".join((c.lower()[:1] or c) if c.isalnum() else " " for c in text)
    out = ""
    for word in spaced.split():
        if word in ARTICLES:
            continue
        joins = out != "" and is_cjk(out[-1]) and is_cjk(word[0])
        if out and not joins:
            out += " "
        out += word
    return out


def contains_gold(text, gold):
    text = normalise(text)
    gold = normalise(gold)
    if not gold:
        return False

    def boundary(edge, inner):
        if edge is not None and not is_cjk(inner):
            return not edge.isalnum() or is_cjk(edge)
        return True

    start = text.find(gold)
    while start != -1:
        end = start + len(gold)
        before = text[start - 1] if start > 0 else None
        after = text[end] if end < len(text) else None
        if boundary(before, gold[0]) and boundary(after, gold[-1]):
            return True
        start = text.find(gold, start + 1)
    return False


def words(text):
    latin = sum(1 for w in text.split() if any(c.isalnum() and not is_cjk(c) for c in w))
    return latin + sum(1 for c in text if is_cjk(c)) // 2


def round3(value):
    return math.floor(value * 1000.0 + 0.5) / 1000.0


def percentile(values, q):
    """As Warden's report: the element at round((n - 1) * q) of the sorted values."""
    if not values:
        return None
    ordered = sorted(values)
    index = int(math.floor((len(ordered) - 1) * q + 0.5))
    return float(math.floor(ordered[index] + 0.5))


class Report:
    def __init__(self):
        self.cases = self.answerable = self.unanswerable = 0
        self.correct = self.cited_correct = self.abstained_correctly = self.false_abstentions = 0
        self.failures = []

    def fail(self, case_id, check, expected, got):
        self.failures.append({"id": case_id, "check": check, "expected": expected, "got": got})

    def score(self, case, answer, abstained, cited_texts):
        self.cases += 1
        golds = case.get("answers") or []
        if not case["answerable"]:
            self.unanswerable += 1
            if abstained and not cited_texts:
                self.abstained_correctly += 1
            else:
                self.fail(case["id"], "abstention", "abstain, cite nothing", answer)
            return
        self.answerable += 1
        if abstained:
            self.false_abstentions += 1
        if words(answer) <= MAX_ANSWER_WORDS and any(contains_gold(answer, g) for g in golds):
            self.correct += 1
        else:
            self.fail(case["id"], "answer", golds, answer)
        if any(contains_gold(t, g) for t in cited_texts for g in golds):
            self.cited_correct += 1
        else:
            self.fail(case["id"], "citation", golds, len(cited_texts))

    def json(self):
        def share(n, of):
            return None if of == 0 else round3(n / of)

        return {
            "cases": self.cases,
            "answerable": self.answerable,
            "unanswerable": self.unanswerable,
            "answer_accuracy": share(self.correct, self.answerable),
            "citation_accuracy": share(self.cited_correct, self.answerable),
            "abstention_accuracy": share(self.abstained_correctly, self.unanswerable),
            "false_abstention_rate": share(self.false_abstentions, self.answerable),
        }


# --- transcript and llama.cpp -------------------------------------------------------------


def without_max_length(schema):
    """The schema without `maxLength`: llama.cpp compiles it into hundreds of nested optional
    characters, which slows sampling to tens of seconds a case; `max_tokens` bounds the
    reply instead."""
    if isinstance(schema, dict):
        return {k: without_max_length(v) for k, v in schema.items() if k != "maxLength"}
    if isinstance(schema, list):
        return [without_max_length(v) for v in schema]
    return schema


def says_not_found(answer):
    """Whether a reply is the prompt's abstention word (the model's own abstention)."""
    return answer.strip().strip(".。!！").upper() == "NOT_FOUND"


def load_transcript(path, limit, stride=1):
    cases = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            case = json.loads(line)
            missing = {"id", "answerable", "messages", "schema", "passages", "warden"} - set(case)
            if missing:
                raise SystemExit(f"{path}:{number}: transcript line lacks {sorted(missing)}")
            cases.append(case)
    cases = cases[::stride]
    return cases[:limit] if limit else cases


def parse_reply(text, passage_count):
    """The answer and cited passage numbers of a reply; raw text and no citations when the
    reply is not a JSON object."""
    try:
        reply = json.loads(text)
    except ValueError:
        return text, []
    if not isinstance(reply, dict):
        return text, []
    answer = reply.get("answer")
    if not isinstance(answer, str):
        answer = "" if answer is None else json.dumps(answer, ensure_ascii=False)
    cited = reply.get("citations")
    citations = []
    for n in cited if isinstance(cited, list) else []:
        if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= passage_count and n not in citations:
            citations.append(n)
    return answer, citations


def load_llama(gguf, threads):
    from llama_cpp import Llama

    return Llama(
        model_path=str(gguf),
        n_ctx=N_CTX,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )


def generate(llm, case):
    """Streams one greedy, schema-constrained reply; returns (text, first_token_ms, total_ms)."""
    started = time.perf_counter()
    first = None
    parts = []
    stream = llm.create_chat_completion(
        messages=case["messages"],
        temperature=0.0,
        max_tokens=MAX_TOKENS,
        repeat_penalty=REPEAT_PENALTY,
        response_format={"type": "json_object", "schema": without_max_length(case["schema"])},
        stream=True,
    )
    for chunk in stream:
        delta = chunk["choices"][0].get("delta") or {}
        content = delta.get("content")
        if content:
            if first is None:
                first = (time.perf_counter() - started) * 1e3
            parts.append(content)
    total = (time.perf_counter() - started) * 1e3
    return "".join(parts), first, total


def engine_version():
    import llama_cpp

    version = f"llama-cpp-python {getattr(llama_cpp, '__version__', '?')}"
    try:
        info = llama_cpp.llama_print_system_info()
        if isinstance(info, bytes):
            info = info.decode("utf-8", "replace")
        return {"name": version, "system_info": info.strip()}
    except Exception:  # noqa: BLE001 - only a label
        return {"name": version}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("transcript", help="JSON lines from `warden eval answers … --transcript FILE`")
    parser.add_argument("--gguf", default=str(GGUF), help=f"the GGUF Warden answered with (default {GGUF.relative_to(ROOT)})")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads (default 2)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N cases")
    parser.add_argument("--stride", type=int, default=1, help="every Nth case (a slice across the set)")
    parser.add_argument("--skip-llama", action="store_true", help="recompute Warden's side only")
    args = parser.parse_args()

    cases = load_transcript(args.transcript, args.limit, max(args.stride, 1))
    log(f"{len(cases)} cases from {args.transcript}")
    warden = Report()
    llama = Report()
    first_ms, total_ms = [], []
    llm = None
    if not args.skip_llama:
        gguf = Path(args.gguf)
        if not gguf.is_file():
            raise SystemExit(f"no GGUF at {gguf}")
        loading = time.perf_counter()
        llm = load_llama(gguf, args.threads)
        log(f"loaded {gguf.name} in {time.perf_counter() - loading:.1f} s ({args.threads} threads)")

    for number, case in enumerate(cases, 1):
        passages = case["passages"]
        seen = case["warden"]
        warden.score(case, seen.get("answer") or "", seen.get("basis") == "abstained", seen.get("cited") or [])
        if llm is None:
            continue
        text, first, total = generate(llm, case)
        answer, citations = parse_reply(text, len(passages))
        total_ms.append(total)
        if first is not None:
            first_ms.append(first)
        abstained = answer.strip() == "" or says_not_found(answer)
        llama.score(case, answer, abstained, [] if abstained else [passages[n - 1] for n in citations])
        log(f"[{number}/{len(cases)}] {case['id']} cites {citations} ({total:.0f} ms): {answer[:100]!r}")

    sides = {}
    failures = {}
    if llm is not None:
        sides["llama.cpp"] = {
            **llama.json(),
            "latency": {
                "first_token_p50_ms": percentile(first_ms, 0.5),
                "first_token_p95_ms": percentile(first_ms, 0.95),
                "total_p50_ms": percentile(total_ms, 0.5),
                "total_p95_ms": percentile(total_ms, 0.95),
            },
            "threads": args.threads,
            "engine": engine_version(),
        }
        failures["llama.cpp"] = llama.failures
    sides["warden"] = warden.json()
    failures["warden"] = warden.failures
    print(
        json.dumps(
            {
                "transcript": str(args.transcript),
                "model": Path(args.gguf).name,
                "cases": len(cases),
                "sides": sides,
                "failures": failures,
            },
            indent=2,
            ensure_ascii=False,
        )
    )


if __name__ == "__main__":
    main()
