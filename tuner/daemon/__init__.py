"""The long-running daemon. The control loop `loop.Daemon` owns its parts, each in its own module and built
over one shared `context.LoopContext`: `observer` (baseline bands, savings), `host_warnings`, `model_tables`
(prediction tables), `guardrail` (holding a point), `trial_history` (the trial store), `retune_driver`
(retunes) and `status_reader` (what RPCs read). Around it: persisted state (`state`, `journal`), the gRPC
service (`service`, its messages in `grpc_messages`), Prometheus metrics (`metrics`), systemd notification
(`sdnotify`) and the per-retune optimiser worker process (`worker`)."""
