"""The sensitivity study: each Fig 10 group's ratio under one changed input at a time (experiment.py, plot.py)."""
