import sys
from pathlib import Path

# The example's server wrapper and tests/vllm's tiny model maker are shared with these tests.
ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "vllm"))
