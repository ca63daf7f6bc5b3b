"""printf and assert on the machine: each call's arguments stored, lane by lane, to a console word the device reads.

NVRTC compiles ``printf("x=%d %f\\n", i, f)`` to stores of the arguments into a buffer in the thread's local memory
(C's varargs: ints as 4 bytes, a float promoted to a double as 8, each at its alignment) and a call of vprintf with
the format string (a module-scope ``.global`` byte array) and the buffer. The machine has no console and no 64-bit
floats, so this stage (the lowering's first) rewrites each call as stores to a word of the block's memory, the
console (``CONSOLE``, a 4-byte ``__shared__`` array): first the call's number, then each argument's word, under the
call's guard, so exactly the lanes that print store, in lane order. A float argument is stored as the float32 it
was promoted from (``cvt.f64.f32``, exact: the double holds the same number); a double (one the kernel computes,
qwengpu.lowering.doubles) as its two words. The buffer's stores, the format's
address and the promotion go; so do the local buffer and the format string where nothing else uses them (the device
gives them no words).

The device (``Device._console``) reads a warp's stores to the console word from its records, a call's number and
then its arguments, and writes each lane's line with the call's ``Format``: the host formats what the machine
stored, as a GPU's driver prints what its printf buffer holds. ``printf`` returns the number of its arguments, as
CUDA's does.

assert (NVRTC calls __assertfail where the condition is false) is a call of the same kind: the failing lane stores
its block and thread indices, the device writes CUDA's line (``ASSERTION``) and stops the launch with CUDA's
device-side assert error (``Format.fatal``). So is ``__trap()`` (PTX's ``trap``), which aborts a GPU's kernel: the
device writes which thread trapped (``TRAP``) and stops the launch. A run-time refusal (``refuse``: a path the
machine does not run, qwengpu.lowering.paths) is one too: the thread's indices, then the device raises a
``MachineError`` naming the PTX instruction (``Format.refusal``) and puts the launch back.

Conversions taken: ``%d %i %u %x %X %o %c`` (with ``h`` / ``hh``), ``%f %F %e %E %g %G`` of a float or a double,
flags, widths and precisions (``*`` too), ``%%``, and ``%s`` of string literals (the machine stores which literal: a
choice such as ``x ? "big" : "small"`` becomes a ``selp`` of their numbers), and ``%ld`` / ``%lu`` / ``%llx`` /
``%zu`` (``l``, ``ll``, ``z``, ``j``, ``t``: a 64-bit argument, stored as its low word and its high word, which
the machine computes as ``>> 32``: the lowering refuses it where the machine does not hold the high word, and runs
it for a word extended, a loop counter, a product of words); refused by name: ``%p`` (the machine keeps no pointers
for the host), ``%lc`` / ``%ls``, ``%Lf``, ``%a``, ``%n`` and ``%#o``.
"""
from __future__ import annotations

import collections
import dataclasses
import re
import struct
from dataclasses import dataclass

from ..isa import MachineError
from ..ptx import Imm, Instruction, Label, Mem, Reg
from .floats import DOUBLE_HINT
from .paths import REFUSE
from .transfer import registers_read

CONSOLE = "__console"
CHOICE = "%__string"        # registers holding which string literal a %s prints
HIGH = "%__high"            # registers holding a 64-bit argument's high word (the machine computes it)
WIDE = ("l", "ll", "z", "j", "t")       # the length modifiers of a 64-bit integer argument
_SPEC = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d*))?(hh|h|ll|l|z|j|t|L)?([diouxXcfFeEgGaAspn%])")


@dataclass(frozen=True)
class Format:
    """One printf call: its format string and what each argument word is: "int" (d, i, ``*``), "unsigned" (u, x, X,
    o), "char" (c), "string" (s: the number of a string literal in ``strings``), "float" (f, e, g, promoted from a
    float32), "double" then "high" (f, e, g of a double: its two words), or "long" then "high" (a 64-bit argument
    of l / ll / z / j / t: its low word, then its high word).
    ``fatal``: an assert's message or a trap's (its words the failing thread's block and thread index), after which
    the launch stops, as CUDA's device-side assert, with the error ``stops``. ``refusal``: the PTX line of the
    instruction a run-time refusal stands for (0 for a printf, an assert or a trap)."""
    text: str
    kinds: tuple[str, ...]
    fatal: bool = False
    strings: tuple[str, ...] = ()       # a %s argument's word is the number of one of these string literals
    refusal: int = 0
    stops: str = "device-side assert triggered (cudaErrorAssert)"

    def line(self, words: list[int]) -> str:
        """The text this call prints for one lane's argument words, as C's printf formats them."""
        out, pos, at = [], 0, 0
        for m in _SPEC.finditer(self.text):
            out.append(self.text[pos:m.start()])
            pos = m.end()
            flags, width, precision, length, conversion = m.groups()
            if conversion == "%":
                out.append("%")
                continue
            if width == "*":                # a negative * width left-justifies, as in C
                width, at = str(_signed(words[at])), at + 1
                if width.startswith("-"):
                    flags, width = flags + "-", width[1:]
            if precision == "*":            # a negative * precision is as if none was given
                star, at = _signed(words[at]), at + 1
                precision = str(star) if star >= 0 else None
            word, at = words[at], at + 1
            if length in WIDE:              # a 64-bit argument: its low word, then its high word
                word, at = word | words[at] << 32, at + 1
            if conversion in "di":
                value = _narrow(word, length, signed=True)
            elif conversion in "ouxX":
                value = _narrow(word, length, signed=False)
            elif conversion == "c":
                value = chr(word & 0xFF)
            elif conversion == "s":
                value = self.strings[word]
            elif self.kinds[at - 1] == "double":    # a double: its low word, then its high word
                word, at = word | words[at] << 32, at + 1
                value = struct.unpack("<d", word.to_bytes(8, "little"))[0]
            else:
                value = struct.unpack("<f", word.to_bytes(4, "little"))[0]
            spec = "%" + flags + (width or "") + ("." + precision if precision is not None else "") + conversion
            out.append(spec % value)
        out.append(self.text[pos:])
        return "".join(out)


def _literal(text) -> str:
    """A string of the program as printf text (its % doubled)."""
    return str(text).replace("%", "%%")


def _signed(word: int) -> int:
    return word - (1 << 32) if word & 0x80000000 else word


def _narrow(word: int, length: str | None, signed: bool) -> int:
    """The word as C's h / hh read it (an int argument converted to short / char first); a 64-bit argument's two
    words (l, ll, z, j, t) as a long."""
    bits = {"h": 16, "hh": 8}.get(length, 64 if length in WIDE else 32)
    word &= (1 << bits) - 1
    return word - (1 << bits) if signed and word >> (bits - 1) & 1 else word


def conversions(text: str, where: str) -> list[tuple[str, int]]:
    """The argument words a format reads, in order: (kind, bytes in the varargs buffer); refuses what the machine
    cannot print, naming the conversion."""
    words = []
    for m in _SPEC.finditer(text):
        flags, width, precision, length, conversion = m.groups()
        if conversion == "%":
            continue
        wide = length in WIDE and conversion in "diouxX"
        if conversion in "pnaA" or (length in WIDE + ("L",) and not wide) or ("#" in flags and conversion == "o"):
            why = {"p": "a pointer", "n": "a count written back", "o": "C's alternate octal form",
                   "c": "a wide character", "s": "a wide string"}.get(
                conversion, "a hexadecimal float" if conversion in "aA" else "a long double")
            raise MachineError(f"{where}: printf's %{(length or '') + conversion} ({why}) is not supported: the "
                               "machine prints ints (%d %u %x %o %c, h / hh; l / ll / z / j / t of 64-bit values "
                               "whose high word it computes), floats (%f %e %g) and string literals (%s)")
        words += [("int", 4)] * ((width == "*") + (precision == "*"))
        words.append(("long", 8) if wide else ("int", 4) if conversion in "di" else ("unsigned", 4)
                     if conversion in "ouxX" else ("char", 4) if conversion == "c" else ("string", 8)
                     if conversion == "s" else ("float", 8))
    return words


# An assert's line, as CUDA writes it: where, the block and thread indices (the machine's words), the condition.
ASSERTION = "{file}:{line}: {function}: block: [%d,%d,%d], thread: [%d,%d,%d] Assertion `{message}` failed.\n"
TRAP = "block: [%d,%d,%d], thread: [%d,%d,%d] executed trap (__trap())\n"
INDICES = ("%ctaid.x", "%ctaid.y", "%ctaid.z", "%tid.x", "%tid.y", "%tid.z")


def rewrite(kernel):
    """The kernel with each printf (the parser's ``printf [result,] format, buffer``) and each failing assert
    (``assertfail message, file, line, function``: the call NVRTC makes where the condition is false) as stores to
    the console word, and the formats, one a call in the order of the calls' numbers. A kernel without either comes
    back as it is."""
    calls = [i for i, inst in enumerate(kernel.body) if isinstance(inst, Instruction)
             and inst.base in ("printf", "assertfail", "trap", REFUSE)]
    if not calls:
        return kernel, ()
    body = list(kernel.body)
    writes = collections.defaultdict(list)     # register -> the instructions that write it
    for i, inst in enumerate(body):
        if isinstance(inst, Instruction) and inst.operands and isinstance(inst.operands[0], Reg) \
                and inst.base not in ("st", "red", "bra", "printf", "assertfail", "trap", REFUSE):
            writes[inst.operands[0].name].append(i)
    defs = {name: sites[0] for name, sites in writes.items() if len(sites) == 1}    # registers written once
    numbers = _StringNumbers(kernel, body, writes)
    dropped: set[int] = set()
    formats, replaced, highs = [], {}, 0
    for number, i in enumerate(calls):
        call = body[i]
        where = f"kernel {kernel.name} line {call.line}"
        if call.base == REFUSE:         # a path the machine does not run: the thread's indices, then the launch stops
            formats.append(Format(_refusal_text(kernel.name, call), ("int",) * len(INDICES), fatal=True,
                                  refusal=call.line))
            replaced[i] = _indices(number, call)
            continue
        if call.base == "trap":         # __trap(): the thread's indices, then the launch stops as a GPU's aborts
            formats.append(Format(TRAP, ("int",) * len(INDICES), fatal=True, stops="the launch aborted at a trap"))
            replaced[i] = _indices(number, call)
            continue
        if call.base == "assertfail":
            message, file, line, function = (operand if isinstance(operand, Imm) else
                                             _format_text(kernel, _origin(body, defs, operand, where), where)
                                             for operand in call.operands)
            text = ASSERTION.format(file=_literal(file), line=line.value if isinstance(line, Imm) else line,
                                    function=_literal(function), message=_literal(message))
            formats.append(Format(text, ("int",) * len(INDICES), fatal=True))
            replaced[i] = _indices(number, call)
            continue
        *result, fmt, buffer = call.operands
        text = _format_text(kernel, _origin(body, defs, fmt, where), where)
        words = conversions(text, where)
        stores = _buffer_stores(body, defs, i, *_origin(body, defs, buffer, where), where) if words else {}
        sources, kinds, at, prelude = [], [], 0, []
        for kind, size in words:
            at = (at + size - 1) // size * size
            store = stores.pop(at, None)
            if store is None or _width(body[store]) != 8 * size:
                raise MachineError(f"{where}: printf's argument at byte {at} of its buffer is not a {size}-byte "
                                   f"store before the call ({text!r})")
            value, since = body[store].operands[1], store
            promote = defs.get(value.name) if kind == "float" and isinstance(value, Reg) else None
            if promote is not None and body[promote].opcode == "cvt.f64.f32":
                # a float promoted to a double: store the float32 it came from; the promotion goes unless the
                # double is read by more than printf buffers' stores (double arithmetic: qwengpu.lowering.doubles)
                promoted, value, since = value, body[promote].operands[1], promote
                if all(inst.base == "st" and "local" in inst.modifiers for inst in body
                       if isinstance(inst, Instruction) and promoted.name in registers_read(inst)):
                    dropped.add(promote)
            elif kind == "float":   # a double: its two words (qwengpu.lowering.doubles computes it)
                kind = "double"
            if kind != "string" and not _unchanged(body, writes, value, since, i):
                raise MachineError(f"{where}: printf's argument {value.name} is written again between its store into "
                                   "the buffer and the call")
            elif kind == "string":  # a string literal's address, or a choice of some: the literal's number
                value = numbers.of(value, where)
            if kind in ("long", "double"):      # its low word, then its high word as the machine computes it
                if isinstance(value, Imm):
                    sources += [Imm(value.value & 0xFFFFFFFF), Imm(value.value >> 32 & 0xFFFFFFFF)]
                else:
                    high = Reg(f"{HIGH}{highs}")
                    highs += 1
                    prelude.append(Instruction("shr.s64", (high, value, Imm(32)), call.guard, call.guard_negated,
                                               call.line, f"printf's 64-bit argument {value.name} ({text!r})"))
                    sources += [value, high]
                kinds += [kind, "high"]
            else:
                sources.append(value)
                kinds.append(kind)
            dropped.add(store)
            at += size
        if stores:
            raise MachineError(f"{where}: printf's buffer has stores at bytes {sorted(stores)} that its format "
                               f"{text!r} does not read")
        formats.append(Format(text, tuple(kinds)))
        console = Mem(CONSOLE, 0)
        new = prelude + [Instruction("st.shared.u32", (console, Imm(number)), call.guard, call.guard_negated,
                                     call.line, call.text)]
        new += [Instruction("st.shared.b32", (console, source), call.guard, call.guard_negated, call.line,
                            call.text) for source in sources]
        if result:
            new.append(Instruction("mov.b32", (result[0], Imm(len(words))), call.guard, call.guard_negated,
                                   call.line, call.text))
        replaced[i] = new
    out = []
    for i, inst in enumerate(body):
        if i in dropped:
            continue
        out.extend(replaced.get(i, [inst]))
        out.extend(numbers.after.get(i, []))
    out = _without_dead_addresses(out)
    formats = [dataclasses.replace(form, strings=tuple(numbers.strings)) for form in formats]
    named = {o.name for inst in out if isinstance(inst, Instruction) for o in inst.operands
             if isinstance(o, Label)} | {o.base for inst in out if isinstance(inst, Instruction)
                                          for o in inst.operands if isinstance(o, Mem) and isinstance(o.base, str)}
    shared = dict(kernel.shared)
    shared[CONSOLE] = 4
    return dataclasses.replace(
        kernel, body=out, shared=shared, registers={**kernel.registers, CHOICE: "b32", HIGH: "b64"},
        local={name: size for name, size in kernel.local.items() if name in named},
        variables={name: v for name, v in kernel.variables.items() if name in named}), tuple(formats)


def _indices(number: int, call: Instruction) -> list[Instruction]:
    """A fatal call's stores: its number, then the failing thread's block and thread indices."""
    return [Instruction("st.shared.u32", (Mem(CONSOLE, 0), value), call.guard, call.guard_negated, call.line,
                        call.text) for value in [Imm(number)] + [Reg(r) for r in INDICES]]


def _refusal_text(kernel: str, call: Instruction) -> str:
    """What a run-time refusal says: who took the path, the instruction it meets and why the machine has none."""
    return (f"kernel {kernel}: block [%d,%d,%d], thread [%d,%d,%d] took a path to PTX line {call.line} "
            f"({call.text.replace('%', '%%')}), which the machine does not run: a double instruction{DOUBLE_HINT}. "
            "The kernel's other paths run (qwengpu.lowering.paths)\n")


def _origin(body, defs, operand, where: str) -> tuple[str, int]:
    """The symbol and byte offset an address register holds (``mov`` of a symbol, ``cvta``, ``add`` of a
    literal: how NVRTC addresses a string literal and the local buffer)."""
    offset = 0
    while isinstance(operand, Reg):
        i = defs.get(operand.name)
        inst = body[i] if i is not None else None
        if inst is None or inst.base not in ("mov", "cvta", "add"):
            break
        if inst.base == "add":
            if not isinstance(inst.operands[2], Imm):
                break
            offset += inst.operands[2].value
        operand = inst.operands[1]
    if not isinstance(operand, Label):
        raise MachineError(f"{where}: printf's format and buffer must be a string literal and NVRTC's local buffer")
    return operand.name, offset


class _StringNumbers:
    """Which string literal a %s argument points to, as a number into the kernel's ``strings``: a literal's address
    is its number; a register the machine writes with several (``x ? "big" : "small"``: a ``selp`` of addresses,
    or a move on each side of a branch) gets a companion register written beside each of its writes (``after``:
    instruction index -> the instructions to insert after it) with the numbers instead, under the same guard."""

    def __init__(self, kernel, body, writes):
        self.kernel, self.body, self.writes = kernel, body, writes
        self.strings: list[str] = []
        self.after: dict[int, list] = collections.defaultdict(list)
        self.companions: dict[tuple, Reg] = {}

    def of(self, operand, where: str):
        if isinstance(operand, Label):
            return self._literal(operand.name, 0, where)
        sites = self.writes.get(operand.name, []) if isinstance(operand, Reg) else []
        if not sites:
            raise MachineError(f"{where}: printf's %s argument is not a string literal")
        if len(sites) == 1 and self.body[sites[0]].base in ("mov", "cvta"):
            return self.of(self.body[sites[0]].operands[1], where)
        key = operand.name
        if key not in self.companions:
            self.companions[key] = companion = Reg(f"{CHOICE}{len(self.companions)}")
            for site in sites:
                inst = self.body[site]
                if inst.base in ("mov", "cvta"):
                    new = Instruction("mov.b32", (companion, self.of(inst.operands[1], where)), inst.guard,
                                      inst.guard_negated, inst.line, inst.text)
                elif inst.base == "selp":
                    chosen = tuple(self.of(o, where) for o in inst.operands[1:3])
                    new = Instruction("selp.b32", (companion, *chosen, inst.operands[3]), inst.guard,
                                      inst.guard_negated, inst.line, inst.text)
                else:
                    raise MachineError(f"{where}: printf's %s argument is computed ({inst.text}), not a string "
                                       "literal or a choice of some")
                self.after[site].append(new)
        return self.companions[key]

    def _literal(self, symbol: str, offset: int, where: str) -> Imm:
        self.strings.append(_format_text(self.kernel, (symbol, offset), where))
        return Imm(len(self.strings) - 1)


def _format_text(kernel, origin: tuple[str, int], where: str) -> str:
    name, offset = origin
    variable = kernel.variables.get(name)
    if variable is None:
        raise MachineError(f"{where}: printf's format {name} is not a string literal of the module")
    return variable.initial[offset:].split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _buffer_stores(body, defs, call: int, depot: str, start: int, where: str) -> dict[int, int]:
    """The stores into the call's buffer before it, back to the block's start: byte offset -> instruction index."""
    stores = {}
    i = call - 1
    while i >= 0 and isinstance(body[i], Instruction) and body[i].base not in ("bra", "ret", "exit", "printf"):
        inst = body[i]
        if inst.base == "st" and "local" in inst.modifiers:
            mem = inst.operands[0]
            symbol, offset = _origin(body, defs, mem.base, where) if isinstance(mem.base, Reg) else (mem.base, 0)
            if symbol == depot:
                stores.setdefault(offset + mem.offset - start, i)
        i -= 1
    return stores


def _unchanged(body, writes, value, start: int, end: int) -> bool:
    """Whether ``value`` holds at instruction ``end`` what it held at ``start``: a literal, a register written once,
    or one no instruction from ``start`` to ``end`` writes, with no label between (no other path joins)."""
    if not isinstance(value, Reg) or len(writes.get(value.name, ())) <= 1:
        return True
    return not any(start < site < end for site in writes[value.name]) and \
        not any(isinstance(item, Label) for item in body[start:end])


def _width(inst: Instruction) -> int:
    return int(re.sub(r"\D", "", inst.modifiers[-1]) or 0)


def _without_dead_addresses(body: list) -> list:
    """Drop the moves, cvta's, adds and conversions whose result nothing reads any more (the format's and the
    buffer's addresses, the promotions), until none is left."""
    while True:
        read = {o.name for inst in body if isinstance(inst, Instruction) for o in inst.operands[1:]
                if isinstance(o, Reg)}
        read |= {o.base.name for inst in body if isinstance(inst, Instruction) for o in inst.operands
                 if isinstance(o, Mem) and isinstance(o.base, Reg)}
        read |= {inst.guard.name for inst in body if isinstance(inst, Instruction) and inst.guard is not None}
        kept = [inst for inst in body if not (isinstance(inst, Instruction) and inst.base in ("mov", "cvta", "add",
                                                                                              "cvt", "selp")
                                              and inst.guard is None and isinstance(inst.operands[0], Reg)
                                              and inst.operands[0].name not in read)]
        if len(kept) == len(body):
            return body
        body = kept
