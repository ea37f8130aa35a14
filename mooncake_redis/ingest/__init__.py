"""Keeping the index in step with an inference engine's own KV cache: vLLM's KV events
(vllm_events: decode; pods: the tree of blocks and which pod holds them; subscriber: the
ZMQ feed with its gaps and replay; cli: the `ingest` and `pods` commands).

Ingesting needs the `vllm` extra (pyzmq, msgpack): pip install 'mooncake-redis[vllm]';
asking which pods hold a chain (`pods`) reads Redis only and needs neither."""
