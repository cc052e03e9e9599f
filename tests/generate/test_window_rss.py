"""Decode memory past the window, measured (bench/window_rss.py): a windowed model's peak RSS
at 16k total tokens is within 10% of its peak at 4k, each run in a fresh process. Memory, not
time: the bar holds on a busy machine too."""
import pytest

from bench.window_rss import WINDOW, peak_rss_ratio

RSS_RTOL = 0.10   # the bar


@pytest.mark.slow
def test_windowed_decode_peak_rss_flat_past_the_window():
    row = peak_rss_ratio("windowed", (4096, 16384))
    assert row["short"]["tokens"] > 10 * WINDOW
    assert row["short"]["cache_bytes"] == row["long"]["cache_bytes"]   # rings of W slots
    assert abs(row["ratio"] - 1.0) <= RSS_RTOL, row
