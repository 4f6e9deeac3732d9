"""What the API server's engines of the decoding kinds share: a stepper that reports each
row's tokens as the search decides them (a streamed answer)."""

from __future__ import annotations

import numpy as np


class TokenWatcher:
    """A stepper that passes every step on and reports each row's tokens as the search
    feeds them back (the token fed at step i was decided at step i - 1): emit(row,
    {"token", "text"}), up to the row's EOS or its limit; `flush` reports the last ones,
    which no step reads."""

    def __init__(self, stepper, starts, limits, eos_id, sp, emit):
        self.stepper, self.starts, self.limits = stepper, starts, limits
        self.eos_id, self.sp, self.emit = eos_id, sp, emit
        self.seen = [[] for _ in starts]
        self.done = [False] * len(starts)

    def step(self, tokens, index):
        for row, token in enumerate(np.asarray(tokens).tolist()):
            if index > self.starts[row]:
                self._add(row, token)
        return self.stepper.step(tokens, index)

    def reorder(self, indices):
        self.stepper.reorder(indices)

    def _add(self, row: int, token: int) -> None:
        if self.done[row] or len(self.seen[row]) >= self.limits[row]:
            return
        if token == self.eos_id:
            self.done[row] = True
            return
        self.seen[row].append(int(token))
        self.emit(row, {"token": self.sp.id_to_piece(int(token)),
                        "text": self.sp.decode(self.seen[row])})

    def flush(self, found) -> None:
        for row, tokens in enumerate(found):
            for token in tokens[len(self.seen[row]):]:
                self._add(row, token)
