#!/usr/bin/env python3
"""Prints the constants of kernels/math64.h (hex doubles, each the double
nearest the exact value unless a split says otherwise), from exact rationals
and a 70-digit pi / ln 2, so that every literal there can be checked:

    python3 scripts/gen_math64_consts.py
"""
import math
import struct
from decimal import Decimal, getcontext
from fractions import Fraction as F

getcontext().prec = 90


def arctan_inv(n):
    x = Decimal(1) / n
    x2, s, t, k = x * x, x, x, 1
    while True:
        t, k = -t * x2, k + 2
        d = t / k
        if abs(d) < Decimal(10) ** -85:
            return s
        s += d


PI = 4 * (4 * arctan_inv(5) - arctan_inv(239))  # Machin
LN2 = Decimal(2).ln()


def h(x):
    return float(x).hex()


def trunc(v, bits):
    """v's nearest double with its significand cut to `bits` bits (toward zero)."""
    b = struct.unpack("<Q", struct.pack("<d", float(v)))[0]
    b &= ~((1 << (53 - bits)) - 1)
    return struct.unpack("<d", struct.pack("<Q", b))[0]


print("INV_LN2", h(1 / LN2), "LN2/2", h(LN2 / 2))
hi = trunc(LN2, 32)
print("LN2_HI", hi.hex(), "LN2_LO", h(LN2 - Decimal(hi)))
p1 = trunc(PI / 2, 33)
p2 = trunc(PI / 2 - Decimal(p1), 33)
print("PIO2_1", p1.hex(), "PIO2_2", p2.hex(), "PIO2_3", h(PI / 2 - Decimal(p1) - Decimal(p2)))
print("TWO_OVER_PI", h(2 / PI), "TWO_PI", h(2 * PI), "SQRT2", h(Decimal(2).sqrt()))
print("TWO_OVER_SQRTPI", h(2 / PI.sqrt()), "INV_SQRTPI", h(1 / PI.sqrt()))
for n in range(2, 23):
    print("1/%d!" % n, h(F(1, math.factorial(n))))
for n in range(1, 12):
    print("1/%d" % (2 * n + 1), h(F(1, 2 * n + 1)))
for n in range(20):
    print("erf taylor c%d = (-1)^n / (n! (2n+1))" % n, h(F((-1) ** n, math.factorial(n) * (2 * n + 1))))
