"""The long-running daemon. The control loop `loop.Daemon` is built in layers, one module each: `base`
(state and primitives), `status` (what RPCs read, prediction tables), `guardrail` (holding a point),
`trials` (retunes) and `plain` (plain-data rows, bounds, policy checks). Around it: persisted state
(`state`), the gRPC service (`service`), Prometheus metrics (`metrics`), systemd notification (`sdnotify`)
and the per-retune optimiser worker process (`worker`)."""
