"""blocks/prefill_rows.py: a product on a fixed-shape tile gives a row the same bits in any slot
and beside any other rows (what lets serve --batch-invariant prefill joiners together)."""
import numpy as np

from glassformer.blocks.prefill_rows import ROWS, by_tiles, padded


def test_a_row_gets_the_same_bits_in_every_slot_of_a_tile():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 80)).astype(np.float32)
    row = rng.standard_normal(96).astype(np.float32)
    alone = by_tiles(lambda a: a @ w, padded(row[None]))[0]
    for slot in range(0, 3 * ROWS, 7):
        rows = rng.standard_normal((3 * ROWS, 96)).astype(np.float32)
        rows[slot] = row
        np.testing.assert_array_equal(by_tiles(lambda a: a @ w, padded(rows))[slot], alone)


def test_padded_rows_are_zeros_up_to_a_multiple_of_the_tile():
    x = np.ones((ROWS + 3, 4), dtype=np.float32)
    out = padded(x)
    assert out.shape == (2 * ROWS, 4) and out.flags.c_contiguous
    assert out[ROWS + 3:].sum() == 0 and out[:ROWS + 3].all()
    both = by_tiles(lambda a, b: (a + b, a - b), out, out)
    np.testing.assert_array_equal(both[0], 2 * out)
