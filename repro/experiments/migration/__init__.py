"""distkv-llm Fig 9: live migration against borrowing a neighbour's memory, as cost-model arithmetic (model.py) and
its experiment (experiment.py)."""
