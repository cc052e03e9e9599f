import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # schemas.py, shared with tests/serve
