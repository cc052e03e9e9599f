"""Where the shared benchmark data lies (tests read ../shared/data)."""
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "eval"
