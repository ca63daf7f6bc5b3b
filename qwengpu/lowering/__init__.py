"""Lowering: one PTX kernel plus its launch arguments -> machine blocks (qwengpu.isa.Block).

The stages, one module each, run in this order:

0. ``paths.rewrite``             a path that cannot end without a double instruction the doubles stage does not
                                 build (a double log under a branch) as a run-time refusal, where it becomes
                                 certain (the entry's: left to the floats stage, which refuses it before the launch).
   ``console.rewrite``           each printf as stores of its call's number and arguments to the console word
                                 (the device prints what the machine stored), each assert and run-time refusal
                                 as stores of the thread's indices (the device stops the launch).
   ``block_votes.rewrite``       __syncthreads_count / _and / _or (bar.red) as an atomic add to a hidden shared
                                 word between two barriers.
   ``carries.rewrite``           carry chains (add.cc / addc, sub.cc / subc, mad.cc / madc) as plain instructions
                                 and a register for the carry.
   ``packed.rewrite``            add / sub / min / max of packed 16-bit lanes (.u16x2 / .s16x2) as word
                                 instructions that keep each lane's carry in its lane.
   ``doubles.rewrite``           float64 moves, compares, add / sub / mul / div / sqrt and conversions as 64-bit
                                 integer PTX, whose registers the pairs stage keeps as pairs of words.
   ``pairs.rewrite``             64-bit integer loads, stores and atomics as accesses of two words; the values
                                 loaded, and those computed from them, kept as pairs of words (add with its carry,
                                 compares of the high words first).
   ``floats.as_integers``        float32 moves, compares, arithmetic and conversions as integer PTX (what is not
                                 built is refused by name there).
1. ``cfg.layout``                blocks in an order the emitter walks: each loop's blocks together, every other
                                 branch forward (nvcc's bodies that place a shared exit before a loop, or interleave
                                 loops, are reordered; bodies already in order are kept as they are);
   ``cfg.merge_latches``         one latch per loop (several backward branches to a loop's start go to one new one);
   ``cfg.basic_blocks``          split the body at labels and branches.
2. ``propagate.propagate``       constants and thread-index affine values through the control-flow graph, with
                                 ``transfer.step``: the one transfer function per instruction every stage uses.
3. ``emit.Emitter``              the executable blocks in program order as machine ops (``mop.MOp``) under lane
                                 predicates (``predicates.Predicate``); addresses in words (``pointers``), 64-bit
                                 loop counters in one word (``counters``: their steps saturate). Each
                                 instruction's ops come from ``memory``, ``addressing``, ``arithmetic`` or ``bits``.
3b. ``barriers.expand``          with several warps, each __syncthreads becomes a parking block and a resume point
                                 (the registers live across it kept in the block's words).
4. ``fuse.fuse``                 packs a load into its consumer, a store or a branch into the op computing its value.
5. ``regalloc.allocate``         virtual registers onto the 15 machine registers; the ROM blocks.
5b. ``overlays.split``           a program that does not fit is cut into overlays of at most 32 blocks each, a warp
                                 leaving one as it leaves a barrier (fusion and allocation run on each; its
                                 barriers are resume points of the overlays).

Limits are errors that name the value and the limit: more than 15 registers live at one op, block memory, an
unsupported instruction (with its text and line), wrong launch arguments.

Example::

    >>> from qwengpu.ptx import parse
    >>> from qwengpu.toolchain import ptx_for
    >>> kernel = parse(ptx_for("qwengpu/kernels/vadd.cu")).kernels["vadd"]    # doctest: +SKIP
    >>> len(lower(kernel, [0, 16, 32, 16], threads=16).blocks)                  # doctest: +SKIP
    2
"""
from __future__ import annotations

from .. import isa
from ..isa import MachineError
from . import block_votes, carries, console, deadline, doubles, packed, pairs, paths
from .barriers import expand, state_slots
from .cfg import basic_blocks, layout, merge_latches
from .emit import Emitter
from .floats import as_integers
from .fuse import arithmetic, fuse, prune
from .mop import MOp, Program
from .overlays import split
from .propagate import propagate
from .regalloc import DoesNotFit, allocate, check_uniform_branches
from .transfer import WARP_INSTRUCTIONS
from .warp import EXCHANGE
from ..ptx import Instruction, Mem, Reg
from .pointers import address_registers
from .values import MASK32, Affine, Const, Context, destination

__all__ = ["lower", "Program", "bind_arguments", "pointer_fields", "shared_layout", "local_layout"]


# At most this many 64-bit registers are made pairs of words because the lowering refused their high words
# (``lower``): each one more costs a lowering of the kernel.
PAIR_REGISTERS = 32
SURELY_LONG = 2 * isa.ROM_BLOCKS     # ops of arithmetic past which a program is not tried as one (``_lowered``)


def pointer_fields(kernel) -> set[tuple[str, int]]:
    """The 64-bit parameters the kernel uses as addresses, as (parameter, byte offset): offset 0 of a pointer
    parameter (a ``size_t n`` is a 64-bit value, not a pointer), and the pointer fields of a struct passed by
    value."""
    addresses = address_registers(kernel.body)
    pointers = set()
    for inst in kernel.body:
        if isinstance(inst, Instruction) and inst.base == "ld" and "param" in inst.modifiers:
            mem = inst.operands[1]
            if isinstance(mem, Mem) and isinstance(inst.operands[0], Reg) and inst.operands[0].name in addresses:
                pointers.add((mem.base, mem.offset))
    return pointers


def bind_arguments(kernel, args: list[int]) -> dict:
    """Launch arguments as constants: pointers (64-bit parameters used as addresses) as byte addresses, integers as
    words (a 64-bit integer must fit 32 bits), a struct passed by value as its bytes (an int, little-endian) with
    its pointer fields made byte addresses."""
    if len(args) != len(kernel.params):
        names = ", ".join(f"{p.name}: {p.type}" for p in kernel.params)
        raise MachineError(f"kernel {kernel.name} takes {len(kernel.params)} arguments ({names}), got {len(args)}")
    params = {}
    pointers = pointer_fields(kernel)
    for number, (param, value) in enumerate(zip(kernel.params, args), 1):
        if param.size is not None:
            params[param.name] = Const(_struct_value(kernel, param, value, sorted(
                offset for name, offset in pointers if name == param.name)))
        elif param.type == "f64":         # a double's bits (Device.launch converts a Python float to them)
            if not 0 <= value < (1 << 64):
                raise MachineError(f"kernel {kernel.name} argument {number} ({param.name}): {value} is not the bits "
                                   "of a float64 (0..2**64-1)")
            params[param.name] = Const(value)
        elif param.type.endswith("64") and (param.name, 0) not in pointers:
            if not -(1 << 31) <= value < (1 << 32):
                raise MachineError(f"kernel {kernel.name} argument {number} ({param.name}): {value} does not fit 32 "
                                   "bits (the machine's words)")
            params[param.name] = Const(value & ((1 << 64) - 1) if value >= 0 else value & ((1 << 64) - 1))
        elif param.type.endswith("64"):
            if not 0 <= value <= isa.SINK:
                raise MachineError(f"kernel {kernel.name} argument {number} ({param.name}): pointer {value} is not a "
                                   f"device word address 0..{isa.SINK}")
            params[param.name] = Const(value * 4)       # PTX addresses are bytes; the machine's are words
        elif param.type == "f32":         # a float's bits (Device.launch converts a Python float to them)
            if not 0 <= value <= MASK32:
                raise MachineError(f"kernel {kernel.name} argument {number} ({param.name}): {value} is not the bits "
                                   "of a float32 (0..0xffffffff)")
            params[param.name] = Const(value)
        elif param.type[1:] in ("32", "16", "8"):
            bits = int(param.type[1:])
            if not -(1 << (bits - 1)) <= value < (1 << bits):
                raise MachineError(f"kernel {kernel.name} argument {number} ({param.name}): {value} does not fit "
                                   f"{bits} bits")
            params[param.name] = Const(value & ((1 << bits) - 1) & MASK32)
        else:
            raise MachineError(f"kernel {kernel.name} parameter {param.name}: type .{param.type} is not supported "
                               "(integers of 8 to 32 bits, float32 and pointers)")
    return params


def _struct_value(kernel, param, value: int, pointer_offsets: list[int]) -> int:
    """A struct argument's bytes with each pointer field's device word address made a byte address, as a pointer
    parameter's is."""
    if not 0 <= value < 1 << (8 * param.size):
        raise MachineError(f"kernel {kernel.name} argument {param.name}: {value} is not the bytes of a "
                           f"{param.size}-byte struct")
    for offset in pointer_offsets:
        word = (value >> (8 * offset)) & ((1 << 64) - 1)
        if not 0 <= word <= isa.SINK:
            raise MachineError(f"kernel {kernel.name} argument {param.name}: the pointer at byte {offset} is {word}, "
                               f"not a device word address 0..{isa.SINK}")
        value += (3 * word) << (8 * offset)         # word * 4, in place: PTX addresses are bytes
    return value


def shared_layout(kernel, dynamic: int = 0) -> tuple[int, dict[str, int]]:
    """The kernel's __shared__ arrays at the top of memory (below the sink), in declaration order, each starting on a
    word, then the warp's exchange words if the kernel shuffles or votes (``warp.EXCHANGE``), then the dynamic shared
    memory (``extern __shared__``: ``dynamic`` bytes, given at launch; every extern array starts there, as on a
    GPU): (words they take, name -> byte address)."""
    arrays = getattr(kernel, "shared", {})
    sizes = {name: (size + 3) // 4 for name, size in arrays.items() if size is not None}
    extern = [name for name, size in arrays.items() if size is None]
    if not isinstance(dynamic, int) or isinstance(dynamic, bool) or dynamic < 0:
        raise MachineError(f"kernel {kernel.name}: shared={dynamic!r} is not a number of bytes of dynamic shared "
                           "memory (an integer >= 0)")
    if extern and not dynamic:
        raise MachineError(f"kernel {kernel.name} declares extern __shared__ {', '.join(extern)} (dynamic shared "
                           "memory): give its size in bytes at launch, dev.launch(..., shared=BYTES)")
    dynamic_words = (dynamic + 3) // 4 if extern else 0
    if any(isinstance(inst, Instruction) and inst.base in WARP_INSTRUCTIONS for inst in kernel.body):
        sizes[EXCHANGE] = isa.LANES     # shfl / vote / redux pass values between lanes through these words
    words = sum(sizes.values()) + dynamic_words
    if words > isa.USABLE_WORDS:
        listed = ", ".join([f"{name} {n}" for name, n in sizes.items()] +
                           ([f"extern {'/'.join(extern)} {dynamic_words}"] if extern else []))
        raise MachineError(f"kernel {kernel.name} declares {words} words of __shared__ arrays ({listed}); memory has "
                           f"{isa.USABLE_WORDS} words")
    symbols, at = {}, isa.SINK - words
    for name, n in sizes.items():
        symbols[name] = 4 * at
        at += n
    for name in extern:
        symbols[name] = 4 * at
    return words, symbols


def local_layout(kernel, threads: int, shared_words: int, symbols: dict) -> int:
    """Each thread's ``.local`` arrays (a local array indexed at run time), below the __shared__ arrays: thread t's
    copy of the words starts ``t * words`` after the first thread's, so an array's address is an affine function of
    the thread index (``symbols`` gets it as a ``values.Affine`` in bytes). Returns the words a thread takes."""
    words = sum((size + 3) // 4 for size in kernel.local.values())
    if shared_words + words * threads > isa.USABLE_WORDS:
        listed = ", ".join(f"{name} {(size + 3) // 4}" for name, size in kernel.local.items())
        raise MachineError(f"kernel {kernel.name} with {threads} threads needs {words * threads} words of .local "
                           f"arrays ({listed} words a thread) beside {shared_words} of __shared__ arrays; memory "
                           f"has {isa.USABLE_WORDS} words")
    at = isa.SINK - shared_words - words * threads
    for name, size in kernel.local.items():
        symbols[name] = Affine(4 * words, 4 * at)
        at += (size + 3) // 4
    return words


def variable_layout(kernel, placed: dict[str, int]) -> dict[str, int]:
    """The kernel's ``__device__`` / ``__constant__`` variables at the words the device gave them (``placed``:
    name -> word address, ``Device.load_kernel``): name -> byte address."""
    used = getattr(kernel, "variables", {})
    missing = [name for name in used if name not in placed]
    if missing:
        raise MachineError(f"kernel {kernel.name} uses the module variables {', '.join(missing)}, which have no "
                           "words in device memory: load it with Device.load_kernel, which places them")
    return {name: 4 * placed[name] for name in used}


def lower(kernel, args: list[int], threads: int, block: int = 0, blocks: int = 1, shared: int = 0,
          shape: tuple[int, int, int] | None = None, grid: tuple[int, int, int] | None = None,
          variables: dict[str, int] | None = None) -> Program:
    """Lower a parsed PTX kernel for a launch with these argument values, this many threads per block, as block
    ``block`` of a grid of ``blocks``, with ``shared`` bytes of dynamic shared memory (``extern __shared__``).
    ``shape`` / ``grid``: the block's and the grid's (x, y, z) sizes where they have more than one dimension
    (their products are ``threads`` and ``blocks``; ``block`` is the linear index, x fastest). ``variables``: the
    word address of each ``__device__`` / ``__constant__`` variable the kernel names (the device places them).

    A block's __shared__ arrays and (with more than one warp) its barrier state, or a program longer than the ROM
    its overlay state, take the top words of memory (``Program.reserved``; qwengpu.lowering.barriers,
    qwengpu.lowering.overlays). A lowering that runs past ``QWENGPU_LOWERING_SECONDS`` (300 s) stops with
    ``deadline.LoweringTimeout`` (qwengpu.lowering.deadline)."""
    with deadline.lowering(kernel.name):
        return _lower(kernel, args, threads, block, blocks, shared, shape, grid, variables)


def _lower(kernel, args, threads, block, blocks, shared, shape, grid, variables) -> Program:
    """``lower``'s stages, under its deadline."""
    kernel, formats = console.rewrite(paths.rewrite(kernel))
    kernel = packed.rewrite(carries.rewrite(block_votes.rewrite(kernel)))
    # doubles as 64-bit integers, whose registers the pairs stage keeps as pairs of words
    kernel, doubled = doubles.rewrite(kernel)
    written = {name for inst in kernel.body if isinstance(inst, Instruction) for name in [destination(inst)] if name}
    # A 64-bit value whose high word the lowering does not hold is refused naming the registers it reads; kept as
    # pairs of words they have their high words, so the kernel is lowered again with them (a chain of sums: a
    # register more each time, up to PAIR_REGISTERS).
    seeds: frozenset = doubled
    while True:
        deadline.check("lowering again with more registers as pairs of words")
        try:
            return _laid_out(as_integers(pairs.rewrite(kernel, seeds)), formats, args, threads, block, blocks, shared,
                             shape, grid, variables)
        except MachineError as error:
            more = getattr(error, "high_words", frozenset()) & written
            if more <= seeds or len(seeds | more) - len(doubled) > PAIR_REGISTERS:
                raise
            seeds |= more


def _laid_out(kernel, formats, args: list[int], threads: int, block: int, blocks: int, shared: int, shape, grid,
              variables) -> Program:
    """``lower`` after the stages that rewrite PTX: memory laid out, then the machine program."""
    shared_words, symbols = shared_layout(kernel, shared)
    local_words = local_layout(kernel, threads, shared_words, symbols)
    symbols.update(variable_layout(kernel, variables or {}))
    shared_words += local_words * threads
    context = Context(bind_arguments(kernel, args), threads, blocks, block, symbols, shape, grid, kernel.registers)
    printing = (symbols[console.CONSOLE] // 4, formats) if formats else ()
    program = _lowered(kernel, context, threads, shared_words, local_words)
    program.console = printing
    return program


def _lowered(kernel, context: Context, threads: int, shared_words: int, local_words: int) -> Program:
    """The machine program of an integer kernel whose memory is laid out (``lower``'s stages after the layout)."""
    kernel = merge_latches(layout(kernel))
    cfg = basic_blocks(kernel)
    states = propagate(kernel, cfg, context)
    emitter = Emitter(kernel, cfg, states, context)
    mops = emitter.run()
    slots = state_slots(mops)
    words = shared_words + slots * threads
    markers = [m.copy() for m in mops]      # the barriers still markers: overlays leave them their own way

    def overlaid(why: str) -> Program:
        """The program as overlays (``_overlaid``); ``why``: why it is not one program."""
        return _overlaid(kernel.name, why, prune(markers), threads, shared_words, local_words, emitter.barrier)

    if words > isa.USABLE_WORDS:
        error = _memory_error(kernel.name, threads, shared_words, local_words, slots, "__syncthreads")
        try:        # overlays keep fewer: a register is loaded where first used and stored only if written
            return overlaid(str(error))
        except MachineError:
            raise error from None
    base = isa.SINK - words
    mops, _ = expand(mops, threads, base)
    pruned = None
    try:
        if len(mops) > SURELY_LONG:
            # fusion is quadratic in the ops (minutes for the 15,000 of a double exp): a program whose arithmetic
            # alone is twice the ROM goes to the overlays without trying it whole
            pruned = prune(mops)
            if arithmetic(pruned) > SURELY_LONG:
                raise DoesNotFit(f"kernel {kernel.name} needs at least {arithmetic(pruned)} blocks; the ROM holds "
                                 f"{isa.ROM_BLOCKS}")
        try:
            program = allocate(kernel.name, fuse([m.copy() for m in mops]), emitter.barrier)
        except DoesNotFit:
            program = allocate(kernel.name, fuse(pruned or prune(mops)), emitter.barrier, precise=True)
    except DoesNotFit as error:
        return overlaid(str(error))
    if words:
        program.reserved = (base, words)
    if slots:
        program.cleared = (base, threads)
    return program


def _memory_error(name: str, threads: int, shared_words: int, local_words: int, slots: int,
                  across: str) -> MachineError:
    """Block memory over the machine's words: the arrays, and ``slots`` words a thread (a resume word and the kept
    registers) to keep across ``across``."""
    words = shared_words + slots * threads
    local = f", {local_words * threads} of .local arrays ({local_words} a thread)" if local_words else ""
    return MachineError(f"kernel {name} with {threads} threads needs {words} words of block memory "
                        f"({shared_words - local_words * threads} of __shared__ arrays{local}, {slots * threads} "
                        f"to keep {slots - 1} registers and a resume word per thread across {across}); memory has "
                        f"{isa.USABLE_WORDS} words")


def _fits(ops: list[MOp]) -> bool:
    try:
        allocate("", fuse([m.copy() for m in ops]), False, precise=True)
    except DoesNotFit:
        return False
    return True


def _overlaid(name: str, why: str, mops: list[MOp], threads: int, shared_words: int, local_words: int,
              barrier: bool) -> Program:
    """A program longer than the ROM as overlays (qwengpu.lowering.overlays), their state in the words below the
    __shared__ and .local arrays."""
    check_uniform_branches(name, mops)          # on the whole program: a register reloaded at a cut looks uniform
    overlays = split(why, mops, threads, _fits)
    if shared_words + overlays.slots * threads > isa.USABLE_WORDS:      # cut where fewer registers are live
        overlays = min(overlays, split(why, mops, threads, _fits, share=1), key=lambda o: o.slots)
    words = shared_words + overlays.slots * threads
    if words > isa.USABLE_WORDS:
        raise _memory_error(name, threads, shared_words, local_words, overlays.slots,
                            f"__syncthreads and the cuts between its {len(overlays.bounds) - 1} overlays")
    base = isa.SINK - words
    parts = [allocate(name, fuse(ops), barrier, precise=True) for ops in overlays.programs(base)]
    blocks, listing, exits, waits, spans = [], [], set(), set(), []
    for k, part in enumerate(parts):
        spans.append((len(blocks), len(part.blocks)))
        exits |= {len(blocks) + row for row in part.parks}
        waits |= {len(blocks) + row for row in part.waits}
        listing += [f"{line}    [overlay {k}]" for line in part.listing]
        blocks += part.blocks
    program = Program(name, blocks, max(part.registers for part in parts), barrier, listing)
    program.parks, program.waits, program.overlays = frozenset(exits), frozenset(waits), tuple(spans)
    program.reserved, program.cleared = (base, words), (base, threads)
    return program
