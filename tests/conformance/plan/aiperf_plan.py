#!/usr/bin/env python3
"""The replay plan AIPerf 0.13.0 builds for a folder of Weka traces, printed
in the canonical JSON of tests/conformance/README.md, so that it compares
byte for byte with `agentreplay trace plan DIR --json`.

Run it with the python of a venv where aiperf==0.13.0 is installed:

    build/aiperf/bin/python tests/conformance/plan/aiperf_plan.py DIR \
        [--concurrency N --seed S --ratio LO HI] [-o OUT] [--corpus-size]

Everything in the plan comes out of AIPerf's own code, called here:
WekaTraceLoader (schema, subagent times, delays, chain detection and
naming, spawns, joins, prefix-hit prepass, prompt segments, the
happens-before predecessors it installs), BranchOrchestrator's child
dispatch offset, and TrajectorySource with AIPerf's SequentialSampler for
the lanes. What this script adds is reading: which turn spawns or joins a
branch, and the one comparison BranchOrchestrator.on_credit_issued makes
at run time (timing/branch_orchestrator.py:446-462: a branch starts when
its spawning root turn is sent if it began while that turn was in flight),
written out because that method needs a live credit.

The prompt builder needs a tokenizer; the plan only counts the tokens of
each prompt segment. A WordLevel tokenizer with one entry, [UNK], is built
(offline) under build/: every whitespace-separated word is one token and
decodes to one word, so the word count of a segment's text is its token
count. --corpus-size prints the token count of AIPerf's prompt corpus with
that tokenizer (synthetic tails longer than it are cut; pass it to
`trace plan --corpus-tokens`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import types
from pathlib import Path

SCHEMA = "agentreplay.agentx-plan/1"
MODEL = "plan"


def ms(x):
    """A time in ms as the plan writes it: rounded half up, None kept."""
    if x is None:
        return None
    if not math.isfinite(x):
        raise ValueError(f"non-finite time {x!r}")
    return int(math.floor(x + 0.5))


def word_tokenizer(where: Path) -> str:
    """A one-word-one-token tokenizer in `where` (made once)."""
    if not (where / "tokenizer.json").exists():
        from tokenizers import Tokenizer, models, pre_tokenizers

        where.mkdir(parents=True, exist_ok=True)
        tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.save(str(where / "tokenizer.json"))
        (where / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": "[UNK]",
            "clean_up_tokenization_spaces": False,
            "model_max_length": 1 << 30,
        }))
    return str(where.resolve())


def aiperf_run(trace_dir: str, tokenizer: str, seed: int, concurrency: int):
    from aiperf.config import BenchmarkConfig, BenchmarkRun

    cfg = BenchmarkConfig.model_validate({
        "models": [MODEL],
        "endpoint": {"urls": ["http://127.0.0.1:9/v1/chat/completions"],
                     "wait_for_model_timeout": 0},
        "datasets": [{"name": "default", "type": "file", "path": trace_dir,
                      "format": "weka_trace"}],
        "phases": [{"name": "profiling", "type": "concurrency", "duration": 1800,
                    "concurrency": max(1, concurrency)}],
        "tokenizer": {"name": tokenizer},
        "runtime": {"ui": "simple"},
    })
    return BenchmarkRun(benchmark_id="plan", cfg=cfg, artifact_dir=cfg.artifacts.dir,
                        random_seed=seed)


def load(trace_dir: str, tokenizer: str, seed: int, concurrency: int, corpus_only=False):
    """AIPerf's parsed traces and conversations, as a run loads them."""
    from aiperf.common import random_generator
    from aiperf.common.tokenizer import Tokenizer
    from aiperf.dataset.generator.corpus import resolve_prompt_generator
    from aiperf.dataset.loader.weka_trace import WekaTraceLoader
    from aiperf.plugin import plugins

    run = aiperf_run(trace_dir, tokenizer, seed, concurrency)
    random_generator.reset()
    random_generator.init(seed)
    tok = Tokenizer.from_pretrained(tokenizer)
    # The corpus a run picks for weka_trace (dataset/composer/custom.py).
    default = plugins.get_dataset_loader_metadata("weka_trace").default_prompt_corpus
    pg = resolve_prompt_generator(corpus=run.cfg.get_prompt_corpus(), default_corpus=default,
                                  tokenizer=tok)
    if corpus_only:
        return None, None, pg
    loader = WekaTraceLoader(filename=trace_dir, run=run, prompt_generator=pg)
    data = loader.load_dataset()
    return data, loader.convert_to_conversations(data), pg


def settings() -> dict:
    from aiperf.common.environment import Environment

    d, a = Environment.DATASET, Environment.AGENTX
    keys = ["WEKA_SPLIT_FLATTENED_AGENTS", "WEKA_SEAM_MAX_GAP_SECONDS",
            "WEKA_SEAM_MIN_OVERLAP_RATIO", "WEKA_AUX_MAX_REQUESTS", "WEKA_AUX_ISL_RATIO",
            "WEKA_AUX_ISL_FLOOR", "WEKA_AUX_CROSS_MODEL", "WEKA_AUX_REDUCTION_OSL_MAX",
            "WEKA_AUX_REDUCTION_RATIO", "WEKA_WORKER_GROUP_MIN", "WEKA_TOOL_SHAPED_MESSAGES"]
    out = {k: getattr(d, k) for k in keys}
    out["CONTEXT_OVERFLOW_SUBSTRINGS"] = list(a.CONTEXT_OVERFLOW_SUBSTRINGS)
    out["CONTEXT_OVERFLOW_RATE_LIMIT"] = a.CONTEXT_OVERFLOW_RATE_LIMIT
    return out


def kind_of(conv) -> str:
    if conv.parent_conversation_id is None:
        return "root"
    return "subagent" if "::sa:" in conv.session_id else "flat"


def turn_dict(trace, t) -> dict:
    from aiperf.common.enums import PrerequisiteKind

    req = trace.requests[t.source_outer_idx]
    if t.source_inner_idx is not None:
        req = req.requests[t.source_inner_idx]
    return {
        "src": [t.source_outer_idx, t.source_inner_idx],
        "t_ms": ms(t.timestamp),
        "delay_ms": ms(t.delay),
        "api_ms": ms(t.api_time_ms),
        "in": req.input_length,
        "out": req.output_length,
        "max_tokens": t.max_tokens,
        "model": t.model,
        "hash_ids": list(req.hash_ids),
        "after": [[r.conversation_id, r.turn_index] for r in t.replay_predecessors],
        "spawn": list(t.branch_ids),
        "join": [q.branch_id for q in t.prerequisites if q.kind == PrerequisiteKind.SPAWN_JOIN],
        "input_kind": None if t.input_kind is None else str(t.input_kind),
        "prefix_hit_blocks": t.theoretical_prefix_cache_hit_blocks,
        "prefix_total_blocks": t.theoretical_prefix_cache_total_blocks,
        # One word per token with word_tokenizer().
        "msgs": [[m["role"], len((m.get("content") or "").split())]
                 for m in (t.raw_messages or [])],
        "reset": bool(t.reset_context),
    }


def spawns_of(conv, by_id) -> list:
    from aiperf.common.enums import PrerequisiteKind
    from aiperf.timing.branch_orchestrator import BranchOrchestrator

    meta = conv.to_metadata()
    out = []
    for b in conv.branches:
        spawn = next(i for i, t in enumerate(conv.turns) if b.branch_id in t.branch_ids)
        join = next((i for i, t in enumerate(conv.turns)
                     if any(q.kind == PrerequisiteKind.SPAWN_JOIN and q.branch_id == b.branch_id
                            for q in t.prerequisites)), None)
        st = meta.turns[spawn]
        start = b.start_timestamp_ms
        at_issue = (st.api_time_ms is not None and st.api_time_ms > 0 and start is not None
                    and start < st.timestamp_ms + st.api_time_ms)
        origin = st.timestamp_ms if at_issue else start
        offsets = [ms(BranchOrchestrator._child_dispatch_offset_ms(
                       origin, types.SimpleNamespace(metadata=by_id[c].to_metadata())))
                   for c in b.child_conversation_ids]
        out.append({
            "id": b.branch_id, "parent": conv.session_id, "spawn_turn": spawn,
            "join_turn": join, "background": bool(b.is_background),
            "children": list(b.child_conversation_ids), "start_ms": ms(start),
            "dispatch": "issue" if at_issue else "return", "child_offsets_ms": offsets,
        })
    return out


def plan_of(trace_dir: str, data, convs) -> dict:
    from aiperf.dataset.loader import weka_trace

    by_id = {c.session_id: c for c in convs}
    roots = [c for c in convs if c.parent_conversation_id is None]
    names = {}
    for p in sorted(Path(trace_dir).glob("*.json")):
        names[json.loads(p.read_bytes())["id"]] = p.name
    traces = []
    for root in roots:
        tid = root.session_id
        trace = data[tid][0]
        # The tree: the root, then every stream reachable from its branches,
        # in the loader's order.
        reach, todo = set(), [root]
        while todo:
            for b in todo.pop().branches:
                for c in b.child_conversation_ids:
                    if c not in reach:
                        reach.add(c)
                        todo.append(by_id[c])
        streams = [root] + [c for c in convs if c.session_id in reach]
        # AIPerf's own rule, on the root's turns (weka_trace.py:703-720).
        entries = [(i, r) for i, r in enumerate(trace.requests)
                   if getattr(r, "type", None) == "subagent"]
        dropped = weka_trace._dropped_subagent_indices(weka_trace._ParentPlan(
            tid, [(t.source_outer_idx, None) for t in root.turns], entries, trace.block_size))
        stream_out = [{
            "id": c.session_id, "kind": kind_of(c), "parent": c.parent_conversation_id,
            "replay_scope": c.replay_scope_id,
            "turns": [turn_dict(trace, t) for t in c.turns],
        } for c in streams]
        starts = [t["t_ms"] for s in stream_out for t in s["turns"]]
        traces.append({
            "trace_id": tid,
            "file": names.get(tid),
            "block_size": trace.block_size,
            "tool_tokens": trace.tool_tokens,
            "system_tokens": trace.system_tokens,
            "n_requests_in_file": sum(len(r.requests) if getattr(r, "type", None) == "subagent"
                                      else 1 for r in trace.requests),
            "n_turns": len(starts),
            "t_bounds_ms": [min(starts), max(starts)] if starts else None,
            "dropped_subagents": [e.agent_id for k, (_, e) in enumerate(entries) if k in dropped],
            "streams": stream_out,
            "spawns": [s for c in streams for s in spawns_of(c, by_id)],
        })
    import aiperf

    return {
        "schema": SCHEMA,
        "aiperf_version": getattr(aiperf, "__version__", "0.13.0"),
        "settings": settings(),
        "sampler": "sequential",
        "root_order": [r.session_id for r in roots],
        "traces": traces,
    }


def lanes_of(convs, seed: int, concurrency: int, lo: float, hi: float) -> dict:
    """The initial lanes AIPerf's TrajectorySource builds for a run."""
    from aiperf.common.models import DatasetMetadata
    from aiperf.dataset.dataset_samplers import SequentialSampler
    from aiperf.plugin.enums import DatasetSamplingStrategy
    from aiperf.timing.trajectory_source import TrajectorySource

    meta = DatasetMetadata(conversations=[c.to_metadata() for c in convs],
                           sampling_strategy=DatasetSamplingStrategy.SEQUENTIAL)
    roots = [c.conversation_id for c in meta.conversations if getattr(c, "is_root", True)]
    src = TrajectorySource(dataset_metadata=meta,
                           dataset_sampler=SequentialSampler(conversation_ids=roots),
                           concurrency=concurrency, random_seed=seed, start_min_ratio=lo,
                           start_max_ratio=hi, cache_bust_enabled=True)
    turns = {c.conversation_id: c.turns for c in meta.conversations}
    lanes = []
    for i, tr in enumerate(src.trajectories):
        snap = tr.snapshot
        if snap is None:  # AIPerf's turn-count fallback; the plan has no such lane
            raise SystemExit(f"lane {i}: {tr.conversation_id} has no t* snapshot")
        states = []
        for st in snap.states:
            w = st.warmup_turn_index
            states.append({
                "stream": st.conversation_id, "next_turn": st.next_turn_index,
                "offset_ms": ms(st.next_dispatch_offset_ms),
                "waiting_on_children": st.waiting_on_children,
                "join_turn": st.join_target_turn_index, "branch": st.branch_id,
                "warmup_turn": w,
                # Unclamped: AgentX forbids the per-trace idle cap that clamps it.
                "warmup_lead_ms": None if w is None else
                ms(snap.t_star_ms - turns[st.conversation_id][w].timestamp_ms),
            })
        lanes.append({
            "lane": i, "trace_id": tr.conversation_id, "t_star_ms": ms(snap.t_star_ms),
            "states": states,
            "resume_boundaries": [[b.conversation_id, b.next_turn_index]
                                  for b in snap.replay_resume_boundaries],
        })
    return {"seed": seed, "concurrency": concurrency, "ratio": [lo, hi],
            "next_recycle_root": src.next_recycle_conversation_id(), "lanes": lanes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace_dir")
    ap.add_argument("-o", "--output", default="-")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=0,
                    help="also the initial lanes for N lanes (0: none)")
    ap.add_argument("--ratio", type=float, nargs=2, default=(0.0, 1.0), metavar=("LO", "HI"))
    ap.add_argument("--tokenizer-dir", default="build/plan-tokenizer")
    ap.add_argument("--corpus-size", action="store_true",
                    help="print the prompt corpus's token count and stop")
    a = ap.parse_args()
    # A local tokenizer folder loads without the hub (HF_HUB_OFFLINE would
    # make AIPerf look it up in the hub cache instead).
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # The serial reconstruction (the pool path gives the same bytes).
    os.environ.setdefault("AIPERF_DATASET_WEKA_PARALLEL_WORKERS", "1")
    trace_dir = str(Path(a.trace_dir).resolve())
    tok = word_tokenizer(Path(a.tokenizer_dir))
    data, convs, pg = load(trace_dir, tok, a.seed, a.concurrency, a.corpus_size)
    if a.corpus_size:
        print(pg._corpus_size)
        return 0
    plan = plan_of(trace_dir, data, convs)
    if a.concurrency > 0:
        plan["lanes"] = lanes_of(convs, a.seed, a.concurrency, a.ratio[0], a.ratio[1])
    text = json.dumps(plan, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"
    if a.output == "-":
        sys.stdout.write(text)
    else:
        Path(a.output).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
