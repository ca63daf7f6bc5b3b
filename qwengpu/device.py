"""The driver: a QwenGPU as a CUDA-like device that is driven entirely through its token stream.

The device knows the grammar (qwengpu.tokens) and nothing of the machine's arithmetic: it feeds the host's tokens,
asks the backend for every token the model writes, routes write-back records whose header names a peer's aperture,
and splices packets in at record boundaries.

Example::

    import numpy as np
    from qwengpu import Device
    dev = Device()
    a, b, c = dev.alloc(4), dev.alloc(4), dev.alloc(4)
    dev.write(a, np.arange(4)); dev.write(b, np.full(4, 10))
    k = dev.load_kernel("qwengpu/kernels/vadd.cu", "vadd")
    dev.launch(k, threads=4, args=[a, b, c, 4])
    dev.read(c, 4)          # array([10, 11, 12, 13], dtype=int32)
"""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from . import tokens as T
from .tokenlog import TokenLog
from .interpreter import Interpreter, Wait
from .lowering import console
from .isa import DIVISIONS, LANES, NONE, SINK, MachineError, encode_block
from .lowering import Program
from .specialize import Specializer
from .ptx import parse
from .toolchain import NVRTCUnavailable, compile_with_names, ptx_for, source_lines

MAX_THREADS = 1024
MAX_BLOCKS = 1024
DEFAULT_RECORD_LIMIT = 200_000


def make_backend(backend: str, **options):
    if backend == "interpreter":
        if options:
            raise MachineError(f"the interpreter backend takes no options, got {sorted(options)}")
        return Interpreter()
    if backend == "circuit":
        from .circuit.exact import CircuitBackend
        return CircuitBackend(**options)
    if backend == "model":
        from .circuit.model import ModelBackend
        return ModelBackend(**options)
    raise MachineError(f"unknown backend {backend!r}: the backends are 'interpreter', 'circuit' and 'model'")


PROGRAM_CACHE = 64        # program shapes kept per kernel (least recently launched dropped first)


@dataclass(frozen=True)
class CudaOrigin:
    """The CUDA source a kernel's PTX was compiled from (its text, file name and NVRTC name expressions), so that
    a refusal can name the user's line, not only the PTX's."""
    text: str
    name: str
    expressions: tuple[str, ...] = ()

    def locate(self, error: MachineError, ptx: str) -> MachineError:
        """``error`` with the CUDA line its PTX line came from added (``kernel.cu line 4: y[i] = 2.0 * x[i];``),
        where NVRTC's line information has one; else ``error`` itself."""
        if error.line is None:
            return error
        try:
            line = source_lines(self.text, ptx, self.name, self.expressions).get(error.line)
        except (MachineError, NVRTCUnavailable):      # no second compile here: the refusal as it is
            return error
        code = self.text.splitlines()
        if line is None or line > len(code):
            return error
        text = code[line - 1].strip()
        text = text if len(text) <= 100 else text[:97] + "..."
        return type(error)(f"{error}\n  from {self.name} line {line}: {text}", line=error.line)


@dataclass
class Kernel:
    """A kernel loaded on a device: its parsed PTX, lowered per launch configuration (arguments are bound as
    immediates). Programs are lowered once per argument shape, not per launch (qwengpu.specialize: a launch whose
    arguments lead the lowering to the same decisions reuses the program with its immediates recomputed, so qccl's
    counting flag arguments lower once per step kind), and at most PROGRAM_CACHE shapes are kept per kernel.

    ``Kernel.from_program`` wraps ready-made machine blocks (tests, fuzzers, hand-written programs)::

        from qwengpu.isa import Block, Operand, TID, EXIT
        from qwengpu.lowering import Program
        blocks = [Block(op="add", a=Operand(TID), b=Operand(imm=1), store=TID, store_enable=True,
                        branch="always", target=EXIT)]
        dev.launch(Kernel.from_program(Program("inc", blocks, 0, False, [])), threads=4, args=[])
    """
    name: str
    ptx: object
    source: str
    fixed: Program | None = field(default=None, repr=False)
    variables: dict[str, int] = field(default_factory=dict)     # __device__ / __constant__ variable -> word
    cuda: CudaOrigin | None = field(default=None, repr=False)     # the CUDA it was compiled from, if it was
    _programs: Specializer | None = field(default=None, repr=False)

    @classmethod
    def from_program(cls, program: Program) -> "Kernel":
        """A kernel that runs these machine blocks for any thread count; it takes no arguments."""
        if not isinstance(program, Program):
            raise MachineError(f"Kernel.from_program takes a qwengpu.lowering.Program, got {type(program).__name__}")
        return cls(program.kernel, None, "", fixed=program)

    def program(self, args: tuple[int, ...], threads: int, block: int = 0, blocks: int = 1,
                shared: int = 0, shape: tuple | None = None, grid: tuple | None = None) -> Program:
        """The machine program for one launch configuration (block ``block`` of a grid of ``blocks``, ``shared``
        bytes of dynamic shared memory; ``shape`` / ``grid``: the (x, y, z) sizes of a block and a grid of more
        than one dimension)."""
        if self.fixed is not None:
            if args:
                raise MachineError(f"kernel {self.name} is a ready-made program and takes no arguments, got "
                                   f"{len(args)}")
            return self.fixed
        if self._programs is None:
            self._programs = Specializer(self.ptx, PROGRAM_CACHE, self.variables)
        try:
            return self._programs.program(args, threads, block=block, blocks=blocks, shared=shared,
                                          block_shape=shape, grid_shape=grid)
        except MachineError as error:
            if self.cuda is None:
                raise
            raise self.cuda.locate(error, self.source) from None

    def arguments(self, args: Sequence) -> tuple[int, ...]:
        """Launch arguments as the words the lowering binds: integers as they are; for a ``float`` parameter
        (``.param .f32``) a Python or numpy number, converted to float32 (round to nearest, as C++ converts a
        double argument) and passed as its bits; for a struct passed by value its bytes, as ``bytes`` or anything
        that gives them (a ``ctypes.Structure`` with the same fields, pointers as 64-bit device word addresses, or
        a numpy record), read little-endian::

            dev.launch(dev.load_kernel(src, "clamp"), threads=8, args=[y, x, -1.0, 1.0])

            class Args(ctypes.Structure):           # struct Args { int *y; const int *x; int n; int scale; };
                _fields_ = [("y", ctypes.c_uint64), ("x", ctypes.c_uint64), ("n", ctypes.c_int),
                            ("scale", ctypes.c_int)]
            dev.launch(dev.load_kernel(src, "scale"), threads=8, args=[Args(y, x, 8, 3)])
        """
        if self.ptx is None:
            return tuple(_integer(value, "kernel argument") for value in args)
        params = self.ptx.params
        if len(args) != len(params):       # before the lowering, which may refuse the kernel for another reason
            raise MachineError(f"kernel {self.name} takes {len(params)} argument{'s' * (len(params) != 1)} "
                               f"({', '.join(_parameter(p) for p in params) or 'none'}), got {len(args)}")
        words = []
        for i, (param, value) in enumerate(zip(params, args)):
            what = f"kernel {self.name} argument {i + 1}" + (f" ({_parameter(param)})" if param.size is None else "")
            if param.type == "f32":
                words.append(_float_bits(value, what, np.float32))
            elif param.size is not None:
                words.append(_struct_bytes(value, param.size, what))
            elif param.type == "f64":
                words.append(_float_bits(value, what, np.float64))
            else:
                words.append(_integer(value, what))
        return tuple(words)

    def get_global(self, name: str) -> int:
        """The word address of a ``__device__`` or ``__constant__`` variable this kernel names (CuPy's
        ``RawModule.get_global``, CUDA's ``cudaGetSymbolAddress``): ``dev.write`` and ``dev.read`` it where CUDA
        code calls ``cudaMemcpyToSymbol`` / ``cudaMemcpyFromSymbol``. Kernels of one module share the words::

            conv = dev.load_kernel("conv.cu", "conv")       # __constant__ float mask[3];
            dev.write(conv.get_global("mask"), np.float32([0.25, 0.5, 0.25]))
        """
        if name not in self.variables:
            names = ", ".join(sorted(self.variables)) or "none"
            raise MachineError(f"kernel {self.name} names no __device__ or __constant__ variable {name!r} (it "
                               f"names: {names})")
        return self.variables[name]

    @property
    def cached_programs(self) -> int:
        """How many lowered program shapes this kernel keeps now (at most PROGRAM_CACHE)."""
        return 0 if self._programs is None else len(self._programs)

    @property
    def lowerings(self) -> int:
        """How many times this kernel's PTX was lowered (once per argument shape met)."""
        return 0 if self._programs is None else self._programs.lowered


@dataclass(frozen=True)
class Packet:
    """A write record that left the device through an aperture: the header and its two payload VALs, as written."""
    aperture: object
    tokens: tuple[int, int, int]


@dataclass
class Record:
    """One record the model wrote: its block, the register values, the stores, what comes next."""
    kernel: str
    block: int
    values: list[int]
    stores: list[tuple[int, int]]
    next: int | None
    wait: Wait | None
    span: tuple[int, int] = (0, 0)      # the record's positions in the device's token log
    log: object = None

    @property
    def tokens(self) -> list[T.Token]:
        """The record's tokens (built when asked: most callers need only the values and stores)."""
        return self.log[self.span[0]:self.span[1]]


class Device:
    """A QwenGPU: 4 lanes, 15 registers, a 32-block ROM, 127 words of memory (word 127 is the sink).

    backend: "interpreter" (the reference), "circuit" (the compiled weights evaluated exactly) or "model" (the
    weights in transformers' Qwen3.5, options dtype= and device=); options go to the backend. router: set by a
    transport; ``router.route(address)`` returns an aperture (with ``.multicast``) or None for local memory.
    token_log: None keeps the whole stream in ``tokens`` (what verification replays); a number keeps at least that
    many of the latest positions, trimmed between launches (a long-lived device's memory stays flat).

    A backend is fed tokens (``feed``), predicts the next (``predict``) and saves and puts back its state
    (``snapshot`` / ``restore``). A backend with ``feed_run`` (the model) is given the tokens fed between two
    predictions as one run, when the next prediction (or a snapshot) needs them: one forward instead of one a token.
    """

    def __init__(self, backend: str = "interpreter", router=None, token_log: int | None = None, **options):
        self.backend_name = backend
        self.backend = make_backend(backend, **options)
        self.router = router
        self.tokens = TokenLog(token_log)
        self.stats = {"tokens_written": 0, "tokens_fed": 0, "records": 0, "launches": 0}
        self.launch_records: list[int] = []
        self._allocations: dict[int, int] = {}
        self._loose: set[int] = set()       # words the host wrote outside any allocation (dev.write at an address)
        self._variables: dict[str, dict[str, int]] = {}     # module PTX -> its placed variables' words
        self.printed: list[str] = []            # what the kernels' printf wrote, line by line (also to stdout)
        self._rom: list[list[int] | None] = [None] * 32
        self._outbox: list[Packet] = []
        self._launch = None     # (kernel, program, warps left, records) while busy
        self._pending: int | None = None
        self._snapshot = None
        # Tokens fed since the backend's last prediction, for a backend that takes them as one run (feed_run:
        # the model backend, one forward for a host copy or a ROM row instead of one per token).
        self._unfed: list[int] = []
        self._fresh = self._backend_snapshot()      # the empty context, for rebase()
        self.rebases = 0
        self.context_starts = [0]                 # where each context begins in self.tokens (rebase starts one)

    # -- memory ----------------------------------------------------------------------------------------------------
    def alloc(self, n: int, at: int | None = None) -> int:
        """Reserve n consecutive words and return the first word's address (0..126; the sink is never given out)."""
        n = _integer(n, "alloc size")
        if not 1 <= n <= SINK:
            raise MachineError(f"alloc({n}): size must be 1..{SINK} words")
        taken = [(start, start + size) for start, size in self._allocations.items()]
        if at is not None:
            at = _integer(at, "alloc address")
            if at < 0 or at + n > SINK:
                raise MachineError(f"alloc({n}, at={at}): words {at}..{at + n - 1} are outside 0..{SINK - 1}")
            if any(at < stop and start < at + n for start, stop in taken):
                raise MachineError(f"alloc({n}, at={at}): overlaps an allocation")
            self._allocations[at] = n
            return at
        start = 0
        for lo, hi in sorted(taken):
            if lo - start >= n:
                break
            start = max(start, hi)
        if start + n > SINK:
            free = SINK - sum(self._allocations.values())
            raise MachineError(f"alloc({n}): out of device memory ({free} of {SINK} words free, none {n} in a row)")
        self._allocations[start] = n
        return start

    def free(self, address: int) -> None:
        if address not in self._allocations:
            raise MachineError(f"free({address}): not the start of an allocation")
        del self._allocations[address]

    def rebase(self) -> None:
        """Context rebase between launches: the host reads the 127 words back, starts a fresh context and writes
        them back (a copy: nothing is computed), so a long run's context stays short. The next launch feeds its
        program rows again. ``rebases`` counts them; ``tokens[context_starts[-1]:]`` is the current context.

        >>> dev.rebase(); dev.read(a, 4)        # the same words, in a context of 127 write records
        """
        if self._launch is not None:
            raise MachineError(f"rebase during a launch of {self._launch['kernel'].name}: rebase between launches")
        words = self.read(0, SINK)
        self._backend_restore(self._fresh)
        self._rom = [None] * len(self._rom)
        self.context_starts.append(len(self.tokens))
        self._copy_in(0, _words(words))
        self.rebases += 1

    def write(self, address: int, words) -> None:
        """Host -> device copy, fed as write records (MEM a, VAL lo, VAL hi), one per word: an integer array's
        elements are the words' values, a float32 array's their bits, a float64 array's two words each (its bits,
        the low word first: read them back with ``dev.read(p, 2 * n).view(np.float64)``); an array of several
        dimensions is written in C order (a matrix row after row, ``M[i, j]`` at ``address + i * cols + j``).
        Words outside every
        allocation may be written (a fixed address), but a launch whose block state would cover them is refused
        (``_check_reserved``)."""
        data = _words(words)
        self._check_range(address, len(data), "write")
        self._loose.update(range(address, address + len(data)))
        self._copy_in(address, data)

    def _copy_in(self, address: int, data: np.ndarray) -> None:
        for offset, word in enumerate(data):
            self._feed_all(T.write_record(address + offset, int(word)), T.HOST)

    def read(self, address: int, n: int) -> np.ndarray:
        """Device -> host copy: the host feeds READ a and the model writes the word's two VALs."""
        self._check_range(address, n, "read")
        out = np.zeros(n, dtype=np.uint32)
        for offset in range(n):
            self._feed(T.READ(address + offset), T.HOST)
            lo, hi = self._write(), self._write()
            out[offset] = T.argument(lo) | (T.argument(hi) << 16)
        return out.view(np.int32)

    def _check_range(self, address: int, n: int, what: str) -> None:
        address, n = _integer(address, f"{what} address"), _integer(n, f"{what} count")
        if n < 0 or address < 0 or address + n > SINK:
            raise MachineError(f"{what} of {n} words at {address}: outside device memory 0..{SINK - 1}")
        if self._launch is not None and what == "read":
            raise MachineError(f"{what} during a launch: the model is writing a record")

    # -- kernels ---------------------------------------------------------------------------------------------------
    def load_kernel(self, source: str | Path, name: str) -> Kernel:
        """Compile CUDA (a .cu path or source text) or read PTX (.ptx path or text) and pick kernel ``name``: an
        ``extern "C"`` kernel's name, a C++ kernel's (its one entry of that name), or for CUDA source a C++ name
        expression, as CuPy's ``name_expressions`` take it (``"fill<float>"``, ``"ops::scale"``: the template is
        instantiated).

        >>> dev.load_kernel("template <typename T> __global__ void fill(T *y, T v) { y[threadIdx.x] = v; }",
        ...                 "fill<float>")
        """
        text = str(source)
        cuda = text                         # CUDA source: its path or its text (ptx_for takes either)
        if isinstance(source, Path) or (len(text) < 4096 and "\n" not in text and text.endswith((".cu", ".ptx"))):
            cuda = Path(text)
            if not cuda.exists():
                raise MachineError(f"kernel source {text} does not exist")
            text = cuda.read_text()
            if cuda.suffix == ".ptx":
                cuda = None
        elif ".entry" in text:
            cuda = None
        entries: dict[str, str] = {}        # a name expression's entry ("fill<float>", "ops::scale"), from NVRTC
        if cuda is None:
            ptx_text = text
        elif re.fullmatch(r"[A-Za-z_]\w*", name) is None:
            ptx_text, entries = compile_with_names(text, (name,), name=getattr(cuda, "name", "kernel.cu"))
        else:
            ptx_text = ptx_for(cuda)
        module = parse(ptx_text, strict=False)     # another kernel of the file outside the subset is no concern here
        entry = entries.get(name) or _entry(module, name)
        origin = None if cuda is None else CudaOrigin(text, getattr(cuda, "name", "kernel.cu"), tuple(entries))
        if entry in module.refused:
            error = module.refused[entry]
            raise (error if origin is None else origin.locate(error, ptx_text)) from None
        ptx = module.kernels[entry]
        used = console.rewrite(ptx)[0].variables        # a printf's format string takes no words of memory
        return Kernel(name, ptx, ptx_text, variables=self._place(name, ptx_text, used), cuda=origin)

    def _place(self, kernel: str, module: str, variables: dict) -> dict[str, int]:
        """Words for the ``__device__`` / ``__constant__`` variables a kernel names, written with their initial
        bytes (host copies, as a driver loads a module's data). A variable is placed once per module (its PTX text)
        and device, when the first kernel that names it loads, so the module's kernels share it; the words stay
        allocated for the device's life."""
        placed = self._variables.setdefault(module, {})
        new = [v for v in variables.values() if v.name not in placed]
        if new and self._launch is not None:
            raise MachineError(f"load_kernel({kernel!r}) during a launch of {self._launch['kernel'].name}: its "
                               "variables are written at load; load it between launches")
        taken = []
        try:
            for variable in new:
                taken.append(self.alloc(variable.words))
        except MachineError as error:
            for address in taken:
                self.free(address)
            sizes = ", ".join(f"{v.name} {v.words}" for v in new)
            raise MachineError(f"kernel {kernel}: its __device__ / __constant__ variables ({sizes} words) do not "
                               f"fit device memory: {error}") from None
        for variable, address in zip(new, taken):
            padded = variable.initial + bytes(4 * variable.words - len(variable.initial))
            self.write(address, np.frombuffer(padded, dtype="<u4"))
            placed[variable.name] = address
        return {name: placed[name] for name in variables}

    def launch(self, kernel: Kernel, threads, args: Sequence, max_records: int = DEFAULT_RECORD_LIMIT,
               blocks=1, shared: int = 0):
        """Run a kernel to completion: ``blocks`` blocks of ``threads`` threads, one block after another (each sees
        its own ``blockIdx``). Both are CUDA's dim3: an int, or (x, y) / (x, y, z) (``threads=(8, 4)`` gives
        threadIdx.x 0..7 and threadIdx.y 0..3, x varying fastest; at most 1,024 threads a block). A kernel still
        running after max_records records raises (hang detector). ``shared``: bytes of dynamic shared memory for
        ``extern __shared__`` arrays (CUDA's third launch parameter); a kernel that declares one needs it.

        Every block's program is lowered before the first one starts, so a kernel over a limit of the machine
        fails before it touches memory."""
        shape, grid = dim3(threads, "threads", MAX_THREADS), dim3(blocks, "blocks", MAX_BLOCKS)
        words = kernel.arguments(args)
        shared = _integer(shared, "shared (bytes of dynamic shared memory)")
        count = math.prod(grid)
        for block in range(count):
            kernel.program(words, math.prod(shape), block, count, shared, **launch_geometry(shape, grid))
        # A failure in a later block puts back what the earlier blocks did too: the grid is one launch.
        before = (self._backend_snapshot(), len(self.tokens), dict(self.stats), list(self._rom),
                  list(self.launch_records))
        try:
            for block in range(count):
                self._run_block(kernel, shape, grid, words, max_records, block, shared)
        except Exception:
            state, length, stats, rom, launch_records = before
            self._backend_restore(state)
            del self.tokens[length:]
            self.stats, self._rom, self.launch_records, self._outbox = stats, rom, launch_records, []
            raise

    def _run_block(self, kernel: Kernel, shape: tuple, grid: tuple, words: tuple, max_records: int, block: int,
                   shared: int) -> None:
        self._begin(kernel, shape, grid, words, block, shared)
        try:
            records = 0
            while self.busy:
                record = self.step()
                records += 1
                if records >= max_records and self.busy:
                    where = ""
                    if record.wait is not None:
                        w = record.wait
                        value = "unknown" if w.value is None else w.value
                        where = (f"; it spins on address {w.address} (value {value}, waits on {w.op} "
                                 f"{w.expected})")
                    raise MachineError(f"kernel {kernel.name} still running after {records} records{where}")
        except Exception:
            self._abort_launch()
            raise

    @property
    def busy(self) -> bool:
        return self._launch is not None

    def start(self, kernel: Kernel, threads, args: Sequence, block: int = 0, blocks=1, shared: int = 0) -> None:
        """Begin a launch (of block ``block``, its linear index, of a grid of ``blocks``; both sizes CUDA's dim3 as
        in launch): feed the program rows that changed and the first warp's header. Writes nothing yet."""
        self._begin(kernel, dim3(threads, "threads", MAX_THREADS), dim3(blocks, "blocks", MAX_BLOCKS),
                    kernel.arguments(args), block, _integer(shared, "shared (bytes of dynamic shared memory)"))

    def _begin(self, kernel: Kernel, shape: tuple, grid: tuple, words: tuple, block: int, shared: int) -> None:
        """start() with its sizes and arguments checked and converted (launch() does so once for its grid)."""
        if self._launch is not None:
            raise MachineError(f"start({kernel.name}): a launch of {self._launch['kernel'].name} is still running")
        threads = math.prod(shape)
        program = kernel.program(words, threads, block, math.prod(grid), shared, **launch_geometry(shape, grid))
        self._check_supported(kernel, program)
        self._check_reserved(kernel, program)
        self._snapshot = (self._backend_snapshot(), len(self.tokens), dict(self.stats), list(self._rom))
        self._load_rom(program.rom(0))
        first, count = program.cleared          # a block's resume words start at 0 (a memset: words copied)
        for address in range(first, first + count):
            self._feed_all(T.write_record(address, 0), T.HOST)
        warps = [(base, min(LANES, threads - base)) for base in range(0, threads, LANES)]
        self._launch = {"kernel": kernel, "program": program, "warps": warps, "records": 0, "parks": [],
                        "waits": [], "overlay": 0, "barrier": 0, "printing": {}}
        self.stats["launches"] += 1
        self._next_warp()

    def _check_reserved(self, kernel: Kernel, program: Program) -> None:
        """A block's __shared__ arrays and barrier or overlay state take the top words of memory: refuse a launch
        whose words an allocation holds, that the host wrote outside any allocation, or that peers store into (the
        router's apertures), before anything is fed."""
        first, count = program.reserved
        if not count:
            return
        state = "overlay" if program.overlays else "barrier"
        where = (f"kernel {kernel.name} keeps its __shared__ arrays and {state} state in words {first}.."
                 f"{first + count - 1}")
        for start, size in sorted(self._allocations.items()):
            if start < first + count and first < start + size:
                raise MachineError(f"{where}, and allocation {start}..{start + size - 1} overlaps them (device "
                                   f"memory below word {first} is free for allocations)")
        if self.router is not None:
            # Peers store into their apertures' words whenever they run (a transport's FIFOs and flags, never
            # allocated on this device): block state there would be overwritten, and would overwrite them.
            shared = [a for a in range(first, first + count) if self.router.route(a) is not None]
            if shared:
                raise MachineError(f"{where}, and peers store into words {shared[0]}..{shared[-1]} ("
                                   f"{self.router.route(shared[0])}): the launch would overwrite them. Keep the "
                                   "kernel within the ROM and without __shared__ arrays or __syncthreads, or "
                                   "give the transport fewer words")
        allocated = {a for start, size in self._allocations.items() for a in range(start, start + size)}
        written = sorted(a for a in self._loose if first <= a < first + count and a not in allocated)
        if written:
            raise MachineError(f"{where}, and the host wrote words {written[0]}..{written[-1]} there outside any "
                               "allocation (dev.write at a fixed address): the launch would overwrite them. Allocate "
                               "the data (dev.alloc) and the launch keeps clear of it")

    def _load_rom(self, blocks) -> None:
        """Feed the program rows that differ from what the ROM holds."""
        for row, block in enumerate(blocks):
            words = encode_block(block)
            if self._rom[row] != words:
                self._feed_all([T.ROM(row)] + [T.VAL(w) for w in words], T.HOST)
                self._rom[row] = words

    def _park(self, block: int) -> None:
        """A warp that ended in a parking block runs again: one that left its overlay (a program longer than the
        ROM: qwengpu.lowering.overlays) on the next overlay, in a round after every warp of this one has ended (the
        overlay's rows fed first); one that stopped at __syncthreads once no warp is left to run (every warp has
        reached the barrier or finished), on the same overlay. The device follows the EXEC the model wrote and feeds
        overlays in a fixed order; the resume point is in the machine's words."""
        launch = self._launch
        program = launch["program"]
        how = program.parking(launch["overlay"], block)
        if how is not None:
            launch[how].append(launch["warp"])
            if how == "waits":              # the overlay that holds the barrier (every warp waits at the same one)
                launch["barrier"] = launch["overlay"]
        if launch["warps"]:
            return
        if launch["parks"]:                 # warps that left their overlay: the next overlay, in a new round
            launch["warps"], launch["parks"] = launch["parks"], []
            launch["overlay"] = (launch["overlay"] + 1) % len(program.overlays)
            self._load_rom(program.rom(launch["overlay"]))
        else:                               # every warp at a barrier or finished: the barrier's warps go on, on the
            launch["warps"], launch["waits"] = launch["waits"], []        # barrier's overlay (rounds may have moved on)
            if launch["warps"] and launch["overlay"] != launch["barrier"]:
                launch["overlay"] = launch["barrier"]
                self._load_rom(program.rom(launch["overlay"]))

    def _check_supported(self, kernel: Kernel, program: Program) -> None:
        """A compiled circuit computes a subset of the ALU: refuse a program outside it before anything is fed."""
        ops = getattr(self.backend, "supported_ops", None)
        if ops is None:
            return
        atomics = getattr(self.backend, "atomics", True)
        divisors = getattr(self.backend, "divisors", None)
        for index, block in enumerate(program.blocks):
            where = f"kernel {kernel.name} block {index} ({block}): the {self.backend_name} backend's circuit"
            if block.op not in ops or (block.atomic and not atomics):
                what = "atomic blocks" if block.atomic else f"op {block.op}"
                raise MachineError(f"{where} does not compute {what} yet (it has {', '.join(ops)}); run it on "
                                   "the interpreter backend")
            if divisors is not None and block.op in DIVISIONS and (block.b.reg != NONE
                                                                    or block.b.imm not in divisors):
                raise MachineError(f"{where} divides only by an immediate {divisors[0]}..{divisors[-1]}, not by "
                                   f"{block.b} (a launch argument is bound as an immediate); run it on the "
                                   "interpreter backend")

    def _next_warp(self) -> None:
        base, lanes = self._launch["warps"].pop(0)
        self._launch["warp"] = (base, lanes)
        self._feed_all([T.WARP, T.VAL(base), T.VAL(lanes)], T.HOST)
        self._pending = self._predict()

    def step(self) -> Record:
        """The model writes one record: the pending EXEC, the lanes' values, the write-backs; it then predicts the
        next EXEC or END. A packet delivered after this returns lands before the next record."""
        if self._launch is None:
            raise MachineError("step() without a launch in progress")
        kernel = self._launch["kernel"]
        first = len(self.tokens)
        exec_token = self._pending
        block = T.argument(exec_token)
        self._feed(exec_token, T.MODEL)
        for _ in range(2 * LANES):
            self._write()
        stores = []
        while True:
            token = self._predict()
            if T.kind(token) != "MEM":
                break
            stores.append(self._write_back(kernel, block, token))
        if self._launch["program"].console:
            self._console(stores)
        run = getattr(self.backend, "last", None)
        record = Record(kernel.name, block, [], stores, None, getattr(run, "wait", None))
        if run is None:             # a backend that shows only tokens: a spin loop is known by its block and EXEC
            record.wait = self._spin_wait(block, token)
        values = [self.tokens.id(first + 1 + i) for i in range(2 * LANES)]
        record.values = [T.argument(values[2 * i]) | (T.argument(values[2 * i + 1]) << 16) for i in range(LANES)]
        self.stats["records"] += 1
        self._launch["records"] += 1
        if token == T.END:
            self._feed(token, T.MODEL)
            self._park(block)
            if self._launch["warps"]:
                self._next_warp()
                record.next = T.argument(self._pending)
            else:
                self.launch_records.append(self._launch["records"])
                self._launch, self._pending, self._snapshot = None, None, None
                self.tokens.trim()      # between launches only: a launch in flight can still be rolled back
        else:
            self._pending = token
            record.next = T.argument(token)
        record.span = (first, len(self.tokens))
        record.log = self.tokens
        return record

    def _console(self, stores: list[tuple[int, int]]) -> None:
        """printf (qwengpu.lowering.console): a warp's stores to the console word are a call's number, then its
        arguments, one store a printing lane in each record; once a call's arguments are in, each lane's line is
        written (to ``printed`` and standard output), lanes in order. The host formats what the machine stored."""
        word, formats = self._launch["program"].console
        values = [value for address, value in stores if address == word]
        if not values:
            return
        warp, printing = self._launch["warp"], self._launch["printing"]
        if warp not in printing:
            call = values[0]
            if call >= len(formats) or values != [call] * len(values):
                raise MachineError(f"kernel {self._launch['kernel'].name}: console stores {values} are not a "
                                   f"printf's number (0..{len(formats) - 1}) on every printing lane")
            printing[warp] = (formats[call], [[] for _ in values])
        else:
            lanes = printing[warp][1]
            if len(values) != len(lanes):
                raise MachineError(f"kernel {self._launch['kernel'].name}: a printf argument stored by "
                                   f"{len(values)} lanes where {len(lanes)} print")
            for args, value in zip(lanes, values):
                args.append(value)
        form, lanes = printing[warp]
        if len(lanes[0]) == len(form.kinds):
            del printing[warp]
            lines = [form.line(args) for args in lanes]
            kernel = self._launch["kernel"]
            if form.refusal:        # a path the machine does not run (qwengpu.lowering.paths): stopped, rolled back
                error = MachineError(lines[0].strip(), line=form.refusal)
                raise (error if kernel.cuda is None else kernel.cuda.locate(error, kernel.source))
            for line in lines:
                self.printed.append(line)
                sys.stdout.write(line)
            if form.fatal:          # CUDA's device-side assert, or a trap: the launch stops (and is rolled back here)
                raise MachineError(f"kernel {self._launch['kernel'].name}: {form.stops}: {lines[0].strip()}")

    def _spin_wait(self, index: int, next_token: int) -> Wait | None:
        """A record of a spin block (a load and a conditional branch back to itself) that branched back: what it
        waits on, from the block's immediates (the loaded value is not in the stream, so it is None)."""
        block = self._launch["program"].block(self._launch["overlay"], index)
        if not (block.load and block.branch in ("nonzero", "zero") and block.target == index
                and next_token == T.EXEC(index)):
            return None
        address = block.a.imm if block.a.reg == NONE else -1
        expected = block.b.imm if block.b.reg == NONE else -1
        return Wait(address, None, expected, block.op)

    def _write_back(self, kernel: Kernel, block: int, header: int) -> tuple[int, int]:
        address = T.argument(header)
        aperture = self.router.route(address) if self.router is not None else None
        if aperture is not None and self._launch["program"].block(self._launch["overlay"], block).atomic:
            raise MachineError(f"kernel {kernel.name}: atomic store to address {address}, which is in aperture "
                               f"{aperture}: QLink routes only plain stores")
        fed = header if aperture is None or aperture.multicast else T.MEM(SINK)
        self._feed(fed, T.MODEL, written=header)
        lo, hi = self._write(), self._write()
        if aperture is not None:
            self._outbox.append(Packet(aperture, (header, lo, hi)))
        return address, T.argument(lo) | (T.argument(hi) << 16)

    def take_packets(self) -> list[Packet]:
        """The write records that left through apertures since the last call, in the order the model wrote them."""
        packets, self._outbox = self._outbox, []
        return packets

    def deliver(self, record_tokens: Sequence[int]) -> None:
        """Feed a peer's write record (MEM a, VAL lo, VAL hi) at the current record boundary."""
        record_tokens = [int(t) for t in record_tokens]
        if len(record_tokens) != 3 or T.kind(record_tokens[0]) != "MEM" or \
                any(T.kind(t) != "VAL" for t in record_tokens[1:]):
            raise MachineError(f"deliver: a packet is MEM a, VAL lo, VAL hi; got "
                               f"{[T.name(t) for t in record_tokens]}")
        if T.argument(record_tokens[0]) >= SINK:
            raise MachineError(f"deliver: packet for address {T.argument(record_tokens[0])}, outside 0..{SINK - 1}")
        self._feed_all(record_tokens, T.PEER)

    def _abort_launch(self) -> None:
        """Put memory, context and counters back as they were before the failed launch."""
        if self._snapshot is None:
            self._launch = None
            return
        state, length, stats, rom = self._snapshot
        self._backend_restore(state)
        del self.tokens[length:]
        self.stats, self._rom = stats, rom
        self._launch, self._pending, self._snapshot, self._outbox = None, None, None, []

    abort = _abort_launch

    # -- the token stream ------------------------------------------------------------------------------------------
    def _predict(self) -> int:
        self._flush()
        return self.backend.predict()

    def _write(self) -> int:
        """The model writes a token and it is fed back as is."""
        token = self._predict()
        self._feed(token, T.MODEL)
        return token

    def _feed(self, token: int, origin: str, written: int | None = None) -> None:
        if hasattr(self.backend, "feed_run"):
            self._unfed.append(token)
        else:
            self.backend.feed(token)
        self.tokens.append(token, origin, written)
        self.stats["tokens_written" if origin == T.MODEL else "tokens_fed"] += 1

    def _feed_all(self, tokens: Sequence[int], origin: str) -> None:
        for token in tokens:
            self._feed(token, origin)

    def _flush(self) -> None:
        """Give the backend the tokens fed since its last prediction, as one run. Nothing reads a prediction inside
        a run, so the backend sees the stream it would see token by token (``ModelBackend.feed_run``)."""
        if self._unfed:
            run, self._unfed = self._unfed, []
            self.backend.feed_run(run)

    def _backend_snapshot(self):
        self._flush()
        return self.backend.snapshot()

    def _backend_restore(self, state) -> None:
        self._unfed = []            # fed after the snapshot: dropped with the rest of what came after it
        self.backend.restore(state)


def _entry(module, name: str) -> str:
    """The entry of the module that kernel ``name`` is: itself, or the one C++ kernel of that name (``__global__ void
    k(int *)`` without ``extern "C"`` is the entry ``_Z1kPi``: Itanium's mangling, the name's length, the name, then
    the parameter types)."""
    entries = [*module.kernels, *module.refused]
    if name in entries:
        return name
    mangled = [e for e in entries if e.startswith(f"_Z{len(name)}{name}")]     # the length ends the name
    if len(mangled) == 1:
        return mangled[0]
    if mangled:
        raise MachineError(f"kernel {name!r} is overloaded or a template in the module ({', '.join(mangled)}): "
                           "load it by a C++ name expression (\"k<int>\", \"k(int *)\" for an overload), by its "
                           "mangled name, or declare it extern \"C\"")
    raise MachineError(f"kernel {name!r} is not in the module (it has {sorted(entries)})")


def _parameter(param) -> str:
    """A kernel parameter as a user knows it: its C type, from PTX's (the name is the compiler's)."""
    if param.size is not None:
        return f"a struct of {param.size} bytes"
    bits = param.type[1:]
    named = {"f32": "float", "f64": "double", "u64": "a pointer or a 64-bit integer", "s64": "a 64-bit integer",
             "b64": "a pointer or a 64-bit integer"}
    return named.get(param.type, f"{'an' if bits == '8' else 'a'} {bits}-bit integer")


def _integer(value, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise MachineError(f"{what} must be an integer, got {value!r}")
    return int(value)


def dim3(value, what: str = "threads", limit: int = MAX_THREADS) -> tuple[int, int, int]:
    """CUDA's dim3: an int, or a tuple of 1 to 3 ints (x, y, z); every size at least 1, their product at most
    ``limit``."""
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(dims) <= 3:
        raise MachineError(f"{what}={value!r}: give an int or (x, y) or (x, y, z)")
    dims = tuple(_integer(d, what) for d in dims) + (1,) * (3 - len(dims))
    if min(dims) < 1 or math.prod(dims) > limit:
        raise MachineError(f"{what}={value!r}: a launch has 1..{limit} {what} (in all, each size at least 1)")
    return dims


def launch_geometry(shape: tuple, grid: tuple) -> dict:
    """What Kernel.program is told of a block's and a grid's dimensions: nothing for 1-d ones, so 1-d launches
    lower as they always have (the thread and block counts say it all)."""
    geometry = {"shape": shape, "grid": grid}
    return {} if shape[1:] == grid[1:] == (1, 1) else geometry


def _float_bits(value, what: str, dtype) -> int:
    """A number as the bits of the ``dtype`` (float32 or float64: a ``float`` or ``double`` parameter) nearest it,
    as C++ converts an argument; one too large for it is refused (not made infinite)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise MachineError(f"{what} must be a number, got {value!r}")
    name = np.dtype(dtype).name
    try:
        with np.errstate(over="ignore"):
            rounded = dtype(value)
        too_large = np.isinf(rounded) and not np.isinf(float(value))
    except OverflowError:                   # an int beyond even float64
        too_large = True
    if too_large:
        raise MachineError(f"{what}: {value!r} is outside {name}'s range (its largest finite value is "
                           f"{float(np.finfo(dtype).max)!r})")
    return int(rounded.view(np.uint32 if dtype == np.float32 else np.uint64))


def _struct_bytes(value, size: int, what: str) -> int:
    """A struct argument: its ``size`` bytes (bytes, a ctypes.Structure, a numpy record) as a little-endian int."""
    if isinstance(value, np.ndarray) and value.size == 1 or isinstance(value, np.void):
        value = value.tobytes()
    try:
        raw = bytes(value) if not isinstance(value, (int, float, str, np.integer, np.floating)) else None
    except TypeError:
        raw = None
    if raw is None:
        raise MachineError(f"{what} is a struct of {size} bytes: pass its bytes (bytes, a ctypes.Structure with the "
                           f"same fields, a numpy record), got {value!r}")
    if len(raw) != size:
        raise MachineError(f"{what} is a struct of {size} bytes, got {len(raw)} bytes")
    return int.from_bytes(raw, "little")


def _words(words) -> np.ndarray:
    data = np.asarray(words)
    if data.dtype == np.float32:
        data = data.view(np.uint32)     # a float32 is a word: its bits are copied, never converted
    elif data.dtype == np.float64:
        # a double is two words, the low word first (a GPU's layout: cudaMemcpy copies the bytes)
        data = np.ascontiguousarray(data, dtype="<f8").view(np.uint32)
    elif data.dtype.kind == "f":
        raise MachineError(f"device words are 32-bit: a {data.dtype} array is not written (pass float32 or "
                           "float64, whose bits are the words)")
    if data.ndim == 0 or data.dtype.kind not in "iu":
        raise MachineError(f"device words are an integer or float32 array, got shape {data.shape} dtype {data.dtype}")
    data = data.reshape(-1)             # a matrix is its rows one after another (C order), as cudaMemcpy copies it
    if data.dtype.itemsize > 4 and len(data) and (data.min() < -(1 << 31) or data.max() >= (1 << 32)):
        raise MachineError("device words are 32-bit: a value is outside -2**31..2**32-1")
    return data.astype(np.int64) & 0xFFFFFFFF
