"""The radix tree: parent links across shards and their resolver (links), walks over a
namespace's nodes and key patterns (matching), read-only queries (queries) and node
scores recomputed from a node's own fields (rescoring). Imports only the core."""
