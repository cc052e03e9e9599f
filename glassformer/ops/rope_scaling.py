"""RoPE scaling: the angle frequencies of a RoPE stretched past the context it was trained for.

Plain RoPE turns pair i of a head by pos * inv_freq[i], inv_freq[i] = theta^(-2i/D). A model
trained on N tokens has never seen the slow pairs turn further than N * inv_freq[i]; scaling
changes inv_freq so that longer sequences stay in that range. Each kind below is computed as
transformers' `modeling_rope_utils` does (`rope_type` in config.json's rope_parameters or
rope_scaling), in float64 instead of float32:

    linear   (kaiokendev)    inv_freq / factor: every position squeezed by `factor`
    dynamic  (NTK, bloc97)   theta grows with the sequence once it passes N:
                             theta' = theta * (factor * S / N - (factor - 1)) ^ (D / (D - 2)),
                             S = max(longest position + 1, N)
    llama3   (Llama 3.1)     by wavelength 2 pi / inv_freq: short ones (< N / high_freq_factor)
                             kept, long ones (> N / low_freq_factor) divided by factor, a smooth
                             blend in between
    yarn     (Peng et al.    per pair, a ramp between extrapolation (inv_freq kept, fast pairs)
              2023, YaRN)    and interpolation (inv_freq / factor, slow pairs), set by how many
                             turns the pair makes over N (beta_fast .. beta_slow); cos and sin
                             are also multiplied by attention_factor (0.1 ln(factor) + 1)

    pair:           0 (fast) ............................................. D/2 - 1 (slow)
    linear:         / factor   / factor   / factor   / factor   / factor   / factor
    llama3, yarn:   kept       kept       ~~~ blend ~~~          / factor   / factor

The attention factor multiplies both q and k, so the scores grow by its square: YaRN's
"temperature". note: dynamic NTK depends on the sequence length, so keys cached at a shorter
length were turned by other angles than a full recompute would use; transformers has the same
behaviour, and so do we (cached decoding reads S from the newest position).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from glassformer.errors import GlassformerError, check_choice

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """A rope_parameters record, as transformers reads it (defaults are transformers')."""
    rope_type: str = "default"          # one of ROPE_TYPES
    factor: float = 1.0                 # how much longer than the original context
    original_max_len: int | None = None  # N, the pretraining context (llama3, yarn, dynamic)
    low_freq_factor: float = 1.0        # llama3: wavelengths above N / this are divided
    high_freq_factor: float = 4.0       # llama3: wavelengths below N / this are kept
    beta_fast: float = 32.0             # yarn: pairs turning more than this over N are kept
    beta_slow: float = 1.0              # yarn: pairs turning less than this are divided
    attention_factor: float | None = None  # yarn: cos/sin scale (None: 0.1 ln(factor) + 1)
    truncate: bool = True               # yarn: round the ramp's ends to whole pairs

    def __post_init__(self):
        check_choice("rope_type", self.rope_type, ROPE_TYPES)
        if self.rope_type != "default" and not self.factor > 0.0:
            raise GlassformerError(f"RoPE scaling factor must be > 0, got {self.factor}")
        needs_original = self.rope_type in ("dynamic", "llama3", "yarn")
        if needs_original and (self.original_max_len is None or self.original_max_len < 1):
            raise GlassformerError(f"rope_type {self.rope_type!r} needs the original context "
                                   f"length (>= 1), got {self.original_max_len!r}")
        if self.rope_type == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise GlassformerError(f"llama3 RoPE needs high_freq_factor > low_freq_factor, got "
                                   f"{self.high_freq_factor} and {self.low_freq_factor}")


def rope_frequencies(d: int, *, theta: float, scaling: RopeScaling | None = None,
                     seq_len: int = 1) -> tuple[np.ndarray, float]:
    """(inv_freq (D/2,) float64, attention_factor) for head dim D.

    seq_len: the longest position + 1 in this forward (read by dynamic NTK only).

    >>> inv_freq, factor = rope_frequencies(4, theta=100.0, scaling=RopeScaling("linear", 2.0))
    >>> inv_freq.tolist(), factor
    ([0.5, 0.05], 1.0)
    """
    kind = "default" if scaling is None else scaling.rope_type
    if kind == "dynamic":
        theta = _dynamic_theta(d, theta, scaling, seq_len)
    exponents = np.arange(0, d, 2, dtype=np.float64) / d             # (D/2,): 2i / D
    inv_freq = 1.0 / (float(theta) ** exponents)                     # (D/2,)
    if kind == "linear":
        return inv_freq / scaling.factor, 1.0
    if kind == "llama3":
        return _llama3_inv_freq(inv_freq, scaling), 1.0
    if kind == "yarn":
        return _yarn_inv_freq(inv_freq, d, theta, scaling), _yarn_attention_factor(scaling)
    return inv_freq, 1.0


def _dynamic_theta(d: int, theta: float, scaling: RopeScaling, seq_len: int) -> float:
    """NTK-aware base: unchanged up to N, growing with the sequence after it."""
    n = scaling.original_max_len
    length = max(seq_len, n)
    stretch = scaling.factor * length / n - (scaling.factor - 1.0)
    return theta * stretch ** (d / (d - 2.0))


def _llama3_inv_freq(inv_freq: np.ndarray, scaling: RopeScaling) -> np.ndarray:
    """Keep short wavelengths, divide long ones by factor, blend linearly (in N / wavelength)
    in between."""
    n, factor = scaling.original_max_len, scaling.factor
    low, high = scaling.low_freq_factor, scaling.high_freq_factor
    wavelen = 2.0 * math.pi / inv_freq                               # (D/2,) tokens per turn
    scaled = np.where(wavelen > n / low, inv_freq / factor, inv_freq)
    smooth = (n / wavelen - low) / (high - low)                      # 0 at N/low, 1 at N/high
    blended = (1.0 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= n / high) & (wavelen <= n / low)
    return np.where(medium, blended, scaled)


def _yarn_inv_freq(inv_freq: np.ndarray, d: int, theta: float,
                   scaling: RopeScaling) -> np.ndarray:
    """Per pair: inv_freq kept (turns more than beta_fast times over N), divided by factor
    (fewer than beta_slow turns), a linear ramp over the pairs in between."""
    low = _yarn_pair_of(scaling.beta_fast, d, theta, scaling.original_max_len)
    high = _yarn_pair_of(scaling.beta_slow, d, theta, scaling.original_max_len)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp                                                # (D/2,) 1: extrapolate
    return inv_freq / scaling.factor * (1.0 - keep) + inv_freq * keep


def _yarn_pair_of(turns: float, d: int, theta: float, n: int) -> float:
    """The (fractional) pair index that makes `turns` full turns over N positions."""
    return d * math.log(n / (turns * 2.0 * math.pi)) / (2.0 * math.log(theta))


def _yarn_attention_factor(scaling: RopeScaling) -> float:
    if scaling.attention_factor is not None:
        return float(scaling.attention_factor)
    return yarn_mscale(scaling.factor)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention scale for a context `factor` times longer: 0.1 mscale ln(factor) + 1."""
    if factor <= 1.0:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0
