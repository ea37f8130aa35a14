"""Engine integrations, one folder per engine, each speaking its engine's own wire format:
sglang (a HiCache L3 storage backend) and vllm (a KV-events ingester and pod lookups)."""
