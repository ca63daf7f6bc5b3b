"""Calls of device functions the module defines, inlined into the kernels before parsing (PTX text to PTX text).

NVRTC inlines almost every ``__device__`` function; what it leaves as a ``call`` (``__noinline__``, a function too
large to inline, one whose recursion it turned into a loop) has its ``.func`` body in the same module. The machine
runs one kernel body, so each such call becomes a copy of the callee's body in a scope of its own, where the call was:

- the call's ``{ callseq }`` parameters and result become registers of that scope, one a field: each byte offset an
  ``st.param`` writes (a scalar's 0, a struct passed by value each member's), named apart per call; ``st.param`` is
  a move into its field, ``ld.param`` a move out of the field at its offset (narrower: converted as a load would
  extend it, a short's or a char's sign, a long long's low word);
- the callee's ``ld.param`` of its parameters and ``st.param`` of ``func_retval0`` read and write the same fields;
  its ``ret`` branches to the copy's end;
- the callee's registers are declared in the copy's scope, so the parser renames them apart from the caller's; its
  labels and ``.local`` arrays take the call's number.

The copy stands on the call statement's first line, and the statement's other lines stay as blank lines, so every
PTX line number of the kernel holds (a refusal inside the callee names the line of the call). Calls this stage does
not inline stay calls, and the parser refuses them with the reason kept here: a recursive function, a function the
module only declares, a parameter read at a byte no ``st.param`` began at.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = r"[A-Za-z_$][\w$]*"
_HEADER = re.compile(r"(?:\.(?:visible|weak|extern)\s+)*\.func\s*(\(\s*\.param[^)]*\))?\s*(" + _NAME + r")\s*"
                     r"\(([^)]*)\)\s*(?:\.noreturn\s*)?([{;])")
_PARAM = re.compile(r"\s*\.param\s+(?:\.align\s+\d+\s+)?\.([busf]\d+)\s+(" + _NAME + r")\s*(\[\s*\d*\s*\])?\s*")
# a call statement: (guard, result, callee, arguments)
_CALL = re.compile(r"(@!?%?" + _NAME + r"\s+)?(?<![\w$.%])call(?:\.uni)?\s*(?:\(\s*(" + _NAME + r")\s*\)\s*,)?"
                   r"\s*(" + _NAME + r")\s*(?:,\s*\(([^)]*)\))?\s*;")
_REG = re.compile(r"\.reg\s+\.(\w+)\s+([^;]+);")
_LABEL = re.compile(r"(" + _NAME + r")\s*:(?!:)")
_LOCAL = re.compile(r"(\.local\s+(?:\.align\s+\d+\s+)?\.\w+\s+)(" + _NAME + r")(\s*\[)")
DEPTH = 8           # calls inside inlined copies, at most this deep


@dataclass
class Function:
    """A ``.func`` of the module, as this stage reads it."""
    name: str
    result: str | None          # the return parameter's name (func_retval0), None for a void function
    params: list[str]
    body: str                   # between the braces, comments stripped
    why_not: str | None         # why its calls are not inlined (None: they are)


def functions(text: str) -> dict[str, Function]:
    """The module's device functions: each ``.func`` with a body (a declaration alone gives ``why_not``)."""
    found: dict[str, Function] = {}
    for m in _HEADER.finditer(text):
        result, name, params, opener = m.group(1), m.group(2), m.group(3), m.group(4)
        if opener == ";":
            found.setdefault(name, Function(name, None, [], "", "the module declares it without a body"))
            continue
        close = _matching_brace(text, m.end() - 1)
        why = None
        names = []
        for item in [p for p in params.split(",") if p.strip()]:
            p = _PARAM.fullmatch(item)
            if p is None:
                why = f"its parameter {item.strip()!r} is not one this stage reads"
                break
            names.append(p.group(2))
        returned = None
        if result:
            r = _PARAM.fullmatch(result.strip()[1:-1])
            if r is None:
                why = why or f"its result {result.strip()!r} is not one this stage reads"
            else:
                returned = r.group(2)
        found[name] = Function(name, returned, names, text[m.end():close], why)
    return found


class _Unbalanced(ValueError):
    """A { without its }."""


def _matching_brace(text: str, at: int) -> int:
    depth = 0
    for i in range(at, len(text)):
        depth += (text[i] == "{") - (text[i] == "}")
        if depth == 0:
            return i
    raise _Unbalanced(at)


def inline_calls(text: str) -> tuple[str, dict[str, str]]:
    """``text`` (comment-free PTX) with every call of a module function that can be inlined replaced by a copy of
    its body; and, for the functions whose calls stay, why (the parser's refusal names it). Line numbers hold."""
    try:
        table = functions(text)
        if not any(f.why_not is None for f in table.values()):
            return text, {name: f.why_not for name, f in table.items()}
        inliner = _Inliner(table)
        out, at = [], 0
        for m in re.finditer(r"\.entry\s+" + _NAME + r"\s*\([^)]*\)[^{]*\{", text):
            close = _matching_brace(text, m.end() - 1)
            out.append(text[at:m.end()])
            body = text[m.end():close]
            out.append(inliner.body(body, (), _register_types(body)))
            at = close
        out.append(text[at:])
    except _Unbalanced:             # malformed PTX: left as it is, for the parser to name where
        return text, {}
    return "".join(out), inliner.refused


class _Inliner:
    def __init__(self, table: dict[str, Function]):
        self.table = table
        self.count = 0
        self.refused: dict[str, str] = {f.name: f.why_not for f in table.values() if f.why_not}

    def body(self, text: str, stack: tuple[str, ...], types: dict[str, str]) -> str:
        """A body (its registers' ``types``) with its inlinable calls replaced, each call sequence's parameters
        made registers."""
        out, at = [], 0
        for call in _CALL.finditer(text):
            callee = self.table.get(call.group(3))
            if callee is None:
                continue                    # printf, assert, or a function the module does not define
            reason = self._why_not(callee, stack)
            if reason:
                self.refused.setdefault(callee.name, reason)
                continue
            scope = _enclosing_scope(text, call.start())
            if scope is None or scope[0] < at:
                self.refused.setdefault(callee.name, "its call is not in a call sequence's { } scope")
                continue
            start, stop = scope
            out.append(text[at:start])
            out.append(self._sequence(text[start:stop], call.start() - start, call, callee, stack, types))
            at = stop
        out.append(text[at:])
        return "".join(out)

    def _why_not(self, callee: Function, stack: tuple[str, ...]) -> str | None:
        if callee.why_not:
            return callee.why_not
        if callee.name in stack:
            return "it is recursive (" + " -> ".join(stack[stack.index(callee.name):] + (callee.name,)) + ")"
        if len(stack) >= DEPTH:
            return f"its calls nest more than {DEPTH} deep"
        return None

    def _sequence(self, scope: str, offset: int, call: re.Match, callee: Function, stack, types) -> str:
        """One call sequence ``{ .param ...; st.param ...; call ...; ld.param ...; }`` with the call inlined.

        A parameter or the result is a set of fields, one register each: its byte offsets that ``st.param`` writes
        (a scalar: offset 0; a struct passed by value: each member's). An ``ld.param`` reads the field at its
        offset, as wide as it was written or narrower."""
        self.count += 1             # taken before the callee's own calls are inlined, which number theirs after it
        k = self.count
        end = offset + len(call.group(0))
        before, after = scope[:offset], scope[end:]
        declared = {m.group(1) for m in _DECLARED.finditer(before)}
        arguments = [a.strip() for a in (call.group(4) or "").split(",") if a.strip()]
        result = call.group(2)
        if (len(arguments) != len(callee.params) or any(a not in declared for a in arguments)
                or (result is not None and (result not in declared or callee.result is None))):
            self.refused.setdefault(callee.name, "its call's arguments do not match its parameters")
            return scope
        body = self._body_of(callee, stack)
        fields: dict[tuple[str, int], tuple[str, int]] = {}     # (parameter, byte offset) -> (register, bits written)
        for name in arguments:
            for kind, at in _accesses(before, "st", name):
                fields.setdefault((name, at), (f"__call{k}_{name}_{at}", _bits(kind)))
        if result is not None:
            for kind, at in _accesses(body, "st", callee.result):
                fields.setdefault((result, at), (f"__call{k}_{result}_{at}", _bits(kind)))

        def unwritten(name: str, kind: str, at: int) -> bool:      # a read that no field holds whole
            return (name, at) not in fields or _bits(kind) > fields[(name, at)][1]

        unread = [(a, at) for a, p in zip(arguments, callee.params) for kind, at in _accesses(body, "ld", p)
                  if unwritten(a, kind, at)]
        if result is not None:
            unread += [(result, at) for kind, at in _accesses(after, "ld", result) if unwritten(result, kind, at)]
        if unread:
            self.refused.setdefault(callee.name, "it reads bytes of a parameter or result that no one st.param "
                                                 "wrote (byte " + str(unread[0][1]) + ")")
            return scope
        registers = types | _register_types(scope)

        def declare(m: re.Match) -> str:
            own = [(reg, bits) for (n, _), (reg, bits) in sorted(fields.items()) if n == m.group(1)]
            return " ".join(f".reg .b{64 if bits == 64 else 32} {reg};" for reg, bits in own)

        before = _DECLARED.sub(declare, before)
        before = _rewrite(before, "st", arguments, fields, registers)
        after = _rewrite(after, "ld", [result] if result else [], fields, registers)
        body = _rewrite(body, "ld", callee.params, {(p, at): fields[(a, at)] for a, p in zip(arguments, callee.params)
                                                    for (n, at) in fields if n == a}, _register_types(body))
        if callee.result:
            if result is None:
                body = re.sub(_access("st", callee.result), "", body)      # a result the caller does not read
            else:
                body = _rewrite(body, "st", [callee.result], {(callee.result, at): fields[(result, at)]
                                                              for (n, at) in fields if n == result}, {})
        copy = self._copy(body, k)
        guard = (call.group(1) or "").strip()
        if guard:       # a guarded call: the copy runs where the guard holds
            negated = guard.startswith("@!")
            skip = f"$__call{k}_skip"
            copy = f"@{'' if negated else '!'}{guard.lstrip('@!')} bra {skip}; {copy} {skip}:"
        lines = call.group(0).count("\n")
        return before + copy + "\n" * lines + after

    def _body_of(self, callee: Function, stack) -> str:
        """The callee's body with its own calls inlined (and its line directives dropped)."""
        body = "\n".join(line for line in callee.body.splitlines() if not re.match(r"\s*\.(loc|file)\b", line))
        return self.body(body, stack + (callee.name,), _register_types(body))

    def _copy(self, body: str, k: int) -> str:
        """A body whose parameters are registers already, for call number k: on one line, in a { } scope of its
        own, its labels and .local arrays renamed, ``ret`` a branch to its end."""
        end = f"$__call{k}_end"
        # labels and .local arrays are the kernel's: each copy's are its own
        own = set(_LABEL.findall(body)) | {m.group(2) for m in _LOCAL.finditer(body)}
        for name in sorted(own, key=len, reverse=True):
            body = re.sub(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])", f"{name}__call{k}", body)
        body = re.sub(r"(^|[;{}:\s])((?:@!?%?" + _NAME + r"\s+)?)ret(?:\.uni)?\s*;",
                      lambda m: f"{m.group(1)}{m.group(2)}bra {end};", body)
        return "{ " + " ".join(body.split()) + f" {end}: }}"


_DECLARED = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.[busf]\d+\s+(" + _NAME + r")\s*(?:\[\s*\d+\s*\])?\s*;")


def _access(op: str, name: str) -> str:
    """``st.param.T [name+off], value;`` / ``ld.param.T target, [name+off];``: groups (T, off, value or target)."""
    where = r"\[\s*" + re.escape(name) + r"\s*(?:\+\s*(\d+)\s*)?\]"
    if op == "st":
        return r"st\.param\.(\w+)\s*" + where + r"\s*,\s*([^;]+);"
    return r"ld\.param\.(\w+)\s+([^,;]+?)\s*,\s*" + where + r"\s*;"


def _accesses(text: str, op: str, name: str) -> list[tuple[str, int]]:
    """(type, byte offset) of each st / ld .param of ``name`` in ``text``."""
    offset = 2 if op == "st" else 3
    return [(m.group(1), int(m.group(offset) or 0)) for m in re.finditer(_access(op, name), text)]


def _rewrite(text: str, op: str, names, fields: dict, registers: dict[str, str]) -> str:
    """Each st.param to / ld.param from a field of ``names`` as a move into / out of its register."""
    for name in names:
        def move(m: re.Match, name=name) -> str:
            if op == "st":
                kind, at, value = m.group(1), int(m.group(2) or 0), m.group(3).strip()
                reg, bits = fields[(name, at)]
                return _move(reg, f"b{64 if bits == 64 else 32}", value, kind) + ";"
            kind, target, at = m.group(1), m.group(2).strip(), int(m.group(3) or 0)
            reg, bits = fields[(name, at)]
            return _move(target, registers.get(_prefix(target), kind), reg, kind, bits) + ";"
        text = re.sub(_access(op, name), move, text)
    return text


def _enclosing_scope(text: str, at: int) -> tuple[int, int] | None:
    """[start, stop) of the innermost { } around position ``at`` (its braces included)."""
    depth = 0
    for i in range(at - 1, -1, -1):
        depth += (text[i] == "}") - (text[i] == "{")
        if depth < 0:
            return i, _matching_brace(text, i) + 1
    return None


def _register_types(text: str) -> dict[str, str]:
    """Register prefix (``%rs``) -> its declared type (``b16``), from the ``.reg`` declarations in ``text``."""
    types = {}
    for kind, names in _REG.findall(text):
        for item in names.split(","):
            m = re.fullmatch(r"\s*(%?" + _NAME + r"?)\s*(?:<\s*\d+\s*>)?\s*", item)
            if m:
                types[m.group(1)] = kind
    return types


def _prefix(register: str) -> str:
    m = re.fullmatch(r"\s*(%?" + _NAME + r"?)(\d*)\s*", register)
    return m.group(1) if m else register


def _bits(kind: str) -> int:
    digits = re.sub(r"\D", "", kind)
    return int(digits) if digits else 32


def _move(target: str, target_type: str, source: str, kind: str, source_bits: int = 32) -> str:
    """``target = source`` as an st.param / ld.param of type ``kind`` moves it: the whole register, or for an 8- or
    16-bit access its low bits, zero- or sign-extended (``kind``'s sign) to the target's width; a 32-bit read of a
    64-bit field its low word."""
    bits = _bits(kind)
    if bits == 32 and source_bits == 64:
        return f"cvt.u32.u64 {target}, {source}"
    if bits >= 32:
        return f"mov.b{_bits(target_type) if _bits(target_type) >= 32 else bits} {target}, {source}"
    sign = "s" if kind.startswith("s") else "u"
    width = max(16, _bits(target_type))
    return f"cvt.{sign}{width}.{sign}{bits} {target}, {source}"
