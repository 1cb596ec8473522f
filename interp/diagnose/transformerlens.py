"""The papers' attention diagnostics on any TransformerLens model, and the flip-flop paper's light-switch
evaluation (App. B.2.1, "R3") on it.

A TransformerLens model here is a ``transformer_lens.TransformerBridge`` (the TransformerLens 4 that the
project pins): :func:`load_transformerlens` boots one by name (``gpt2``, from the Hugging Face hub, which
needs a network) or from a local directory holding a Hugging Face model; any bridge built otherwise
(``TransformerBridge.boot_native`` from a configuration, as the tests do) is taken as it is.

- :func:`diagnose_transformerlens`: on the sequences of a text or token file, cut to each context length,
  per layer and head: the sparsity, the maximum weight and the generalised sink ratio on the first key
  (TDA paper Fig. 1a-c), the tail probabilities of the raw logits q.k / sqrt(d) (Table 7), the effective
  entropy and the last-row dispersion (Sec. 3, Cor. 4.7), all from :mod:`interp.metrics.attention` on the
  cached ``hook_pattern`` and ``hook_attn_scores``; heatmaps of each per-head quantity by length.
- :func:`light_switch_accuracy`: the light-switch sentences of :mod:`interp.tasks.light_switch`, a
  length-16 demonstration first, then "The light is turned": whether the model puts more weight on the
  right state (" on" / " off") than on the other, per length, with a Wilson interval.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from jaxtyping import Int
from torch import Tensor

from interp.metrics.anatomy import wilson_interval
from interp.metrics.attention import (cache_maps, entropy_summary, last_row_dispersion, max_abs_weight, sink_ratio,
                                      sparsity, tail_probabilities)
from interp.outputs import read_bytes, staged

# The per-head quantities drawn as heatmaps (layer x head, one panel per length), by metric name.
HEATMAPS = {"sparsity": "sparsity (TDA Fig. 1a)", "max_abs_weight": "maximum weight (Fig. 1b)",
            "gsink_ratio": "sink ratio on the first key (Fig. 1c)", "effective_entropy": "effective entropy",
            "last_row_dispersion": "last-row dispersion (Cor. 4.7)"}
DEFAULT_LENGTHS = (128, 256, 512, 1024)
DEFAULT_SEQUENCES = 8
FILES = ("metrics.csv", "tails.csv", "summary.json", *(f"{metric}.png" for metric in HEATMAPS))


def load_transformerlens(name_or_path: str, device: str = "cpu"):
    """A ``TransformerBridge`` of the Hugging Face model ``name_or_path`` (a hub name such as ``gpt2``, or a
    local directory with its config, weights and tokenizer), in eval mode."""
    from transformer_lens.model_bridge import TransformerBridge

    try:
        model = TransformerBridge.boot_transformers(name_or_path, device=device)
    except OSError as err:   # no network, no such model, no such directory
        raise ValueError(f"--transformerlens {name_or_path}: no model loads by that name or path "
                         f"({str(err).splitlines()[0]}); a hub name needs a network, a directory a Hugging Face "
                         "model saved with save_pretrained") from None
    return model.eval()


def read_token_file(model, path: str | Path, seq_len: int, n: int) -> Int[Tensor, "batch pos"]:
    """``[n', seq_len]`` token ids, ``n' <= n``: a ``.txt`` file read as one text, tokenized by the model's
    tokenizer and cut into consecutive windows, or a ``.jsonl`` file of ``{"tokens": [...]}`` lines (what
    ``glitchlens data`` writes), each line's first ``seq_len`` tokens. A file too short for one window of
    ``seq_len`` tokens is refused in one line."""
    path = Path(path)
    text = read_bytes(path, "token file").decode("utf-8", errors="replace")
    if path.suffix == ".jsonl":
        rows = [json.loads(line)["tokens"] for line in text.splitlines() if line.strip()]
        rows = [row[:seq_len] for row in rows if len(row) >= seq_len][:n]
        tokens = torch.tensor(rows, dtype=torch.long).reshape(len(rows), seq_len)
    elif path.suffix == ".txt":
        stream = model.to_tokens(text, prepend_bos=False, truncate=False)[0]
        windows = min(n, len(stream) // seq_len)
        tokens = stream[:windows * seq_len].reshape(windows, seq_len)
    else:
        raise ValueError(f"{path}: give a .txt text or a .jsonl token file")
    if not len(tokens):
        raise ValueError(f"{path}: holds no sequence of {seq_len} tokens; give a longer file or shorter --lengths")
    if int(tokens.max()) >= model.cfg.d_vocab:
        raise ValueError(f"{path}: token id {int(tokens.max())} is outside the model's vocabulary of "
                         f"{model.cfg.d_vocab}")
    return tokens


def attention_frames(model, tokens: Int[Tensor, "batch pos"]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-head frame (sparsity, maximum weight, sink ratio on key 0, effective entropy, last-row
    dispersion) and the Table 7 tails of one run of ``tokens`` through ``model``."""
    wanted = ("attn.hook_pattern", "attn.hook_attn_scores")
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens.to(model.cfg.device), names_filter=lambda name: name.endswith(wanted))
    patterns = {layer: a.float().cpu() for layer, a in cache_maps(cache, "pattern").items()}
    # TransformerLens's hook_attn_scores: q.k / sqrt(d_head), rotated where the model rotates, masked above
    # the diagonal, which tail_probabilities never reads
    scores = {layer: s.float().cpu() for layer, s in cache_maps(cache, "attn_scores").items()}
    sink = sink_ratio(patterns, key_pos=[0])
    per_head = pd.concat([sparsity(patterns), max_abs_weight(patterns), sink[sink.metric == "gsink_ratio"],
                          entropy_summary(patterns), last_row_dispersion(patterns)], ignore_index=True)
    return per_head, tail_probabilities(scores)


def diagnose_transformerlens(model, tokens: Int[Tensor, "batch pos"], lengths: list[int], out: str | Path,
                             overwrite: bool = False) -> dict:
    """The diagnostics of the module docstring on ``tokens [batch, pos]`` cut to each of ``lengths``,
    written into ``out`` (``metrics.csv``: one row per length, layer, head and metric; ``tails.csv``;
    ``summary.json``: each metric's mean over heads by layer and length; a heatmap per metric). Returns
    the summary."""
    lengths = sorted(set(lengths))
    if lengths[-1] > tokens.shape[1] or lengths[-1] > model.cfg.n_ctx:
        raise ValueError(f"--lengths up to {lengths[-1]}: the sequences have {tokens.shape[1]} tokens and the "
                         f"model a context of {model.cfg.n_ctx}; ask for at most "
                         f"{min(tokens.shape[1], model.cfg.n_ctx)}")
    per_head, tails = [], []
    for T in lengths:
        heads, tail = attention_frames(model, tokens[:, :T])
        per_head.append(heads)
        tails.append(tail)
    per_head, tails = pd.concat(per_head, ignore_index=True), pd.concat(tails, ignore_index=True)
    by_layer = per_head.groupby(["metric", "seq_len", "layer"])["value"].mean()
    summary = {"model": getattr(model.cfg, "model_name", "?"), "sequences": int(tokens.shape[0]),
               "lengths": lengths,
               "by_layer": {metric: {str(T): by_layer[metric][T].round(6).tolist() for T in lengths}
                            for metric in HEATMAPS},
               "tails": tails[["layer", "seq_len", "k", "value", "low", "high", "gaussian"]].round(8)
               .to_dict(orient="records")}
    with staged(out, overwrite, FILES) as stage:
        per_head.to_csv(stage / "metrics.csv", index=False)
        tails.to_csv(stage / "tails.csv", index=False)
        (stage / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        for metric, title in HEATMAPS.items():
            heatmaps(per_head[per_head.metric == metric], title, stage / f"{metric}.png")
    return summary


def heatmaps(frame: pd.DataFrame, title: str, path: Path) -> None:
    """One panel per length: the metric by layer (rows) and head (columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted(frame.seq_len.unique())
    fig, axes = plt.subplots(1, len(lengths), figsize=(2.6 * len(lengths) + 1, 2.8), squeeze=False)
    low, high = frame.value.min(), frame.value.max()
    for ax, T in zip(axes[0], lengths):
        grid = frame[frame.seq_len == T].pivot_table(index="layer", columns="head", values="value")
        image = ax.imshow(grid.to_numpy(), aspect="auto", cmap="viridis", vmin=low, vmax=high)
        ax.set(title=f"T = {T}", xlabel="head", ylabel="layer")
    fig.colorbar(image, ax=axes[0].tolist())
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def light_switch_accuracy(model, lengths: list[int], n: int = 500, seed: int = 0) -> pd.DataFrame:
    """The flip-flop paper's R3 protocol (App. B.2.1) on ``model``: for each length, ``n`` light-switch
    sequences of that many sentences (:mod:`interp.tasks.light_switch`), each after one length-16
    demonstration of its own, the last sentence cut to "The light is turned"; a sequence is right when
    the model's logit of the right state's first token (" on" or " off") is above the other's. Columns
    ``length``, ``sequences``, ``right``, ``accuracy``, ``low``, ``high`` (the 95% Wilson interval)."""
    from interp.tasks.light_switch import DEMONSTRATION_LENGTH, STATE_WORDS, LightSwitchTask

    task = LightSwitchTask()
    states = [model.to_tokens(word, prepend_bos=False)[0] for word in STATE_WORDS]
    if len(states[0]) < 1 or len(states[1]) < 1 or states[0][0] == states[1][0]:
        raise ValueError(f"the tokenizer gives {STATE_WORDS} no two distinct first tokens to compare")
    first = torch.stack([state[0] for state in states])   # [off, on]
    rows = []
    for length in lengths:
        rng = np.random.default_rng([seed, length])
        demos = task.sample(n, DEMONSTRATION_LENGTH, rng)
        tests = task.sample(n, length, rng)
        right = 0
        for demo, test in zip(demos, tests):
            prompt, answer = task.prompt(demo, test)
            tokens = model.to_tokens(prompt)
            if tokens.shape[1] > model.cfg.n_ctx:
                raise ValueError(f"length {length}: the prompt takes {tokens.shape[1]} tokens, more than the "
                                 f"model's context of {model.cfg.n_ctx}; ask for shorter lengths")
            with torch.no_grad():
                logits = model(tokens.to(model.cfg.device))[0, -1].float().cpu()
            right += int(logits[first].argmax()) == answer
        low, high = wilson_interval(right, n)
        rows.append({"length": length, "sequences": n, "right": right, "accuracy": right / n,
                     "low": float(low), "high": float(high)})
    return pd.DataFrame(rows)


def transformerlens_model(args):
    """The model ``--transformerlens`` names, given alone (no CHECKPOINT beside it)."""
    if not args.transformerlens:
        raise ValueError("--task light-switch and --tokens measure a TransformerLens model: give --transformerlens "
                         "NAME_OR_PATH")
    if args.checkpoint is not None:
        raise ValueError(f"give a CHECKPOINT ({args.checkpoint}) or --transformerlens, not both")
    return load_transformerlens(args.transformerlens, device=args.device or "cpu")


def diagnose_command(args) -> int:
    """``glitchlens diagnose --transformerlens NAME_OR_PATH --tokens FILE --out DIR``."""
    if not args.tokens:
        raise ValueError("--transformerlens: give --tokens FILE, the .txt text or .jsonl token file to measure on")
    lengths = args.lengths or DEFAULT_LENGTHS
    model = transformerlens_model(args)
    tokens = read_token_file(model, args.tokens, max(lengths), args.n or DEFAULT_SEQUENCES)
    summary = diagnose_transformerlens(model, tokens, lengths, args.out, overwrite=args.overwrite)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{args.transformerlens}: {summary['sequences']} sequences at T = {', '.join(map(str, lengths))}; "
          "mean over heads, by layer")
    for metric in HEATMAPS:
        for T, values in summary["by_layer"][metric].items():
            print(f"{metric:<20} T = {T:>5}: " + " ".join(f"{v:.4f}" for v in values))
    print(f"wrote {', '.join(FILES)} in {args.out}")
    return 0


def eval_command(args) -> int:
    """``glitchlens eval --transformerlens NAME_OR_PATH --task light-switch``: accuracy per length."""
    if args.task != "light-switch":
        raise ValueError(f"--transformerlens is evaluated on --task light-switch (the flip-flop paper's test of "
                         f"language models), not {args.task!r}")
    from interp.tasks.light_switch import LENGTHS, SEQUENCES_PER_LENGTH

    model = transformerlens_model(args)
    frame = light_switch_accuracy(model, args.lengths or list(LENGTHS), args.n or SEQUENCES_PER_LENGTH)
    if args.json:
        print(frame.to_json(orient="records", indent=2))
        return 0
    print(f"{args.transformerlens}: light switch, a length-16 demonstration then 'The light is turned'")
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0
