"""`tuner load`: an open-loop, trace-driven memcached load generator (plan, engine, runner, interval logs)."""
