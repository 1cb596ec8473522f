"""``glitchlens explain``: for the glitches of a checkpoint, which components carry the bit to
the read and which ones corrupt it.

Orchestration of :func:`interp.evaluate.evaluate_reads`, :mod:`interp.circuits` and
:mod:`interp.plots`:

1. Evaluate the first ``n`` sequences of one split; every wrong read is a glitch.
2. Direct logit attribution at every read of those sequences: the mean share of each
   component, at correct reads and at glitches, through every norm of a model that
   renormalises the stream (:func:`~interp.circuits.direct_logit_attribution`); the
   components of a read add up to its logit difference (``dla_sum_error``: the largest gap).
3. *Carry the bit*: :func:`~interp.circuits.bit_flip_pairs` on up to ``pairs`` correct reads,
   evenly spaced over the evaluated ones. Every head's ``hook_z``, every MLP output and every
   mechanism hook is patched at all positions; the residual stream before each block is
   patched one position at a time, from the last write to 8 tokens after it (where the bit
   lives at each depth); and the two heads that restore most are path-patched
   (:func:`~interp.circuits.path_patching`, through the MLPs) into the heads of later layers.
4. *Corrupt it*: :func:`~interp.circuits.glitch_pairs` on up to ``pairs`` glitches (clean =
   the one-instruction edit that the model reads right), patched the same way; the first
   glitches with an instruction between their write and their read, the only ones an edit can
   pair.

An analysis that does not apply (no correct read to flip, no glitch that any edit fixes, no
residual stream in the LSTM) is skipped, its reason in ``explain.json["skipped"]``, at the top
of report.md, and on stderr from the command line.

A component *carries* (or *corrupts*) when patching it alone, at every position, restores at
least ``NAMED`` of the logit difference over the pairs (the sums' ratio); the residual stream
itself always would, so it is reported by position instead. Files in ``out_dir``:

- ``report.md``: all of it as prose, tables and the PNGs; ``explain.json``: the summary
  (:class:`Explanation`: ``carry`` and ``corrupt`` each hold ``pairs``, ``named``, ``where``,
  ``paths``; ``dla``: the three largest components per kind of read; ``dla_sum_error``;
  ``neurons``: :func:`top_neurons`; ``skipped``: the reason of each analysis skipped);
- ``glitches.csv``: the wrong reads (``read_table`` rows); ``dla.csv``: ``dla_summary`` by
  ``reads`` (correct or glitch); ``pairs.csv``: ``ReadPairs.info`` of every pair, with
  ``kind`` (carry or corrupt); ``patching.csv``: ``activation_patching`` rows with ``kind``;
  ``path_patching.csv``: ``path_patching`` rows with ``kind``;
- ``dla.png``, ``components.png`` (every component, both kinds), ``where_carry.png`` and,
  with glitches, ``where_corrupt.png`` (the stream by position).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from interp import circuits, plots
from interp.diagnose.summary import plain
from interp.evaluate import BATCH_SIZE, evaluate_reads, predict_reads
from interp.tasks import SPLITS, load_split
from interp.tasks.flipflop import split_size

NAMED = 0.5                  # restored fraction that names a component
WHERE_OFFSETS = range(0, 9)  # positions from the last write at which the stream is patched


@dataclass
class Explanation:
    """What :func:`explain` wrote: ``summary`` is explain.json; ``files`` maps each kind to its path."""

    out_dir: Path
    summary: dict
    files: dict[str, Path]

    def lines(self) -> list[str]:
        """The summary in a few lines, as ``glitchlens explain`` prints it."""
        s = self.summary
        out = [f"{s['checkpoint']} ({s['model']}), {s.get('task', 'flipflop')} task, {s['split']}, first "
               f"{s['sequences']} sequences: {s['reads']} {'reads' if 'task' not in s else 'answers'}, "
               f"{s['glitches']} glitches"]
        if not s["glitches"]:
            out.append("  no glitches in these sequences: the bit's route is traced on correct reads only")
        for kind, title in (("carry", "carry the bit"), ("corrupt", "corrupt it")):
            part = s.get(kind)
            if part is None:
                continue
            named = ", ".join(f"{c['component']} {c['restored']:.2f}" for c in part["named"]) or "none alone"
            out.append(f"{title} ({part['pairs']} pairs: {part['pairs_are']}): {named}")
            if "where" in part:
                out.append(f"  where, before each layer (position from the write): {where_text(part['where'])}")
            if part.get("paths"):
                out.append("  paths: " + ", ".join(f"{p['sender']} -> {p['receiver']} {p['input']} {p['restored']:.2f}"
                                                   for p in part["paths"]))
        if s["dla"]:
            largest = "; ".join(f"{reads}: " + ", ".join(f"{c['component']} {c['attribution']:+.2f}" for c in rows)
                                for reads, rows in s["dla"].items())
            out.append(f"direct logit attribution (the parts add up to within {s['dla_sum_error']:.1e}): {largest}")
        return out


def where_text(where: list[dict]) -> str:
    """``layer 0: write+1 0.94; layer 1: write+2 0.53, write+4 0.25`` (at most three per layer)."""
    by_layer: dict[int, list[str]] = {}
    for w in sorted(where, key=lambda w: -w["restored"]):
        by_layer.setdefault(w["layer"], []).append(f"write{w['offset']:+d} {w['restored']:.2f}")
    return "; ".join(f"layer {layer}: {', '.join(spots[:3])}" for layer, spots in sorted(by_layer.items())) or \
        "no single position restores 0.1"


def evenly_spaced(frame: pd.DataFrame, k: int) -> pd.DataFrame:
    """``k`` rows of ``frame`` spread evenly over it (all of them if it has fewer)."""
    if len(frame) <= k:
        return frame
    return frame.iloc[np.linspace(0, len(frame) - 1, k).round().astype(int)]


def trace(model, pairs: circuits.ReadPairs, components: list[str], runs: RunCounter, kind: str = "pairs"
          ) -> dict[str, pd.DataFrame]:
    """The patching of one set of pairs: every component at all positions, the stream before
    each block by position from the write, and path patching between the two heads that
    restore most and the heads of later layers. ``runs`` counts the forward passes, as
    :meth:`RunCounter.trace` planned them."""
    clean, corrupt, read = pairs.clean, pairs.corrupt, pairs.read
    streams, receivers, inputs = route(model)
    with runs.stage(f"{kind}: patching every component", runs.patching(components)):
        whole = circuits.activation_patching(model, clean, corrupt, components, reads=read)
    with runs.stage(f"{kind}: patching the stream by position", runs.patching(streams, WHERE_OFFSETS)):
        where = circuits.activation_patching(model, clean, corrupt, streams, reads=read, positions=WHERE_OFFSETS,
                                             anchor="write")
    heads = circuits.patching_summary(whole[whole.hook.str.endswith("attn.hook_z")])
    top = heads.reindex(heads.restored.abs().sort_values(ascending=False).index).head(PATH_SENDERS)
    senders = [(int(r.layer), int(r.head)) for r in top.itertuples() if r.layer < model.cfg.n_layers - 1]
    planned = path_runs(PATH_SENDERS * len(receivers), len(inputs))
    with runs.stage(f"{kind}: path patching", path_runs(len(senders) * len(receivers), len(inputs)), planned=planned):
        paths = (circuits.path_patching(model, clean, corrupt, senders, receivers, inputs, reads=read)
                 if senders and receivers else pd.DataFrame())
    return {"whole": whole, "where": where, "paths": paths}


PATH_SENDERS = 2   # the heads that restore most, path-patched into the later layers


def route(model) -> tuple[list[str], list[tuple[int, int]], list]:
    """What :func:`trace` patches besides the components: the stream before every block but the
    first, the receivers of path patching (every head after layer 0) and their input groups."""
    streams = circuits.patchable_hooks(model, ("resid_pre",))[:-1]
    receivers = [(layer, head) for layer in range(1, model.cfg.n_layers) for head in range(model.cfg.n_heads)]
    return streams, receivers, [*circuits.receiver_inputs(model, model.cfg.n_layers - 1), ("k", "v")]


def path_runs(paths: int, input_groups: int) -> int:
    """The forward passes of ``circuits.path_patching``: the clean and the corrupt run, then per
    (sender, receiver) one to record the receiver's inputs and one per input group patched."""
    return 2 + paths * (1 + input_groups) if paths else 0


class RunCounter:
    """A tqdm bar on stderr over the forward passes of an explanation, planned in advance
    (:meth:`plan`); each stage names itself, and a forward hook on the model counts them."""

    SHAPE_TOKENS = 8   # the length of the run whose cache gives every hook's shape

    def __init__(self, model, progress: bool):
        tokens = torch.zeros(1, self.SHAPE_TOKENS, dtype=torch.long, device=next(model.parameters()).device)
        _, cache = model.run_with_cache(tokens)
        self.shapes = {name: tuple(value.shape) for name, value in cache.items()}
        self.model = model
        self.bar = tqdm(total=0, desc="explain", unit="run", leave=False, disable=not progress)
        self.counting = True
        self.hook = model.register_forward_hook(self._count)

    def _count(self, *_) -> None:   # a forward hook: returning anything else would replace the output
        if self.counting:
            self.bar.update()

    def patching(self, hook_names: list[str], positions=None) -> int:
        """The forward passes of ``circuits.activation_patching`` on these hooks: the clean and
        the corrupt run, then one per head of a hook with a head axis, times one per position
        of ``positions`` for a hook with a position axis (an upper bound: positions that no pair
        reaches are skipped)."""
        total = 2
        for name in hook_names:
            shape = self.shapes[name]
            head_axis, pos_axis = circuits.hook_axes(name, shape, self.SHAPE_TOKENS, self.model.cfg.n_heads)
            total += ((shape[head_axis] if head_axis is not None else 1)
                      * (len(positions) if positions is not None and pos_axis is not None else 1))
        return total

    def trace(self, components: list[str]) -> int:
        """At most how many forward passes one :func:`trace` makes."""
        streams, receivers, inputs = route(self.model)
        return (self.patching(components) + self.patching(streams, WHERE_OFFSETS)
                + path_runs(PATH_SENDERS * len(receivers), len(inputs)))

    def plan(self, runs: int):
        self.bar.total += runs
        self.bar.refresh()

    @contextlib.contextmanager
    def stage(self, doing: str, runs: int, planned: int | None = None, counted: bool = True):
        """``doing`` makes ``runs`` forward passes (at most), where the total held ``planned``
        for it (default: ``runs``, planned in advance). ``counted=False``: its own passes are not
        counted (the evaluation runs its layers by itself), and it counts ``runs`` at its end."""
        self.plan(runs - (runs if planned is None else planned))
        self.bar.set_postfix_str(doing)
        start, self.counting = self.bar.n, counted
        yield
        self.counting = True
        self.bar.update(max(0, start + runs - self.bar.n))   # an upper bound not reached: the stage is done

    def close(self):
        self.hook.remove()
        self.bar.refresh()   # the last state is drawn, whatever tqdm's minimum interval between draws
        self.bar.close()


def named(traced: dict[str, pd.DataFrame], pairs: circuits.ReadPairs, pairs_are: str) -> dict:
    """The summary of one :func:`trace`: the components that restore at least ``NAMED``, where
    in the stream the difference lives (per layer, the positions that restore at least 0.1),
    and the paths that restore at least ``NAMED``."""
    whole = circuits.patching_summary(traced["whole"])
    where = circuits.patching_summary(traced["where"])
    paths = traced["paths"]
    paths = (circuits.patching_summary(paths, by=["sender", "receiver", "input"]) if len(paths) else paths)

    def records(frame: pd.DataFrame, columns: list[str], floor: float) -> list[dict]:
        if not len(frame):
            return []
        chosen = frame[frame.restored >= floor].sort_values("restored", ascending=False)
        return chosen[columns].to_dict("records")

    return {"pairs": len(pairs), "pairs_are": pairs_are,
            "named": records(whole, ["component", "restored"], NAMED),
            "where": records(where, ["layer", "offset", "restored"], 0.1),
            "paths": records(paths, ["sender", "receiver", "input", "restored"], NAMED)}


def dla_by_reads(model, tokens: np.ndarray, reads: pd.DataFrame, task: str | None = None
                 ) -> tuple[pd.DataFrame, float]:
    """:func:`~interp.circuits.dla_summary` at the correct reads and at the glitches, and how
    far the components of a read are from adding up to its logit difference (the largest gap
    over the reads, :func:`~interp.circuits.dla_sum_error`). ``task``: the model's by default."""
    dla = circuits.direct_logit_attribution(model, tokens, task=task)
    labels = reads[["seq", "position", "correct"]].assign(reads=np.where(reads.correct, "correct", "glitch"))
    return (circuits.dla_summary(dla.merge(labels, on=["seq", "position"]), by=["reads"]),
            circuits.dla_sum_error(dla))


NEURON_CHUNK = 8   # sequences per attribution by neuron: its frame has a row per (read, neuron)
TOP_NEURONS = 5    # the neurons named per kind of read


def top_neurons(model, tokens: np.ndarray, reads: pd.DataFrame, task: str | None = None) -> dict[str, list[dict]]:
    """The ``TOP_NEURONS`` MLP neurons of largest mean absolute direct attribution at the
    correct reads and at the glitches (``{reads: [{component, attribution, abs_attribution,
    share}]}``), from :func:`~interp.circuits.direct_logit_attribution` with ``neurons``, run
    ``NEURON_CHUNK`` sequences at a time and summed."""
    labels = reads[["seq", "position"]].assign(reads=np.where(reads.correct, "correct", "glitch"))
    sums = []
    for start in range(0, len(tokens), NEURON_CHUNK):
        frame = circuits.direct_logit_attribution(model, tokens[start:start + NEURON_CHUNK], neurons=True, task=task)
        frame = frame[frame.kind == "neuron"].assign(seq=lambda f: f.seq + start).merge(labels, on=["seq", "position"])
        frame = frame.assign(abs_attribution=frame.attribution.abs(), n=1)
        sums.append(frame.groupby(["reads", "component"], sort=False)[
            ["attribution", "abs_attribution", "logit_diff", "n"]].sum())
    total = pd.concat(sums).groupby(level=["reads", "component"], sort=False).sum()
    means = total[["attribution", "abs_attribution", "logit_diff"]].div(total.n, axis=0).reset_index()
    means["share"] = means.attribution / means.logit_diff
    return {label: group.nlargest(TOP_NEURONS, "abs_attribution")[
        ["component", "attribution", "abs_attribution", "share"]].to_dict("records")
        for label, group in means.groupby("reads")}


def _without_stream(model, out_dir: Path, summary: dict, glitches: pd.DataFrame, files: dict) -> Explanation:
    """The explanation of a model without blocks (the LSTM): its glitches, every other analysis
    skipped with the reason."""
    reason = f"the {model.cfg.model} model has no heads or residual stream to attribute or patch"
    summary["skipped"] |= {"dla": reason, "carry": reason, "corrupt": reason}
    return _write(out_dir, summary, glitches, pd.DataFrame(), files)


def _write(out_dir: Path, summary: dict, glitches: pd.DataFrame, dla: pd.DataFrame, files: dict,
           report: str | None = None) -> Explanation:
    """report.md (``report``, or flip-flop's :func:`report_markdown`) and explain.json, the last
    files of an explanation."""
    files["report"] = out_dir / "report.md"
    files["report"].write_text(report if report is not None else report_markdown(summary, glitches, dla))
    files["json"] = out_dir / "explain.json"
    summary["files"] = {kind: path.name for kind, path in files.items()}
    files["json"].write_text(json.dumps(plain(summary), indent=2, allow_nan=False) + "\n")
    return Explanation(out_dir, summary, files)


def report_markdown(summary: dict, glitches: pd.DataFrame, dla: pd.DataFrame) -> str:
    """report.md: the summary as prose and tables, with the PNGs inline."""
    s = summary
    lines = [f"# glitchlens explain: {s['checkpoint']} ({s['model']})", ""]
    if s["skipped"]:
        lines += [*(f"**Skipped: {ANALYSES[kind]}**: {reason}.  " for kind, reason in s["skipped"].items()), ""]
    lines += [f"Split `{s['split']}`, first {s['sequences']} sequences: {s['reads']} reads, "
              f"{s['glitches']} glitches.", ""]
    if not s["glitches"]:
        lines += ["No glitches in these sequences: below, only how the bit travels at correct reads.", ""]
    else:
        lines += ["| seq | read | last write | dependency | true bit | predicted |", "|---|---|---|---|---|---|"]
        lines += [f"| {r.seq} | {r.position} | {r.write_pos} | {r.dependency_length} | {r.true_bit} | {r.pred_bit} |"
                  for r in glitches.itertuples()]
        lines.append("")
    if len(dla):
        table = dla.pivot_table(index="component", columns="reads", values=["attribution", "share"], sort=False)
        kinds = list(dict.fromkeys(dla.reads))
        counts = dla.groupby("reads").n_reads.first()
        lines += ["## Direct logit attribution", "",
                  "Mean attribution of each component to logit(right bit) - logit(other bit), straight to the "
                  "unembedding, and its share of the mean logit difference. Where each block renormalises the "
                  "stream, each component is carried through every later norm with the norm's scale frozen at its "
                  "value in the run, so the components of a read add up to its logit difference (here to within "
                  f"{s['dla_sum_error']:.1e}, the largest gap over the reads).", "",
                  "| component | " + " | ".join(f"{k} ({counts[k]} reads)" for k in kinds) + " |",
                  "|---" * (len(kinds) + 1) + "|"]
        lines += [f"| {component} | " + " | ".join(
            f"{row['attribution', k]:+.3f} ({row['share', k]:.2f})" for k in kinds) + " |"
            for component, row in table.iterrows()]
        lines += ["", "![direct logit attribution](dla.png)", "",
                  f"The {TOP_NEURONS} MLP neurons of largest mean absolute attribution (neuron n of layer l writes "
                  "its activation times row n of W_out; mean attribution, mean |attribution|, share):", ""]
        lines += [f"- {reads}: " + ", ".join(f"{n['component']} {n['attribution']:+.3f} ({n['abs_attribution']:.3f}, "
                                             f"{n['share']:.2f})" for n in rows)
                  for reads, rows in s["neurons"].items()]
        lines.append("")
    for kind, title, meaning in (
            ("carry", "Which components carry the bit",
             "Pairs: a correct read, and the same sequence had its last write stored the other bit. "
             "Restored: the share of the logit difference that patching the component from the clean run into "
             "the corrupt one brings back."),
            ("corrupt", "Which components carry the glitch",
             "Pairs: a glitch, and the one-instruction edit between its write and its read that the model reads "
             "right. Restored: the share of the right answer that the component's clean value brings back.")):
        part = s.get(kind)
        if part is None:
            continue
        lines += [f"## {title}", "", meaning, "", f"{part['pairs']} pairs ({part['pairs_are']}).", "",
                  "Named (restore >= {:.1f} alone): ".format(NAMED)
                  + (", ".join(f"**{c['component']}** {c['restored']:.2f}" for c in part["named"]) or "none"), "",
                  "Where the difference lives in the stream (patched one position at a time before each layer; "
                  f"positions from the last write): {where_text(part['where'])}.", "",
                  "Paths (restore >= {:.1f}): ".format(NAMED)
                  + (", ".join(f"{p['sender']} -> {p['receiver']} ({p['input']}) {p['restored']:.2f}"
                               for p in part["paths"]) or "none"), ""]
        lines += [f"![where, {kind}](where_{kind}.png)", ""]
    if "carry" in s or "corrupt" in s:
        lines += ["## Every component, both kinds of pairs", "", "![components](components.png)", ""]
    return "\n".join(lines)


ANALYSES = {"dla": "direct logit attribution", "carry": "which components carry the bit",
            "corrupt": "which components carry the glitch"}
PAIRS_ARE = {"carry": "correct reads, their last write's bit flipped",
             "corrupt": "glitches, clean = the one-instruction edit the model reads right",
             "resample": "glitches, clean = another sequence answered right at the same position"}


def explain(checkpoint_path, out_dir, split: str | None = None, n: int = 100, pairs: int = 16,
            batch_size: int = BATCH_SIZE, device: str = "cpu", progress: bool = False,
            overwrite: bool = False, task: str | None = None) -> Explanation:
    """Explain the glitches of a checkpoint on the first ``n`` sequences of ``split`` (default:
    ``dense``) and write the files of the module docstring into ``out_dir``; ``pairs``: at most
    this many pairs of each kind. ``progress``: a bar on stderr over the forward passes
    (:class:`RunCounter`). The checkpoint's recorded task decides the data (``task``, when
    given, must be that one); a model of another task than flip-flop is explained by
    :func:`explain_task`.

    The cost is the patching: each kind of pair (correct reads, glitches) takes one forward
    pass of its ``pairs`` sequences per head of every patched hook, per position of the
    stream before each layer, and per path; a pass costs about ``pairs`` times one sequence's
    forward at the length up to its read. ``n`` costs one evaluation and one cached run."""
    from interp.diagnose import require_finite
    from interp.diagnose.task import recorded_task
    from interp.outputs import check_free, moved, staged, writable_dir
    from models import load

    task = recorded_task(checkpoint_path, task)
    if task != "flipflop":
        return explain_task(checkpoint_path, out_dir, task, split, n, pairs, batch_size, device, overwrite)
    split = split or "dense"
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: flip-flop's canonical splits are {', '.join(SPLITS)}")
    split_size(split, n)   # an n the split does not have is refused before the evaluation
    check_free(writable_dir(out_dir), ("report.md", "explain.json", "glitches.csv"), overwrite)  # before the passes

    model = require_finite(load(checkpoint_path, device=device), checkpoint_path, "attribution")
    runs = RunCounter(model, progress)
    try:
        with staged(out_dir, overwrite, ("report.md", "explain.json", "glitches.csv")) as stage:
            result = _explain(model, checkpoint_path, stage, split, n, pairs, batch_size, runs)
    finally:
        runs.close()
    return replace(result, out_dir=Path(out_dir), files=moved(result.files, stage, out_dir))


def _explain(model, checkpoint_path, out_dir: Path, split: str, n: int, pairs: int, batch_size: int,
             runs: RunCounter) -> Explanation:
    with runs.stage(f"evaluating {split}", 1, planned=0, counted=False):
        _, reads = evaluate_reads(model, [split], n, batch_size)
    tokens = load_split(split, n)[:, :-1]
    glitches = reads[~reads.correct].drop(columns="split").reset_index(drop=True)
    summary = {"checkpoint": str(checkpoint_path), "model": model.cfg.model, "split": split, "sequences": len(tokens),
               "reads": len(reads), "glitches": len(glitches), "named_at": NAMED, "dla": {}, "skipped": {}}
    files = {"glitches": out_dir / "glitches.csv"}
    glitches.to_csv(files["glitches"], index=False)
    if not hasattr(model, "blocks"):
        return _without_stream(model, out_dir, summary, glitches, files)
    components = circuits.patchable_hooks(model, ("z", "mlp_out", "mechanism"))
    paired = min(len(glitches), pairs)
    neuron_runs = -(-len(tokens) // NEURON_CHUNK)
    runs.plan(1 + neuron_runs + paired + (1 + bool(paired)) * runs.trace(components))   # DLA, pairing, the traces

    with runs.stage("direct logit attribution", 1):
        dla, summary["dla_sum_error"] = dla_by_reads(model, tokens, reads)
    with runs.stage("direct logit attribution by neuron", neuron_runs):
        summary["neurons"] = top_neurons(model, tokens, reads)
    if len(dla):
        files["dla_csv"] = out_dir / "dla.csv"
        dla.to_csv(files["dla_csv"], index=False)
        files["dla"] = plots.save(plots.dla_chart(dla, series="reads", backend="matplotlib"), out_dir / "dla.png")
        summary["dla"] = {label: group.reindex(group.attribution.abs().sort_values(ascending=False).index).head(3)[
            ["component", "attribution", "share"]].to_dict("records") for label, group in dla.groupby("reads")}

    found = {}
    if reads.correct.any():
        found["carry"] = circuits.bit_flip_pairs(tokens, evenly_spaced(reads[reads.correct], pairs))
    else:
        summary["skipped"]["carry"] = "no read of these sequences is right, so there is no correct read to flip"
        runs.plan(-runs.trace(components))
    if len(glitches):
        try:
            with runs.stage("pairing the glitches with edits read right", paired):
                # a glitch with no instruction between its write and its read has no edit to pair it with
                editable = glitches[glitches.dependency_length > 2]
                chosen = (editable if len(editable) else glitches).head(pairs)
                found["corrupt"] = circuits.glitch_pairs(model, tokens, chosen)
            summary["unpaired_glitches"] = found["corrupt"].unpaired.to_dict("records")
        except ValueError as err:   # no glitch has a partner
            summary["skipped"]["corrupt"] = str(err)
            runs.plan(-runs.trace(components))
    traced = {}
    for kind, kind_pairs in found.items():
        traced[kind] = trace(model, kind_pairs, components, runs, kind)
    for kind, parts in traced.items():
        summary[kind] = named(parts, found[kind], PAIRS_ARE[kind])
        files[f"where_{kind}"] = plots.save(plots.patching_heatmap(
            circuits.patching_summary(parts["where"]), xlabel="position from the last write",
            title=f"{kind}: restored by patching the stream at one position", backend="matplotlib"),
            out_dir / f"where_{kind}.png")
    if traced:
        files["components"] = plots.save(plots.patching_heatmap(
            pd.concat([circuits.patching_summary(parts["whole"]).assign(pairs=kind) for kind, parts in traced.items()]),
            x="pairs", title="Restored by patching one component at every position", backend="matplotlib"),
            out_dir / "components.png")
    tables = {"pairs": [kind_pairs.info.assign(kind=kind) for kind, kind_pairs in found.items()],
              "patching": [parts[part].assign(kind=kind) for kind, parts in traced.items() for part in ("whole", "where")],
              "path_patching": [parts["paths"].assign(kind=kind) for kind, parts in traced.items() if len(parts["paths"])]}
    for name, frames in tables.items():
        if frames:
            files[name] = out_dir / f"{name}.csv"
            pd.concat(frames, ignore_index=True).to_csv(files[name], index=False)
    return _write(out_dir, summary, glitches, dla, files)


def explain_task(checkpoint_path, out_dir, task_name: str, split: str | None = None, n: int = 100, pairs: int = 16,
                 batch_size: int = BATCH_SIZE, device: str = "cpu", overwrite: bool = False) -> Explanation:
    """:func:`explain` of a model of a registered task other than flip-flop, on the first ``n``
    sequences of ``split`` (default: the task's first split out of distribution, else its first):
    its glitches (wrong answers at scored positions), direct logit attribution of the task's
    margin at correct answers and at glitches, and *corrupt it*: up to ``pairs`` glitches, each
    the corrupt run of a pair whose clean run is another sequence answered right at the same
    position (:func:`interp.diagnose.circuits.partners`), every head's ``hook_z``, MLP output and
    mechanism hook patched at all positions. Flip-flop's position-by-position and path patching
    follow its write, which other tasks do not have. Files: report.md, explain.json,
    glitches.csv, dla.csv, patching.csv."""
    from interp.diagnose import require_finite
    from interp.diagnose.circuits import partners, patch_glitches
    from interp.outputs import moved, staged, writable_dir
    from interp.tasks import get_task
    from models import load

    task = get_task(task_name)
    split = split or next((name for name, s in task.splits.items() if not s.in_distribution), next(iter(task.splits)))
    tokens = task.load_split(split, min(n, task.splits[split].size) if split in task.splits else n)
    with staged(writable_dir(out_dir), overwrite, ("report.md", "explain.json", "glitches.csv")) as stage:
        model = require_finite(load(checkpoint_path, device=device), checkpoint_path, "attribution")
        inputs = task.model_io(tokens)[0]
        found = predict_reads(model, tokens, batch_size, task=task)
        correct = task.is_correct(found.predicted, found.target)
        reads = pd.DataFrame({"seq": found.sequence, "position": found.position, "target": found.target,
                              "correct": correct})
        glitches = pd.DataFrame({"seq": found.sequence, "position": found.position,
                                 "target": [task.vocab[t] for t in found.target],
                                 "predicted": [task.vocab[t] for t in found.predicted], "margin": found.margin})[~correct]
        glitches = glitches.reset_index(drop=True)
        summary = {"checkpoint": str(checkpoint_path), "model": model.cfg.model, "task": task.name, "split": split,
                   "sequences": len(tokens), "reads": len(reads), "glitches": len(glitches), "named_at": NAMED,
                   "dla": {}, "skipped": {}}
        files = {"glitches": stage / "glitches.csv"}
        glitches.to_csv(files["glitches"], index=False)
        dla = pd.DataFrame()
        if not hasattr(model, "blocks"):
            reason = f"the {model.cfg.model} model has no heads or residual stream to attribute or patch"
            summary["skipped"] |= {"dla": reason, "corrupt": reason}
        else:
            dla, summary["dla_sum_error"] = dla_by_reads(model, inputs, reads, task.name)
            summary["neurons"] = top_neurons(model, inputs, reads, task.name)
            files["dla_csv"] = stage / "dla.csv"
            dla.to_csv(files["dla_csv"], index=False)
            summary["dla"] = {label: group.reindex(group.attribution.abs().sort_values(ascending=False).index).head(3)[
                ["component", "attribution", "share"]].to_dict("records") for label, group in dla.groupby("reads")}
            chosen = glitches.head(pairs)
            partner = partners(reads, chosen)
            if not len(glitches):
                summary["skipped"]["corrupt"] = "no answer of these sequences is wrong, so there is no glitch to patch"
            elif not (partner >= 0).any():
                summary["skipped"]["corrupt"] = (f"no glitch has a partner: no other sequence of {split} is answered "
                                                 "right at a glitch's position")
            else:
                components = circuits.patchable_hooks(model, ("z", "mlp_out", "mechanism"))
                patched = patch_glitches(model, task, inputs, chosen, partner, components)
                files["patching"] = stage / "patching.csv"
                patched.assign(kind="corrupt").to_csv(files["patching"], index=False)
                whole = circuits.patching_summary(patched)
                summary["corrupt"] = {"pairs": int((partner >= 0).sum()), "pairs_are": PAIRS_ARE["resample"],
                                      "named": whole[whole.restored >= NAMED].sort_values(
                                          "restored", ascending=False)[["component", "restored"]].to_dict("records")}
        result = _write(stage, summary, glitches, dla, files, task_report_markdown(summary, glitches, dla))
    return replace(result, out_dir=Path(out_dir), files=moved(result.files, stage, out_dir))


def task_report_markdown(summary: dict, glitches: pd.DataFrame, dla: pd.DataFrame) -> str:
    """report.md of :func:`explain_task`: the glitches, the attribution and the patching."""
    s = summary
    lines = [f"# glitchlens explain: {s['checkpoint']} ({s['model']}), {s['task']} task", ""]
    lines += [f"**Skipped: {ANALYSES[kind]}**: {reason}.  " for kind, reason in s["skipped"].items()]
    lines += ["", f"Split `{s['split']}`, first {s['sequences']} sequences: {s['reads']} scored answers, "
                  f"{s['glitches']} glitches.", "", "| seq | position | right answer | predicted | margin |",
              "|---|---|---|---|---|"]
    lines += [f"| {r.seq} | {r.position} | {r.target} | {r.predicted} | {r.margin:+.3f} |"
              for r in glitches.head(50).itertuples()]
    if len(dla):
        lines += ["", "## Direct logit attribution", "",
                  "Mean attribution of each component to the task's margin (the right answer's logit minus the "
                  f"best other answer's), and its share; the parts add up to within {s['dla_sum_error']:.1e}.", "",
                  "| component | reads | attribution | share |", "|---|---|---|---|"]
        lines += [f"| {r.component} | {r.reads} | {r.attribution:+.3f} | {r.share:.2f} |" for r in dla.itertuples()]
    if "corrupt" in s:
        part = s["corrupt"]
        lines += ["", "## Which components carry the glitch", "", f"{part['pairs']} pairs ({part['pairs_are']}).",
                  "", f"Named (restore >= {NAMED:.1f} alone): "
                  + (", ".join(f"**{c['component']}** {c['restored']:.2f}" for c in part["named"]) or "none")]
    return "\n".join(lines) + "\n"
