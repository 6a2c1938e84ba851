"""The worker side shared by both executors: the worker API a tool process calls and its semantics.

`api` speaks HTTP (`runtime.contract`), `channel` applies each call to the task store, `executions`
names what a worker token authorizes. The embedded runner serves it on loopback; the operator on the
cluster network for tools running in pods. Same contract, so a tool written once runs in both.
"""
