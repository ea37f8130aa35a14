"""What an operator runs beside the hot path: fsck and doctor, reclaiming unfinished puts,
stored-setting changes, the namespaces a Redis holds, and Prometheus metrics. Imports
everything below the facade (index.py) but none of the commands."""
