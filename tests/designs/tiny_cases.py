"""What the designs' real-run tests share: the tiny model as a Hugging Face folder and transformers' greedy tokens
on it (tests/engine/test_engine_equivalence.py), a block size and prompts that span several blocks."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
from test_engine_equivalence import NUM_NEW, hf_folder, hf_greedy  # noqa: E402,F401

BLOCK = 4
PROMPTS = [[(7 * i + 3) % 256 for i in range(30)], [200, 1, 45, 45, 9, 130, 7, 88, 19, 240, 66, 3, 14, 90],
           [(11 * i + 5) % 256 for i in range(21)]]
