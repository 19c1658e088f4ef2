"""The Trainyard node agent: `python -m agents --server URL --join-token TOKEN --pool NAME`."""
