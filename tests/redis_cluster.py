"""Starts a throwaway Redis Cluster on loopback from the installed redis-server."""

from __future__ import annotations

import shutil
import subprocess
import time

import redis
from ports import free_port
from redis_server import RedisServer

NODE_TIMEOUT_MS = 1000
"""cluster-node-timeout: a replica takes over about this long after its master dies."""

START_DEADLINE_S = 180
"""How long creating the cluster (redis-cli --cluster create waits for the nodes to gossip)
and its first health check may take: a hang guard only. At load 8 on 2 cores a create has
taken over 60 s, which failed every cluster test of that worker."""

CLUSTER_ARGS = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS))


class LocalCluster:
    """`masters` primaries (and `replicas` replicas of each) on free loopback ports, each
    in its own temporary directory; stop() kills them all and removes the directories."""

    def __init__(self, masters: int = 3, replicas: int = 0):
        binary = shutil.which("redis-cli")
        if binary is None:
            raise RuntimeError("redis-cli is not installed; run scripts/test.sh, which installs it")
        self.servers: list[RedisServer] = []
        self._owned_directories: list[RedisServer] = []
        """Killed servers whose directories the restarted ones reuse; removed at stop()."""
        try:
            for _ in range(masters * (1 + replicas)):
                self.servers.append(RedisServer(*CLUSTER_ARGS, port=free_port()))
            subprocess.run(
                [binary, "--cluster", "create", *(f"127.0.0.1:{s.port}" for s in self.servers),
                 "--cluster-replicas", str(replicas), "--cluster-yes"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                timeout=START_DEADLINE_S)
            self.wait_until_healthy()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """A redis+cluster:// URL that lists every node as a seed."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    def client(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(port=server.port, decode_responses=True)

    def alive(self) -> list[RedisServer]:
        return [s for s in self.servers if s.process.poll() is None]

    def masters(self) -> list[RedisServer]:
        return [s for s in self.alive() if self.client(s).info("replication")["role"] == "master"]

    def wait_until_healthy(self) -> None:
        """Until every live node says cluster_state:ok with all slots served by live nodes,
        and every replica is in sync with its master."""
        deadline = time.monotonic() + START_DEADLINE_S
        while not self._healthy():
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster not healthy after {START_DEADLINE_S} s")
            time.sleep(0.1)

    def _healthy(self) -> bool:
        live_ports = {s.port for s in self.alive()}
        for server in self.alive():
            client = self.client(server)
            info = client.cluster("info")
            if info.get("cluster_state") != "ok":
                return False
            for slot_range in client.cluster("slots"):
                if slot_range[2][1] not in live_ports:
                    return False
            replication = client.info("replication")
            if replication["role"] == "slave" and replication.get("master_link_status") != "up":
                return False
        return True

    def restart(self, server: RedisServer) -> None:
        """Start a killed node again on its port and directory: its nodes.conf makes it
        rejoin, as a replica of whichever node took over its slots."""
        self.servers[self.servers.index(server)] = RedisServer(
            *CLUSTER_ARGS, port=server.port, directory=server.directory)
        self._owned_directories.append(server)

    def stop(self) -> None:
        for server in self.servers + self._owned_directories:
            server.stop()

    def owner(self, slot: int) -> RedisServer:
        """The master serving a slot now (as the cluster says, not a client's map)."""
        for start, end, master, *_ in self.client(self.alive()[0]).cluster("slots"):
            if int(start) <= slot <= int(end):
                return next(s for s in self.alive() if s.port == int(master[1]))
        raise AssertionError(f"no master serves slot {slot}")

    def move_slot(self, slot: int, target: RedisServer) -> SlotMove:
        """A move of a slot to another master, step by step (SlotMove)."""
        return SlotMove(self, slot, self.owner(slot), target)


class SlotMove:
    """Moving a slot with its keys as `redis-cli --cluster reshard` does, one step at a
    time, so a test can stop between them: open() (the target IMPORTING, the source
    MIGRATING), move_keys() (MIGRATE ... KEYS, some or all), close() (the rest of the
    keys, then CLUSTER SETSLOT ... NODE on every master), or the whole of it: run()."""

    def __init__(self, cluster: LocalCluster, slot: int, source: RedisServer,
                 target: RedisServer):
        if source.port == target.port:
            raise AssertionError(f"slot {slot} is already on {target.port}")
        self.cluster, self.slot, self.source, self.target = cluster, slot, source, target
        self.source_client, self.target_client = cluster.client(source), cluster.client(target)
        self.target_id = self.target_client.execute_command("CLUSTER", "MYID")
        self.opened = self.closed = False

    def open(self) -> SlotMove:
        self.opened = True
        source_id = self.source_client.execute_command("CLUSTER", "MYID")
        self.target_client.execute_command("CLUSTER", "SETSLOT", self.slot, "IMPORTING",
                                           source_id)
        self.source_client.execute_command("CLUSTER", "SETSLOT", self.slot, "MIGRATING",
                                           self.target_id)
        return self

    def keys(self) -> list[str]:
        """The slot's keys still on the source."""
        return list(self.source_client.execute_command("CLUSTER", "GETKEYSINSLOT",
                                                       self.slot, 10_000))

    def move_keys(self, keys: list[str] | None = None) -> None:
        """Migrate these keys (default: every key still on the source) to the target."""
        keys = self.keys() if keys is None else keys
        if keys:
            self.source_client.execute_command("MIGRATE", "127.0.0.1", self.target.port, "",
                                               0, 5000, "KEYS", *keys)

    def close(self) -> None:
        """The rest of the keys, then the slot is the target's on every master."""
        self.move_keys()
        others = [m for m in self.cluster.masters() if m.port not in
                  (self.source.port, self.target.port)]
        for server in (self.target, self.source, *others):
            self.cluster.client(server).execute_command("CLUSTER", "SETSLOT", self.slot,
                                                        "NODE", self.target_id)
        self.closed = True
        self.cluster.wait_until_healthy()

    def run(self) -> None:
        self.open()
        self.close()

    def back(self) -> None:
        """Move the slot back where it was (the session cluster's layout, as it was)."""
        SlotMove(self.cluster, self.slot, self.target, self.source).run()
