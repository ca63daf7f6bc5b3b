"""Calls of device functions the module defines, inlined into the kernels before parsing (PTX text to PTX text).

NVRTC inlines almost every ``__device__`` function; what it leaves as a ``call`` (``__noinline__``, a function too
large to inline, one whose recursion it turned into a loop) has its ``.func`` body in the same module. The machine
runs one kernel body, so each such call becomes a copy of the callee's body in a scope of its own, where the call was:

- the call's ``{ callseq }`` parameters (``.param .b32 param0``) become registers of that scope (renamed apart per
  call), ``st.param`` to them a move, and the ``ld.param`` of its result a move from the result's register;
- the callee's ``ld.param`` of its parameters and ``st.param`` of ``func_retval0`` read and write those registers
  (a narrow parameter, ``ld.param.u8``, converted as a load would extend it); its ``ret`` branches to the copy's end;
- the callee's registers are declared in the copy's scope, so the parser renames them apart from the caller's; its
  labels and ``.local`` arrays take the call's number.

The copy stands on the call statement's first line, and the statement's other lines stay as blank lines, so every
PTX line number of the kernel holds (a refusal inside the callee names the line of the call). Calls this stage does
not inline stay calls, and the parser refuses them with the reason kept here: a recursive function, a parameter or
result passed as bytes (a struct or an array by value), a function the module only declares.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = r"[A-Za-z_$][\w$]*"
_HEADER = re.compile(r"(?:\.(?:visible|weak|extern)\s+)*\.func\s*(\(\s*\.param[^)]*\))?\s*(" + _NAME + r")\s*"
                     r"\(([^)]*)\)\s*(?:\.noreturn\s*)?([{;])")
_PARAM = re.compile(r"\s*\.param\s+(?:\.align\s+\d+\s+)?\.([busf]\d+)\s+(" + _NAME + r")\s*(\[\s*\d*\s*\])?\s*")
_CALL = re.compile(r"(@!?%?" + _NAME + r"\s+)?call(?:\.uni)?\s*(?:\(\s*(" + _NAME + r")\s*\)\s*,)?\s*(" + _NAME +
                   r")\s*(?:,\s*\(([^)]*)\))?\s*;")
_REG = re.compile(r"\.reg\s+\.(\w+)\s+([^;]+);")
_LABEL = re.compile(r"(" + _NAME + r")\s*:(?!:)")
_LOCAL = re.compile(r"(\.local\s+(?:\.align\s+\d+\s+)?\.\w+\s+)(" + _NAME + r")(\s*\[)")
DEPTH = 8           # calls inside inlined copies, at most this deep


@dataclass
class Function:
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
            if p is None or p.group(3):
                why = "it takes a struct or an array by value (a parameter of bytes)"
                break
            names.append(p.group(2))
        returned = None
        if result:
            r = _PARAM.fullmatch(result.strip()[1:-1])
            if r is None or r.group(3):
                why = why or "it returns a struct or an array by value (a result of bytes)"
            else:
                returned = r.group(2)
        found[name] = Function(name, returned, names, text[m.end():close], why)
    return found


def _matching_brace(text: str, at: int) -> int:
    depth = 0
    for i in range(at, len(text)):
        depth += (text[i] == "{") - (text[i] == "}")
        if depth == 0:
            return i
    raise ValueError("unbalanced braces")


def inline_calls(text: str) -> tuple[str, dict[str, str]]:
    """``text`` (comment-free PTX) with every call of a module function that can be inlined replaced by a copy of
    its body; and, for the functions whose calls stay, why (the parser's refusal names it). Line numbers hold."""
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
        """One call sequence ``{ .param ...; st.param ...; call ...; ld.param ...; }`` with the call inlined."""
        self.count += 1
        k = self.count
        end = offset + len(call.group(0))
        before, after = scope[:offset], scope[end:]
        params = {name: kind for kind, name in
                  re.findall(r"\.param\s+(?:\.align\s+\d+\s+)?\.([busf]\d+)\s+(" + _NAME + r")\s*;", before)}
        rename = {name: f"__call{k}_{name}" for name in params}
        arguments = [a.strip() for a in (call.group(4) or "").split(",") if a.strip()]
        if (len(arguments) != len(callee.params) or any(a not in rename for a in arguments)
                or (call.group(2) is not None and (call.group(2) not in rename or callee.result is None))):
            self.refused.setdefault(callee.name, "its call's arguments do not match its parameters")
            return scope

        def declare(m: re.Match) -> str:
            return f".reg .{_register_type(m.group(1))} {rename[m.group(2)]};"

        def store(m: re.Match) -> str:
            kind, name, value = m.group(1), m.group(2), m.group(3)
            return _move(rename[name], _register_type(params[name]), value.strip(), kind) + ";"

        names = "|".join(map(re.escape, rename)) or "(?!)"
        declared = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.([busf]\d+)\s+(" + names + r")\s*;")
        stored = re.compile(r"st\.param\.(\w+)\s*\[\s*(" + names + r")\s*(?:\+\s*0\s*)?\]\s*,\s*([^;]+);")
        loaded = re.compile(r"ld\.param\.(\w+)\s+([^,]+),\s*\[\s*(" + names + r")\s*(?:\+\s*0\s*)?\]\s*;")
        registers = types | _register_types(scope)

        def load(m: re.Match) -> str:
            kind, target, name = m.group(1), m.group(2).strip(), m.group(3)
            return _move(target, registers.get(_prefix(target), kind), rename[name], kind) + ";"

        before = stored.sub(store, declared.sub(lambda m: declare(m), before))
        after = loaded.sub(load, after)
        copy = self._copy(callee, k, [rename[a] for a in arguments],
                          rename.get(call.group(2)) if call.group(2) else None, stack)
        guard = (call.group(1) or "").strip()
        if guard:       # a guarded call: the copy runs where the guard holds
            negated = guard.startswith("@!")
            skip = f"$__call{k}_skip"
            copy = f"@{'' if negated else '!'}{guard.lstrip('@!')} bra {skip}; {copy} {skip}:"
        lines = call.group(0).count("\n")
        return before + copy + "\n" * lines + after

    def _copy(self, callee: Function, k: int, arguments: list[str], result: str | None, stack) -> str:
        """The callee's body for call number k, on one line, in a { } scope of its own."""
        body = "\n".join(line for line in callee.body.splitlines()
                         if not re.match(r"\s*\.(loc|file)\b", line))
        types = _register_types(body)
        body = self.body(body, stack + (callee.name,), types)      # its own calls first, then its parameters
        end = f"$__call{k}_end"
        # labels and .local arrays are the kernel's: each copy's are its own
        own = set(_LABEL.findall(body)) | {m.group(2) for m in _LOCAL.finditer(body)}
        for name in sorted(own, key=len, reverse=True):
            body = re.sub(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])", f"{name}__call{k}", body)
        for index, name in enumerate(callee.params):
            body = re.sub(r"ld\.param\.(\w+)\s+([^,]+),\s*\[\s*" + re.escape(name) + r"\s*(?:\+\s*0\s*)?\]\s*;",
                          lambda m, a=arguments[index]: _move(m.group(2).strip(), types.get(_prefix(m.group(2)),
                                                                                         m.group(1)),
                                                             a, m.group(1)) + ";", body)
        if callee.result:
            body = re.sub(r"st\.param\.(\w+)\s*\[\s*" + re.escape(callee.result) + r"\s*(?:\+\s*0\s*)?\]\s*,\s*"
                          r"([^;]+);",
                          lambda m: (_move(result, "b64" if _bits(m.group(1)) == 64 else "b32", m.group(2).strip(),
                                           m.group(1)) if result else "") + ";", body)
        body = re.sub(r"(^|[;{}:\s])((?:@!?%?" + _NAME + r"\s+)?)ret(?:\.uni)?\s*;",
                      lambda m: f"{m.group(1)}{m.group(2)}bra {end};", body)
        return "{ " + " ".join(body.split()) + f" {end}: }}"


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


def _register_type(kind: str) -> str:
    """A parameter's register: a word, or two for 64 bits (a narrow parameter is held zero-extended in a word)."""
    return "b64" if _bits(kind) == 64 else "b32"


def _move(target: str, target_type: str, source: str, kind: str) -> str:
    """``target = source`` as an st.param / ld.param of type ``kind`` moves it: the whole register, or for an 8- or
    16-bit access its low bits, zero- or sign-extended (``kind``'s sign) to the target's width."""
    bits = _bits(kind)
    if bits >= 32:
        return f"mov.b{_bits(target_type) if _bits(target_type) >= 32 else bits} {target}, {source}"
    sign = "s" if kind.startswith("s") else "u"
    width = max(16, _bits(target_type))
    return f"cvt.{sign}{width}.{sign}{bits} {target}, {source}"
