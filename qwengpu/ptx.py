"""A parser for the PTX subset that nvcc, NVRTC and clang emit for small integer kernels.

It turns PTX text into a Module of Kernels, each a flat list of Instructions and the Labels where they are defined.
It checks syntax and declarations (registers, labels, parameter symbols) and rejects, with the line and text, what
the machine cannot have: vector operands (but those of ld / st / atom / red, split into their elements), calls that
are not inlined (but printf's vprintf and assert's __assertfail, the pseudo-instructions ``printf [result,] format,
buffer`` and ``assertfail message, file, line, function`` for the lowering's console stage), float immediates.
``__device__`` and ``__constant__`` variables (module-scope ``.global`` / ``.const`` data) are kept as ``Variable``s
with their initial bytes, in ``Module.variables`` and, for each kernel that names one, ``Kernel.variables``; the
device gives them words when such a kernel loads. ``.shared`` arrays of a known size (a kernel's ``__shared__ int
s[8];`` or one at file scope) are kept by name and size in ``Kernel.shared``, dynamic ones (``extern __shared__ int
s[];``) with size None (their bytes are a launch parameter), and ``.local`` arrays (each thread's own) in
``Kernel.local``; the lowering places them in the block's words. Calls of device functions (.func) the module
defines are inlined first (qwengpu.inline: ``__noinline__`` functions); the functions themselves are skipped (NVRTC
emits libdevice helpers even where every use is inlined). Inline asm's nested ``{ }`` scopes are taken, each scope's
registers renamed apart (``Kernel.registers`` holds them under kernel-wide names). ``parse(text, strict=False)``
keeps a kernel outside the subset out of ``Module.kernels`` and its error in ``Module.refused``, so one kernel of a
file does not keep the others from loading. What an instruction means is left to the lowering: opcodes are kept
exactly as written (``.u32`` and ``.b32`` spellings both survive).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from .inline import inline_calls
from .isa import LANES, MachineError

VERSION_MIN, VERSION_MAX = (7, 8), (9, 5)


class PTXError(MachineError):
    """The PTX is malformed or outside the supported subset; the message names the line and the offending text."""


@dataclass(frozen=True)
class Reg:
    name: str           # "%r1", "%rd3", "%p2", "%rs1", or a special register such as "%tid.x"


@dataclass(frozen=True)
class Imm:
    value: int


@dataclass(frozen=True)
class Label:
    name: str           # a label definition in a kernel body, or a branch target operand


@dataclass(frozen=True)
class Mem:
    base: Reg | str | None      # register, parameter symbol ("vadd_param_0"), or None for an absolute address
    offset: int


@dataclass(frozen=True)
class Instruction:
    opcode: str                 # full dotted opcode as written, guard removed: "ld.volatile.global.u32"
    operands: tuple             # Reg | Imm | Label | Mem, destination first, as in the text
    guard: Reg | None           # "@%p1" -> Reg("%p1")
    guard_negated: bool         # "@!%p1"
    line: int                   # 1-based line in the PTX text
    text: str                   # the statement as written, stripped, without the ';'
    pair: Reg | None = None     # the second destination of "d|p": shfl's source-in-range predicate (setp's
    #                             negated result, which the lowering refuses)
    whole: int = 0              # the instructions a lowering stage writes for a lane's turn at an atomic (a
    #                             64-bit atomic's loads of its two words, then its stores) share this number: no
    #                             overlay's end falls among them (lowering.overlays)

    # cached: the lowering asks each instruction for these thousands of times per launch configuration
    @cached_property
    def base(self) -> str:
        """The first dotted part of the opcode: "ld" for "ld.global.u32"."""
        return self.opcode.split(".", 1)[0]

    @cached_property
    def modifiers(self) -> tuple[str, ...]:
        """The opcode's dotted parts after the base: ("global", "u32") for "ld.global.u32"."""
        return tuple(self.opcode.split(".")[1:])


@dataclass(frozen=True)
class Param:
    name: str
    type: str           # "u64", "u32", "b32", "s32", "f32", ...; "b8" with a size for a struct passed by value
    size: int | None = None     # bytes of a struct parameter (``.param .align 8 .b8 k_param_0[24]``)


@dataclass
class Kernel:
    name: str
    params: list[Param] = field(default_factory=list)
    body: list = field(default_factory=list)            # Instruction | Label, in text order
    registers: dict[str, str] = field(default_factory=dict)  # "%r" -> "b32", "%p" -> "pred"
    shared: dict[str, int | None] = field(default_factory=dict)   # .shared arrays it uses: name -> bytes, in
    #                                                               order (None: extern, sized at launch)
    local: dict[str, int] = field(default_factory=dict)     # .local arrays (each thread's own): name -> bytes
    variables: dict[str, "Variable"] = field(default_factory=dict)  # __device__ / __constant__ ones it names


@dataclass(frozen=True)
class Variable:
    """A ``__device__`` or ``__constant__`` variable: module-scope ``.global`` / ``.const`` data. ``initial`` holds
    all its bytes: the initializer's, then zeros (CUDA zero-fills the rest, and a variable without one)::

        .const .align 4 .b8 mask[12] = {0, 0, 128, 62, 0, 0, 0, 63, 0, 0, 128, 62};   // {0.25f, 0.5f, 0.25f}
        .global .align 4 .u32 total = 7;
    """
    name: str
    space: str          # "global" (__device__) or "const" (__constant__)
    initial: bytes

    @property
    def words(self) -> int:
        return (len(self.initial) + 3) // 4


@dataclass
class Module:
    version: str
    target: str
    address_size: int
    kernels: dict[str, Kernel] = field(default_factory=dict)
    shared: dict[str, int] = field(default_factory=dict)     # module-scope .shared arrays: name -> bytes
    refused: dict[str, PTXError] = field(default_factory=dict)  # parse(strict=False): kernel -> why it is not kept
    variables: dict[str, Variable] = field(default_factory=dict)  # __device__ / __constant__ variables: name ->


JOINED = "%__joined"        # the parser's own 64-bit register: mov.b64's { } lists of words (_words_moved)
JOINED_WORD = "%__joined_word"      # and its 32-bit one: mov.b32's { } lists of 16-bit halves
COPIED = "%__copied"        # the word an asynchronous copy (cp.async) moves (_async_copy)
# Special registers are always in scope; whether the machine has one is the lowering's decision.
SPECIAL_REGISTER = re.compile(r"%(?:n?tid|n?ctaid|nclusterid|clusterid)\.[xyz]$|"
                              r"%(?:laneid|warpid|nwarpid|smid|nsmid|gridid|clock|clock64|globaltimer|"
                              r"lanemask_(?:eq|le|lt|ge|gt)|envreg\d+)$")
_IDENT = r"[A-Za-z_$][\w$]*"
_REG = re.compile(r"%" + _IDENT + r"(?:\.[xyz])?$")
_SYMBOL = re.compile(_IDENT + "$")
_OPCODE = re.compile(r"[a-z][a-z0-9_]*(?:\.(?:[a-z0-9_]+|NaN))*$")    # min.NaN.f32: PTX's one capital


def _scoped(opcode: str, line: int, text: str) -> str:
    """An opcode with PTX's ``::`` qualifiers read: ``.shared::cta`` is the block's shared memory (``.shared``);
    the cache levels and hints ``.L2`` (a prefetch's), ``.L1::evict_last``, ``.L2::128B``, ... go (the machine has
    no caches); ``.shared::cluster`` (another block's shared memory) and ``.L2::cache_hint`` (a cache policy
    operand) are refused by name."""
    if "::" not in opcode and ".L1" not in opcode and ".L2" not in opcode:
        return opcode
    kept = []
    for part in opcode.split("."):
        if part == "shared::cta":
            kept.append("shared")
        elif part == "L2::cache_hint":
            raise _err(line, "a cache policy operand (.L2::cache_hint) is not supported: the machine has no caches; "
                             "drop the hint", text)
        elif part in ("L1", "L2") or part.startswith(("L1::", "L2::")):
            continue
        elif part == "shared::cluster":
            raise _err(line, "a cluster's shared memory (.shared::cluster) is not supported: the machine runs one "
                             "block at a time and has no clusters", text)
        else:
            kept.append(part)
    return ".".join(kept)
_INT = re.compile(r"(-)?\s*(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]+|[1-9][0-9]*|0)U?$")
_FLOAT = re.compile(r"-?(0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|[0-9]*\.[0-9]*(?:[eE][-+]?[0-9]+)?|"
                    r"[0-9]+[eE][-+]?[0-9]+)$")
_FLOAT32 = re.compile(r"0[fF]([0-9a-fA-F]{8})$")
_FLOAT64 = re.compile(r"0[dD]([0-9a-fA-F]{16})$")
_TYPE = re.compile(r"\.([usbf](?:8|16|32|64))$")

# Directives that come without ';' and end at the end of their line.
_ONE_LINE = (".version", ".target", ".address_size", ".file", ".loc")
# Performance-tuning directives, after an entry's parameter list or in its body: no effect on a 4-lane warp.
_PERF = {"maxntid", "reqntid", "minnctapersm", "maxnctapersm", "maxnreg", "noreturn", "explicitcluster",
         "reqnctapercluster", "maxclusterrank", "blocksareclusters", "pragma"}
# State spaces and declarations that the machine has no storage for.
_UNSUPPORTED_DECL = {"shared", "local", "const", "global", "extern", "func", "param", "tex", "surfref", "texref",
                     "samplerref", "weak", "common", "callprototype", "alias"}


_SHARED = re.compile(r"\.(?:shared|local)\s+(?:\.align\s+(\d+)\s+)?\.([usbf](?:8|16|32|64))\s+(" + _IDENT + r")\s*"
                     r"(?:\[\s*(\d*)\s*\])?")


def _array_declaration(line: int, text: str) -> tuple[str, int]:
    """``.shared .align 4 .b8 name[32]`` (or a scalar ``.shared .u32 name``, ``.shared .f64 name``: a
    ``__shared__ double``; ``.local`` alike) -> (name, bytes)."""
    m = _SHARED.fullmatch(text.strip())
    if not m:
        raise _err(line, f"this {text.split()[0]} declaration is not supported (a sized array or a scalar)", text)
    if m.group(4) == "":
        raise _err(line, "a .shared array without a size (dynamic shared memory, extern __shared__) is not "
                         "supported: declare it with its size", text)
    count = int(m.group(4)) if m.group(4) is not None else 1
    size = int(m.group(2)[1:]) // 8 * count
    if size <= 0:
        raise _err(line, f".shared array {m.group(3)} has no bytes", text)
    return m.group(3), size


_VARIABLE = re.compile(r"(?:\.visible\s+)?\.(global|const)\s+(?:\.align\s+\d+\s+)?\.([usbf](?:8|16|32|64))\s+("
                       + _IDENT + r")\s*(?:\[\s*(\d*)\s*\])?\s*(?:=\s*(.*?))?", re.S)


def _variable(line: int, text: str, values: str | None) -> Variable:
    """A module-scope ``.global`` / ``.const`` declaration (``text``, up to its ';', or its '=' where a ``{ ... }``
    list follows: ``values``, that list's text) -> Variable. Initial values are integers or float bit patterns
    (``0f3F800000``, ``0d...``), little-endian in the type's width; an address (``generic(x)``) is refused."""
    m = _VARIABLE.fullmatch(text.strip())
    if not m or (values is not None and m.group(5)):
        raise _err(line, "this module-scope data is not supported (a __device__ or __constant__ scalar or array of "
                         "numbers, .global or .const)", text)
    space, type_, name, count, scalar = m.groups()
    size = int(type_[1:]) // 8
    items = [v.strip() for v in (values if values is not None else scalar or "").split(",") if v.strip()]
    if count == "" and not items:
        raise _err(line, f"module data {name} has neither a size nor an initializer", text)
    n = len(items) if count == "" else int(count or 1)
    if len(items) > n:
        raise _err(line, f"module data {name} has {len(items)} initial values for {n} elements", text)
    initial = bytearray()
    for item in items:
        if type_[0] == "f":
            digits = re.fullmatch(r"0[fF]([0-9a-fA-F]{8})" if size == 4 else r"0[dD]([0-9a-fA-F]{16})", item)
            if digits is None:
                raise _err(line, f"initial value {item} of {name} is not a .{type_} bit pattern", text)
            value = int(digits.group(1), 16)
        elif _INT.match(item):
            value = _parse_int(item, line, text)
            if not -(1 << (8 * size - 1)) <= value < 1 << (8 * size):
                raise _err(line, f"initial value {item} of {name} does not fit .{type_}", text)
        else:
            raise _err(line, f"initial value {item} of {name} is not a number (an address, such as generic(x), "
                             "cannot be kept: the machine keeps no pointers in memory)", text)
        initial += (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    if n * size == 0:
        raise _err(line, f"module data {name} has no bytes", text)
    return Variable(name, space, bytes(initial) + bytes(n * size - len(initial)))


def _declared_name(text: str) -> str:
    """The name a module-scope declaration declares: ``.global .align 4 .b8 table[20] = {...}`` -> ``table``."""
    return text.split("=", 1)[0].split()[-1].split("[", 1)[0]


def _declare(variables: dict, refused: dict, line: int, text: str, values: str | None, strict: bool) -> None:
    """Keep a module-scope variable; one outside the subset raises (strict) or is kept in ``refused`` by name, so a
    kernel that names it is refused with its error."""
    try:
        if values == "{":
            raise _err(line, "a nested initializer list is not supported", text)
        variable = _variable(line, text, values)
    except PTXError as error:
        if strict:
            raise
        refused[_declared_name(text)] = error
        return
    if variable.name in variables:
        raise _err(line, f"module data {variable.name} is declared twice", text)
    variables[variable.name] = variable


def _err(line: int, msg: str, text: str) -> PTXError:
    return PTXError(f"line {line}: {msg}: {text.strip()!r}", line=line)


def _strip_comments(text: str) -> str:
    """Blank out // and /* */ comments (outside strings), keeping every newline so line numbers hold."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = text.find('"', i + 1)
            j = n if j < 0 else j + 1
            out.append(text[i:j])
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                line = text.count("\n", 0, i) + 1
                raise _err(line, "unterminated /* comment", text[i:i + 20])
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _chunks(text: str):
    """Split comment-free PTX into (line, text, terminator) statements.

    A statement ends at ';', '{', '}', a label's ':', or (for the one-line directives) at its newline; the line is
    where its first character stands. The terminator is None for text left at the end. A '{' inside an instruction
    (after its opcode) opens a vector operand, which its '}' closes.
    """
    buf: list[str] = []
    start, line = 0, 1
    vector = False          # inside an instruction's vector operand ``{%r1, %r2}``: its braces end nothing
    for ch in text:
        if vector or (ch == "{" and buf and "".join(buf).strip()[:1] not in ("", ".")):
            vector = ch != "}"
            buf.append(ch)
            line += ch == "\n"
            continue
        pending = "".join(buf).strip()
        if ch == "\n":
            if pending.startswith(_ONE_LINE):
                yield start, pending, "\n"
                buf = []
            elif buf:
                buf.append(ch)
            line += 1
            continue
        if ch in ";{}" or (ch == ":" and _SYMBOL.match(pending)):
            yield (start if pending else line), pending, ch
            buf = []
            continue
        if not pending and not ch.isspace():
            start = line
        buf.append(ch)
    pending = "".join(buf).strip()
    if pending:
        yield start, pending, (("\n" if pending.startswith(_ONE_LINE) else None))


def _parse_int(s: str, line: int, text: str) -> int:
    s = s.strip()
    if _FLOAT.match(s):
        kind = "a float64" if s.lstrip("-")[:2] in ("0d", "0D") else "a decimal float"
        hint = ("; in CUDA, write 2.0f: C reads 2.0 or 1e-3 as a double and computes the expression in double"
                if kind == "a float64" else "")
        raise _err(line, f"float immediate {s} is not supported ({kind} literal: the machine's words are 32 bits, "
                         f"and of floats only float32 literals, 0f and eight hex digits, are read{hint})", text)
    m = _INT.match(s)
    if not m:
        raise _err(line, f"bad integer {s!r}", text)
    digits = m.group(2)
    if digits[:2] in ("0x", "0X", "0b", "0B"):
        v = int(digits, 0)
    elif len(digits) > 1 and digits[0] == "0":
        v = int(digits, 8)          # PTX, like C, reads a leading 0 as octal
    else:
        v = int(digits)
    return -v if m.group(1) else v


def _check_version(v: str, line: int, text: str) -> None:
    m = re.fullmatch(r"(\d+)\.(\d+)", v)
    if not m or not VERSION_MIN <= (int(m.group(1)), int(m.group(2))) <= VERSION_MAX:
        lo, hi = (f"{a}.{b}" for a, b in (VERSION_MIN, VERSION_MAX))
        raise _err(line, f"PTX .version {v} is not supported (accepted: {lo} to {hi})", text)


class _KernelParser:
    """Collects one kernel's body; checks registers, labels and symbols against its declarations."""

    def __init__(self, kernel: Kernel, line: int, module_shared: dict[str, int] | None = None,
                 module_variables: dict[str, Variable] | None = None,
                 refused_data: dict[str, PTXError] | None = None, not_inlined: dict[str, str] | None = None):
        self.k, self.line = kernel, line
        self.not_inlined = not_inlined or {}        # a module function whose calls stay calls -> why
        self.module_shared = module_shared or {}
        self.module_variables = module_variables or {}
        self.refused_data = refused_data or {}
        self.counts: dict[str, int | None] = {}     # register prefix -> count declared with <N>, None for a name
        self.labels: dict[str, int] = {}
        self.targets: list[tuple[str, Instruction]] = []
        # The open { } scopes (the body's first): a register declared in a nested one (inline asm's
        # ``{ .reg .pred p; ... }``), or named without '%', gets a kernel-wide name of its own, so scopes that declare
        # the same name never meet.
        self.scopes: list[tuple[int, dict[str, str]]] = [(0, {})]
        self.opened = 0
        # A call's { callseq } scope: its .param names -> the operand stored there (st.param); the call to vprintf
        # (printf) becomes the pseudo-instruction ``printf [result,] format, arguments``.
        self.call_params: dict[str, object] = {}

    def open_scope(self) -> None:
        self.opened += 1
        self.scopes.append((self.opened, {}))

    def close_scope(self) -> bool:
        """Close a nested scope; False at the body's own closing brace."""
        if len(self.scopes) == 1:
            return False
        self.scopes.pop()
        return True

    def resolve(self, name: str) -> str | None:
        """The kernel-wide name of a register declared in a scope (``p`` -> ``%p_s1_``; ``r3`` of ``.reg .b32
        r<4>`` -> ``%r_s1_3``), innermost scope first; None if no scope renamed it."""
        m = re.fullmatch(r"(%?" + _IDENT + r"?)(\d+)", name)
        for _, names in reversed(self.scopes):
            if name in names and self.counts.get(names[name], 0) is None:
                return names[name]
            if m and m.group(1) in names and self.counts.get(names[m.group(1)]) is not None:
                return names[m.group(1)] + m.group(2)
        return None

    def directive(self, line: int, text: str) -> None:
        name = text.split(None, 1)[0][1:]
        if name == "reg":
            self._reg(line, text)
        elif name in _PERF or name == "loc":
            return
        elif name == "shared":
            symbol, size = _array_declaration(line, text)
            if symbol in self.k.shared or symbol in self.module_shared:
                raise _err(line, f".shared {symbol} is declared twice", text)
            self.k.shared[symbol] = size
        elif name == "local":       # a thread's own array (a local array indexed at run time): per-thread words
            symbol, size = _array_declaration(line, text)
            if symbol in self.k.local or self._shared_symbol(symbol):
                raise _err(line, f".local {symbol} is declared twice", text)
            self.k.local[symbol] = size
        elif name == "param" and len(self.scopes) > 1:      # a call's argument or result, in its { callseq }
            m = re.fullmatch(r"\.param\s+(?:\.align\s+\d+\s+)?\.[busf]\d+\s+(" + _IDENT + r")", text.strip())
            if not m:
                why = (" (a struct or an array passed by value to a __device__ function that is not inlined: pass "
                       "its fields or a pointer)" if re.search(r"\[\s*\d*\s*\]\s*$", text.strip()) else "")
                raise _err(line, "this call parameter is not supported" + why, text)
            self.call_params[m.group(1)] = None
        elif name in _UNSUPPORTED_DECL:
            raise _err(line, f".{name} declarations are not supported", text)
        else:
            raise _err(line, f"unknown directive .{name}", text)

    def _reg(self, line: int, text: str) -> None:
        m = re.fullmatch(r"\.reg\s+\.(\w+)\s+(.+)", text, re.S)
        if not m:
            raise _err(line, "bad .reg declaration", text)
        typ = m.group(1)
        if typ.startswith("v") and typ[1:].isdigit():
            raise _err(line, "vector registers are not supported", text)
        for item in m.group(2).split(","):
            r = re.fullmatch(r"\s*(%?" + _IDENT + r")\s*(?:<\s*(\d+)\s*>)?\s*", item)
            if not r:
                raise _err(line, f"bad register name {item.strip()!r}", text)
            name = r.group(1)
            scope, names = self.scopes[-1]
            if scope or not name.startswith("%"):
                names[name] = name = f"%{name.lstrip('%')}_s{scope}_"
            self.k.registers[name] = typ
            self.counts[name] = int(r.group(2)) if r.group(2) else None

    def label(self, line: int, name: str) -> None:
        if name in self.labels:
            raise _err(line, f"label {name} is defined twice (first on line {self.labels[name]})", name + ":")
        self.labels[name] = line
        self.k.body.append(Label(name))

    def reg(self, name: str, line: int, text: str) -> Reg:
        name = self.resolve(name) or name
        if not _REG.match(name):
            raise _err(line, f"bad register {name!r}", text)
        if SPECIAL_REGISTER.match(name) or self.counts.get(name, 0) is None:
            return Reg(name)
        # Split "%rd12" into prefix "%rd" and index 12: the lazy prefix stops where only digits remain.
        m = re.fullmatch(r"(%" + _IDENT + r"?)(\d+)", name)
        n = self.counts.get(m.group(1)) if m else None
        if n is None:
            raise _err(line, f"register {name} is not declared", text)
        if int(m.group(2)) >= n:
            raise _err(line, f"register {name} is outside {m.group(1)}<{n}>", text)
        return Reg(name)

    def operand(self, s: str, line: int, text: str):
        s = s.strip()
        if not s:
            raise _err(line, "empty operand", text)
        if s.startswith("["):
            if not s.endswith("]"):
                raise _err(line, f"bad memory operand {s!r}", text)
            return self._mem(s[1:-1].strip(), line, text)
        if s.startswith("%") or self.resolve(s):
            return self.reg(s, line, text)
        if s == "WARP_SZ":          # PTX's run-time constant for the threads of a warp: the machine's warp
            return Imm(LANES)
        if s[0] in "!|" or "|" in s:
            raise _err(line, f"operand {s!r} is not supported", text)
        self._check_data(s, line, text)
        if _SYMBOL.match(s):
            return Label(s)
        single = _FLOAT32.match(s)
        if single:      # a float32 literal is its bits (the lowering's floats stage reads them as a float)
            return Imm(int(single.group(1), 16))
        double = _FLOAT64.match(s)
        opcode = text.split()[1 if text.startswith("@") else 0]
        if double and ".f64" in opcode:     # its bits, in a double instruction, which the lowering refuses
            return Imm(int(double.group(1), 16))     # (where a thread meets it: lowering.paths)
        return Imm(_parse_int(s, line, text))

    def _mem(self, inner: str, line: int, text: str) -> Mem:
        if _INT.match(inner) or _FLOAT.match(inner):
            return Mem(None, _parse_int(inner, line, text))     # an absolute address
        m = re.fullmatch(r"(%?" + _IDENT + r"(?:\.[xyz])?)\s*(?:([+-])(.+))?", inner, re.S)
        if not m:
            raise _err(line, f"bad memory operand [{inner}]", text)
        off = 0
        if m.group(2):
            off = _parse_int(m.group(3), line, text)      # "+-8" parses "-8"
            off = -off if m.group(2) == "-" else off
        if m.group(1).startswith("%") or self.resolve(m.group(1)):
            return Mem(self.reg(m.group(1), line, text), off)
        if self._shared_symbol(m.group(1)) or m.group(1) in self.k.local:
            return Mem(m.group(1), off)
        self._check_data(m.group(1), line, text)
        if m.group(1) not in {p.name for p in self.k.params}:
            raise _err(line, f"unknown symbol {m.group(1)} (only parameters and .shared arrays can be addressed)",
                       text)
        return Mem(m.group(1), off)

    def _shared_symbol(self, name: str) -> bool:
        """Whether ``name`` is a .shared array in scope or a module's variable (a module-scope one is recorded as
        used by this kernel)."""
        if name in self.k.shared or name in self.k.variables:
            return True
        if name in self.module_shared:
            self.k.shared[name] = self.module_shared[name]
            return True
        if name in self.module_variables:
            self.k.variables[name] = self.module_variables[name]
            return True
        return False

    def _check_data(self, name: str, line: int, text: str) -> None:
        if name in self.refused_data:
            raise _err(line, f"{name} is module-scope data outside the subset ({self.refused_data[name]})", text)

    def instruction(self, line: int, text: str) -> None:
        guard, negated, rest = None, False, text
        g = re.match(r"@(!?)\s*(%?[\w$]+)\s+", text)
        if g:
            negated, rest = bool(g.group(1)), text[g.end():]
            guard = self.reg(g.group(2), line, text)
            if self.k.registers.get(re.sub(r"\d+$", "", guard.name)) != "pred" \
                    and self.k.registers.get(guard.name) != "pred":
                raise _err(line, f"guard {guard.name} is not a .pred register", text)
        parts = rest.split(None, 1)
        opcode = _scoped(parts[0], line, text)
        if not _OPCODE.match(opcode):
            raise _err(line, f"bad opcode {opcode!r}", text)
        if self._call_statement(opcode, parts[1] if len(parts) > 1 else "", guard, negated, line, text):
            return
        texts = re.split(r",(?![^{]*\})", parts[1]) if len(parts) > 1 else []     # commas outside { } lists
        pair = None
        if texts and "|" in texts[0]:           # "d|p": a destination and a predicate destination
            first, second = texts[0].split("|", 1)
            texts[0], pair = first, self.reg(second.strip(), line, text)
        if opcode in ("mov.b64", "mov.b32") and len(texts) == 2 and any(t.strip().startswith("{") for t in texts):
            self._words_moved(opcode, texts, guard, negated, line, " ".join(text.split()))
            return
        if opcode.startswith("cp.async."):
            for opcode_, texts_ in self._async_copy(opcode, texts, line, text):
                self._append(Instruction(opcode_, tuple(self.operand(s, line, text) for s in texts_), guard,
                                         negated, line, " ".join(text.split())))
            return
        if any(t.strip().startswith("{") for t in texts):
            for opcode_, texts_ in self._vector_elements(opcode, texts, line, text):
                self._append(Instruction(opcode_, tuple(self.operand(s, line, text) for s in texts_), guard,
                                         negated, line, " ".join(text.split())))
            return
        ops = tuple(self.operand(s, line, text) for s in texts)
        self._append(Instruction(opcode, ops, guard, negated, line, " ".join(text.split()), pair))

    def _call_statement(self, opcode: str, rest: str, guard, negated: bool, line: int, text: str) -> bool:
        """A statement of a call sequence: ``st.param`` of an argument, the ``call``, the ``ld.param`` of its result.
        A call of vprintf (printf) becomes ``printf format, arguments`` (with the result register first once its
        ld.param is read); any other call is refused naming the function."""
        base = opcode.split(".", 1)[0]
        param = re.fullmatch(r"\[\s*(" + _IDENT + r")\s*(?:\+\s*0\s*)?\]", rest.split(",", 1)[0].strip()) \
            if base in ("st", "ld") and ".param" in opcode else None
        if base == "st" and param and param.group(1) in self.call_params:
            self.call_params[param.group(1)] = self.operand(rest.split(",", 1)[1], line, text)
            return True
        if base == "ld" and ".param" in opcode:
            source = re.search(r"\[\s*(" + _IDENT + r")", rest)
            if source and source.group(1) in self.call_params:
                call = self.k.body[-1]
                if not (isinstance(call, Instruction) and call.base == "printf" and len(call.operands) == 2):
                    raise _err(line, "a call's result read here is not printf's", text)
                self.k.body[-1] = Instruction("printf", (self.operand(rest.split(",", 1)[0], line, text),)
                                              + call.operands, call.guard, call.guard_negated, call.line, call.text)
                return True
        if base != "call":
            return False
        m = re.fullmatch(r"(?:\(\s*(" + _IDENT + r")\s*\)\s*,\s*)?(" + _IDENT + r")\s*(?:,\s*\((.*)\))?", rest.strip(),
                         re.S)
        callee = m.group(2) if m else rest.strip()
        arguments = [a.strip() for a in (m.group(3) or "").split(",") if a.strip()] if m else []
        pseudo = {("vprintf", 2): "printf", ("__assertfail", 5): "assertfail"}.get((callee, len(arguments)))
        if pseudo is None or any(self.call_params.get(a) is None for a in arguments):
            what = {"malloc": "malloc", "free": "free"}.get(callee) or self.not_inlined.get(callee)
            raise _err(line, f"function calls are not supported: {callee}" + (f" ({what})" if what else "") +
                       " (the machine runs one kernel body; printf and assert are the calls it takes, and the "
                       "module's __device__ functions are inlined where they are called)", text)
        # printf format, buffer; assertfail message, file, line, function (its fifth, the char size, is 1)
        operands = tuple(self.call_params[a] for a in arguments)[:4]
        self._append(Instruction(pseudo, operands, guard, negated, line, " ".join(text.split())))
        return True

    def _append(self, ins: Instruction) -> None:
        self.targets += [(o.name, ins) for o in ins.operands if isinstance(o, Label)
                         and not self._shared_symbol(o.name) and o.name not in self.k.local]
        self.k.body.append(ins)

    def _words_moved(self, opcode: str, texts: list[str], guard, negated: bool, line: int, text: str) -> None:
        """``mov.b64 {lo, hi}, x`` (a 64-bit value's two words: NVRTC's ``signbit`` and ``__double2hiint`` of a
        double) and ``mov.b64 x, {lo, hi}`` (two words joined: ``__hiloint2double``), and ``mov.b32`` of two 16-bit
        halves the same way (CUDA's SIMD intrinsics, ``__vsub2``, split a word into its halves so), as the
        conversions and shifts they are, through a register of the parser's own (JOINED, JOINED_WORD); ``_``
        takes no part."""
        bits = int(opcode[len("mov.b"):])
        half = bits // 2
        wide, narrow = f"u{bits}", f"u{half}"
        joined_name = JOINED if bits == 64 else JOINED_WORD
        self.k.registers.setdefault(joined_name, f"b{bits}")
        self.counts.setdefault(joined_name, None)
        joined = Reg(joined_name)
        unpack = texts[0].strip().startswith("{")
        parts = [w.strip() for w in texts[0 if unpack else 1].strip().strip("{}").split(",")]
        if len(parts) != 2 or not texts[0 if unpack else 1].strip().endswith("}"):
            raise _err(line, f"{opcode} takes a {{ }} list of two {half}-bit parts", text)
        low, high = (None if w == "_" else self.operand(w, line, text) for w in parts)
        other = self.operand(texts[1 if unpack else 0], line, text)

        def append(opcode_: str, *operands) -> None:
            self._append(Instruction(opcode_, operands, guard, negated, line, text))
        if unpack:
            if low is not None:
                append(f"cvt.{narrow}.{wide}", low, other)
            if high is not None:
                append(f"shr.b{bits}", joined, other, Imm(half))
                append(f"cvt.{narrow}.{wide}", high, joined)
            return
        if low is None or high is None:
            raise _err(line, f"{opcode} joins two parts, not _", text)
        append(f"cvt.{wide}.{narrow}", joined, high)
        append(f"shl.b{bits}", joined, joined, Imm(half))
        append(f"cvt.{wide}.{narrow}", other, low)
        append(f"or.b{bits}", other, other, joined)

    def _async_copy(self, opcode: str, texts: list[str], line: int, text: str):
        """``cp.async.ca / .cg .shared.global [d], [s], 4 / 8 / 16`` (an asynchronous copy of global words into
        shared memory: ``__pipeline_memcpy_async``, GEMM tutorials' inline assembly) as the word loads and stores it
        makes, through a register of the parser's own (COPIED); its groups' commits and waits as nothing. The copy
        is done when it is issued, which an asynchronous copy may be: the program may not touch its words before it
        waits for it. A source size (zero-filling the rest), a cache policy and the bulk copies are refused."""
        mods = opcode.split(".")[2:]
        if mods in (["commit_group"], ["wait_all"], ["wait_group"]):
            return []
        if len(mods) != 3 or mods[0] not in ("ca", "cg") or mods[1:] != ["shared", "global"] or len(texts) != 3:
            raise _err(line, "of the asynchronous copies, cp.async.ca / .cg .shared.global [d], [s], 4 / 8 / 16 "
                             "(no source size or cache policy) and its commit_group / wait_group / wait_all run", text)
        size = _parse_int(texts[2].strip(), line, text)
        if size not in (4, 8, 16):
            raise _err(line, f"cp.async copies 4, 8 or 16 bytes, not {size}", text)
        self.k.registers.setdefault(COPIED, "b32")
        self.counts.setdefault(COPIED, None)
        where = []
        for address in texts[:2]:
            base = re.fullmatch(r"\[\s*([^\]+\-]+?)\s*(?:([+-])\s*(\w+))?\s*\]", address.strip())
            if not base:
                raise _err(line, f"bad memory operand {address.strip()}", text)
            offset = _parse_int(base.group(3), line, text) * (-1 if base.group(2) == "-" else 1) if base.group(3) else 0
            where.append((base.group(1), offset))
        (d, d_offset), (src, s_offset) = where
        accesses = []
        for k in range(0, size, 4):
            accesses.append(("ld.global.b32", [COPIED, f"[{src}+{s_offset + k}]"]))
            accesses.append(("st.shared.b32", [f"[{d}+{d_offset + k}]", COPIED]))
        return accesses

    def _vector_elements(self, opcode: str, texts: list[str], line: int, text: str):
        """A vector load, store or atomic (``ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1+16]``, sm_90's
        ``atom.global.add.v2.f32 {%f3, %f4}, [%rd1], {%f1, %f2}`` of CUDA's ``atomicAdd(float2 *, float2)``) as the
        scalar accesses it is made of, element k at the address plus k times the element's bytes: (opcode, operand
        texts) each. A vector atomic is atomic element by element, not as a whole (as CUDA's guide says of the
        float2 / float4 atomicAdd). A load's destination that is also its address register is loaded last; ``_``
        (no destination) is skipped, or for an atomic makes that element a ``red``."""
        mods = opcode.split(".")
        counts = [m for m in mods if re.fullmatch(r"v[248]", m)]
        typed = [m for m in mods if _TYPE.match("." + m)]
        layout = {"ld": "va", "st": "av", "atom": "vav", "red": "av"}.get(mods[0])     # v: a { } list, a: address
        if layout is None or len(counts) != 1 or len(typed) != 1:
            raise _err(line, "vector operands are supported on ld / st / atom / red (.v2 / .v4 / .v8) only", text)
        scalar = ".".join(m for m in mods if m not in counts)
        size = int(typed[0][1:]) // 8
        if len(texts) != len(layout) or any(t.strip()[:1] != ("{" if kind == "v" else "[")
                                            for t, kind in zip(texts, layout)):
            wanted = " and ".join("a { } list" if kind == "v" else "an address" for kind in layout)
            raise _err(line, f"a vector {mods[0]} takes {wanted}", text)
        lists = [[e.strip() for e in t.strip()[1:-1].split(",")] for t, kind in zip(texts, layout) if kind == "v"]
        if any(len(elements) != int(counts[0][1:]) for elements in lists):
            raise _err(line, f"{counts[0]} takes {counts[0][1:]} elements, not "
                             f"{', '.join(str(len(e)) for e in lists)}", text)
        address = texts[layout.index("a")].strip()
        base = re.fullmatch(r"\[\s*([^\]+\-]+?)\s*(?:([+-])\s*(\w+))?\s*\]", address)
        if not base:
            raise _err(line, f"bad memory operand {address}", text)
        offset = _parse_int(base.group(3), line, text) * (-1 if base.group(2) == "-" else 1) if base.group(3) else 0
        accesses = []
        for k in range(int(counts[0][1:])):
            where = f"[{base.group(1)}+{offset + k * size}]"
            column = iter([elements[k] for elements in lists])
            operands = [where if kind == "a" else next(column) for kind in layout]
            if mods[0] == "atom" and operands[0] == "_":
                accesses.append(("red" + scalar[len("atom"):], operands[1:]))
            elif "_" not in operands:
                accesses.append((scalar, operands))
        # a destination that is the address register is written last, so the other elements use the old address
        accesses.sort(key=lambda access: mods[0] in ("ld", "atom") and access[1][0] == base.group(1))
        return accesses

    def finish(self) -> Kernel:
        for name, ins in self.targets:
            if name not in self.labels:
                raise _err(ins.line, f"label {name} is not defined in kernel {self.k.name}", ins.text)
        return self.k


def _parse_header(line: int, text: str) -> Kernel:
    """`.visible .entry name( .param .u64 name_param_0, ... ) [.maxntid ...]` -> Kernel with its params."""
    m = re.fullmatch(r"((?:\.\w+\s+)*)\.entry\s+(" + _IDENT + r")\s*\((.*)\)(.*)", text, re.S)
    if not m:
        if re.search(r"(^|\s)\.func\b", text):
            raise _err(line, "device functions (.func) are not supported", text)
        raise _err(line, "expected a kernel header '.entry name(...)'", text)
    for q in m.group(1).split():
        if q not in (".visible", ".weak"):
            raise _err(line, f"kernel qualifier {q} is not supported", text)
    k = Kernel(m.group(2))
    params = m.group(3).strip()
    for p in params.split(",") if params else ():
        toks = p.split()
        if not toks or toks[0] != ".param" or len(toks) < 3:
            raise _err(line, f"bad parameter {p.strip()!r}", text)
        pname, types, i = toks[-1], [], 1
        while i < len(toks) - 1:
            t = toks[i]
            if t == ".align":
                i += 1      # ".align N": alignment is not the machine's concern
            elif _TYPE.match(t):
                types.append(t[1:])
            elif t not in (".ptr", ".global", ".const", ".local", ".shared"):   # clang's pointer annotations
                raise _err(line, f"parameter qualifier {t} is not supported", text)
            i += 1
        array = re.fullmatch(r"(" + _IDENT + r")\[(\d+)\]", pname)
        if array and types == ["b8"] and int(array.group(2)) > 0:       # a struct passed by value: its bytes
            k.params.append(Param(array.group(1), "b8", int(array.group(2))))
            continue
        if "[" in pname or len(types) != 1 or not _SYMBOL.match(pname):
            raise _err(line, f"parameter {p.strip()!r} is not supported (scalar parameters and structs passed by "
                             "value, .b8 arrays)", text)
        k.params.append(Param(pname, types[0]))
    for d in re.findall(r"\.(\w+)", m.group(4)):
        if d not in _PERF:
            raise _err(line, f"unknown directive .{d} after the parameter list", text)
    return k


def parse(text: str, strict: bool = True) -> Module:
    """Parse PTX text into a Module; raise PTXError (naming the line and text) on anything outside the subset.

    With ``strict=False`` a kernel whose header or body is outside the subset is left out and its error kept in
    ``Module.refused`` (a module of several kernels loads the others, as a GPU's driver would); an error at module
    scope still raises."""
    version = target = None
    address_size = None
    kernels: dict[str, Kernel] = {}
    shared: dict[str, int] = {}
    refused: dict[str, PTXError] = {}
    variables: dict[str, Variable] = {}
    refused_data: dict[str, PTXError] = {}      # parse(strict=False): module data outside the subset, and why
    initializer = None      # (line, declaration) of a variable whose { ... } list comes next
    kp: _KernelParser | None = None
    skipping = 0            # depth inside a device function's body: skipped (a call to it is refused when lowered)
    broken = None           # (kernel, error) of a refused kernel whose body is being skipped
    body, not_inlined = inline_calls(_strip_comments(text))
    for line, stmt, term in _chunks(body):
        if initializer is not None:
            (at, declaration), initializer = initializer, None
            if term == "}":
                _declare(variables, refused_data, at, declaration, stmt, strict)
                continue
            _declare(variables, refused_data, at, declaration, "{", strict)     # refused: a nested list
            skipping = 1 + (term == "{")
            continue
        if skipping:
            skipping += (term == "{") - (term == "}")
            if not skipping and broken:
                refused[broken[0]] = broken[1]
                broken = None
            continue
        if kp is None and term in ("{", ";") and re.search(r"(^|\s)\.func\b", stmt):
            # libdevice helpers NVRTC emits beside a kernel (e.g. __nv_umin) even when every use is inlined.
            skipping = 1 if term == "{" else 0
            continue
        if kp is None:
            if term == "\n":
                word, _, arg = stmt.partition(" ")
                arg = arg.strip()
                if word == ".version":
                    _check_version(arg, line, stmt)
                    version = arg
                elif word == ".target":
                    target = arg
                elif word == ".address_size":
                    if arg != "64":
                        raise _err(line, f".address_size {arg} is not supported (only 64)", stmt)
                    address_size = 64
                continue        # .file: source names for debug info
            data = re.match(r"(?:\.visible\s+)?\.(global|const)\s", stmt)
            if data and term in ("{", ";") and "__nv_atomic_triv_cp_helper" not in stmt:
                # __device__ / __constant__ variables (printf's format strings and assert's messages too): kept with
                # their initial bytes; a list initializer's { ... } is the next statement.
                if term == "{":
                    initializer = (line, stmt)
                    continue
                _declare(variables, refused_data, line, stmt, None, strict)
                continue
            if term == "{":
                if version is None:
                    raise _err(line, "a kernel before the .version directive", stmt)
                try:
                    kp = _KernelParser(_parse_header(line, stmt), line, shared, variables, refused_data,
                                       not_inlined)
                except PTXError as e:
                    named = re.search(r"\.entry\s+(" + _IDENT + ")", stmt)
                    if strict or not named:
                        raise
                    skipping, broken = 1, (named.group(1), e)
                    continue
                if kp.k.name in kernels:
                    raise _err(line, f"kernel {kp.k.name} is defined twice", stmt)
                continue
            if not stmt:
                if term == ";":
                    continue
                raise _err(line, f"unexpected '{term}'", term)
            word = stmt.split(None, 1)[0]
            if word == ".shared" and term == ";":
                symbol, size = _array_declaration(line, stmt)
                if symbol in shared:
                    raise _err(line, f".shared {symbol} is declared twice", stmt)
                shared[symbol] = size
                continue
            if word == ".extern" and ".shared" in stmt.split() and term == ";":
                # ``extern __shared__ int s[];``: dynamic shared memory, its bytes given at launch (size None here;
                # every such array starts at the same word, after the sized ones, as on a GPU).
                m = _SHARED.fullmatch(stmt.split(None, 1)[1].strip())
                if not m or m.group(4) != "":
                    raise _err(line, "this extern .shared declaration is not supported (an array without a size, "
                                     "extern __shared__ T s[])", stmt)
                if m.group(3) in shared:
                    raise _err(line, f".shared {m.group(3)} is declared twice", stmt)
                shared[m.group(3)] = None
                continue
            name = _declared_name(stmt)
            if word == ".global" and term == ";" and "__nv_atomic_triv_cp_helper" in name:
                # CUDA 13's atomicExch / atomicCAS headers declare a one-byte helper (``.global .align 1 .u8
                # _ZN26__nv_atomic_triv_cp_helperIiE5__valE``) that no instruction uses: skipped (an instruction
                # that names it is refused as an unknown symbol).
                continue
            if word.startswith(".") and word[1:] in _UNSUPPORTED_DECL | {"visible", "entry"}:
                raise _err(line, "module-scope declarations are not supported", stmt)
            raise _err(line, "unexpected statement at module scope" if term else "missing ';'", stmt)
        # inside a kernel body
        try:
            if _body_statement(kp, line, stmt, term):
                kernels[kp.k.name] = kp.finish()
                kp = None
        except PTXError as e:
            if strict:
                raise
            skipping = len(kp.scopes) + (term == "{") - (term == "}")     # the braces still open
            if skipping:
                broken = (kp.k.name, e)
            else:
                refused[kp.k.name] = e
            kp = None
    if kp is not None:
        raise _err(kp.line, f"kernel {kp.k.name} has no closing '}}'", f".entry {kp.k.name}")
    if broken:
        raise broken[1]
    if version is None:
        raise PTXError("line 1: missing .version directive: " + repr(text[:40]))
    if target is None:
        raise PTXError("line 1: missing .target directive: " + repr(text[:40]))
    if address_size is None:
        raise PTXError("line 1: missing .address_size 64 directive: " + repr(text[:40]))
    return Module(version, target, address_size, kernels, shared, refused, variables)


def _body_statement(kp: _KernelParser, line: int, stmt: str, term: str | None) -> bool:
    """One statement of a kernel body; True at the body's closing brace."""
    if term == "}":
        if stmt:
            raise _err(line, "missing ';'", stmt)
        return not kp.close_scope()
    if term == "{":
        if stmt:
            raise _err(line, "vector operands are not supported", stmt + " {")
        kp.open_scope()             # inline asm's { .reg .pred p; ... }
    elif term == ":":
        kp.label(line, stmt)
    elif term == "\n":
        pass                        # .loc line info
    elif term is None:
        raise _err(line, "missing ';'", stmt)
    elif stmt.startswith("."):
        kp.directive(line, stmt)
    elif stmt:
        kp.instruction(line, stmt)
    return False
