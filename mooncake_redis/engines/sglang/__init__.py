"""SGLang: a HiCache L3 storage backend on mooncake-redis (hicache.MooncakeRedisHiCache)."""
