"""Checkpoints outside a running job.

Reading and inspecting them (inspection, on contents: a location opened read-
only, the state of its nodes decoded), state as pandas frames (frames), writing
savepoints (writer), and replaying new code from one (replay).
"""
