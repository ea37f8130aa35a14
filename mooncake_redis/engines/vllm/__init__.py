"""vLLM: keeping the index in step with vLLM's own KV cache through its KV events
(kv_events: decode; pods: the tree of blocks and which pod holds them; feed and ingester:
the ZMQ feed with its gaps and replay; tokens: vLLM's block hashes of a token list). The
`ingest` and `pods` commands are cli/ingest.py.

Ingesting needs the `vllm` extra (pyzmq, msgpack): pip install 'mooncake-redis[vllm]';
asking which pods hold a chain (`pods`) reads Redis only and needs neither."""
