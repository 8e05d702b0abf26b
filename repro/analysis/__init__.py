"""Cost-model arithmetic behind experiments that simulate no cluster (migration.py: distkv-llm Fig 9)."""
