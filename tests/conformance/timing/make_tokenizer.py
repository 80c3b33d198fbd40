#!/usr/bin/env python3
"""make_tokenizer.py: a local word-level tokenizer for AIPerf whose counts
are `agentreplay serve`'s (offline: no model hub is reachable).

The server counts one prompt token per whitespace-separated word (' ', '\\n',
'\\t', '\\r' separate words) over every message's content, and its 256-word
vocabulary is traces/prompt.c's. AIPerf counts input lengths with the
tokenizer it is given and also builds its Weka prompts by decoding token
ids drawn from a corpus it first encodes with that tokenizer (its `coding`
tool pool for weka_trace). This writes a HuggingFace `tokenizers` WordLevel
model with a WhitespaceSplit pre-tokenizer and an [UNK] token, no
normalizer and no special tokens added, so that any text is exactly as
many tokens as it has words, and decoding joins the tokens with single
spaces. Its vocabulary: [UNK], the server's words, then every word of
AIPerf's coding pool for each --seed (the pool depends only on AIPerf's
--random-seed; give the run's seed, or much of the corpus decodes to
[UNK] and distinct hash blocks come out alike).

Writes OUT/ (a plain tokenizer folder) and OUT-hf-home/, the same files as a
HuggingFace cache entry: run AIPerf with HF_HOME=OUT-hf-home HF_HUB_OFFLINE=1
--tokenizer agentreplay/wordlevel (AIPerf 0.13.0 offline resolves every name
through the hub cache, aiperf/common/tokenizer.py).

Run with AIPerf's Python (it imports aiperf to rebuild the corpus):
    build/aiperf/bin/python make_tokenizer.py --repo . --seed 1 --out build/conformance/tokenizer
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ID = "agentreplay/wordlevel"
REVISION = "0" * 40


def server_words(repo: Path) -> list:
    """The vocabulary of traces/prompt.c, without the leading spaces."""
    src = (repo / "traces" / "prompt.c").read_text()
    body = src[src.index("vocab[PROMPT_VOCAB] = {"):]
    body = body[:body.index("};")]
    words = [w.strip() for w in re.findall(r'"([^"]*)"', body)]
    if len(words) != 256:
        sys.exit(f"{repo}/traces/prompt.c: expected 256 words, found {len(words)}")
    return words


def coding_pool(seed: int) -> str:
    """AIPerf's coding tool pool text for its root seed: its own generator,
    given a tokenizer that only records what it is asked to encode."""
    from aiperf.common import random_generator as rng
    from aiperf.config.dataset.content import PromptConfig
    from aiperf.dataset.generator.coding_content import CodingContentGenerator

    class Recorder:
        block_separation_token_id = None

        def __init__(self):
            self.texts = []

        def encode(self, text, **kw):
            self.texts.append(text)
            return [0]

    rng.reset()
    rng.init(seed)
    rec = Recorder()
    CodingContentGenerator(config=PromptConfig(), tokenizer=rec)
    rng.reset()
    return "\n\n".join(rec.texts)


def build(out: Path, repo: Path, seeds: list) -> dict:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0}
    for w in server_words(repo):
        vocab.setdefault(w, len(vocab))
    for seed in seeds:
        text = coding_pool(seed)
        odd = {c for c in set(text) if c.isspace() and c not in " \n\t\r"}
        if odd:
            sys.exit(f"the coding pool of seed {seed} has whitespace the server keeps in words: {odd}")
        for w in text.split():
            vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["[UNK]"])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
        "clean_up_tokenization_spaces": False, "model_max_length": 1 << 30,
        "model_input_names": ["input_ids", "attention_mask"]}, indent=1) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps({"unk_token": "[UNK]"}) + "\n")
    home = out.parent / (out.name + "-hf-home")
    entry = home / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    if home.exists():
        shutil.rmtree(home)
    snap = entry / "snapshots" / REVISION
    snap.mkdir(parents=True)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text(REVISION)
    for f in out.iterdir():
        shutil.copy2(f, snap / f.name)
    return {"vocab": len(vocab), "seeds": seeds, "hf_home": str(home), "repo_id": REPO_ID}


CHECK = r"""
import re, sys
from aiperf.common.tokenizer import Tokenizer
t = Tokenizer.from_pretrained(sys.argv[1])
for s in ["[rid:0123456789ab]\n\n the water of", " def f(x):\n\treturn x + 1\r\n", "unseenword \u00e9t\u00e9"]:
    n = len([w for w in re.split(r"[ \n\t\r]+", s) if w])
    ids = t.encode(s)
    assert len(ids) == n, (s, len(ids), n)
    assert len(t.decode(ids).split()) == n
print("ok", t.vocab_size)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repo", type=Path, default=Path("."), help="the agentreplay checkout")
    ap.add_argument("--seed", type=int, action="append", help="AIPerf --random-seed (repeatable; 1)")
    a = ap.parse_args()
    info = build(a.out, a.repo, a.seed or [1])
    # Loaded by AIPerf's own Tokenizer the way the runs load it.
    env = {"HF_HOME": info["hf_home"], "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", CHECK, REPO_ID], env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode:
        sys.exit("the tokenizer does not load through aiperf offline:\n" + r.stderr[-2000:])
    info["check"] = r.stdout.strip()
    print(json.dumps(info))


if __name__ == "__main__":
    main()
