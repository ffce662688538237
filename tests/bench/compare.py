#!/usr/bin/env python3
"""Compare Warden's inference/embedding throughput with reference stacks.

Run with the bench venv (see tests/bench/README.md):

    tests/bench/.venv/bin/python tests/bench/compare.py [--threads 2] [--warden target/release/warden]

Reference figures:
  * llama-cpp-python on models/SmolLM2-135M-Instruct.Q4_1.gguf with the prompt
    in tests/bench/prompt.txt, trimmed and sent as the single user message through
    the GGUF chat template exactly like `warden bench inference` (534 tokens incl.
    SmolLM2's default system prompt; --raw-prompt uses the bare text, 505 tokens):
      - prefill_tokens_per_s: prompt tokens / wall time of one batched eval of the prompt
      - ttft_ms: start of prompt eval -> first (greedy) token chosen
      - decode_tokens_per_s: single-token forward passes per second over
        --new-tokens greedy steps (EOS ignored: we always feed the argmax back)
  * sentence-transformers on models/all-MiniLM-L6-v2 over 256 fixed sentences
    (the same generator as `bench_sentence` in src/cli/bench.rs),
    batch_size 32, CPU, torch.set_num_threads(threads): sentences_per_s.

Each measurement is repeated --repeats times after a warm-up; the median is reported.

--gguf PATH runs the inference comparison on another GGUF (Warden gets it as
--chat-model), e.g. the K-quant default chat model of models/manifest.toml; --skip-embed
leaves the embedding comparison out.

Warden figures come from `WARDEN bench inference --json` and
`WARDEN bench embed --json` (last JSON object line on stdout).

stdout: one JSON object {"reference": ..., "warden": ..., "ratios": ...}.
Progress/diagnostics go to stderr.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GGUF = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBED_DIR = ROOT / "models" / "all-MiniLM-L6-v2"
PROMPT_FILE = ROOT / "tests" / "bench" / "prompt.txt"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(msg):
    print(f"compare: {msg}", file=sys.stderr, flush=True)


def r3(x):
    return None if x is None else round(float(x), 3)


# --------------------------------------------------------------------------
# Fixed embedding corpus: 256 deterministic ops sentences. This mirrors
# `bench_sentence` in src/cli/bench.rs so both sides embed the same text;
# keep them in sync (compare.py flags a token-count mismatch).

_SUBJECTS = [
    "The primary database",
    "Nginx on the edge proxy",
    "The connection pool of the billing service",
    "A slow query on the orders table",
    "The disk on the log volume",
    "The last deploy of the API gateway",
    "Replication between the two data centres",
    "The nightly batch job",
]
_PREDICATES = [
    "reported deadlocks between two transactions updating the same rows",
    "returned 502 errors after the upstream timed out",
    "was exhausted because connections were not returned after errors",
    "took more than thirty seconds because an index was missing",
    "filled up and writes started to fail with no space left on device",
    "introduced a configuration change that doubled the error rate",
    "lagged by several minutes during the peak hour",
    "held a lock that blocked the checkout flow",
]


def bench_sentence(i):
    repeat = 1 + i % 3
    base = f"{_SUBJECTS[i % 8]} {_PREDICATES[(i // 8) % 8]} (case {i})."
    return " ".join([base] * repeat)


def embed_corpus(n=256):
    return [bench_sentence(i) for i in range(n)]


# --------------------------------------------------------------------------
# llama.cpp reference

def bench_llama(threads, new_tokens, repeats, raw_prompt=False, gguf=GGUF):
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama

    text = PROMPT_FILE.read_text(encoding="utf-8")
    llm = Llama(model_path=str(gguf), n_ctx=1024, n_batch=1024, n_ubatch=512,
                n_threads=threads, n_threads_batch=threads, seed=1234, verbose=False)
    if raw_prompt:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    else:
        # Same as warden: the trimmed file is the single user message, rendered
        # with the GGUF's chat template (adds SmolLM2's default system prompt).
        import jinja2
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise SystemExit("GGUF has no tokenizer.chat_template; use --raw-prompt")
        prompt = jinja2.Template(template).render(
            messages=[{"role": "user", "content": text.strip()}],
            add_generation_prompt=True, bos_token="", eos_token="")
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
    if len(ids) + new_tokens + 1 > llm.n_ctx():
        raise SystemExit(f"prompt ({len(ids)} tokens) + {new_tokens} does not fit n_ctx {llm.n_ctx()}")
    log(f"llama.cpp {llama_cpp.__version__}: prompt {len(ids)} tokens, threads {threads}, "
        f"{new_tokens} new tokens, {repeats} repeats")

    n_vocab = llm.n_vocab()

    def last_logits():
        # With logits_all=False, llama-cpp-python 0.3.x no longer copies logits
        # into llm.scores; read the last output row straight from the context.
        ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(n_vocab,))

    # warm-up
    llm.reset()
    llm.eval(ids[:32])
    llm.eval([int(last_logits().argmax())])

    prefill, ttft, decode = [], [], []
    generated = None
    for _ in range(repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        tok = int(last_logits().argmax())
        t1 = time.perf_counter()
        prefill.append(len(ids) / (t1 - t0))
        ttft.append((t1 - t0) * 1000.0)
        out = [tok]
        t2 = time.perf_counter()
        for _ in range(new_tokens):
            llm.eval([tok])
            tok = int(last_logits().argmax())
            out.append(tok)
        t3 = time.perf_counter()
        decode.append(new_tokens / (t3 - t2))
        generated = out
    cont = llm.detokenize(generated[:40], special=True).decode("utf-8", errors="replace")
    log(f"llama.cpp greedy continuation starts: {cont!r}")
    return {
        "engine": f"llama-cpp-python {llama_cpp.__version__}",
        "model": Path(gguf).name,
        "threads": threads,
        "prompt_tokens": len(ids),
        "prompt_format": "raw" if raw_prompt else "chat_template",
        "new_tokens": new_tokens,
        "prefill_tokens_per_s": r3(statistics.median(prefill)),
        "ttft_ms": r3(statistics.median(ttft)),
        "decode_tokens_per_s": r3(statistics.median(decode)),
        "runs": {"prefill_tokens_per_s": [r3(x) for x in prefill],
                 "ttft_ms": [r3(x) for x in ttft],
                 "decode_tokens_per_s": [r3(x) for x in decode]},
    }


# --------------------------------------------------------------------------
# sentence-transformers reference

def bench_embed(threads, batch, repeats):
    import torch
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    sentences = embed_corpus(256)
    model = SentenceTransformer(str(EMBED_DIR), device="cpu")
    model.eval()
    log(f"sentence-transformers {sentence_transformers.__version__} torch {torch.__version__}: "
        f"{len(sentences)} sentences, batch {batch}, threads {threads}, {repeats} repeats")
    tok = model.tokenizer
    n_tokens = sum(min(len(tok(x, add_special_tokens=True, truncation=False)["input_ids"]), model.max_seq_length)
                   for x in sentences)
    with torch.inference_mode():
        model.encode(sentences[:batch], batch_size=batch, show_progress_bar=False)  # warm-up
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model.encode(sentences, batch_size=batch, show_progress_bar=False, convert_to_numpy=True)
            rates.append(len(sentences) / (time.perf_counter() - t0))
    return {
        "engine": f"sentence-transformers {sentence_transformers.__version__} / torch {torch.__version__}",
        "model": EMBED_DIR.name,
        "threads": threads,
        "batch": batch,
        "sentences": len(sentences),
        "tokens": n_tokens,
        "sentences_per_s": r3(statistics.median(rates)),
        "runs": [r3(x) for x in rates],
    }


# --------------------------------------------------------------------------
# Warden

def run_warden(binary, args, timeout):
    cmd = [str(binary)] + args
    log(f"running {' '.join(cmd)}")
    try:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout}s"
    except OSError as e:
        return None, str(e)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
        return None, f"exit {proc.returncode}: {tail}"
    for line in reversed(proc.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj, None
    try:
        obj = json.loads(proc.stdout)
        if isinstance(obj, dict):
            return obj, None
    except json.JSONDecodeError:
        pass
    return None, f"no JSON object on stdout: {proc.stdout[-500:]!r}"


def ratio(a, b):
    try:
        if a is None or b is None or float(b) == 0:
            return None
        return round(float(a) / float(b), 3)
    except (TypeError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warden", type=Path, default=Path(os.environ.get("WARDEN_BIN", "target/release/warden")),
                    help="warden binary (default $WARDEN_BIN or target/release/warden)")
    ap.add_argument("--warden-arg", action="append", default=[],
                    help="extra argument appended to both warden bench commands (repeatable)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per warden command")
    ap.add_argument("--raw-prompt", action="store_true",
                    help="feed prompt.txt to llama.cpp as raw text instead of as a chat-templated user message")
    ap.add_argument("--gguf", type=Path, default=GGUF,
                    help="chat model for the inference comparison (default: the default model)")
    ap.add_argument("--skip-embed", action="store_true", help="leave the embedding comparison out")
    ap.add_argument("--skip-reference", action="store_true", help="only run warden")
    ap.add_argument("--skip-warden", action="store_true", help="only run the reference stacks")
    args = ap.parse_args()

    gguf = args.gguf.resolve()
    for p in (gguf, EMBED_DIR, PROMPT_FILE):
        if not p.exists():
            sys.exit(f"missing {p}; run models/fetch first")

    result = {"reference": None, "warden": None, "ratios": None, "notes": []}

    if not args.skip_reference:
        result["reference"] = {
            "inference": bench_llama(args.threads, args.new_tokens, args.repeats, args.raw_prompt, gguf),
            "embed": None if args.skip_embed else bench_embed(args.threads, args.batch, args.repeats),
        }

    warden = args.warden if args.warden.is_absolute() else ROOT / args.warden
    if args.skip_warden:
        pass
    elif not warden.is_file() or not os.access(warden, os.X_OK):
        msg = f"warden binary not found at {warden}; build it with `cargo build --release` (reference figures only)"
        log(msg)
        result["notes"].append(msg)
    else:
        w = {}
        kinds = {"inference": ["--chat-model", str(gguf), "--decode-tokens", str(args.new_tokens)],
                 "embed": []}
        if args.skip_embed:
            del kinds["embed"]
        for kind, extra in kinds.items():
            obj, err = run_warden(warden, ["bench", kind, "--json"] + extra + args.warden_arg, args.timeout)
            if err:
                msg = f"warden bench {kind} failed: {err}"
                log(msg)
                result["notes"].append(msg)
            w[kind] = obj
        result["warden"] = w
        wi = w.get("inference") or {}
        if wi.get("threads") is not None and int(wi["threads"]) != args.threads:
            result["notes"].append(f"thread mismatch: warden used {wi['threads']}, reference {args.threads}")
        ref_i = (result["reference"] or {}).get("inference") or {}
        if wi.get("prompt_tokens") is not None and ref_i.get("prompt_tokens") is not None \
                and int(wi["prompt_tokens"]) != int(ref_i["prompt_tokens"]):
            result["notes"].append(f"prompt token count differs: warden {wi['prompt_tokens']}, "
                                   f"llama.cpp {ref_i['prompt_tokens']}")

        we = w.get("embed") or {}
        ref_e = (result["reference"] or {}).get("embed") or {}
        if we.get("tokens") is not None and ref_e.get("tokens") is not None \
                and int(we["tokens"]) != int(ref_e["tokens"]):
            result["notes"].append(f"embedding corpus token count differs: warden {we['tokens']}, "
                                   f"reference {ref_e['tokens']} (corpus out of sync with src/cli/bench.rs?)")

    if result["reference"] and result["warden"]:
        ri, re_ = result["reference"]["inference"], result["reference"]["embed"] or {}
        wi = result["warden"].get("inference") or {}
        we = result["warden"].get("embed") or {}
        result["ratios"] = {
            "prefill": ratio(wi.get("prefill_tokens_per_s"), ri["prefill_tokens_per_s"]),
            "decode": ratio(wi.get("decode_tokens_per_s"), ri["decode_tokens_per_s"]),
            "embed": ratio(we.get("sentences_per_s"), re_.get("sentences_per_s")),
            "ttft": ratio(wi.get("ttft_ms"), ri["ttft_ms"]),
        }
        result["notes"].append("ratios are warden/reference; >1 is better except ttft (lower is better)")

    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
