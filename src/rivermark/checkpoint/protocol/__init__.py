"""The checkpoint protocol: what a job does to take and resume a checkpoint.

Job (job), the steps of one checkpoint (cycle), the run loop and signals
(runloop), waiting checkpoint and savepoint calls (requests), the listener
interface its watchers attach through (listeners), the node counts a checkpoint
carries (counts), how a run ended (runstate), the graph's nodes by role
(roles), recovery at start (recovery), stopping and failure reports (shutdown),
the job's option checks (options), the upgrade rules of a restore into a
changed graph (upgrade), the handle of a job started from an event loop
(handle).
"""
