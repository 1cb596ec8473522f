"""The ``cmd_*`` functions behind each ``glitchlens`` subcommand, each a thin layer over a
library call. Each imports what it runs, so that importing this module (as the parser does)
imports no torch.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table


def _model_overrides(args) -> dict:
    overrides = {k: getattr(args, k) for k in ("n_layers", "n_heads", "d_model", "d_mlp", "dropout", "n_ctx",
                                               "attention_impl", "norm_placement", "init", "linear_bias",
                                               "embedding_dropout", "attention_dropout", "mlp_hidden_dropout")
                 if getattr(args, k) is not None}
    options = {}
    for item in args.attn_opt or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--attn-opt expects key=value, got {item!r}")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    if options:
        overrides["attention_options"] = options
    return overrides


def cmd_data(args) -> int:
    from interp.tasks import SPLITS, TRAIN_P_I, load_split, sample_ffl, write_sequences

    if Path(args.out).exists() and not args.overwrite:
        raise ValueError(f"--out {args.out} exists; pass --overwrite to replace it")
    if args.split == "train":
        tokens = sample_ffl(args.n or 1000, args.seq_len, TRAIN_P_I, args.seed)
    elif args.seed is None:
        tokens = load_split(args.split, args.n, args.seq_len)
    else:
        split = SPLITS[args.split]
        tokens = sample_ffl(args.n or split.size, args.seq_len, split.p_i, args.seed)
    path = write_sequences(tokens, args.out)
    print(f"wrote {len(tokens)} sequences of {tokens.shape[1]} tokens to {path}")
    return 0


def train_configs(args):
    """The ``(ModelConfig, TrainConfig)`` that ``glitchlens train`` arguments describe."""
    from interp.recipes import run_configs

    recipe_fields = {k: getattr(args, k) for k in ("weight_decay", "decay_all_parameters", "warmup", "grad_clip")
                     if getattr(args, k) is not None}
    if recipe_fields.get("grad_clip") == "none":
        recipe_fields["grad_clip"] = None
    training = {**recipe_fields,
                "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "seq_len": args.seq_len,
                "loss": args.loss, "task": args.task, "mixture": args.mixture, "p_bottom": args.p_bottom,
                "regulariser": args.regulariser, "reg_coef": args.reg_coef, "reg_start": args.reg_start,
                "beta_schedule": args.beta_schedule, "beta_final": args.beta_final,
                "beta_ramp_start": args.beta_ramp_start, "beta_ramp_end": args.beta_ramp_end,
                "seed": args.seed, "data_file": args.data, "eval_every": args.eval_every, "eval_n": args.eval_n,
                "checkpoint_every": args.checkpoint_every}
    return run_configs(args.model, args.preset, args.recipe, _model_overrides(args), training)


def cmd_train(args) -> int:
    from interp.train import TrainingInterrupted, format_quick_eval, train
    from models.checkpoint import CONFIG_FILE

    model_cfg, train_cfg = train_configs(args)
    if args.resume and not (Path(args.out) / CONFIG_FILE).exists():
        print(f"glitchlens train: no checkpoint in {args.out} to resume; starting at step 0", file=sys.stderr)
    try:
        train(model_cfg, train_cfg, args.out, resume=args.resume, overwrite=args.overwrite, progress=not args.quiet,
              metadata={"command": " ".join(["glitchlens", *args.argv])}, device=args.device)
    except TrainingInterrupted as stop:
        print(stop, file=sys.stderr)
        return 130
    from models import read_config

    evaluation = read_config(args.out)["metadata"].get("evaluation")
    print(f"saved {args.out}")
    if evaluation:
        print(f"first {args.eval_n} sequences per split: " + format_quick_eval(evaluation))
    return 0


def checkpoint_dir(text: str) -> Path:
    """The checkpoint a CHECKPOINT argument names: a path that exists as given, even one named
    like a pretrained model (the user's own directory is the one meant), else the pretrained
    entry of that name."""
    from models import pretrained

    if Path(text).exists():
        return Path(text)
    if text not in pretrained.ENTRIES:
        raise ValueError(f"{text}: no such checkpoint directory, nor a pretrained model of that name "
                         f"(pretrained: {', '.join(pretrained.ENTRIES)})")
    pretrained.info(text)  # refuses an entry not built yet, saying how to build it
    return pretrained.path(text)


def cmd_eval(args) -> int:
    from interp.evaluate import BATCH_SIZE, checkpoint_task, evaluate_automaton, evaluate_splits, evaluate_tokens
    from models import load, read_config

    batch_size = args.batch_size or BATCH_SIZE
    checkpoint = checkpoint_dir(args.checkpoint)
    task = checkpoint_task(read_config(checkpoint))
    if task == "automaton" and (args.data or args.splits):
        raise ValueError(f"{args.checkpoint} was trained on the automaton task; it is evaluated on fresh automaton "
                         "sequences, so --data and --splits (flip-flop sequences) do not apply")
    if args.data and args.splits:
        raise ValueError("--data evaluates one file and --splits the canonical splits: give one of them")
    model = load(checkpoint, device=args.device)
    progress = not args.quiet
    if task == "automaton":
        result = evaluate_automaton(model, args.n or 1000, batch_size=batch_size, progress=progress)
        if args.json:
            print(json.dumps({"automaton": result}, indent=2))
            return 0
        rows = [("automaton", str(result["sequences"]), f"{100 * result['position_accuracy']:.2f}%",
                 f"{100 * result['sequence_accuracy']:.2f}%")]
        _print_table(f"{args.checkpoint} ({model.cfg.model}, automaton task)",
                     ("task", "sequences", "state accuracy", "seq accuracy"), rows)
        return 0
    if args.data:
        from interp.tasks import read_sequences

        tokens = read_sequences(args.data)[:args.n]
        results = {args.data: evaluate_tokens(model, tokens, args.data, batch_size, progress)}
    else:
        splits = [s.strip() for s in (args.splits or "iid,sparse,dense").split(",") if s.strip()]
        results = evaluate_splits(model, splits, n=args.n, batch_size=batch_size, progress=progress)
    if args.json:
        print(json.dumps({name: r.to_dict() for name, r in results.items()}, indent=2))
        return 0
    rows = [(r.split, str(r.sequences), str(r.reads), str(r.read_errors), f"{r.error_rate:.2e}",
             f"{r.error_rate_upper95:.2e}", f"{100 * r.sequence_accuracy:.2f}%") for r in results.values()]
    _print_table(f"{args.checkpoint} ({model.cfg.model})",
                 ("split", "sequences", "reads", "read errors", "error rate", "95% upper", "seq accuracy"), rows)
    return 0


def _print_table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]],
                 caption: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, caption=caption)
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def cmd_diagnose(args) -> int:
    from interp.diagnose import diagnose

    options = {"n": args.n, "lengths": args.lengths, "n_cache_sequences": args.cache_sequences, "device": args.device}
    result = diagnose(checkpoint_dir(args.checkpoint), args.out, progress=not args.quiet,
                      **{k: v for k, v in options.items() if v is not None})
    if args.json:
        print(json.dumps(result.metrics, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.checkpoint} ({result.metrics['model']}): diagnosis")
    for col in ("quantity", "value", "detail"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for row in result.summary_rows():
        table.add_row(*row, style="dim" if row[1] == "skipped" else None)
    console = Console()
    console.print(table)
    console.print(f"wrote {result.files['report']} ({result.metrics['timings_s']['total']:.1f} s); "
                  f"also {', '.join(sorted(p.name for k, p in result.files.items() if k != 'report'))}")
    return 0


def cmd_explain(args) -> int:
    from interp.explain import explain

    result = explain(checkpoint_dir(args.checkpoint), args.out, split=args.split, n=args.n, pairs=args.pairs,
                     device=args.device, progress=not args.quiet)
    print("\n".join(result.lines()))
    print(f"wrote {result.files['report']}; also {', '.join(sorted(p.name for k, p in result.files.items() if k != 'report'))}")
    return 0


def cmd_hunt(args) -> int:
    from interp.evaluate import checkpoint_task
    from interp.hunt import OVERVIEW_COLUMNS, OVERVIEW_NOTE, hunt, overview_rows, shortest_rows, write_hunt
    from models import load, read_config

    checkpoint = checkpoint_dir(args.checkpoint)
    if checkpoint_task(read_config(checkpoint)) == "automaton":
        raise ValueError(f"{args.checkpoint} was trained on the automaton task; hunt searches flip-flop sequences")
    if args.out:
        from interp.outputs import writable_dir

        writable_dir(args.out)
    model = load(checkpoint, device=args.device)
    result = hunt(model, budget=args.budget, seq_len=args.seq_len, max_len=args.max_len, p_i=args.p_i,
                  population=args.population, seed=args.seed, progress=not args.quiet)
    files = write_hunt(result, args.out) if args.out else {}
    if args.json:
        print(json.dumps(result.summary(), indent=2))
        return 0
    _print_table(f"{args.checkpoint} ({model.cfg.model}): glitch hunt, at most {args.budget} sequences per method",
                 OVERVIEW_COLUMNS, overview_rows(result), caption=OVERVIEW_NOTE)
    shortest = shortest_rows(result)
    _print_table("shortest failing sequence per error type",
                 ("type", "method", "length", "read at", "gap", "stale write at"), [row[:-1] for row in shortest])
    for error_type, method, *_, text in shortest:
        print(f"{error_type}, {method}: {text}")
    if files:
        print(f"wrote {files['json']} and {len(files) - 1} files of failing sequences; re-check one with "
              f"glitchlens eval {args.checkpoint} --data FILE")
    return 0


def cmd_reproduce(args) -> int:
    from interp import sweeps
    from interp.reproduce import SCALES, TABLE1_MODELS, reproduce_recipes, reproduce_table1
    from interp.studies import STUDIES, run_study

    models = tuple(args.models.split(",")) if args.models else TABLE1_MODELS
    scale = SCALES[args.scale] if args.steps is None else replace(SCALES[args.scale], steps=args.steps)
    sweeps.SHOW_PROGRESS = not args.quiet
    if args.what in STUDIES:
        if args.steps is not None:
            raise ValueError(f"--steps is for table1 and recipes: {args.what} fixes its runs' budgets "
                             "(interp/studies.py)")
        if args.device != "cpu":
            raise ValueError(f"--device is for table1 and recipes: {args.what} trains on the CPU "
                             "(interp/studies.py)")
        run_study(args.what, args.out, args.jobs, args.ray, train=not args.report_only)
        report = "summary.md"
    elif args.what == "recipes":
        reproduce_recipes(args.out, tuple(args.recipes.split(",")), models, args.seeds, args.jobs, scale,
                          ray_address=args.ray, device=args.device)
        report = "recipes.md"
    else:
        reproduce_table1(args.out, scale, args.seeds, args.jobs, models, train=not args.report_only,
                         ray_address=args.ray, device=args.device)
        report = "table1.md"
    print(f"wrote {args.out}/{report}")
    print((Path(args.out) / report).read_text())
    return 0


def cmd_pretrained(args) -> int:
    from interp import pretrained
    from interp.specimens import specimen
    from models.pretrained import ENTRIES

    if args.action == "list" and not Path(args.root).is_dir():
        raise ValueError(f"--root {args.root}: no such directory of pretrained entries")
    if args.action == "build":
        from interp.train import TrainingInterrupted

        names = args.names or [name for name, entry in ENTRIES.items() if not entry.gpu]
        if args.from_run and len(names) != 1:
            raise ValueError("--from-run adopts one run: name exactly one entry")
        for name in names:
            print(f"building {name}: {specimen(name, args.steps).command()}")
            try:
                built = pretrained.build(name, steps=args.steps, root=args.root, from_run=args.from_run,
                                         progress=not args.quiet)
                print(f"wrote {built}")
            except TrainingInterrupted:  # its run was in a temporary directory, now gone
                print(f"glitchlens pretrained: interrupted; {name} not written", file=sys.stderr)
                return 130
        return 0
    if args.table1:
        if args.names:
            raise ValueError("--table1 compares every built GPU specimen with the paper: give no names")
        print(pretrained.specimens_table1(args.root))
        return 0
    rows = pretrained.listing(args.root, args.names)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if args.names:
        for row in rows:
            console.print(_entry_table(row))
        return 0
    # No padding at the table's edges: every entry then fits one line of 100 columns.
    table = Table(title="pretrained models: models.load_pretrained(NAME); one in full (read accuracy, "
                        "command, seed): glitchlens pretrained list NAME", pad_edge=False)
    unbroken = ("name", "trained\n(steps, T)", "sequences right (%)\niid / sparse / dense")
    for col in ("name", "model", "layers x\nheads x\nd_model", *unbroken[1:], "beta per\nlayer", "size"):
        table.add_column(col, no_wrap=col in unbroken)
    for row in rows:
        shape = "x".join(str(row[field]) for field in pretrained.SHAPE_FIELDS)
        trained = f"{row['steps']}, T={row['seq_len']}"
        right = _sequences_right(row["accuracy"]) if row["built"] else "not built"
        beta = _betas(row["beta"]) if "beta" in row else ""
        table.add_row(row["name"], row["model"], shape, trained, right, beta,
                      f"{row['size_kb']:.0f} KB" if row["built"] else "-")
    console.print(table)
    unbuilt = [row["name"] for row in rows if not row["built"]]
    if unbuilt:  # their build commands are in `list NAME` (models.pretrained.build_command imports torch)
        console.print(f"not built: {', '.join(unbuilt)}; `glitchlens pretrained list NAME` says how to build one")
    return 0


def _betas(betas: list[float]) -> str:
    """A threshold entry's beta per layer, layer 0 first."""
    return "/".join(f"{beta:.2f}" for beta in betas)


def _sequences_right(accuracy: dict) -> str:
    """A pretrained entry's full-sequence accuracies, in percent: iid / sparse / dense, or its one other task's."""
    if set(accuracy) == {"iid", "sparse", "dense"}:
        return " / ".join(f"{100 * accuracy[split]['sequence_accuracy']:.1f}" for split in ("iid", "sparse", "dense"))
    return ", ".join(f"{split} {100 * r['sequence_accuracy']:.1f}" for split, r in accuracy.items())


def _accuracy_lines(accuracy: dict) -> str:
    """A pretrained entry's accuracy, a line per split: read (or automaton state) / full-sequence."""
    return "\n".join(f"{split}: {100 * r.get('read_accuracy', r.get('position_accuracy', 0.0)):.2f}% / "
                     f"{100 * r['sequence_accuracy']:.1f}%" for split, r in accuracy.items())


def _entry_table(row: dict) -> Table:
    """One row of ``interp.pretrained.listing``, field by field (``glitchlens pretrained list NAME``)."""
    from rich.table import Table

    from models.pretrained import build_command

    fields = {"description": row["description"], "path": row["path"]}
    if row["built"]:
        fields.update({"model": row["model"] + (f" (beta per layer: {_betas(row['beta'])})" if "beta" in row else ""),
                       "size": f"{row['size_kb']:.0f} KB", "seed": str(row["seed"]),
                       "accuracy": _accuracy_lines(row["accuracy"]) + "\n(read / full-sequence)",
                       "command": row["command"]})
    else:
        fields["built"] = f"not yet: {build_command(row['name'])}"
    table = Table(title=row["name"], show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for field, value in fields.items():
        table.add_row(field, value)
    return table


def cmd_figures(args) -> int:
    from interp.figures import make_figures

    if args.table1 is not None and not Path(args.table1).is_file():
        raise ValueError(f"--table1 {args.table1}: no such file (write one with `glitchlens reproduce table1`)")
    written = make_figures(args.out, args.only, table1_csv=args.table1, progress=not args.quiet)
    print(f"wrote {len(written)} figures (PNG, HTML, CSV each) to {args.out}; captions in "
          f"{Path(args.out) / 'captions.json'}, all of them in {Path(args.out) / 'index.md'}")
    return 0


def cmd_bench(args) -> int:
    from interp import bench

    return bench.run(args.what, args)


def cmd_check_mechanism(args) -> int:
    from interp.conformance import check_mechanism
    from models import mechanisms

    name = mechanisms.load_spec(args.mechanism) if ":" in args.mechanism else args.mechanism
    if not mechanisms.find_mechanism(name):
        raise ValueError(mechanisms.unknown_model(name))
    report = check_mechanism(name, args.device)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0 if report.passed else 1
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{name} ({report.source}) on {report.device}: conformance")
    for col in ("check", "result", "measured"):
        table.add_column(col)
    for check in report.checks:
        table.add_row(check.name, "[green]PASS[/]" if check.passed else "[bold red]FAIL[/]", escape(check.detail))
    console = Console()
    console.print(table)
    failed = [check.name for check in report.checks if not check.passed]
    console.print(f"{len(report.checks) - len(failed)} of {len(report.checks)} checks passed"
                  + (f"; failed: {', '.join(failed)}" if failed else ""), highlight=False)
    return 1 if failed else 0
