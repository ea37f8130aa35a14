# The mooncake-redis image: the library, the CLI, RQ workers and the monitor.
FROM python:3.11-slim
# Log lines and printed output reach `docker logs` at once, not when a buffer fills.
ENV PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY mooncake_redis ./mooncake_redis
COPY lua ./lua
COPY workers ./workers
RUN pip install --no-cache-dir ".[metrics]"
ENTRYPOINT ["mooncake-redis"]
CMD ["--help"]
