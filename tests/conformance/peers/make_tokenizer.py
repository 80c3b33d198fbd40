#!/usr/bin/env python3
"""make_tokenizer.py: a local Hugging Face tokenizer that counts as
`agentreplay serve` counts: one token per word, words separated by space,
tab, CR or LF (traces/prompt.c, prompt_blocks_text), with the ids the
server's /tokenize gives (0 "<|endoftext|>", 1 "unk" for any other word,
2.. the 256 words of traces/prompt.c's vocabulary, in order), so that
AIPerf, GuideLLM and `vllm bench serve` run offline against the server
and their token counts are the server's.

    PYTHON make_tokenizer.py OUT_DIR [--prompt-c traces/prompt.c]

Writes OUT_DIR/tokenizer/ (tokenizer.json: WordLevel over WhitespaceSplit,
no post-processor; tokenizer_config.json with a chat template joining the
message contents with spaces, as the server joins them; a config.json)
and OUT_DIR/hf_home/hub/models--local--agentreplay-words/ (the same files
as a hub cache entry: AIPerf resolves tokenizers through
huggingface_hub.snapshot_download in offline mode, which refuses a
directory path, aiperf/common/tokenizer.py). Use it with
HF_HOME=OUT_DIR/hf_home HF_HUB_OFFLINE=1 --tokenizer local/agentreplay-words.
Needs the `tokenizers` package (every peer venv has it).
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import sys

EOS, UNK, REPO = "<|endoftext|>", "unk", "local/agentreplay-words"


def server_words(prompt_c):
    src = open(prompt_c, encoding="utf-8").read()
    m = re.search(r"vocab\[PROMPT_VOCAB\]\s*=\s*\{(.*?)\};", src, re.S)
    if not m:
        sys.exit(f"{prompt_c}: no vocab[PROMPT_VOCAB] table")
    words = [w.strip() for w in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))]
    if len(words) != 256 or len(set(words)) != 256 or any(not w or " " in w for w in words):
        sys.exit(f"{prompt_c}: expected 256 distinct words, found {len(words)}")
    return words


def build(out, words):
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {EOS: 0, UNK: 1}
    for w in words:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.add_special_tokens([AddedToken(EOS, special=True, normalized=False)])
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    template = ("{% for m in messages %}{% if m['content'] is string %}{{ m['content'] }} "
                "{% else %}{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }} "
                "{% endif %}{% endfor %}{% endif %}{% endfor %}")
    big = 1 << 20
    files = {
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": big,
            "eos_token": EOS, "bos_token": EOS, "pad_token": EOS, "add_bos_token": False,
            "add_eos_token": False, "clean_up_tokenization_spaces": False, "chat_template": template,
            "added_tokens_decoder": {"0": {"content": EOS, "lstrip": False, "normalized": False,
                                           "rstrip": False, "single_word": False, "special": True}}},
        "special_tokens_map.json": {"eos_token": EOS, "bos_token": EOS, "pad_token": EOS},
        # No weights: enough for AutoConfig and max_model_len look-ups.
        "config.json": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                        "vocab_size": len(vocab), "n_positions": big, "max_position_embeddings": big,
                        "n_embd": 64, "n_layer": 1, "n_head": 1, "bos_token_id": 0, "eos_token_id": 0},
        "generation_config.json": {"bos_token_id": 0, "eos_token_id": 0},
    }
    for name, obj in files.items():
        with open(os.path.join(out, name), "w") as f:
            json.dump(obj, f, indent=1)
    return tok


def hub_entry(src, hf_home):
    org, name = REPO.split("/")
    repo = os.path.join(hf_home, "hub", f"models--{org}--{name}")
    files = sorted(os.listdir(src))
    h = hashlib.sha1()
    for f in files:
        h.update(f.encode() + open(os.path.join(src, f), "rb").read())
    snap = os.path.join(repo, "snapshots", h.hexdigest())
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(snap)
    os.makedirs(os.path.join(repo, "refs"))
    for f in files:
        shutil.copy(os.path.join(src, f), snap)
    with open(os.path.join(repo, "refs", "main"), "w") as r:
        r.write(h.hexdigest())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--prompt-c", default="traces/prompt.c")
    a = ap.parse_args()
    words = server_words(a.prompt_c)
    tdir = os.path.join(a.out, "tokenizer")
    tok = build(tdir, words)
    ids = tok.encode(" ".join(words[:3]) + "  zebra\tit's\n").ids
    assert ids == [2, 3, 4, 1, 1], ids  # one id per word, the server's ids
    hub_entry(tdir, os.path.join(a.out, "hf_home"))
    print(f"{tdir}: {tok.get_vocab_size()} ids; HF_HOME={a.out}/hf_home --tokenizer {REPO}")


if __name__ == "__main__":
    main()
