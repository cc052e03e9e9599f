"""The error function erf and its complement erfc, vectorised, in float64, without SciPy; and the
normal distribution's upper tail in float32, for the exact GELU on float32 activations.

Exact GELU needs the normal CDF, Phi(x) = erfc(-x / sqrt(2)) / 2, and NumPy has no erf. Calling
`math.erf` per element (one Python call each) is far too slow for activations, and the short
Abramowitz-Stegun fits (7.1.26, error 1.5e-7) are too rough: a float64 gradient check compares
the forward's finite differences with an exact derivative, so the forward must be as smooth and
accurate as float64.

We use W. J. Cody's rational Chebyshev approximations ("Rational Chebyshev approximations for the
error function", Math. Comp. 23 (1969) 631-638), with the coefficient sets of his Netlib SPECFUN
routine CALERF, the same ones behind many libm and SciPy-era implementations. On y = |x|:

    y <= 0.46875        erf(y)  = y * A(y^2) / B(y^2)                       degree 4 / 4
    0.46875 < y <= 4    erfc(y) = exp(-y^2) * C(y) / D(y)                   degree 8 / 8
    y > 4               erfc(y) = exp(-y^2) / y * (1/sqrt(pi) - z P(z) / Q(z)),  z = 1 / y^2

and erfc(-y) = 2 - erfc(y). Measured against `math.erfc` the relative error is below ~1e-15 near
the origin and a few 1e-15 in the far tail (tests/ops/test_activation.py pins a bound). erfc
underflows to 0 past y ~ 26.6, as float64 must.

`erf` and `erfc` compute in float64 whatever the input dtype; callers cast the result back.

The float32 tail. Cody's float64 fits cost 20-35x a float32 tanh-GELU (three intervals picked
out by fancy indexing, float64 passes, a cast back). For float32, the upper tail of the standard
normal distribution, 1 - Phi(y) = erfc(y / sqrt 2) / 2, is written with the normal density
phi(y) = exp(-y^2/2) / sqrt(2 pi), which the GELU's slope needs anyway, times Mills' ratio:

    1 - Phi(y) = phi(y) M(y),   M(y) = (1 - Phi(y)) / phi(y)       (y >= 0)

M is smooth, falls from sqrt(pi/2) at 0 like 1/y, and needs no interval split. It is a continued
fraction of four levels (a rational of degree 3 over 4, Laplace's form refitted),

    M(y) = a0 / (y + b0 + a1 / (y + b1 + a2 / (y + b2 + a3 / (y + b3))))

whose coefficients were fitted for the least worst relative error on [0, 8] (Lawson-weighted
linearised least squares, then Euclid's algorithm to turn P/Q into the fraction; the recipe is
in docs/derivations/activation.md). Relative error of the tail against float64 erfc: 1.3e-7 for the
fit, 3.7e-7 evaluated in float32, on [0, 8]; past the fitted range it grows to 8e-6 at y = 12,
where the tail is below 1e-32. Evaluated from the inside out, it costs a
division and two additions per level, all in place. Because the density multiplies M, the tail
keeps its relative accuracy where it is tiny (a float32 1 - Phi(-x) would round to 0 past x ~ 5.4).
"""
from __future__ import annotations

import math

import numpy as np

# Cody's coefficients, highest-degree numerator term last (his storage order); B, D, Q are monic.
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
      3.20937758913846947e03, 1.85777706184603153e-1)
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
      2.84423683343917062e03)
_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
      2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
      2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
      1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
      3.43936767414372164e03, 1.23033935480374942e03)
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
      1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
      6.05183413124413191e-2, 2.33520497626869185e-3)

_SMALL = 0.46875        # end of the first interval
_MIDDLE = 4.0           # end of the second interval
_UNDERFLOW = 27.3      # erfc(27.3) ~ 4e-326 < 5e-324, the smallest float64
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)

# Mills' ratio as a continued fraction, level 0 (outermost) first; see the module docstring.
_MILLS_A = (0.9996567560932352, 1.2301576250404802, -9.950158246708032, 17.226019975289564)
_MILLS_B = (-0.013083634724884163, 2.051874796810467, 4.163955085160852, 1.1918504361711124)


def _rational(t: np.ndarray, num: tuple, den: tuple) -> np.ndarray:
    """Cody's Horner scheme: N(t) / D(t) with num[-1] the top coefficient and D monic.

    N(t) = num[-1] t^n + num[0] t^(n-1) + ... + num[-2],  D(t) = t^n + den[0] t^(n-1) + ... + den[-1].
    """
    top = num[-1] * t
    lower = t.copy()
    for a, b in zip(num[:-2], den[:-1]):
        # in place: these run over every activation, and fresh temporaries double the time
        top += a
        top *= t
        lower += b
        lower *= t
    top += num[-2]
    lower += den[-1]
    return top / lower


def _exp_minus_square(y: np.ndarray) -> np.ndarray:
    """exp(-y^2), split as Cody does so the rounding of y^2 is not magnified by exp.

    subtle: for y ~ 6, y^2 ~ 36 carries an absolute rounding error ~4e-15, which exp turns into a
    relative error of the same size. Writing y = y16 + r with y16 = y rounded down to 1/16,
    y^2 = y16^2 + r (y + y16) where y16^2 is exact; only the small second part is rounded.
    """
    y16 = np.floor(y * 16.0) / 16.0
    rest = (y - y16) * (y + y16)
    return np.exp(-y16 * y16) * np.exp(-rest)


def erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function 1 - erf(x), elementwise, as float64. Any shape.

    Accurate in relative terms in the right tail (erfc(10) ~ 2e-45 is not rounded to 0).

    >>> float(erfc(np.array(0.0)))
    1.0
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.abs(x)
    result = np.full_like(y, np.nan)                   # NaN in, NaN out: no interval claims it
    small = y <= _SMALL
    middle = (y > _SMALL) & (y <= _MIDDLE)
    large = y > _MIDDLE

    ys = y[small]
    result[small] = 1.0 - ys * _rational(ys * ys, _A, _B)

    ym = y[middle]
    result[middle] = _exp_minus_square(ym) * _rational(ym, _C, _D)

    # Past y = 27.3 erfc is below the smallest float64 and rounds to 0; capping there keeps
    # y = inf from producing inf - inf in the exp split.
    yl = np.minimum(y[large], _UNDERFLOW)
    inv_square = 1.0 / (yl * yl)
    tail = _INV_SQRT_PI - inv_square * _rational(inv_square, _P, _Q)
    result[large] = _exp_minus_square(yl) / yl * tail

    negative = x < 0.0
    result[negative] = 2.0 - result[negative]          # erfc(-y) = 2 - erfc(y)
    return result


def erf(x: np.ndarray) -> np.ndarray:
    """Error function, elementwise, as float64: (2/sqrt(pi)) * integral_0^x exp(-t^2) dt.

    >>> round(float(erf(np.array(1.0))), 10)
    0.8427007929
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.abs(x)
    small = y <= _SMALL
    # Near 0 use the erf fit directly: 1 - erfc would lose the relative accuracy of tiny erf(x).
    result = erfc(y)
    np.subtract(1.0, result, out=result)               # erf(|x|), exact enough for |x| > 0.47
    ys = y[small]
    result[small] = ys * _rational(ys * ys, _A, _B)
    return np.copysign(result, x)


def normal_upper_tail(y: np.ndarray, density: np.ndarray) -> np.ndarray:
    """1 - Phi(y) = density * M(y) for y >= 0, in y's dtype (meant for float32). Any shape.

    density: phi(y) = exp(-y^2/2) / sqrt(2 pi), y's shape (only read); the caller has it already.
    M is the four-level continued fraction of the module docstring, 11 passes over y.

    >>> y = np.array([0.0, 2.0], dtype=np.float32)
    >>> tail = normal_upper_tail(y, np.exp(-0.5 * y * y) / math.sqrt(2.0 * math.pi))
    >>> tail.dtype, np.round(tail, 6).tolist()
    (dtype('float32'), [0.5, 0.02275])
    """
    fraction = y + _MILLS_B[3]                               # innermost level: y + b3
    for a, b in zip(_MILLS_A[:0:-1], _MILLS_B[-2::-1]):      # (a3, b2), (a2, b1), (a1, b0)
        np.divide(a, fraction, out=fraction)
        fraction += y
        fraction += b                                        # y + b_k + a_(k+1) / (...)
    tail = np.divide(density, fraction, out=fraction)        # phi / (...)
    tail *= _MILLS_A[0]                                      # phi * a0 / (...) = phi M
    return tail
