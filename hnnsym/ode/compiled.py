"""The implicit stage solve as one compiled program: the "extrapolate" predictor, k fixed-point
sweeps K <- F(K, y) of the stage equations and the max-norm change of each sweep, traced by
``torch.compile`` (inductor, static shapes, one graph) so that the host reads convergence once per
k sweeps (``sweeps``), or m whole steps of planned sweeps each, the first converged iterate of
each step selected on the device (``steps``). Used by ``RungeKutta`` built with ``compile=True``
(config ``integrator.compile=true``).
With such an integrator the symplectic adjoint's backward compiles its direct solve over a chunk
of steps as well (``chunk``: H's closed-form linearisation, the adjoint matrices and the chunk's
λ recursion and parameter gradient, one program per chunk length).

f is the eager field traced, closed forms and all: the MLP Hamiltonians' ∇H as plain
feature-major ops (``mlp_gradient``; its hand-written backward is for eager code), whose backward
AOT autograd derives; only an H without a closed-form ∇H takes it by ``torch.func.grad`` in grad
mode. Either equals the eager field to rounding. A model with a field of its own (``OWN_FIELD``)
is traced as it is.

On CUDA, a program replays as CUDA graphs (``uses_cuda_graphs``), in grad mode too.

Each compiled function belongs to one structure of H (``_structure``: its modules' types and
plain-data attributes, its tensors' names and shapes), tableau, h and grad mode, and dynamo checks
only its tensors on each call (dtype, device, shape, strides, requires_grad; another shape
compiles another graph). Models of one structure, such as the runs of a sweep in one process,
share the functions, each with its own weights as the graph's inputs. An H whose attributes are
not plain data (a function, a hook) has functions of its own. H's structure is read on its
first call: a change to its Python attributes after that is not seen. Inputs that share memory
are cloned first.

Inductor's FX graph cache and AOT autograd cache live on disk, in ``$HNNSYM_COMPILE_CACHE`` or,
when unset, ``$TORCHINDUCTOR_CACHE_DIR`` or ``~/.cache/hnnsym/inductor`` (``$XDG_CACHE_HOME``
respected), and so do whole programs, Dynamo's trace included (``_Program``, in
``programs_dir()``, where torch can save them: ``programs_on_disk``): only a machine's first run
pays the full compile, and a later process loads a program without tracing it. Inductor's check
of the CPU's vector instructions runs once per machine, not in every process, its verdict kept in
the same cache (``_check_vector_instructions``). The cache holds code that is loaded and run
(inductor's compiled modules, pickled programs): it is this user's own, like the source tree,
never a file handed in.
Where compilation fails (no C compiler, an unsupported platform, a ``torch._dynamo`` error, or the
backward graph, which is compiled on its first use and so is checked by one backward pass on a
program's first call in grad mode) one line is logged, once per process, and this and every later
solve runs eagerly (``sweeps`` returns None).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import math
import os
import platform
import shutil
import sys
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.dynamics import hamiltonian_flow, symplectic_gradient, vector_field

log = logging.getLogger(__name__)
CACHE_ENV = "HNNSYM_COMPILE_CACHE"

_state: dict[str, Any] = {"failed": False, "chunk_failed": False, "configured": False,
                          "unsaved": False}  # fmt: skip
# {(function, tableau, h, n_q, k or plan, guesses, grad mode, H.training): program} (no guess:
# RK2, whatever the integrator's predictor; ``_steps``: "extrapolate" only),
# per structure of H (``_structure``), or H's own where its structure is not plain data;
# ``_models``: per H (weakly), the programs it uses and its modules, read on its first call
_shared: dict[tuple, dict] = {}
_models: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_serial = itertools.count()


def cache_dir() -> Path:
    """Where inductor keeps compiled graphs across processes. A ``$TORCHINDUCTOR_CACHE_DIR``
    equal to inductor's own default (a folder under /tmp, which inductor writes into the
    environment once imported) counts as unset."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    theirs = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if theirs and os.path.abspath(theirs) != os.path.abspath(default_cache_dir()):
        return Path(theirs).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hnnsym" / "inductor"


def programs_dir() -> Path:
    """Where compiled programs are kept across processes (``_Program``)."""
    return cache_dir() / "programs"


def _configure_cache() -> None:
    """Inductor's FX graph cache and AOT autograd cache on, in ``cache_dir()``, and its check of
    the CPU's vector instructions once per machine (``_check_vector_instructions``)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir())
    inductor_config.fx_graph_cache = True
    functorch_config.enable_autograd_cache = True
    _check_vector_instructions(cache_dir() / "vector_instructions")


def _check_vector_instructions(records: Path) -> None:
    """Inductor checks each vector instruction set the CPU declares (AVX-512, AVX2, ...) by
    building a test library and loading it in a child process, once per set in every process
    that runs a C++ program: about 0.9 s of a Table 1 run's 10 s. Here the check runs once per
    machine (``_machine_key``: its CPU's flags, the C++ compiler, torch and Python) and its
    verdict is kept in ``records``, as the name of an empty file (``<key>.all-passed`` or
    ``<key>.some-failed``: made whole or not at all). Where every declared set passed,
    inductor's ``cpp.vec_isa_ok`` is set, which trusts the CPU's flags, in the process that
    checked as in every later one: the setting is part of inductor's cache keys, so all of them
    compile and look up the same programs. Where a declared set failed, the setting is left
    unset and each process checks again. A ``TORCHINDUCTOR_VEC_ISA_OK`` of the user's is left
    as it is."""
    import torch._inductor.config as inductor_config
    from torch._inductor import cpu_vec_isa

    if inductor_config.cpp.vec_isa_ok is not None:
        return
    key = _machine_key()
    passed, failed = records / f"{key}.all-passed", records / f"{key}.some-failed"
    if passed.exists() or failed.exists():
        all_passed = passed.exists()
    else:
        checked = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]  # inductor's check
        with inductor_config.patch({"cpp.vec_isa_ok": True}):
            declared = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list.__wrapped__()]
        all_passed = checked == declared
        with contextlib.suppress(OSError):  # a cache that cannot be written: check next time
            records.mkdir(parents=True, exist_ok=True)
            (passed if all_passed else failed).touch()
    if all_passed:
        inductor_config.cpp.vec_isa_ok = True


def _machine_key() -> str:
    """What inductor's check of the vector instructions depends on: the CPU's flags, the C++
    compiler it builds with (its path, size and time), torch's version and the Python that loads
    the libraries."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    flags = platform.processor()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next(
                (line for line in cpuinfo if line.startswith(("flags", "Features"))), flags
            )
    try:
        compiler = get_cpp_compiler()
    except Exception:  # noqa: BLE001  (none found: the compile fails there, with its own notice)
        compiler = ""
    compiler = shutil.which(compiler) or compiler
    with contextlib.suppress(OSError):
        stat = os.stat(compiler)
        compiler = f"{os.path.realpath(compiler)} {stat.st_size} {stat.st_mtime_ns}"
    text = repr((flags, compiler, torch.__version__, sys.executable, platform.machine()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _field(H: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """f(y) as traceable ops: ``vector_field`` as eager code runs it, H's closed-form ∇H included
    (traced as plain ops: ``mlp_gradient``); in grad mode, for an H without a closed form
    (``energy_gradient`` absent or None), J⁻¹ ∇H with ∇H by ``torch.func.grad``."""
    if not hamiltonian_flow(H) or not torch.is_grad_enabled():
        return lambda y: vector_field(H, y)
    grad = torch.func.grad(lambda x: H(x).sum())

    def field(y: Tensor) -> Tensor:
        closed = H.energy_gradient(y) if has(H, Capability.ENERGY_GRADIENT) else None
        return symplectic_gradient(grad(y) if closed is None else closed)

    return field


def _sweeps(integrator, H, y: Tensor, guess: tuple[Tensor, ...], h: float, n_q: int,
            k: int) -> tuple[list[Tensor], Tensor]:  # fmt: skip
    """From the first guess K₀, the iterates K₁ … K_k (s, B, n) each and max|K_j − K_{j−1}| of
    each sweep, (k,). ``guess``: the last three steps' stages (a, b, c), oldest first, for the
    "extrapolate" predictor K₀ = a + 3 (c − b) (b = c = 0 passes a guess through exactly), or
    () for the integrator's own guess without history (``RungeKutta._predict``: the slope of
    explicit RK2 in every stage, as on a run's first step)."""
    f = _field(H)
    if guess:
        K = integrator.extrapolate(guess)
    else:
        K = integrator._predict(f, y, h, None, ())
    iterates, changes = [], []
    for _ in range(k):
        new = integrator.stage_equations(f, y, K, h, n_q)
        changes.append(torch.linalg.vector_norm(new - K, math.inf))
        iterates.append(new)
        K = new
    return iterates, torch.stack(changes)


def _steps(integrator, H, y: Tensor, guess: tuple[Tensor, ...], h: float, n_q: int,
           plan: tuple[tuple[int, ...], float]) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """m steps from y, step j running ``sweeps[j]`` sweeps, ``plan`` = (sweeps, tol): the states
    y_1 … y_m stacked, (m, B, n), the stages K_1 … K_m, (m, s, B, n), and per step, float64,
    (m, 2): the sweeps it took and |h| max|ΔK| of its last. Each step's guess is the
    "extrapolate" predictor over the steps before it (``guess``: the stages of the up to three
    steps before y, oldest first; none: RK2), and its stages are the first sweep's iterate with
    |h| max|ΔK| <= tol (a comparison in float64, as the host makes it), selected on the device:
    so a step equals the eager iteration that stops there. A step that met the tolerance in none
    of its sweeps makes it and the steps after it void (the caller steps it again)."""
    f = _field(H)
    history = list(guess)
    states, stages, info = [], [], []
    for sweeps in plan[0]:
        K = integrator._predict(f, y, h, None, history)
        chosen = None
        for j in range(sweeps):
            new = integrator.stage_equations(f, y, K, h, n_q)
            residual = torch.linalg.vector_norm(new - K, math.inf).double() * abs(h)
            met = torch.logical_not(residual > plan[1])  # NaN stops too, as on the host
            if chosen is None:
                chosen, taken, last, done = new, torch.ones_like(residual), residual, met
            else:
                chosen = torch.where(done, chosen, new)
                taken = torch.where(done, taken, j + 1)
                last = torch.where(done, last, residual)
                done = done | met
            K = new
        y = integrator.update(y, chosen, h, n_q)
        states.append(y)
        stages.append(chosen)
        info.append(torch.stack([taken, last]))
        history = [*history[-2:], chosen]
    return torch.stack(states), torch.stack(stages), torch.stack(info)


# AOT autograd's split of a grad-mode program into forward and backward: the fraction of what
# its default min-cut partition saves for the backward that the forward may keep. Below 1 the
# backward recomputes cheap elementwise ops (tanh and the products around it) from fewer saved
# tensors. On the headline iteration of ``benchmarks/peer_jax.py`` (one CPU core), backprop over
# 256 steps saved 116 MiB with the default, far more than a core's caches, and 36 MiB with 0.3;
# reading the saved tensors back cost more than recomputing them: 0.3 took 0.86-0.95 of the
# default's time at 32 steps and 0.88-0.91 at 256, the same at 6. At 0 (all recomputed, the
# matrix products too) and at 0.1 the 6-step window was slower than with the default.
ACTIVATION_MEMORY_BUDGET = 0.3


def _compile(fn: Callable, device_type: str, graphs: bool | None = None) -> Callable:
    """``torch.compile`` with static shapes and one graph (what the fallback test replaces),
    guarding tensors only (dtype, device, shape, strides, requires_grad): ``_program`` keys each
    function by everything else it depends on, and dynamo's checks of the module's and the
    integrator's attributes on every call cost about 100 µs (``torch.profiler``, "TorchDynamo Cache
    Lookup"), as much as a whole step's fused kernels. On the CPU, inductor's C++ wrapper calls the
    kernels and matrix products in place of its Python one (5–8 % off the headline training
    iteration on one CPU core, and no slower to compile). Not on CUDA: there torch 2.11's C++
    wrapper fails on the backward graph, which AOT autograd compiles lazily, outside the
    options' scope ("CudaKernelParamCache not populated"). On the CPU too, a matrix product's bias
    is added in the elementwise kernel after it, as inductor does on GPUs
    (``inductor_passes.BiasIntoPointwise``: the programs of a Table 1 epoch take 0.93 of their
    time).
    On CUDA, inductor's CUDA graphs (``uses_cuda_graphs``, unless ``graphs`` is False; such
    programs are not kept on disk whole)."""
    options: dict[str, Any] = {"guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe}
    if device_type == "cpu":
        from hnnsym.ode.inductor_passes import BiasIntoPointwise

        options["cpp_wrapper"] = True
        options["post_grad_custom_post_pass"] = BiasIntoPointwise()
    graphs = uses_cuda_graphs(device_type) if graphs is None else graphs
    if graphs:
        options["triton.cudagraphs"] = True
    compiled = torch.compile(fn, dynamic=False, fullgraph=True, options=options)
    # its programs are these settings' and can be compiled ahead and saved (``_Program._ahead``)
    compiled.kept_on_disk = programs_on_disk() and not graphs
    compiled.cuda_graphs = graphs  # its outputs are copied out of the graphs' pool (``_Program``)
    return compiled


def uses_cuda_graphs(device_type: str) -> bool:
    """Whether a program compiled for a device of this type replays its kernels as CUDA graphs
    (inductor's CUDA graph trees): on CUDA. A replay launches a program's kernels at once, where
    the host launching them one by one otherwise sets the pace. Its outputs live in the graphs'
    memory pool, which the next replay overwrites, so ``_Program`` copies them out.
    In grad mode AOT autograd's saved tensors and the backward's outputs live in that pool too.
    The trees keep the saved tensors of every forward until a backward runs, so a solve's
    programs keep theirs until the loss's backward. The gradients it leaves in ``.grad`` are
    overwritten by the next forward's replays: read them before it (the trainer sets them to
    None before each batch). A new program's backward is checked on a twin compiled without CUDA
    graphs (``_Program.checked``): a backward on the program itself, in the middle of a solve,
    would end the forwards that await theirs, and the next replay would reuse their memory."""
    return device_type == "cuda"


@functools.lru_cache(maxsize=1)
def programs_on_disk() -> bool:
    """Whether this torch compiles a program ahead of its call and saves and loads it whole
    (``aot_compile`` on what ``torch.compile`` returns, ``torch.compiler.load_compiled_function``):
    torch 2.13 does, torch 2.11 does not. Without it each process traces its programs again, and
    inductor's own disk caches still spare it most of the compile."""
    return hasattr(torch.compiler, "load_compiled_function") and hasattr(
        torch.compile(lambda x: x), "aot_compile"
    )


def _program(H, key: tuple, run: Callable, name: str, device: torch.device) -> Callable:
    """``run`` compiled once per structure of H (``_programs_of``) and ``key`` (everything else
    the graph reads: the function, the integrator's tableau, h, ...), in the current grad mode and
    H's training flag. Each is compiled from its own copy of the code (``_fresh``), since dynamo
    keeps its graphs per code object and checks only tensors here."""
    key = (*key, torch.is_grad_enabled(), getattr(H, "training", None), device.type)
    programs = _programs_of(H)
    if key not in programs:
        compiled = _compile(_fresh(run, name), device.type)
        programs[key] = _Program(compiled, run, name, key, device.type)
    return programs[key]


class _Program:
    """One compiled function and, per signature of its tensors (``_signature``: H's and the
    inputs' shapes, strides, dtypes, devices and requires_grad), the program it runs. Where H and
    the code it runs through are hnnsym's own (``_disk_key``), the program is compiled ahead of
    its call (``aot_compile``) and saved in ``programs_dir()``, and a later process loads
    it from there instead of tracing it again: Dynamo's trace is most of a warm compile (6.7 of
    10.2 s for a Table 1 run's programs). Otherwise, and where compiling ahead or saving fails,
    ``compiled`` traces it at its first call, as ``torch.compile`` does."""

    def __init__(
        self, compiled: Callable, run: Callable, name: str, key: tuple, device_type: str
    ) -> None:
        self.compiled, self.run, self.name, self.key = compiled, run, name, key
        self.device_type = device_type
        self.graphs = getattr(compiled, "cuda_graphs", False)
        # what the traced code reads from its closure (the integrator, h, ...): given to a loaded
        # program as it is now, never saved with it
        self.closure = {f"closure_{i}": cell.cell_contents
                        for i, cell in enumerate(run.__closure__ or ())}  # fmt: skip
        self.by_signature: dict[tuple, Callable] = {}

    def __call__(self, H, *inputs: Tensor) -> Any:
        signature = _signature(H, inputs)
        program = self.by_signature.get(signature)
        if program is None:  # compiled or loaded here: partitioned by ACTIVATION_MEMORY_BUDGET
            import torch._functorch.config as functorch_config

            with (
                _compiling(),
                functorch_config.patch(activation_memory_budget=ACTIVATION_MEMORY_BUDGET),
            ):
                program = self._ahead(H, inputs, signature) or self.compiled
                self.by_signature[signature] = program
                return self._outputs(program(H, *inputs))
        return self._outputs(program(H, *inputs))

    def checked(self) -> _Program:
        """What ``_check_backward`` runs, once: this program, or where it replays CUDA graphs a
        twin compiled without them, the same graph (``uses_cuda_graphs``), not kept after."""
        if not self.graphs:
            return self
        twin = _compile(_fresh(self.run, self.name), self.device_type, graphs=False)
        return _Program(twin, self.run, self.name, self.key, self.device_type)

    def _outputs(self, value: Any) -> Any:
        """A CUDA graph's outputs copied out of its pool (``uses_cuda_graphs``), the same
        nesting; other programs' as they are."""
        return _copied(value) if self.graphs else value

    def _ahead(self, H, inputs: tuple[Tensor, ...], signature: tuple) -> Callable | None:
        """The program loaded from the disk cache, or compiled ahead and saved there; None where
        it cannot be kept on disk (H or its code not hnnsym's, not ``_compile``'s settings) or
        compiling ahead fails (``compiled`` then traces it, and reports a failure of its own)."""
        if not getattr(self.compiled, "kept_on_disk", False):  # an older torch, or tests' compiler
            return None
        key = _disk_key(H, self.key, signature)
        if key is None:
            return None
        path = programs_dir() / f"{key}.bin"
        if path.is_file():
            try:
                with open(path, "rb") as file:
                    return torch.compiler.load_compiled_function(file, external_data=self.closure)
            except Exception as err:  # noqa: BLE001  (stale or damaged: compile it again)
                log.debug("compiled program %s not loaded (%s: %s)", path, type(err).__name__, err)
        try:
            program = self.compiled.aot_compile(((H, *inputs), {}))
        except Exception as err:  # noqa: BLE001
            log.debug("%s not compiled ahead (%s: %s)", self.name, type(err).__name__, err)
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            program.save_compiled_function(str(path), external_data=self.closure)
        except Exception as err:  # noqa: BLE001  (a read-only cache: keep it for this process)
            if not _state["unsaved"]:
                where = str(path.parent).replace("%", "%%")
                _fail(err, "unsaved", f"compiled programs cannot be saved in {where} (%s: %s); "
                      "each process compiles them again")  # fmt: skip
        return program


def _signature(H, inputs: tuple[Tensor, ...]) -> tuple:
    """What a program's graph is specialised to in its tensors (dynamo's tensor guards): the
    inputs' and H's parameters' and buffers', read from H's modules as they are now (a replaced
    parameter is seen). Taken on every call, so H's modules are listed once (``_first_read``):
    7 µs per call against 22 µs by ``H.parameters()`` and ``H.buffers()``."""
    tensors = (*inputs, *(t for module in _first_read(H)[1]
                          for owned in (module._parameters, module._buffers)
                          for t in owned.values() if t is not None))  # fmt: skip
    return tuple((t.shape, t.stride(), t.dtype, t.device, t.requires_grad) for t in tensors)


def _disk_key(H, key: tuple, signature: tuple) -> str | None:
    """A digest of everything a program depends on, for its file in the disk cache: torch's
    version, inductor's and AOT autograd's settings (the partition's budget among them), the
    machine (its CPU's vector instructions, which inductor's code uses, and the GPUs the tensors
    are on: a cache on a cluster's shared disk serves nodes of several kinds), hnnsym's source,
    H's structure, the program's key and its tensors' signature. None where H runs code that is
    not hnnsym's or torch's (a model class of the user's own, whose source the digest would not
    follow) or is not plain data."""
    structure = _structure(H)
    if structure is None or any(
        not cls.__module__.startswith(("hnnsym.", "torch.")) for _, cls, _ in structure[0]
    ):
        return None
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    gpus = sorted({(torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device))
                   for *_, device, _ in signature if device.type == "cuda"})  # fmt: skip
    machine = (platform.machine(), torch.backends.cpu.get_cpu_capability(), gpus)
    settings = [sorted(config.save_config_portable().items())
                for config in (inductor_config, functorch_config)]  # fmt: skip
    text = repr((torch.__version__, settings, machine, _source_digest(), structure, key,
                 signature))  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """sha256 of hnnsym's Python source: a program on disk belongs to the code that traced it."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for file in sorted(root.rglob("*.py")):
        digest.update(str(file.relative_to(root)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


@contextlib.contextmanager
def _compiling() -> Iterator[None]:
    """Inductor's disk caches set up (once per process), and dynamo's warnings about the
    lru_cache'd constant helpers it traces through silenced: entered where a program is compiled
    or loaded (``_Program`` on a new signature, ``_check_backward``), not on every call."""
    if not _state["configured"]:
        _configure_cache()
        _state["configured"] = True
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*functools.lru_cache.*")
        yield


def _programs_of(H) -> dict:
    """H's programs: those of every H of its structure (a sweep's runs in one process share them,
    each model's tensors being a program's inputs), or H's own where its structure is not plain
    data."""
    return _first_read(H)[0]


def _first_read(H) -> tuple[dict, tuple[torch.nn.Module, ...]]:
    """What is read of H once, on its first call: its programs (``_programs_of``) and its
    modules (none where H is not a module), whose tensors ``_signature`` reads on every call.
    Read again on every call where H cannot be referenced weakly (rare), with no programs kept."""
    try:
        known = _models.get(H)
    except TypeError:
        return {}, _modules(H)
    if known is None:
        structure = _structure(H)
        programs = {} if structure is None else _shared.setdefault(structure, {})
        known = _models[H] = (programs, _modules(H))
    return known


def _modules(H) -> tuple[torch.nn.Module, ...]:
    return tuple(H.modules()) if isinstance(H, torch.nn.Module) else ()


class _NotPlain(Exception):
    pass


def _structure(H: Any) -> tuple | None:
    """An ``nn.Module``'s structure as plain data: per submodule its name, type and attributes
    (numbers, strings, dtypes, devices, and tuples, lists, sets, dicts and plain objects of
    them), per parameter and buffer its name, shape, dtype, device and requires_grad. None where
    H is not a module or holds anything else (a function, a hook, a tensor that is not a
    parameter or buffer): such an H keeps programs of its own. Dynamo checks only tensors here
    (``_compile``), so two modules of one structure may share programs: they differ only in
    their tensors' values, which a program takes as inputs."""
    if not isinstance(H, torch.nn.Module):
        return None
    try:
        modules = tuple(
            (name, type(module), _plain({k: v for k, v in vars(module).items()
                                         if k not in ("_parameters", "_buffers", "_modules", "training")}))
            for name, module in H.named_modules()
        )  # fmt: skip
    except (_NotPlain, TypeError):  # TypeError: a set or dict whose items do not sort
        return None
    tensors = tuple(
        (name, tuple(t.shape), t.dtype, t.device, t.requires_grad)
        for name, t in (*H.named_parameters(), *H.named_buffers())
    )  # fmt: skip
    return modules, tensors


def _plain(value: Any) -> Any:
    """``value`` as hashable plain data, or ``_NotPlain``."""
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return value
    if isinstance(value, (tuple, list)):
        return type(value).__name__, tuple(_plain(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return "set", tuple(sorted(_plain(v) for v in value))
    if isinstance(value, dict):
        return "dict", tuple(sorted((str(k), _plain(v)) for k, v in value.items()))
    if type(value).__module__.startswith("hnnsym.") and hasattr(value, "__dict__"):
        return type(value), _plain(vars(value))  # an object of ours: its class and its data
    raise _NotPlain


def _fresh(run: Callable, name: str) -> Callable:
    """A copy of ``run`` with its own code object (dynamo keeps its graphs per code object)."""
    code = run.__code__.replace(co_name=f"{name}_{next(_serial)}")
    return types.FunctionType(code, run.__globals__, code.co_name, None, run.__closure__)


def _fail(err: BaseException, flag: str = "failed",
          notice: str = "torch.compile is unavailable here (%s: %s); the stage solver runs eagerly",
          ) -> None:  # fmt: skip
    """Set ``_state[flag]`` and log ``notice`` once, with the error's type and first line."""
    _state[flag] = True
    first = (str(err).strip().splitlines() or [""])[0][:200]
    log.warning(notice, type(err).__name__, first)


def sweeps(
    integrator, H, y: Tensor, guess: tuple[Tensor, ...], h: float, n_q: int, k: int
) -> tuple[list[Tensor], Tensor] | None:
    """``_sweeps`` compiled (see there), or None where compilation is unavailable: the caller then
    runs the eager solver. Differentiable when grad mode is on (AOT autograd's backward)."""
    return _call(_sweeps, integrator, H, y, guess, h, n_q, k)


def steps(
    integrator, H, y: Tensor, guess: tuple[Tensor, ...], h: float, n_q: int,
    plan: tuple[tuple[int, ...], float],
) -> tuple[Tensor, Tensor, Tensor] | None:  # fmt: skip
    """``_steps`` compiled (see there), or None where compilation is unavailable."""
    return _call(_steps, integrator, H, y, guess, h, n_q, plan)


def _call(fn: Callable, integrator, H, y: Tensor, guess: tuple[Tensor, ...], h: float, n_q: int,
          k: Any):  # fmt: skip
    """``fn`` compiled and called, or None (one notice per process) where compilation fails,
    the backward graph's included (``_check_backward``). One program per number of guess
    tensors as well."""
    if _state["failed"]:
        return None
    try:
        # (H, y, *guess) -> fn(...), for this integrator's tableau, h, n_q and k
        program = _program(
            H, (fn.__name__, integrator.tableau, h, n_q, k, len(guess)),
            lambda H, y, *guess: fn(integrator, H, y, guess, h, n_q, k), fn.__name__, y.device,
        )  # fmt: skip
        inputs = _unaliased(y, *guess)
        if torch.is_grad_enabled() and not getattr(program, "backward_checked", False):
            with _compiling():
                _check_backward(program.checked(), H, inputs)
            program.backward_checked = True
        return program(H, *inputs)
    except Exception as err:  # noqa: BLE001  (any compiler failure: run eagerly)
        _fail(err)
        return None


def chunk(
    fn: Callable, integrator, H, Y: Tensor, jumps: Tensor, lam: Tensor, h: float, params: bool
) -> tuple[Tensor, list[Tensor | None]] | None:
    """The symplectic adjoint's direct solve over a chunk of steps (``fn``:
    ``symplectic_adjoint.chunk_adjoint``, no grad mode) compiled for this integrator's tableau,
    H, h and whether the parameter gradient is wanted: (λ_n, parameter gradients), or None where
    compilation fails (one notice; this and every later chunk then runs eagerly, the forward's
    compiled solve unaffected)."""
    if _state["failed"] or _state["chunk_failed"]:
        return None
    try:
        program = _program(
            H, (fn.__name__, integrator.tableau, h, params),
            lambda H, Y, jumps, lam: fn(integrator, H, Y, jumps, lam, h, params), fn.__name__,
            Y.device,
        )  # fmt: skip
        return program(H, *_unaliased(Y, jumps, lam))
    except Exception as err:  # noqa: BLE001  (any compiler failure: run eagerly)
        _fail(err, "chunk_failed",
              "the symplectic adjoint's backward could not be compiled (%s: %s); it runs eagerly")  # fmt: skip
        return None


def _check_backward(program: Callable, H, inputs: list[Tensor]) -> None:
    """One forward and backward pass of ``program`` on stand-ins of ``inputs`` (detached copies
    that require grad as they do, so the same graph runs). AOT autograd compiles a program's
    backward only when it first runs, so a compiler that fails there would otherwise fail in
    the caller's ``backward()``, after the forward it cannot redo. The pass does not keep its
    graph: inductor's backward may free its buffers as it goes, and then refuses a second pass
    over one graph. Raises what the compiler raised."""
    stand_ins = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    outputs = [t for t in _tensors(program(H, *stand_ins)) if t.requires_grad]
    wrt = [t for t in (*stand_ins, *_parameters(H)) if t.requires_grad]
    if outputs and wrt:
        total = torch.stack([t.sum() for t in outputs]).sum()
        torch.autograd.grad(total, wrt, allow_unused=True)


def _tensors(value: Any) -> list[Tensor]:
    """The tensors in nested tuples and lists."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _copied(value: Any) -> Any:
    """Each tensor in nested tuples and lists cloned; the rest as it is."""
    if isinstance(value, Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_copied(v) for v in value)
    return value


def _parameters(H: Any) -> list[Tensor]:
    return list(H.parameters()) if isinstance(H, torch.nn.Module) else []


def _unaliased(*tensors: Tensor) -> list[Tensor]:
    """The tensors, each one sharing memory with an earlier one cloned: a graph traced with
    aliased inputs (the same zeros twice) assumes them equal, and the guard that would catch a
    later call without the aliasing is one of those left out (``_compile``)."""
    seen, out = set(), []
    for t in tensors:
        ptr = t.untyped_storage().data_ptr()
        out.append(t.clone() if ptr in seen else t)
        seen.add(ptr)
    return out


def reset() -> None:
    """Forget the compiled functions and any failure (tests; a changed compiler setting)."""
    _models.clear()
    _shared.clear()
    _state.update(failed=False, chunk_failed=False, unsaved=False)
