"""The `mooncake-redis` command: main builds the parser and runs the sub-commands; each other
module is one command group (config, eviction, events, ingest, maintenance, metrics,
segments), and support, render and logs are what they share."""
