"""The engine: nodes, graph walking, runtime (event loop) and completion tracking.

Nothing in this package imports pandas, Kafka or Dask.
"""
