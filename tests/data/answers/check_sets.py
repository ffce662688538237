#!/usr/bin/env python3
"""Check the answer-eval question sets in this folder (python3 stdlib only).

    python3 tests/data/answers/check_sets.py [-v]

For every set listed in SETS it checks:

* every line is a JSON object with a unique string "id", a non-empty "question",
  a list "answers" and a boolean "answerable"; ids are unique across all sets;
* an answerable case has 1-3 gold strings, an unanswerable one has "answers": [];
* every gold string, normalised the way the scorer normalises answers, occurs in the
  text of the KB files the set draws its answers from. Chinese golds: lowercase, drop
  punctuation and whitespace, substring match. English golds: lowercase, drop punctuation,
  drop a/an/the, match as whole tokens (a CJK character counts as a token boundary,
  so English terms inside Chinese text are whole tokens). Because "drop punctuation" glues code such as
  `pg_cancel_backend(123)` into one token, English golds are checked under two readings:
  punctuation deleted and punctuation turned into spaces. Each gold must occur under at
  least one reading, and each case must have a gold that occurs under each reading;
* no gold occurs in its own question (an answer that only echoes the question must not
  score);
* an unanswerable case lists "absent" key terms of a plausible answer, and none of
  them occurs anywhere in the set's KB_DIR (the eval ingests all of it);
* at least 80 cases, and an unanswerable share between 20% and 30%;
* each set-specific KB folder holds at most 300 KB of text.

Exit status 0 when everything passes, 1 otherwise.
"""
import html
import json
import os
import re
import string
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

# file, KB_DIR (relative to the repository root; what `warden eval answers` ingests),
# sub-folders of KB_DIR where the answers must be found, own KB folder size limit checked?
SETS = [
    ("ops-en.jsonl", "kb", ["en", "playbooks", "skills"], False),
    ("ops-zh.jsonl", "kb", ["zh"], False),
    ("debian-handbook-en.jsonl", "tests/data/answers/debian-handbook-en/kb", ["."], True),
    ("debian-handbook-zh.jsonl", "tests/data/answers/debian-handbook-zh/kb", ["."], True),
]

KB_EXTS = (".md", ".markdown", ".txt", ".html", ".htm")
MIN_CASES = 80
MAX_KB_BYTES = 300 * 1024
ARTICLES = {"a", "an", "the"}
ASCII_PUNCT = set(string.punctuation)


def is_cjk(ch):
    o = ord(ch)
    return (0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF
            or 0x20000 <= o <= 0x2FFFF)


def has_cjk(s):
    return any(is_cjk(c) for c in s)


def is_punct(ch):
    return ch in ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def norm_en(s, space=False):
    """Lowercase, drop punctuation (or turn it into spaces), drop a/an/the, collapse
    whitespace. Returns the token list. A CJK character is a token of its own, so that
    `AccessExclusiveLock` in "需要AccessExclusiveLock。" is a whole token."""
    s = s.lower()
    s = "".join((" " if space else "") if is_punct(c) else (f" {c} " if is_cjk(c) else c)
                for c in s)
    return [t for t in s.split() if t not in ARTICLES]


def norm_zh(s):
    """Lowercase, drop punctuation and whitespace."""
    return "".join(c for c in s.lower() if not (is_punct(c) or c.isspace()))


def contains_tokens(hay, needle):
    if not needle:
        return False
    n = len(needle)
    first = needle[0]
    for i, t in enumerate(hay):
        if t == first and hay[i:i + n] == needle:
            return True
    return False


def gold_in_text(gold, text):
    if has_cjk(gold):
        return norm_zh(gold) in norm_zh(text)
    return (contains_tokens(norm_en(text), norm_en(gold)) or
            contains_tokens(norm_en(text, space=True), norm_en(gold, space=True)))


def strip_html(text):
    text = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", text)
    text = re.sub(r"(?s)<[^>]+>", " ", text)
    return html.unescape(text)


def read_kb(root, subdirs):
    docs = {}
    for sub in subdirs:
        base = os.path.normpath(os.path.join(root, sub))
        for dirpath, _, files in os.walk(base):
            for f in sorted(files):
                if not f.lower().endswith(KB_EXTS):
                    continue
                p = os.path.join(dirpath, f)
                with open(p, encoding="utf-8") as fh:
                    t = fh.read()
                if f.lower().endswith((".html", ".htm")):
                    t = strip_html(t)
                docs[os.path.relpath(p, root)] = t
    return docs


class Index:
    def __init__(self, docs):
        self.docs = docs
        self.en = {k: norm_en(v) for k, v in docs.items()}
        self.en_sp = {k: norm_en(v, space=True) for k, v in docs.items()}
        self.zh = {k: norm_zh(v) for k, v in docs.items()}
        self.low = {k: v.lower() for k, v in docs.items()}

    def find_gold(self, gold):
        """Return (files where found, files where found with punctuation as spaces)."""
        if has_cjk(gold):
            g = norm_zh(gold)
            hits = [k for k, v in self.zh.items() if g and g in v]
            return hits, hits
        g = norm_en(gold)
        gs = norm_en(gold, space=True)
        return ([k for k, v in self.en.items() if contains_tokens(v, g)],
                [k for k, v in self.en_sp.items() if contains_tokens(v, gs)])

    def find_term(self, term):
        t = term.lower()
        hits = [k for k, v in self.low.items() if t in v]
        if has_cjk(term):
            g = norm_zh(term)
            hits += [k for k, v in self.zh.items() if g and g in v and k not in hits]
        else:
            g = norm_en(term)
            hits += [k for k, v in self.en.items() if contains_tokens(v, g) and k not in hits]
        return hits


def check_set(name, kb_dir, subdirs, own_kb, seen_ids, verbose):
    errors, warnings = [], []
    path = os.path.join(HERE, name)
    root = os.path.join(REPO, kb_dir)
    if not os.path.isfile(path):
        return [f"{name}: missing"], warnings, None
    if not os.path.isdir(root):
        return [f"{name}: KB_DIR {kb_dir} missing"], warnings, None
    answer_kb = Index(read_kb(root, subdirs))
    whole_kb = Index(read_kb(root, ["."]))
    if not answer_kb.docs:
        errors.append(f"{name}: no KB files under {kb_dir} {subdirs}")
    if own_kb:
        size = sum(len(t.encode("utf-8")) for t in whole_kb.docs.values())
        if size > MAX_KB_BYTES:
            errors.append(f"{name}: KB folder {kb_dir} holds {size} bytes (> {MAX_KB_BYTES})")

    cases = []
    with open(path, encoding="utf-8") as fh:
        for ln, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                c = json.loads(line)
            except json.JSONDecodeError as e:
                errors.append(f"{name}:{ln}: invalid JSON: {e}")
                continue
            if not isinstance(c, dict):
                errors.append(f"{name}:{ln}: not an object")
                continue
            cases.append((ln, c))

    questions = set()
    n_unans = 0
    for ln, c in cases:
        where = f"{name}:{ln}"
        cid = c.get("id")
        if not isinstance(cid, str) or not cid:
            errors.append(f"{where}: missing id")
        elif cid in seen_ids:
            errors.append(f"{where}: duplicate id {cid} (also {seen_ids[cid]})")
        else:
            seen_ids[cid] = where
        q = c.get("question")
        if not isinstance(q, str) or not q.strip():
            errors.append(f"{where}: missing question")
        elif q.strip().lower() in questions:
            errors.append(f"{where}: duplicate question")
        else:
            questions.add(q.strip().lower())
        answers = c.get("answers")
        answerable = c.get("answerable")
        if not isinstance(answerable, bool):
            errors.append(f"{where}: answerable must be true or false")
            continue
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            errors.append(f"{where}: answers must be a list of strings")
            continue
        if not answerable:
            n_unans += 1
            if answers:
                errors.append(f"{where}: unanswerable case with answers")
            absent = c.get("absent")
            if not isinstance(absent, list) or not absent:
                errors.append(f"{where}: unanswerable case needs 'absent' key terms")
                continue
            for term in absent:
                hits = whole_kb.find_term(term)
                if hits:
                    errors.append(f"{where}: 'absent' term {term!r} occurs in {hits[:3]}")
            continue
        if not 1 <= len(answers) <= 3:
            errors.append(f"{where}: answerable case needs 1-3 gold strings, has {len(answers)}")
        found_del = found_sp = in_source = False
        for g in answers:
            if has_cjk(g):
                n = norm_zh(g)
                if len(n) < 2:
                    errors.append(f"{where}: gold {g!r} too short")
            else:
                toks = norm_en(g)
                if not toks:
                    errors.append(f"{where}: gold {g!r} is empty after normalisation")
                    continue
                if len(toks) == 1 and len(toks[0]) <= 2 and not toks[0].isdigit():
                    warnings.append(f"{where}: gold {g!r} is a very short token")
            if gold_in_text(g, q if isinstance(q, str) else ""):
                errors.append(f"{where}: gold {g!r} already occurs in the question")
            hits, hits_sp = answer_kb.find_gold(g)
            if hits:
                found_del = True
            if hits_sp:
                found_sp = True
            if not hits and not hits_sp:
                errors.append(f"{where}: gold {g!r} not found in {kb_dir} {subdirs}")
            elif verbose and not (hits and hits_sp):
                print(f"  note: {where}: gold {g!r} found only with punctuation "
                      f"{'deleted' if hits else 'as spaces'}")
            src = c.get("source")
            anyhits = hits or hits_sp
            if src and any(h == src or h.endswith("/" + src) for h in anyhits):
                in_source = True
            if verbose:
                print(f"  {cid}: {g!r} -> {anyhits[:3]}")
        src = c.get("source")
        if src and answers and not in_source:
            warnings.append(f"{where}: no gold occurs in its source {src!r}")
        if answers and not found_del:
            errors.append(f"{where}: no gold occurs with punctuation deleted")
        if answers and not found_sp:
            errors.append(f"{where}: no gold occurs with punctuation as spaces")

    total = len(cases)
    share = n_unans / total if total else 0
    if total < MIN_CASES:
        errors.append(f"{name}: {total} cases (< {MIN_CASES})")
    if not 0.20 <= share <= 0.30:
        errors.append(f"{name}: unanswerable share {share:.1%} outside 20-30%")
    summary = (f"{name}: {total} cases, {total - n_unans} answerable, {n_unans} unanswerable "
               f"({share:.1%}), KB_DIR={kb_dir}")
    return errors, warnings, summary


def main():
    verbose = "-v" in sys.argv[1:]
    seen = {}
    all_errors = []
    for name, kb_dir, subdirs, own_kb in SETS:
        errors, warnings, summary = check_set(name, kb_dir, subdirs, own_kb, seen, verbose)
        if summary:
            print(summary)
        for w in warnings:
            print("  warning:", w)
        for e in errors:
            print("  ERROR:", e)
        all_errors += errors
    print("OK" if not all_errors else f"FAILED: {len(all_errors)} error(s)")
    return 0 if not all_errors else 1


if __name__ == "__main__":
    sys.exit(main())
