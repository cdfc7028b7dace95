"""strategy: how a model is split over a machine, and how to find a fast split.

Strategy files (files.py) and views of them (views.py, graph_picture.py); machine models
(machines/: presets, files, calibration of this machine); the cost model (costs/: measured
profiles and an analytic fallback); the simulator over the TaskGraph the executors run
(simulator.py, delta.py); the MCMC search and its space (search.py, space.py, explain.py,
exhaustive.py, standard.py, experts.py); replay of recorded runs (replay.py); and
`python -m strategy` (cli.py). It takes a model and a machine: the programs that define
models (apps/, a user's file) plug in through the Workload interface (workload.py), and
nothing here imports them.
"""
