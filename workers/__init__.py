"""The RQ side: eviction jobs, the watermark monitor, and the worker that runs jobs."""
