"""The designs experiment: every design of the catalog on every Fig 10 group (experiment.py), the counters that
say why (counters.py), each design's own headline claim (claims.py), the table (compare.py), the cost of the run
(cost.py) and the figure (figure.py)."""
