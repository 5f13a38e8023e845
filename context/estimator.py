"""The online estimator: a calibrated estimate of Claude's token count, learned from real usage.

``TokenEstimator`` turns raw cl100k counts (``context.tokens``) into an
estimate of what Claude will count, and learns online from the real ``usage``
of every response.

Claude's tokenizer is not cl100k, and the API adds framing the raw count never
sees (roles, tool-call and tool-result wrappers, thinking blocks a converted log
lost). The estimator models what the model reads for a span of messages as::

    estimate = assistant_factor * raw_assistant + user_factor * raw_user
               + per_message * n_messages + per_block * n_blocks

Assistant messages (mostly tool calls, counted here as their input JSON) and
user messages (user text, tool results) get separate factors because Claude's
count of them differs: roughly 1.25-1.3x cl100k for tool-call JSON, 1.05-1.15x for
file contents read by a tool, on real Claude Code sessions. ``estimate_raw``
called without the split applies ``factor``, the blend of the two at the share
of assistant tokens in the recently observed spans.

Defaults (before any observation): both factors 1.19, 24 tokens a message, 12 a
block. They come from a robust fit on two real Claude Code sessions
(``bench/token_estimate.py``); the online learner reaches similar values from
a cold start. Each real response gives one exact data point: the growth of the
model's own count between two consecutive calls (``total_k - total_{k-1}``)
against the raw size of the messages appended in between. The four
coefficients are a ridge-regularised weighted least-squares fit of those
points (sufficient statistics are a 4x4 matrix and a 4-vector), with a slow
forgetting factor so a change of model or tooling is tracked. Two choices make
the fit serve the anchored totals:

* weights 1/y**1.5 for a span of y tokens, between relative error (1/y**2,
  where a 30-token span weighs as much as a 10k-token one) and absolute error;
* Huber down-weighting: a span off the current model by more than ``huber``
  (10%) gets weight ``huber / r``. Real logs hold spans that no model of the
  visible content can predict (thinking the log dropped, tool output the log
  truncated); fitted by least squares they inflate the factors and worsen
  every ordinary span.

Because estimates are always *anchored* on the previous call's real total (see
``predict_total`` / ``estimate_call``), only the appended span is estimated and
the error stays a fraction of a percent of the whole context.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from context.messages import Message
from context.tokens import split_counts


def usage_total(usage: Any) -> int | None:
    """What the model read according to ``usage``, or None if the usage is unusable.

    Accepts a ``Usage`` model, a mapping with the API field names, or a plain
    int total. Missing/None fields count as 0; a negative, non-numeric or
    non-finite field, or a total of 0, makes the whole usage unusable.
    """
    if usage is None or isinstance(usage, bool):
        return None
    if isinstance(usage, (int, float)):
        values = [usage]
    else:
        get = usage.get if isinstance(usage, Mapping) else (lambda k: getattr(usage, k, None))
        values = [
            get("input_tokens"),
            get("cache_read_input_tokens"),
            get("cache_creation_input_tokens"),
        ]
    total = 0
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            return None
        total += int(v)
    return total if total > 0 else None


def _fingerprint(messages: Sequence[Message]) -> str:
    """Identity of a message list's ends: appending keeps the first and the last-seen message."""
    if not messages:
        return ""
    h = hashlib.sha1(messages[0].canonical.encode("utf-8", "surrogatepass"))
    h.update(b"\x00")
    h.update(messages[-1].canonical.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:20]


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Solve a small square linear system by Gaussian elimination with partial pivoting."""
    n = len(b)
    m = [row[:] + [rhs] for row, rhs in zip(a, b)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-300:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        s = m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))
        x[r] = s / m[r][r]
    return x if all(math.isfinite(v) for v in x) else None


#: The learned coefficients, in the order of the feature vector
#: (assistant raw tokens, user raw tokens, messages, blocks).
_COEFS = ("assistant_factor", "user_factor", "per_message", "per_block")
_N = len(_COEFS)
#: Prior scales: a prior weight of 1 costs as much as one typical span estimated
#: 100% off when a factor is 0.25 away from its prior, or an overhead 20 tokens
#: away. With the default weight 0.3 the priors are worth about ten typical
#: spans, so a few dozen observations dominate them.
_PRIOR_SCALE = (0.25, 0.25, 20.0, 20.0)
#: Sanity bounds on the learned coefficients.
_BOUNDS = ((0.5, 3.0), (0.5, 3.0), (0.0, 1000.0), (0.0, 1000.0))
#: Span size (Claude tokens) at which the 1/y**1.5 weight equals the relative
#: weight 1/y**2: keeps ``prior_weight`` on the scale of "typical spans".
_REF_SPAN = 300.0
#: Pseudo-mass (raw tokens, at a share of one half) behind ``assistant_share``,
#: so the first observed span does not set it alone.
_SHARE_PRIOR_RAW = 1000.0


class TokenEstimator(BaseModel):
    """Calibrated estimate of Claude's token count, learned online from real usage.

    Serialise with ``to_dict()`` / ``TokenEstimator.from_dict()`` (plain JSON types).
    """

    model_config = ConfigDict(extra="ignore", validate_assignment=False)

    # Prior (the model before any observation), its strength and the memory length.
    prior_factor: float = 1.19  # both role factors start here
    prior_per_message: float = 24.0
    prior_per_block: float = 12.0
    prior_weight: float = 0.3
    forget: float = 0.99  # per observation: memory of roughly 1/(1-forget) = 100 spans
    clip: float = 3.0  # an observed span is clipped to [est/clip, est*clip] before it is learned
    huber: float = 0.1  # relative residual beyond which a span's weight is cut (Huber); 0 disables

    # Current coefficients.
    assistant_factor: float = 1.19  # Claude tokens per raw token of assistant messages
    user_factor: float = 1.19  # ... of user messages (user text, tool results)
    per_message: float = 24.0
    per_block: float = 12.0
    #: Blend of the two role factors at ``assistant_share``: what ``estimate_raw``
    #: applies when it is not told how the raw tokens split between the roles.
    factor: float = 1.19

    # Sufficient statistics of the weighted least squares (without the prior).
    xtx: list[list[float]] = Field(default_factory=lambda: [[0.0] * _N for _ in range(_N)])
    xty: list[float] = Field(default_factory=lambda: [0.0] * _N)
    n_observations: int = 0

    # Forgetting sums of the raw tokens of observed spans, all and assistant.
    raw_seen: float = 0.0
    assistant_raw_seen: float = 0.0

    # Tokens the model read outside the messages (system prompt, tool definitions,
    # unexplained framing), learned from whole-context observations. None until seen.
    base: float | None = None

    # Anchor: the last call's real total and the shape of its input.
    last_total: int | None = None
    last_n_messages: int = 0
    last_fingerprint: str = ""

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """Accept the state of the earlier one-factor model (3x3 statistics).

        Its statistics cannot be split between the roles, so they are dropped
        and its learned coefficients become the prior (and the start) of this
        model, which then relearns the split from new observations.
        """
        if not isinstance(data, Mapping):
            return data
        xtx, xty = data.get("xtx"), data.get("xty")
        old = (
            isinstance(xtx, list)
            and len(xtx) == 3
            and all(isinstance(row, list) and len(row) == 3 for row in xtx)
            and isinstance(xty, list)
            and len(xty) == 3
        )
        if not old:
            return data
        data = {k: v for k, v in data.items() if k not in ("xtx", "xty")}
        learned = data.get("n_observations")
        if isinstance(learned, int) and learned > 0:
            for prior, coef in (("prior_factor", "factor"), ("prior_per_message", "per_message"),
                                ("prior_per_block", "per_block")):
                if coef in data:
                    data[prior] = data[coef]
            if "factor" in data:
                data.setdefault("assistant_factor", data["factor"])
                data.setdefault("user_factor", data["factor"])
        return data

    @field_validator("xtx")
    @classmethod
    def _square(cls, v: list[list[float]]) -> list[list[float]]:
        if len(v) != _N or any(len(row) != _N for row in v):
            raise ValueError(f"xtx must be {_N}x{_N}")
        return v

    @field_validator("xty")
    @classmethod
    def _vec(cls, v: list[float]) -> list[float]:
        if len(v) != _N:
            raise ValueError(f"xty must have {_N} entries")
        return v

    def model_post_init(self, __context: Any) -> None:
        fresh = self.n_observations == 0
        given = self.model_fields_set
        if "factor" in given:
            # An explicitly given single factor applies to both roles unless they are given too.
            for name in ("assistant_factor", "user_factor"):
                if name not in given:
                    setattr(self, name, self.factor)
        elif fresh:
            for name in ("assistant_factor", "user_factor"):
                if name not in given:
                    setattr(self, name, self.prior_factor)
        if fresh and "per_message" not in given:
            self.per_message = self.prior_per_message
        if fresh and "per_block" not in given:
            self.per_block = self.prior_per_block
        if "factor" not in given:
            self.factor = self._blend()

    # ----------------------------------------------------------------- estimates

    @property
    def assistant_share(self) -> float:
        """Share of assistant tokens in the raw tokens of recently observed spans (1/2 before any)."""
        share = (self.assistant_raw_seen + 0.5 * _SHARE_PRIOR_RAW) / (self.raw_seen + _SHARE_PRIOR_RAW)
        return min(max(share, 0.0), 1.0)

    def _blend(self) -> float:
        s = self.assistant_share
        return s * self.assistant_factor + (1.0 - s) * self.user_factor

    def _features(
        self, raw_tokens: float, n_messages: float, n_blocks: float, assistant_raw: float | None
    ) -> tuple[float, float, float, float]:
        raw = max(float(raw_tokens), 0.0)
        if assistant_raw is None:
            a = self.assistant_share * raw
        else:
            a = min(max(float(assistant_raw), 0.0), raw)
        return (a, raw - a, max(float(n_messages), 0.0), max(float(n_blocks), 0.0))

    def _coefs(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in _COEFS)

    def _predict(self, x: Sequence[float]) -> float:
        return sum(c * v for c, v in zip(self._coefs(), x))

    def estimate_raw(
        self, raw_tokens: int, n_messages: int, n_blocks: int, assistant_raw: int | None = None
    ) -> int:
        """Claude-token estimate of a span with these raw counts.

        ``assistant_raw`` is how many of the raw tokens are in assistant
        messages. Without it the span is assumed to split like the recently
        observed spans, i.e. the blended ``factor`` applies to all raw tokens.
        """
        return int(round(self._predict(self._features(raw_tokens, n_messages, n_blocks, assistant_raw))))

    def estimate_messages(self, messages: Sequence[Message]) -> int:
        """Claude-token estimate of these messages (not including system prompt or tools)."""
        raw, n_msg, n_blk, a_raw = split_counts(messages)
        return self.estimate_raw(raw, n_msg, n_blk, assistant_raw=a_raw)

    def predict_total(self, prev_actual_total: int, added: Sequence[Message]) -> int:
        """Anchored prediction: the previous call's real total plus the estimate of what was added."""
        return int(prev_actual_total) + self.estimate_messages(added)

    def estimate_input(self, messages: Sequence[Message], extra_raw_tokens: int = 0) -> int:
        """Unanchored estimate of a whole call's input.

        ``extra_raw_tokens`` is the raw count of what is sent besides the
        messages (system prompt, tool definitions). Once a call has been
        observed, the learned ``base`` (what the model read outside the
        messages) is added too.
        """
        est = self.estimate_messages(messages) + self.factor * max(extra_raw_tokens, 0)
        if self.base is not None:
            est += self.base
        return int(round(est))

    def estimate_call(self, messages: Sequence[Message], extra_raw_tokens: int = 0) -> int:
        """Best estimate of the next call's input: anchored when ``messages`` extends the last call's input.

        If the last observed call's messages are a prefix of ``messages`` (same
        first and last-seen message), this is ``last_total + estimate(new
        messages)``; otherwise (compaction, edits, no observation yet) it falls
        back to ``estimate_input``.
        """
        if self._extends_anchor(messages):
            return self.predict_total(self.last_total or 0, messages[self.last_n_messages :])
        return self.estimate_input(messages, extra_raw_tokens)

    def _extends_anchor(self, messages: Sequence[Message]) -> bool:
        n = self.last_n_messages
        return (
            self.last_total is not None
            and n > 0
            and len(messages) >= n
            and _fingerprint(messages[:n]) == self.last_fingerprint
        )

    # ----------------------------------------------------------------- learning

    def observe(
        self,
        usage: Any,
        messages: Sequence[Message] | None = None,
        *,
        extra_raw_tokens: int = 0,
    ) -> bool:
        """Learn from the real ``usage`` of a response to a call whose input was ``messages``.

        ``messages`` is the full message list sent in that call. When it extends
        the previous observed call's input, the growth of the real total is
        learned against the appended span. Unusable usage (None, zeros,
        negatives, garbage) is ignored and returns False; the anchor is kept.
        """
        total = usage_total(usage)
        if total is None:
            return False
        if messages is None:
            # Nothing to compare against next time: drop the anchor.
            self.forget_anchor()
            return True
        if self._extends_anchor(messages) and self.last_total is not None:
            raw, n_msg, n_blk, a_raw = split_counts(messages[self.last_n_messages :])
            self.observe_span(total - self.last_total, raw, n_msg, n_blk, assistant_raw=a_raw)
        residual = total - self.estimate_messages(messages) - self.factor * max(extra_raw_tokens, 0)
        residual = max(0.0, float(residual))
        self.base = residual if self.base is None else 0.5 * self.base + 0.5 * residual
        self.last_total = total
        self.last_n_messages = len(messages)
        self.last_fingerprint = _fingerprint(messages)
        return True

    def forget_anchor(self) -> None:
        """Forget the last call (e.g. after compaction, when the next input does not extend it)."""
        self.last_total = None
        self.last_n_messages = 0
        self.last_fingerprint = ""

    def observe_span(
        self,
        actual_tokens: Any,
        raw_tokens: Any,
        n_messages: Any,
        n_blocks: Any,
        assistant_raw: Any = None,
    ) -> bool:
        """Learn from one span: the model counted ``actual_tokens`` for a span of these raw counts.

        ``assistant_raw`` (optional) is the raw tokens of the span's assistant
        messages; without it the span is taken to split like recent spans.
        Returns False (and learns nothing) for unusable data: non-numeric or
        non-finite values, actual <= 0, negative counts or an empty span.
        """
        vals = (actual_tokens, raw_tokens, n_messages, n_blocks)
        if assistant_raw is not None:
            vals += (assistant_raw,)
        if any(v is None or isinstance(v, bool) or not isinstance(v, (int, float)) for v in vals):
            return False
        if not all(math.isfinite(v) for v in vals):
            return False
        if actual_tokens <= 0 or min(vals[1:]) < 0:
            return False
        if raw_tokens == 0 and n_messages == 0 and n_blocks == 0:
            return False
        x = self._features(raw_tokens, n_messages, n_blocks, assistant_raw)
        est = max(1.0, self._predict(x))
        y = min(max(float(actual_tokens), est / self.clip), est * self.clip)
        # Weight 1/y**1.5 (scaled to 1/y**2 at _REF_SPAN tokens): between relative
        # error (1/y**2: a 30-token span counts as much as a 10k one) and absolute
        # error (1/y), since the anchored totals this serves care about tokens.
        w = math.sqrt(y / _REF_SPAN) / (y * y)
        # Huber: a span far off the current model (thinking blocks the log lost,
        # output truncated in the log) is down-weighted, not fitted.
        r = abs(y - est) / max(y, est)
        if self.huber > 0 and r > self.huber:
            w *= self.huber / r
        f = self.forget
        for i in range(_N):
            for j in range(_N):
                self.xtx[i][j] = f * self.xtx[i][j] + w * x[i] * x[j]
            self.xty[i] = f * self.xty[i] + w * x[i] * y
        if assistant_raw is not None:
            self.raw_seen = f * self.raw_seen + x[0] + x[1]
            self.assistant_raw_seen = f * self.assistant_raw_seen + x[0]
        self.n_observations += 1
        self._refit()
        return True

    def _refit(self) -> None:
        prior = (self.prior_factor, self.prior_factor, self.prior_per_message, self.prior_per_block)
        a = [row[:] for row in self.xtx]
        b = self.xty[:]
        for i in range(_N):
            p = self.prior_weight / (_PRIOR_SCALE[i] ** 2)
            a[i][i] += p
            b[i] += p * prior[i]
        sol = _solve(a, b)
        if sol is not None:
            for name, v, (lo, hi) in zip(_COEFS, sol, _BOUNDS):
                setattr(self, name, min(max(v, lo), hi))
        self.factor = self._blend()

    # ----------------------------------------------------------------- persistence

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON state, for saving with the agent's state."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TokenEstimator:
        """Restore from ``to_dict()``; None or an unreadable dict gives a fresh estimator."""
        if not data:
            return cls()
        try:
            return cls.model_validate(dict(data))
        except (ValidationError, TypeError, ValueError):
            return cls()
