"""One block's integer dot product as a single SIMD expression: 32 int8 codes of x times W's codes.

    dot_int8(x, xo, w, wo)      sum_j x[xo + j] * w[wo + j]            j < 32, both int8 (Q8_0)
    dot_nibbles(x, xo, w, wo)   sum_j x[xo + j] * (w[wo + j] & 15)
                                + x[xo + 16 + j] * (w[wo + j] >> 4)    j < 16, 16 bytes of nibbles
    dot_fives(x, xo, w, wo)     the same with a fifth bit each: code j = nibble j | bit j << 4,
                                the 32 bits little-endian in w[wo:wo + 4], the nibbles after them

-> int32, exact (|sum| <= 32 * 128 * 127). x holds int8 codes (activations_q8's Q8_0/Q8_1
blocks, -127..127), w a row of W's blocks as stored (uint8 bytes; Q8_0's are read as int8). The
nibble codes are unsigned (0..15, 0..31): Q4_0's q - 8 and Q5_0's q - 16 are dot - 8 * sum(x)
and dot - 16 * sum(x), the same integer (the caller has the block's sum). Also here, for the
same kernel: `half_at` (a block's float16 scale as float32) and `prefetch` (a cache-line hint).

Why not a numba loop: numba widens every integer operation to int64, and LLVM vectorizes a loop
holding two or more such sums in int64 lanes (vpmuldq / vpaddq: slower than float32); a loop
with one sum gets vpmaddwd but pays a vector prologue and epilogue every 32 products. Each
function here emits the block as LLVM vector IR instead (numba's `intrinsic`): load <32 x i8>,
extend, multiply, `llvm.vector.reduce.add`. The IR is target-independent; on x86 with AVX-VNNI /
AVX512-VNNI LLVM selects vpdpbusd for the unsigned codes times int8 x (llama.cpp's instruction;
Q8_0's signed codes get there through llama.cpp's sign trick, `_signed_dot`), elsewhere vpmaddwd
(AVX2) or what the target has. The reduction to one int32 closes each block, so the float scale
products stay in the NumPy twin's order (kernels/q8_numba.py). Tried and dropped: four rows'
sums folded to 8 lanes and reduced together (vphaddd): fewer instructions, but 2x slower, the
shuffle port saturated.

No bounds checks: the caller reads whole blocks inside its arrays (x, w 1-D, C-contiguous,
1-byte items; anything else fails numba's typing).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

I8, I32 = ir.IntType(8), ir.IntType(32)


def _vector(n: int, kind=I8) -> ir.VectorType:
    return ir.VectorType(kind, n)


def _bytes(arr) -> bool:
    """A 1-D C-contiguous array of int8 or uint8 (what the loads below may read)."""
    return (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"
            and arr.dtype in (types.int8, types.uint8))


def _load(context, builder, arrty, arr, offset, n: int):
    """<n x i8> from arr[offset:offset + n] (unaligned)."""
    data = context.make_array(arrty)(context, builder, arr).data
    at = builder.gep(data, [offset])
    return builder.load(builder.bitcast(at, _vector(n).as_pointer()), align=1)


def _reduce(builder, values):
    """The int32 sum of a <32 x i32> vector."""
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(I32, [_vector(32, I32)]),
                                        "llvm.vector.reduce.add.v32i32")
    return builder.call(fn, [values])


def _splat(value: int, n: int, kind=I8) -> ir.Constant:
    return ir.Constant(_vector(n, kind), [value] * n)


def _nibbles(builder, packed):
    """<16 x i8> bytes -> <32 x i8> codes: the 16 low nibbles, then the 16 high ones."""
    low = builder.and_(packed, _splat(15, 16))
    high = builder.lshr(packed, _splat(4, 16))
    return builder.shuffle_vector(low, high, ir.Constant(_vector(32, I32), list(range(32))))


def _fifth_bits(builder, context, wty, w, wo):
    """<32 x i8>: 16 where bit j of the little-endian uint32 at w[wo:wo + 4] is set, else 0."""
    data = context.make_array(wty)(context, builder, w).data
    word = builder.load(builder.bitcast(builder.gep(data, [wo]), I32.as_pointer()), align=1)
    lanes = builder.insert_element(ir.Constant(_vector(32, I32), None), word, I32(0))
    lanes = builder.shuffle_vector(lanes, lanes, ir.Constant(_vector(32, I32), [0] * 32))
    bits = builder.and_(lanes, ir.Constant(_vector(32, I32), [1 << j for j in range(32)]))
    set_ = builder.icmp_unsigned("!=", bits, ir.Constant(_vector(32, I32), [0] * 32))
    return builder.select(set_, _splat(16, 32), _splat(0, 32))


def _dot(builder, codes, xv, signed: bool):
    """sum(codes * xv) over 32 lanes, xv signed; codes signed (int8) or unsigned (nibbles)."""
    wide = _vector(32, I32)
    extend = builder.sext if signed else builder.zext
    return _reduce(builder, builder.mul(extend(codes, wide), builder.sext(xv, wide)))


def _signed_dot(builder, codes, xv):
    """sum(codes * xv), both int8, as |codes| * (xv signed like codes): llama.cpp's sign trick,
    an unsigned-by-signed product (vpdpbusd) instead of a signed one (vpmaddwd on words).
    Exact for every code (|-128| is the unsigned byte 128) and x in -127..127 (quantize_q8's)."""
    zero = _splat(0, 32)
    negative = builder.icmp_signed("<", codes, zero)
    size = builder.select(negative, builder.sub(zero, codes), codes)
    signed_x = builder.select(negative, builder.sub(zero, xv), xv)
    return _dot(builder, size, signed_x, signed=False)


def _block_dot(kind: str):
    """The intrinsic for one kind of W codes ("int8", "nibbles", "fives")."""
    def typer(typingctx, x, xo, w, wo):
        if not (_bytes(x) and _bytes(w) and isinstance(xo, types.Integer)
                and isinstance(wo, types.Integer)):
            return None
        sig = types.int32(x, xo, w, wo)

        def codegen(context, builder, signature, args):
            x_, xo_, w_, wo_ = args
            xv = _load(context, builder, signature.args[0], x_, xo_, 32)
            if kind == "int8":
                return _signed_dot(builder, _load(context, builder, signature.args[2], w_, wo_,
                                                  32), xv)
            if kind == "nibbles":
                packed = _load(context, builder, signature.args[2], w_, wo_, 16)
                return _dot(builder, _nibbles(builder, packed), xv, signed=False)
            codes_at = builder.add(wo_, ir.Constant(wo_.type, 4))
            packed = _load(context, builder, signature.args[2], w_, codes_at, 16)
            codes = builder.or_(_nibbles(builder, packed),
                                _fifth_bits(builder, context, signature.args[2], w_, wo_))
            return _dot(builder, codes, xv, signed=False)
        return sig, codegen
    typer.__name__ = f"dot_{kind}"
    typer.__doc__ = f"One block's int32 dot product, W's codes as {kind} (module docstring)."
    return intrinsic(typer)


dot_int8 = _block_dot("int8")
dot_nibbles = _block_dot("nibbles")
dot_fives = _block_dot("fives")


def _native_half() -> bool:
    """Whether LLVM converts float16 in registers here (x86's F16C, every ARM64): else a
    conversion would call a runtime function numba may not have, so `half_at` reads the table."""
    import platform

    import llvmlite.binding as llvm
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return True
    try:
        return bool(llvm.get_host_cpu_features().get("f16c"))
    except RuntimeError:                                    # features unknown: the safe way
        return False


NATIVE_HALF = _native_half()


@intrinsic
def half_at(typingctx, w, at, halves):
    """The float16 stored little-endian at w[at], w[at + 1], as float32 (exact): one vcvtph2ps
    where the CPU converts float16 (NATIVE_HALF), else halves[bits] (quant_numba's table of every
    float16's value, a lookup that misses L1 while W streams past)."""
    if not (_bytes(w) and isinstance(at, types.Integer) and isinstance(halves, types.Array)
            and halves.dtype == types.float32 and halves.ndim == 1):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        bits = builder.load(builder.bitcast(builder.gep(data, [args[1]]),
                                            ir.IntType(16).as_pointer()), align=1)
        if NATIVE_HALF:
            return builder.fpext(builder.bitcast(bits, ir.HalfType()), ir.FloatType())
        table = context.make_array(signature.args[2])(context, builder, args[2]).data
        return builder.load(builder.gep(table, [builder.zext(bits, ir.IntType(64))]))
    return types.float32(w, at, halves), codegen


@intrinsic
def prefetch(typingctx, w, at):
    """Ask for the cache line holding w[at] (llvm.prefetch: read, keep in all levels); nothing
    where the target has no prefetch. For the rows a product reads next, ahead of their use."""
    if not (_bytes(w) and isinstance(at, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        ptr = builder.gep(data, [args[1]])
        kind = ir.FunctionType(ir.VoidType(), [ptr.type, I32, I32, I32])
        fn = cgutils.get_or_insert_function(builder.module, kind, "llvm.prefetch.p0")
        builder.call(fn, [ptr, I32(0), I32(3), I32(1)])      # read, all cache levels, data
        return context.get_dummy_value()
    return types.none(w, at), codegen
