"""``glitchlens check-mechanism``: does an attention mechanism keep the contract that every tool
of GlitchLens relies on (``models.attention.base``, ``models.mechanisms``)?

:func:`check_mechanism` builds the mechanism into a small model (2 layers x 2 heads, d_model 32,
n_ctx 32, weights drawn under seed 0, eval mode) and runs these checks, each a measured number
against a tolerance:

- ``builds``: the model is built from its config, also on the meta device (as loading does);
- ``causal outputs``: changing the inputs after position 11 of a 24-token input (each layer's
  attention on random vectors) leaves the outputs at positions 0-11 unchanged;
- ``causal gradients``: the gradient of the output at position 11 reaches no later input;
- ``no weight on future keys``: ``hook_pattern`` is 0 above the diagonal;
- ``hook names and shapes``: the common hooks fire with TransformerLens's shapes (``hook_q``,
  ``hook_k``, ``hook_v``, ``hook_z`` ``[batch, pos, head, d_head]``; ``hook_attn_scores``,
  ``hook_attn_logits``, ``hook_pattern`` ``[batch, head, query_pos, key_pos]``), the mechanism's
  own hooks are named ``hook_*`` and have the batch first;
- ``pattern on the path``: zeroing ``hook_pattern`` changes ``hook_z`` (patching and ablations
  edit the weights the model uses, not a copy); whether ``z = pattern v`` exactly is reported;
- ``determinism``: two runs give the same outputs and gradients bit for bit, and two models
  built under the same seed the same weights;
- ``gradients reach every parameter``: each of the mechanism's parameters gets a finite,
  non-zero gradient from a next-token loss;
- ``half precision``: under bfloat16 autocast the logits and every gradient are finite, at the
  training length and three times it;
- ``T = 0 and 1``: an empty input gives empty logits, a one-token input the first position's;
- ``longer than training``: at three times ``n_ctx`` the logits are finite, the first 24
  positions equal the 24-token run's, the gradients are finite;
- ``fast paths agree``: each of the mechanism's ``IMPLEMENTATIONS`` besides the reference, and
  the evaluation's path through the reads only (``normalized_at``), gives the reference's
  outputs and gradients. Triton kernels run on CUDA only here (``--device cuda``).

A check that raises fails, with the exception as its detail, and the others still run.

A plug-in's check, ``check-mechanism`` as ``check-task`` (:func:`task_checks`), runs in a child
process (:func:`isolated`) with a time limit, from the import of the plug-in's module on: a
module that loops at import, a ``sample`` that sleeps, or code that ends the process
(``os._exit(0)`` at import) is a one-line error of the command, never a hang or a silent exit 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformer_lens.hook_points import HookPoint

from models import ModelConfig, build_model
from models.attention.base import COMMON_HOOKS, reference_attention

LAYERS, HEADS, D_MODEL, N_CTX = 2, 2, 32, 32
BATCH, LENGTH, SPLIT = 2, 24, 11   # inputs of LENGTH tokens; positions after SPLIT are changed
LONG = 3 * N_CTX
TOLERANCE = 1e-5        # relative: float32 results that may differ by rounding only
FAST_OUTPUTS = 1e-4     # relative RMS: a fast path's outputs against the reference's
FAST_GRADIENTS = 1e-3   # relative RMS: its gradients
# The hooks a mechanism calls itself, and whether each is per position ([batch, pos, head, d_head])
# or a map ([batch, head, query_pos, key_pos]); the base class's others (hook_result) are its own.
CALLED_HOOKS = {"hook_q": "position", "hook_k": "position", "hook_v": "position", "hook_attn_scores": "map",
                "hook_attn_logits": "map", "hook_pattern": "map", "hook_z": "position"}


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass
class ConformanceReport:
    mechanism: str
    source: str
    device: str
    checks: list[Check]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def to_dict(self) -> dict:
        return {"mechanism": self.mechanism, "class": self.source, "device": self.device, "passed": self.passed,
                "checks": [dataclasses.asdict(check) for check in self.checks]}

    def lines(self) -> list[str]:
        """The report as plain text, one line per check."""
        width = max(len(check.name) for check in self.checks)
        failed = sum(not check.passed for check in self.checks)
        return [f"{self.mechanism} ({self.source}) on {self.device}:",
                *(f"  {'PASS' if c.passed else 'FAIL'}  {c.name:<{width}}  {c.detail}" for c in self.checks),
                f"{len(self.checks) - failed} of {len(self.checks)} checks passed"]


def check_mechanism(name: str, device: str | torch.device = "cpu") -> ConformanceReport:
    """Run every check on the registered mechanism ``name`` (``models.register_mechanism``; a
    built-in model name works too) on ``device``."""
    from models.attention import get_attention_class
    from models.mechanisms import class_path

    device = torch.device(device)
    cfg = ModelConfig(model=name, n_layers=LAYERS, n_heads=HEADS, d_model=D_MODEL, n_ctx=N_CTX)
    if cfg.attention is None or cfg.pos_embed != "none":
        raise ValueError(f"{name} is not an attention mechanism alone (it has no attention, or positions in the "
                         "residual stream, which these checks assume absent): check its mechanism, e.g. nope")
    source = class_path(get_attention_class(cfg.attention))
    checks = [_run("builds", lambda: _builds(cfg))]
    if checks[0].passed:
        model = _model(cfg, device)
        tokens = torch.randint(0, cfg.d_vocab, (BATCH, LONG), generator=torch.Generator().manual_seed(1)).to(device)
        for check_name, check in CHECKS.items():
            checks.append(_run(check_name, lambda: check(model, tokens)))
            if checks[-1].detail.startswith(TIMED_OUT):   # the next checks would hang as long: not run
                checks += [Check(later, False, f"not run: {check_name} did not return") for later in
                           list(CHECKS)[list(CHECKS).index(check_name) + 1:]]
                break
    return ConformanceReport(name, source, str(device), checks)


CHECK_SECONDS = 30.0   # a check that takes longer fails (a forward that never returns), and ends the run
TIMED_OUT = "did not return within"


class CheckTimedOut(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`CheckTimedOut` in the block after ``seconds`` (SIGALRM: the main thread only;
    elsewhere no limit). A forward stuck inside one native call is interrupted when it returns."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise CheckTimedOut(f"{TIMED_OUT} {seconds:g} s (interp.conformance.CHECK_SECONDS)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


TASK_CHECK_SECONDS = 30.0   # check-task, the task's import included: every built-in task takes about a second


def isolated(function: Callable, *args, seconds: float, what: str):
    """``function(*args)`` in a child process that must return within ``seconds``; its result.

    The child is forked, so it sees the tasks and mechanisms this process registered. Whatever
    the code it runs does, this process goes on: an exception comes back as a ValueError of one
    line (a ValueError or TypeError as it was, others naming their type), and a child that runs
    past ``seconds`` (then killed) or ends without a result (``os._exit``, a crash) is a
    ValueError naming ``what``."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, function, args), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(seconds):
            raise ValueError(f"{what}: did not finish within {seconds:g} s (it loops or waits, at import or in a "
                             "check); fix it")
        try:
            kind, *message = receive.recv()
        except EOFError:
            child.join(5)
            raise ValueError(f"{what}: its process ended (exit status {child.exitcode}) without a result: the "
                             "code it imports or runs ends the process (os._exit, a crash); fix it") from None
    finally:
        if child.is_alive():
            child.kill()
        child.join()
    if kind == "result":
        return message[0]
    name, text = message
    raise ValueError(text if name in ("ValueError", "TypeError") and text else f"{what}: {name}: {text}")


def _child(send, function: Callable, args: tuple) -> None:
    if "torch" in sys.modules:   # one thread: a forked child must not enter the parent's OpenMP pool
        torch.set_num_threads(1)
    try:
        result = ("result", function(*args))
    except BaseException as err:   # a plug-in's failure, whatever it is (SystemExit too), is reported
        result = ("error", type(err).__name__, str(err).splitlines()[0] if str(err) else "")
    send.send(result)


def task_checks(spec: str) -> tuple[str, list]:
    """``check-task``'s work, for :func:`isolated`: the task ``spec`` names (a registered name or
    ``MODULE:CLASS``, imported here), and its checks (:func:`interp.tasks.contract.check_task`)."""
    from interp.tasks import get_task
    from interp.tasks.contract import check_task
    from interp.tasks.registry import resolve

    task = get_task(resolve(spec))
    return task.name, check_task(task)


def mechanism_report(spec: str, device: str) -> ConformanceReport:
    """``check-mechanism``'s work, for :func:`isolated`: the mechanism ``spec`` names (a model
    name or ``MODULE:CLASS``, imported here within :data:`CHECK_SECONDS`) and its report."""
    from models import mechanisms

    try:
        with time_limit(CHECK_SECONDS):   # a module that never finishes importing
            name = mechanisms.load_spec(spec) if ":" in spec else spec
    except CheckTimedOut as err:
        raise ValueError(f"importing {spec}: {err}") from None
    if not mechanisms.find_mechanism(name):
        raise ValueError(mechanisms.unknown_model(name))
    return check_mechanism(name, device)


def mechanism_seconds() -> float:
    """The time limit of the whole of ``check-mechanism``: the import and each check's."""
    return CHECK_SECONDS * (len(CHECKS) + 2)


def _run(name: str, check: Callable[[], tuple[bool, str]]) -> Check:
    """One check; one that raises fails, with the exception (and where it was raised) as its detail."""
    try:
        with time_limit(CHECK_SECONDS):
            passed, detail = check()
    except CheckTimedOut as err:
        return Check(name, False, str(err))
    except Exception as err:   # a mechanism's own failure, whatever it is, is what is being reported
        frame = traceback.extract_tb(err.__traceback__)[-1]
        return Check(name, False, f"raised {type(err).__name__}: {err} ({frame.filename}:{frame.lineno})")
    return Check(name, bool(passed), detail)


def _model(cfg: ModelConfig, device: torch.device, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(cfg).to(device).eval()


def _builds(cfg: ModelConfig) -> tuple[bool, str]:
    model = _model(cfg, torch.device("cpu"))
    with torch.device("meta"):
        build_model(cfg)
    own = sum(p.numel() for p in model.blocks[0].attn.parameters())
    return True, (f"{cfg.n_layers} layers x {cfg.n_heads} heads, d_model {cfg.d_model}: {own} parameters per "
                  "layer's attention")


def _inputs(model, seed: int) -> torch.Tensor:
    """Random block inputs ``[batch, LENGTH, d_model]`` on the model's device."""
    x = torch.randn(BATCH, LENGTH, model.cfg.d_model, generator=torch.Generator().manual_seed(seed))
    return x.to(model.W_E.device)


def _scale(t: torch.Tensor) -> float:
    return max(float(t.abs().max()), torch.finfo(torch.float32).tiny) if t.numel() else 1.0


def _relative_rms(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).float().pow(2).mean().sqrt() / max(float(b.float().pow(2).mean().sqrt()), 1e-30))


def _causal_outputs(model, tokens) -> tuple[bool, str]:
    before = after = scale = 0.0
    for layer, block in enumerate(model.blocks):
        x = _inputs(model, layer)
        changed = x.clone()
        changed[:, SPLIT + 1:] = _inputs(model, 100 + layer)[:, SPLIT + 1:]
        with torch.no_grad():
            a, b = block.attn(x), block.attn(changed)
        before = max(before, float((a - b)[:, :SPLIT + 1].abs().max()))
        after = max(after, float((a - b)[:, SPLIT + 1:].abs().max()))
        scale = max(scale, _scale(a))
    return before <= TOLERANCE * scale, (f"changing positions {SPLIT + 1}-{LENGTH - 1} moves the outputs at 0-{SPLIT} "
                                         f"by {before:.1e} (outputs up to {scale:.1e}), those after by {after:.1e}")


def _causal_gradients(model, tokens) -> tuple[bool, str]:
    future = past = 0.0
    for layer, block in enumerate(model.blocks):
        x = _inputs(model, layer).requires_grad_()
        block.attn(x)[:, SPLIT].square().sum().backward()
        future = max(future, float(x.grad[:, SPLIT + 1:].abs().max()))
        past = max(past, float(x.grad[:, :SPLIT + 1].abs().max()))
    return future <= TOLERANCE * past and past > 0, (
        f"gradient of position {SPLIT}'s output: up to {future:.1e} on later inputs, {past:.1e} on earlier ones")


def _cache(model, tokens):
    with torch.no_grad():
        return model.run_with_cache(tokens[:, :LENGTH])[1]


def _future_weight(model, tokens) -> tuple[bool, str]:
    cache = _cache(model, tokens)
    above = torch.ones(LENGTH, LENGTH, dtype=torch.bool, device=tokens.device).triu(1)
    worst = max(float(cache["pattern", layer][..., above].abs().max()) for layer in range(model.cfg.n_layers))
    return worst <= TOLERANCE, f"largest |hook_pattern| on a key after its query: {worst:.1e}"


def _hooks(model, tokens) -> tuple[bool, str]:
    cache = _cache(model, tokens)
    cfg, problems, own, silent = model.cfg, [], {}, set()
    for layer, block in enumerate(model.blocks):
        for name, kind in CALLED_HOOKS.items():
            expected = ((BATCH, LENGTH, cfg.n_heads, cfg.d_head) if kind == "position"
                        else (BATCH, cfg.n_heads, LENGTH, LENGTH))
            key = f"blocks.{layer}.attn.{name}"
            if key not in cache.cache_dict:
                problems.append(f"{key} never called")
            elif tuple(cache[key].shape) != expected:
                problems.append(f"{key} {list(cache[key].shape)}, expected {list(expected)}")
        for child, module in block.attn.named_modules():
            if isinstance(module, HookPoint) and not child.split(".")[-1].startswith("hook_"):
                problems.append(f"blocks.{layer}.attn.{child} is a HookPoint not named hook_*")
        for name in block.attn.hook_points():
            if name in COMMON_HOOKS:
                continue
            key = f"blocks.{layer}.attn.{name}"
            if key not in cache.cache_dict:
                silent.add(name)
            elif cache[key].ndim == 0 or cache[key].shape[0] != BATCH:
                problems.append(f"{key} {list(cache[key].shape)} has no batch dimension first")
            else:
                own[name] = list(cache[key].shape)
    detail = "; ".join(problems) if problems else f"the {len(CALLED_HOOKS)} common hooks with TransformerLens's shapes"
    detail += "; own: " + (", ".join(f"{name} {shape}" for name, shape in own.items()) or "none")
    if silent:
        detail += f"; never called here: {', '.join(sorted(silent))}"
    return not problems, detail


def _pattern_on_path(model, tokens) -> tuple[bool, str]:
    cache = _cache(model, tokens)
    changes, exact = [], 0.0
    for layer in range(model.cfg.n_layers):
        z = cache["z", layer]
        exact = max(exact, float((torch.einsum("bhqk,bkhd->bqhd", cache["pattern", layer], cache["v", layer]) - z)
                                 .abs().max()) / _scale(z))
        seen = {}
        with torch.no_grad():
            model.run_with_hooks(tokens[:, :LENGTH], fwd_hooks=[
                (f"blocks.{layer}.attn.hook_pattern", lambda a, hook: torch.zeros_like(a)),
                (f"blocks.{layer}.attn.hook_z", lambda z, hook: seen.setdefault("z", z))])
        changes.append(float((seen["z"] - z).abs().max()) / _scale(z))
    relation = "z = pattern v" if exact <= TOLERANCE else "z is not pattern v (a normalisation after it?)"
    return min(changes) > 1e-3, (f"zeroing hook_pattern changes hook_z by {', '.join(f'{c:.0%}' for c in changes)} "
                                 f"of its size (layers 0-{len(changes) - 1}); {relation}, up to {exact:.1e}")


def _loss(model, tokens: torch.Tensor) -> torch.Tensor:
    """The next-token cross-entropy of ``tokens`` (float32 whatever the autocast dtype)."""
    logits = model(tokens[:, :-1]).float()
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


def _gradients(model, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    _loss(model, tokens).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _determinism(model, tokens) -> tuple[bool, str]:
    with torch.no_grad():
        outputs = float((model(tokens[:, :LENGTH]) - model(tokens[:, :LENGTH])).abs().max())
    first, second = _gradients(model, tokens[:, :LENGTH]), _gradients(model, tokens[:, :LENGTH])
    gradients = max(float((first[k] - second[k]).abs().max()) for k in first)
    twin = _model(model.cfg, tokens.device)
    weights = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), twin.state_dict().values()))
    return outputs == 0 and gradients == 0 and weights, (
        f"two runs differ by {outputs:.1e} (outputs) and {gradients:.1e} (gradients); two builds under one seed: "
        f"{'the same weights' if weights else 'different weights'}")


def _every_parameter(model, tokens) -> tuple[bool, str]:
    grads = _gradients(model, tokens[:, :LENGTH])
    own = [name for name, _ in model.named_parameters() if ".attn." in name]
    norms = {name: float(grads[name].norm()) if name in grads else 0.0 for name in own}
    dead = [name for name, norm in norms.items() if not norm > 0]
    bad = [name for name in own if name in grads and not bool(torch.isfinite(grads[name]).all())]
    smallest = min(norms, key=norms.get)
    detail = f"{len(own) - len(dead) - len(bad)} of {len(own)} attention parameters get a finite, non-zero gradient"
    detail += f"; no gradient: {', '.join(dead)}" if dead else f" (smallest norm {norms[smallest]:.1e}: {smallest})"
    if bad:
        detail += f"; non-finite: {', '.join(bad)}"
    return not dead and not bad, detail


def _half_precision(model, tokens) -> tuple[bool, str]:
    problems, deviation = [], 0.0
    for length in (LENGTH, LONG):
        with torch.no_grad():
            full = model(tokens[:, :length])
        with torch.autocast(tokens.device.type, dtype=torch.bfloat16):
            model.zero_grad()
            logits = model(tokens[:, :length])
            F.cross_entropy(logits.float().flatten(0, 1), tokens[:, :length].flatten()).backward()
        logits = logits.detach()
        if not bool(torch.isfinite(logits).all()):
            problems.append(f"non-finite logits at T = {length}")
        problems += [f"non-finite gradient of {name} at T = {length}" for name, p in model.named_parameters()
                     if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
        deviation = max(deviation, float((logits.float() - full).abs().max()) / _scale(full))
    return not problems, "; ".join(problems) or (f"bfloat16 autocast at T = {LENGTH} and {LONG}: finite logits and "
                                                 f"gradients, logits within {deviation:.1e} of float32 (relative)")


def _short_inputs(model, tokens) -> tuple[bool, str]:
    with torch.no_grad():
        empty = model(tokens[:, :0])
        one, full = model(tokens[:, :1]), model(tokens[:, :LENGTH])
    first = float((one - full[:, :1]).abs().max()) / _scale(full)
    passed = tuple(empty.shape) == (BATCH, 0, model.cfg.d_vocab) and bool(torch.isfinite(one).all()) and \
        first <= TOLERANCE
    finite = "finite" if bool(torch.isfinite(one).all()) else "NON-FINITE"
    return passed, (f"T = 0: logits {list(empty.shape)}; T = 1: {finite} logits, {first:.1e} from the first "
                    f"position of a {LENGTH}-token run (relative)")


def _longer_than_training(model, tokens) -> tuple[bool, str]:
    with torch.no_grad():
        long, short = model(tokens), model(tokens[:, :LENGTH])
    prefix = float((long[:, :LENGTH] - short).abs().max()) / _scale(short)
    grads = _gradients(model, tokens)
    finite = bool(torch.isfinite(long).all()) and all(bool(torch.isfinite(g).all()) for g in grads.values())
    return finite and prefix <= TOLERANCE, (
        f"T = {LONG} (n_ctx {model.cfg.n_ctx}): {'finite' if finite else 'NON-FINITE'} logits and gradients; the "
        f"first {LENGTH} positions within {prefix:.1e} of the {LENGTH}-token run's (relative)")


def _fast_paths(model, tokens) -> tuple[bool, str]:
    cfg, device = model.cfg, tokens.device
    attn = model.blocks[0].attn
    configured = cfg.attention_impl
    results, passed = [], True
    try:
        with reference_attention(model):   # in eval mode too
            with torch.no_grad():
                reference = model(tokens)
            reference_grads = _gradients(model, tokens)
        covered = set()
        for setting in ("rows", "triton"):
            cfg.attention_impl = setting
            if setting == "triton" and device.type != "cuda":
                if "triton" in attn.IMPLEMENTATIONS:
                    results.append("triton not run (CUDA only here: --device cuda)")
                continue
            path = attn.implementation(device)
            if path == "reference" or path in covered:
                continue
            covered.add(path)
            with torch.no_grad():
                outputs = _relative_rms(model(tokens), reference)
            grads = _gradients(model, tokens)
            gradients = max(_relative_rms(grads[k], reference_grads[k]) for k in reference_grads)
            passed &= outputs <= FAST_OUTPUTS and gradients <= FAST_GRADIENTS
            results.append(f"{path}: outputs {outputs:.1e}, gradients {gradients:.1e}")
        cfg.attention_impl = configured
        reads = torch.arange(1, LONG, 2, device=device).expand(BATCH, -1)
        with torch.no_grad():
            at_reads = model.unembed(model.normalized_at(tokens, reads))
            full = model(tokens)
        evaluation = _relative_rms(at_reads, full.gather(1, reads[..., None].expand(-1, -1, full.shape[-1])))
        passed &= evaluation <= FAST_OUTPUTS
        results.append(f"the evaluation's reads-only path: outputs {evaluation:.1e}")
    finally:
        cfg.attention_impl = configured
    paths = sorted(set(attn.IMPLEMENTATIONS) - {"reference"})
    head = f"paths {', '.join(paths)}" if paths else "no fast path (the reference only)"
    return passed, (f"{head}; relative RMS from the reference (at most {FAST_OUTPUTS:.0e} outputs, "
                    f"{FAST_GRADIENTS:.0e} gradients): " + "; ".join(results))


CHECKS: dict[str, Callable] = {
    "causal outputs": _causal_outputs,
    "causal gradients": _causal_gradients,
    "no weight on future keys": _future_weight,
    "hook names and shapes": _hooks,
    "pattern on the path": _pattern_on_path,
    "determinism": _determinism,
    "gradients reach every parameter": _every_parameter,
    "half precision": _half_precision,
    "T = 0 and 1": _short_inputs,
    "longer than training": _longer_than_training,
    "fast paths agree": _fast_paths,
}
