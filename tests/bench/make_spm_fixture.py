#!/usr/bin/env python3
"""Writes tests/data/spm_vocab.gguf and tests/data/spm_tokenizer_parity.json.

A SentencePiece BPE vocabulary (1,500 pieces, byte fallback, two user-defined symbols) is
trained on the sample knowledge base (kb/, English and Chinese), written as a vocab-only
llama GGUF, and llama.cpp's tokenization of fixed strings is recorded, so Warden's
SentencePiece-from-GGUF tokenizer can be checked against llama.cpp without a large model.
Needs the reference venv (tests/bench/README.md) plus `pip install sentencepiece gguf`.
"""
import glob
import json
import os
import tempfile

import gguf
import numpy as np
import sentencepiece as spm
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GGUF_PATH = os.path.join(ROOT, "tests/data/spm_vocab.gguf")
FIXTURE_PATH = os.path.join(ROOT, "tests/data/spm_tokenizer_parity.json")
USER_DEFINED = ["<|user|>", "<|end|>"]
PLAIN_CASES = [
    "Hello world", " leading space", "Nginx returns 502 after deploy", "磁盘已满，检查 /var/log 目录",
    'fn main() { println!("hi"); }', "emoji 🚀 and café", "  two  spaces\nnew line\n\n",
    "deadlock_timeout=1s; SELECT * FROM t;", "12345 digits 3.14", "MixedCASE Words",
    "typed <s> stays text", "", "a", "连接池耗尽 connection pool exhausted", "\ttab\tseparated",
]
SPECIAL_CASES = ["<|user|>hi<|end|>", "<s>hello</s> there", "x<|user|> y"]


def train(workdir):
    corpus = os.path.join(workdir, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as out:
        for path in sorted(glob.glob(os.path.join(ROOT, "kb/**/*.*"), recursive=True)):
            out.write(open(path, encoding="utf-8", errors="ignore").read() + "\n")
    prefix = os.path.join(workdir, "spm")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, vocab_size=1500, model_type="bpe", byte_fallback=True,
        character_coverage=0.9995, user_defined_symbols=USER_DEFINED, split_digits=True)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def write_gguf(sp):
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        kind = 1
        if sp.is_unknown(i):
            kind = 2
        elif sp.is_control(i):
            kind = 3
        elif piece in USER_DEFINED:
            kind = 4
        elif sp.is_unused(i):
            kind = 5
        elif sp.is_byte(i):
            kind = 6
        tokens.append(piece)
        scores.append(sp.get_score(i))
        types.append(kind)
    writer = gguf.GGUFWriter(GGUF_PATH, "llama")
    writer.add_context_length(128)
    writer.add_embedding_length(8)
    writer.add_block_count(1)
    writer.add_feed_forward_length(8)
    writer.add_head_count(1)
    writer.add_head_count_kv(1)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(8)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_unk_token_id(sp.unk_id())
    writer.add_add_bos_token(False)
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    with tempfile.TemporaryDirectory() as workdir:
        write_gguf(train(workdir))
    llm = Llama(model_path=GGUF_PATH, vocab_only=True, verbose=False)
    cases = [{"text": t, "special": False, "ids": llm.tokenize(t.encode(), add_bos=False, special=False)}
             for t in PLAIN_CASES]
    cases += [{"text": t, "special": True, "ids": llm.tokenize(t.encode(), add_bos=False, special=True)}
              for t in SPECIAL_CASES]
    with open(FIXTURE_PATH, "w", encoding="utf-8") as out:
        json.dump({"source": "llama-cpp-python 0.3.36, vocab_only", "cases": cases}, out, ensure_ascii=False, indent=1)
    print(f"wrote {GGUF_PATH} and {FIXTURE_PATH} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
