#!/usr/bin/env python3
"""Generate reference fixtures for Warden's tests.

Run with the bench venv (see tests/bench/README.md):

    tests/bench/.venv/bin/python tests/bench/make_fixtures.py

Writes (relative to the repository root):
    tests/data/tokenizer_parity.json    llama.cpp tokenizer ids for fixed strings
    tests/data/embedding_reference.json sentence-transformers vectors
    tests/data/logits_reference.json    llama.cpp top-10 logits of a chat prompt

Options: --only tokenizer|embedding|logits (repeatable), --out-dir DIR.
"""

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
GGUF = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBED_DIR = MODELS / "all-MiniLM-L6-v2"

# Offline: never touch the Hugging Face hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def sig7(x):
    """Round a float to 7 significant digits."""
    return float(f"{float(x):.7g}")


def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=sys.stderr)


# --------------------------------------------------------------------------
# a) tokenizer parity

TOKENIZER_TEXTS = [
    # plain English
    "The quick brown fox jumps over the lazy dog.",
    " Leading space before the first word.",
    "\nLeading newline, then a sentence about restarting the service.",
    "Hello world",
    # numbers
    "12345 and 3.14",
    "Disk usage is at 97% on /dev/sda1 (1,024 GiB of 1,056 GiB) since 2024-03-15T08:30:00Z.",
    # Chinese and mixed
    "数据库死锁如何排查？",
    "请帮我查看 nginx 的 error.log，最近 5 分钟有 502 错误。",
    # code
    "fn main() {\n    let v: Vec<u32> = (1..=10).collect();\n    println!(\"{:?}\", v);\n}\n",
    "def handler(event):\n\tif event.get('retry'):\n\t\treturn None\n\treturn {'ok': True}\n",
    # emoji
    "🚀 deploy ✅ done 👍🏽",
    # whitespace
    "multiple   spaces    between     words",
    "trailing whitespace   ",
    "tabs\tand\nnewlines\n\n\nand CRLF\r\n",
    # accents
    "Café, naïve façade, Crème brûlée, Ångström, São Paulo, Dvořák",
    # URL
    "See https://example.com/runbooks/db-failover?step=3&lang=en#rollback for details.",
    # JSON
    '{"service": "orders", "replicas": 3, "healthy": true, "tags": ["prod", "eu-west-1"]}',
    # shell / logs
    "$ kubectl -n prod rollout restart deployment/orders && kubectl get pods -w",
    "ERROR 2024-05-01 12:00:01 [worker-7] Connection refused (errno=111)",
    # special-token text tokenized WITHOUT special parsing (must be split into pieces)
    "<|im_start|>user\nhi<|im_end|>",
    "",
]

TOKENIZER_SPECIAL_TEXTS = [
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n数据库死锁如何排查？<|im_end|>\n<|im_start|>assistant\n",
]


def make_tokenizer(out_dir):
    from llama_cpp import Llama
    import llama_cpp

    llm = Llama(model_path=str(GGUF), vocab_only=True, verbose=False)
    entries = []
    for text in TOKENIZER_TEXTS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        entries.append({"text": text, "ids": list(map(int, ids))})
    for text in TOKENIZER_SPECIAL_TEXTS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        entries.append({"text": text, "ids": list(map(int, ids)), "special": True})
    # Sanity: detokenize round trip (informational only).
    for e in entries:
        back = llm.detokenize(e["ids"], special=e.get("special", False)).decode("utf-8", errors="replace")
        if back != e["text"]:
            print(f"note: detokenize round-trip differs for {e['text']!r}: {back!r}", file=sys.stderr)
    print(f"tokenizer: llama_cpp {llama_cpp.__version__}, {len(entries)} entries, "
          f"n_vocab={llm.n_vocab()} bos={llm.token_bos()} eos={llm.token_eos()}", file=sys.stderr)
    write_json(out_dir / "tokenizer_parity.json", entries)


# --------------------------------------------------------------------------
# b) embedding reference

LONG_SENTENCE = " ".join(
    [
        "During the quarterly disaster recovery exercise the platform team failed over the primary",
        "PostgreSQL cluster from the eu-west-1 region to eu-central-1, measured the replication lag,",
        "verified that the connection poolers picked up the new writer endpoint, and then replayed",
        "a synthetic workload of checkout, refund and inventory reservation requests against the",
        "orders service while chaos tooling randomly terminated application pods, injected packet",
        "loss between availability zones, throttled the object storage bucket used for invoices,",
        "and rotated the TLS certificates of the internal service mesh; the exercise uncovered",
        "three problems: an alert on replication lag that fired far too late because it averaged",
        "over fifteen minutes, a hard-coded hostname in the invoice renderer that bypassed service",
        "discovery, and a runbook step that asked the operator to run a migration script which had",
        "been deleted two releases earlier, so the follow-up actions were to tighten the alert window,",
        "replace the hostname with the discovery alias, rewrite the runbook with tested commands,",
        "schedule another exercise for the next quarter, and share a written summary with every",
        "engineering team that depends on the orders database, including the analytics group whose",
        "nightly extract jobs were silently retried eleven times before they finally succeeded.",
        "Everything after this point lies beyond the 256 word-piece window of the embedding model and",
        "must be dropped by truncation: the retrospective also noted that the status page was updated",
        "late, that two dashboards disagreed about the error budget because they used different time",
        "zones, that the pager escalation policy skipped the secondary on-call engineer during a public",
        "holiday, and that nobody had verified the restore procedure for the encrypted backup snapshots",
        "since the storage vendor changed its key management interface in the spring.",
    ]
)

EMBED_SENTENCES = [
    "How do I restart the nginx service after changing its configuration?",
    "The database is running out of connections during peak traffic.",
    "Kubernetes pod stuck in CrashLoopBackOff after the last deployment.",
    "Rotate the API keys every ninety days and store them in the vault.",
    "A cat sat quietly on the warm windowsill.",
    "数据库死锁如何排查？",
    LONG_SENTENCE,
    "ok",
]


def make_embedding(out_dir):
    import torch
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model = SentenceTransformer(str(EMBED_DIR), device="cpu")
    model.eval()
    modules = json.loads((EMBED_DIR / "modules.json").read_text())
    module_types = [m["type"] for m in modules]
    normalize_in_pipeline = any(t.endswith("Normalize") for t in module_types)
    tok = model.tokenizer
    token_counts = [len(tok(s, add_special_tokens=True)["input_ids"]) for s in EMBED_SENTENCES]
    # The Normalize module (if present in modules.json) already L2-normalises;
    # normalize_embeddings=False so we reproduce exactly what the config says.
    with torch.inference_mode():
        vecs = model.encode(EMBED_SENTENCES, batch_size=32, convert_to_numpy=True,
                            normalize_embeddings=False, show_progress_bar=False)
    norms = [float((v.astype("float64") ** 2).sum() ** 0.5) for v in vecs]
    print(f"embedding: sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}; "
          f"modules={module_types}; max_seq_length={model.max_seq_length}; "
          f"token_counts={token_counts}; norms={[round(n, 6) for n in norms]}", file=sys.stderr)
    obj = {
        "model": "all-MiniLM-L6-v2",
        "modules": module_types,
        "normalized": normalize_in_pipeline,
        "pooling": "mean",
        "max_seq_length": int(model.max_seq_length),
        "token_counts_untruncated": token_counts,
        "sentences": EMBED_SENTENCES,
        "vectors": [[sig7(x) for x in v] for v in vecs],
        "generator": {
            "sentence_transformers": sentence_transformers.__version__,
            "torch": torch.__version__,
        },
    }
    write_json(out_dir / "embedding_reference.json", obj)


# --------------------------------------------------------------------------
# c) logits reference

LOGITS_PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


def make_logits(out_dir):
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama

    n_threads = 2
    llm = Llama(model_path=str(GGUF), n_ctx=512, n_batch=512, n_threads=n_threads,
                n_threads_batch=n_threads, seed=1234, logits_all=True, verbose=False)
    ids = llm.tokenize(LOGITS_PROMPT.encode("utf-8"), add_bos=False, special=True)
    llm.reset()
    llm.eval(ids)
    last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    order = np.argsort(-last, kind="stable")[:10]
    top = [{"id": int(i), "logit": sig7(last[i]),
            "piece": llm.detokenize([int(i)]).decode("utf-8", errors="replace")} for i in order]
    # Also the logits of the second-to-last position (sanity for causal masking).
    prev = np.array(llm.scores[llm.n_tokens - 2], dtype=np.float32)
    prev_order = np.argsort(-prev, kind="stable")[:10]
    print(f"logits: llama_cpp {llama_cpp.__version__}; {len(ids)} prompt tokens; "
          f"top: {[(t['id'], t['piece'], t['logit']) for t in top[:5]]}", file=sys.stderr)
    obj = {
        "model": GGUF.name,
        "prompt": LOGITS_PROMPT,
        "prompt_ids": list(map(int, ids)),
        "n_vocab": int(llm.n_vocab()),
        "n_threads": n_threads,
        "seed": 1234,
        "top_k": 10,
        "top_ids": [t["id"] for t in top],
        "top_logits": [t["logit"] for t in top],
        "top_pieces": [t["piece"] for t in top],
        "prev_position_top_ids": [int(i) for i in prev_order],
        "prev_position_top_logits": [sig7(prev[i]) for i in prev_order],
        "generator": {"llama_cpp_python": llama_cpp.__version__},
    }
    write_json(out_dir / "logits_reference.json", obj)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=["tokenizer", "embedding", "logits"])
    ap.add_argument("--out-dir", type=Path, default=ROOT / "tests" / "data")
    args = ap.parse_args()
    which = args.only or ["tokenizer", "embedding", "logits"]
    for p in ([GGUF] if {"tokenizer", "logits"} & set(which) else []) + \
             ([EMBED_DIR] if "embedding" in which else []):
        if not p.exists():
            sys.exit(f"missing {p}; run models/fetch first")
    if "tokenizer" in which:
        make_tokenizer(args.out_dir)
    if "embedding" in which:
        make_embedding(args.out_dir)
    if "logits" in which:
        make_logits(args.out_dir)


if __name__ == "__main__":
    main()
