"""Simulator: hash-table vs radix-tree KV-cache indexes under eviction policies, in three
experiments: indexes/ (a generated workload, in memory), trace/ (Mooncake's traces as page
chains, in memory) and service/ (page chains on the real service). This folder holds the
`sim` command that runs them (cli, trace_cli, service_cli, redis_backend) and what they
share (arguments, report)."""
