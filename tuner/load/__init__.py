"""`tuner load`: an open-loop, trace-driven memcached load generator (`plan`, the `sender` process, the
`coordinator` that runs and gathers the senders, `hlog_merge` for interval logs)."""
