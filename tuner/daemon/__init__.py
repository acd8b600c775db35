"""The long-running daemon: control loop and guardrail (`loop`), persisted state (`state`), the gRPC
service (`service`), Prometheus metrics (`metrics`) and systemd notification (`sdnotify`) and the per-retune optimiser worker process (`worker`)."""
