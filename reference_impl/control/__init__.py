"""The control plane: rBlocks, rManagers, scheduling, instances, the engine, the gManager, Algorithm 1 and DGFM. It imports no torch (tests/control/test_torch_free.py)."""
