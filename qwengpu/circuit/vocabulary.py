"""How tokens enter and leave the residual stream: the token groups, the embedding and the output head.

A token's embedding sets ``family``, ``nonzero`` (a VAL whose half-word is not 0) and the four one-hot nibbles of its
argument; every other group stays at its default, so every row has mean(x^2) = 64. The output head reads the output
slots ``out_family`` and four ``out_nibble`` groups, which the layers raise: a token scores LOGIT per slot it is
spelled with, so the right token beats every other by at least LOGIT.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tokens as T
from .basis import HOT, Group, Residual

FAMILIES = tuple(name for name, _, _ in T.FAMILIES)     # the token families, from the one grammar
NIBBLES = 4             # nibbles of a token's argument (a 16-bit half-word)
WORD = 2 * NIBBLES      # nibbles of a 32-bit word (two VAL tokens)
LOGIT = 8.0             # output-head weight per matching slot: the right token beats every other by >= LOGIT


@dataclass(frozen=True)
class Tokens:
    """The groups the embedding sets (the token fed) and the ones the output head reads (the token predicted)."""
    family: Group
    nonzero: Group
    nibble: tuple[Group, ...]
    out_family: Group
    out_nibble: tuple[Group, ...]


def build(residual: Residual) -> Tokens:
    """Place the token groups (the first groups of the residual)."""
    family = residual.group("family", FAMILIES)
    nonzero = residual.group("nonzero", (False, True))
    nibble = tuple(residual.group(f"nibble{i}", range(16)) for i in range(NIBBLES))
    out_family = residual.group("out_family", (None, *FAMILIES))
    out_nibble = tuple(residual.group(f"out_nibble{i}", range(16)) for i in range(NIBBLES))
    return Tokens(family, nonzero, nibble, out_family, out_nibble)


def token_slots(tokens: Tokens, token: int) -> dict[Group, object]:
    """The embedding's hot slots for a token (the groups not named stay at their defaults)."""
    family, arg = T.kind(token), T.argument(token) or 0
    return {tokens.family: family, tokens.nonzero: family == "VAL" and arg != 0, **_nibbles(tokens.nibble, arg)}


def output_slots(tokens: Tokens, token: int) -> dict[Group, object]:
    """The output slots a token is spelled with."""
    family, arg = T.kind(token), T.argument(token) or 0
    return {tokens.out_family: family, **_nibbles(tokens.out_nibble, arg)}


def embedding(residual: Residual, tokens: Tokens) -> np.ndarray:
    """(vocab, hidden) embedding: every row a residual vector with mean(x^2) = 64."""
    table = np.tile(np.array(residual.vector({}), dtype=np.float32), (T.VOCAB_SIZE, 1))
    rows = np.arange(T.VOCAB_SIZE)
    columns = {group: [] for group in (tokens.family, tokens.nonzero, *tokens.nibble)}
    for token in rows:
        for group, slot in token_slots(tokens, int(token)).items():
            columns[group].append(group.dim(slot))
    for group, dims in columns.items():
        table[rows, group.dim(group.default)] = 0.0
        table[rows, np.array(dims)] = HOT
    return table


def output_head(tokens: Tokens) -> dict:
    """The lm_head as {(token, dim): weight}: LOGIT on each output slot the token is spelled with."""
    head = {}
    for token in range(T.VOCAB_SIZE):
        for group, slot in output_slots(tokens, token).items():
            head[token, group.dim(slot)] = LOGIT
    return head


def _nibbles(groups: tuple[Group, ...], arg: int) -> dict:
    return {group: (arg >> (4 * i)) & 15 for i, group in enumerate(groups)}
