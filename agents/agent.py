"""The agent daemon: parts that start in order and stop in reverse.

config -> client -> registration -> spool/shipper -> runner -> monitor -> heartbeat -> claimer.
SIGTERM (or SIGINT) drains: stop claiming, let running attempts finish until --drain-timeout,
then stop them as "drain" (the job checkpoints; the server requeues the run), ship what is
left, tell the server the node is going offline (so it is not declared lost), and exit 0. A
second signal shortens the jobs' grace period to nothing (still as a drain).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import signal
import sys
import threading
import time
import uuid
from types import FrameType

from agents import container, isolation, protocol
from agents.client import ApiError, Client, Unreachable
from agents.config import Config, parse_args
from agents.devices import Nvml, cpu_inventory, memory_bytes
from agents.monitor import Monitor
from agents.runner import Runner
from agents.shipper import Shipper, Spool

log = logging.getLogger("agents")
MAIN_TICK_S = 0.2
REGISTER_NOTICE_S = 15.0  # how long registration retries quietly before saying again what to check
UNREACHABLE_NOTICE_S = 60.0  # how often a long outage is mentioned again


def _join_token_help(config: Config) -> str:
    return (f"an administrator makes one for pool {config.pool!r} in the portal's admin (Nodes > Join tokens) or with "
            f"`python manage.py agent_join_token --pool {config.pool}`")


def registration_advice(err: ApiError, config: Config) -> str:
    """What a refused registration means and what to do about it, in one message."""
    if err.status == 403 and err.code == "bad_join_token":
        if not config.join_token:
            return (f"registration refused: no join token was given (--join-token or TRAINYARD_AGENT_JOIN_TOKEN) and "
                    f"{config.workdir} holds no node credential that the server accepts; {_join_token_help(config)}")
        return (f"registration refused: the server does not accept this join token (unknown, revoked or expired); "
                f"ask for a new one: {_join_token_help(config)}")
    pool_words = (err.fields.get("pool") or [err.message])[0]
    if err.status == 400 and err.code == "unknown_pool":
        return f"registration refused: {pool_words}. Start the agent with the join token's pool in --pool"
    if err.status == 400 and err.code == "wrong_pool":
        return (f"registration refused: {pool_words}. A join token is made for one pool: start the agent with that "
                f"pool's name in --pool, or ask for a join token for pool {config.pool!r}")
    if err.status == 400 and err.code == "registered_elsewhere":
        return (f"registration refused: {pool_words}. The agent's identity is kept in {config.workdir}: start it with "
                f"that pool in --pool, or give it a new --workdir to join {config.pool!r} as a new node")
    if err.status == 400 and "protocol_version" in err.fields:
        return (f"registration refused: this agent speaks protocol {protocol.PROTOCOL_VERSION}, newer than the server "
                f"({err.message}); upgrade the portal, or run the agent that came with it")
    if err.status in (404, 405):
        return (f"registration refused: {config.server} has no Trainyard agent API at {err.path} (HTTP {err.status}: "
                f"{err.message}); --server must be the portal's base URL, like http://host:8000")
    return f"registration refused: {err}"


def devices_text(devices: list[protocol.DeviceInfo]) -> str:
    """ "1 CPU slot", "8 GPUs (NVIDIA H100 80GB HBM3)"."""
    gpus = [d for d in devices if d.get("kind") == "gpu"]
    if gpus:
        models = sorted({d.get("model") or "" for d in gpus} - {""})
        return f"{len(gpus)} GPU{'' if len(gpus) == 1 else 's'}" + (f" ({', '.join(models)})" if models else "")
    return f"{len(devices)} CPU slot{'' if len(devices) == 1 else 's'}"


class Registration:
    """The agent's identity (agent_uid in the workdir) and its node credential (mode 600)."""

    def __init__(self, config: Config, client: Client, nvml: Nvml) -> None:
        self.config = config
        self.client = client
        self.nvml = nvml
        self.session = 0
        self.node_id = 0
        self.heartbeat_s = config.heartbeat_s
        ident = config.workdir / "agent.json"
        if ident.exists():
            self.agent_uid = str(json.loads(ident.read_text())["agent_uid"])
        else:
            self.agent_uid = uuid.uuid4().hex
            ident.write_text(json.dumps({"agent_uid": self.agent_uid}))
        self.cred_path = config.workdir / "credential"
        if self.cred_path.exists():
            client.credential = self.cred_path.read_text().strip()

    def devices(self) -> list[protocol.DeviceInfo]:
        return self.nvml.inventory() if self.nvml.available else cpu_inventory(self.config.slots)

    def register(self, running: list[protocol.RunningAttempt], stop: threading.Event) -> list[int]:
        body: protocol.RegisterRequest = {
            "protocol_version": protocol.PROTOCOL_VERSION, "agent_version": protocol.AGENT_VERSION, "agent_uid": self.agent_uid,
            "join_token": self.config.join_token, "pool": self.config.pool, "hostname": self.config.name,
            "name": self.config.name, "address": self.config.address, "cpus": os.cpu_count() or 1,
            "memory_bytes": memory_bytes(), "devices": self.devices(), "running": running}
        while not stop.is_set():
            try:
                resp = self.client.request("POST", protocol.API_PREFIX + "register/", body, retry_for=REGISTER_NOTICE_S)
            except Unreachable as err:
                if stop.is_set() or self.client.stop.is_set():
                    break
                log.warning("cannot reach the portal at %s to register (%s). Check that --server is the portal's URL and that "
                            "this machine can reach it; still trying, with backoff (Ctrl-C stops the agent)",
                            self.config.server, err)
                continue
            except ApiError as err:
                if err.status == 401 and self.client.credential:
                    log.warning("stored node credential refused; registering again with the join token")
                    self.client.credential = ""
                    self.cred_path.unlink(missing_ok=True)
                    continue
                raise
            if resp["credential"]:
                self.client.credential = resp["credential"]
                fd = os.open(self.cred_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(resp["credential"])
                os.chmod(self.cred_path, 0o600)
            self.session, self.node_id = int(resp["session"]), int(resp["node_id"])
            log.info("registered as node %d in pool %s (session %d; %s) with %s", self.node_id, resp.get("pool", self.config.pool),
                     self.session, devices_text(body["devices"]), self.config.server)
            return list(resp.get("kill") or [])
        raise Unreachable("stopped before registering")


class Agent:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.stop = threading.Event()  # everything winds down
        self.draining = threading.Event()
        self.beat_now = threading.Event()  # wakes the heartbeat early (the drain is news to the server)
        self.claiming = threading.Event()  # a claim long-poll is in flight
        self.signals = 0
        config.workdir.mkdir(parents=True, exist_ok=True)
        self.client = Client(config.server, timeout=config.request_timeout_s, stop=self.stop)
        self.nvml = Nvml()
        self.registration = Registration(config, self.client, self.nvml)
        self.spool = Spool(config.spool_dir, config.spool_max_bytes)
        self.shipper = Shipper(self.client, self.spool, interval=config.ship_interval_s, on_stale=self._stale)
        self.runner = Runner(config, self.client, self.shipper)
        self.runner.inventory = self.registration.devices
        if self.nvml.available:
            self.runner.drivers = lambda: (self.nvml.driver_version(), self.nvml.cuda_driver_version())
        self.monitor = Monitor(config, self.runner, self.shipper, self.nvml)
        self.runner.on_exit = self.monitor.finish
        self.threads: list[threading.Thread] = []
        self.server_drain = False
        self.drain_deadline: float | None = None
        self.registered = False
        self.unreachable_since: float | None = None  # when the heartbeat last stopped getting through
        self.unreachable_noted = 0.0

    def _stale(self, attempt_id: int, reason: str) -> None:
        self.runner.kill(attempt_id, reason)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if not self.registered:
            # Nothing runs yet: stop trying to register (the client retries until told to stop).
            log.warning("got %s before registering: stopping", signal.Signals(signum).name)
            self.draining.set()
            self.stop.set()
            return
        if self.signals == 1:
            log.warning("got %s: draining (no new work; running attempts get %.0fs, then are preempted)",
                        signal.Signals(signum).name, self.config.drain_timeout_s)
            self.draining.set()
            self.beat_now.set()
        else:
            log.warning("got %s again: stopping running attempts now", signal.Signals(signum).name)
            self.drain_deadline = time.monotonic()

    # --- parts --------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self.stop.is_set():
            body: protocol.HeartbeatRequest = {"session": self.registration.session, "draining": self.draining.is_set(),
                                               "devices": self.monitor.samples(), "running": self.runner.running()}
            try:
                resp = self.client.request("POST", protocol.API_PREFIX + "heartbeat/", body, retry_for=self.config.heartbeat_s)
                for order in resp.get("stop", []):
                    self.runner.request_stop(int(order["attempt_id"]), str(order["kind"]), float(order["grace_period_s"]))
                for attempt_id in resp.get("kill", []):
                    self.runner.kill(int(attempt_id), "the server says this attempt is stale or finished")
                self._server_drain_set(bool(resp.get("drain")))
                self._reachable()
            except ApiError as err:
                self._reachable()
                if err.status == 409:
                    log.warning("heartbeat refused (%s); registering again", err)
                    try:
                        for attempt_id in self.registration.register(self.runner.running(), self.stop):
                            self.runner.kill(attempt_id, "refused at re-registration")
                    except (ApiError, Unreachable) as exc:
                        log.error("re-registration failed: %s", exc)
                else:
                    log.error("heartbeat refused: %s", err)
            except Unreachable as err:
                self._unreachable(err)
            self.beat_now.wait(self.config.heartbeat_s)
            self.beat_now.clear()

    def _server_drain_set(self, draining: bool) -> None:
        """An administrator's drain of this node, as the server reports it: said on the console when it begins and ends
        (not the echo of the agent's own drain, which it already announced)."""
        if draining != self.server_drain and not self.draining.is_set():
            if draining:
                log.warning("the portal drained this node: it claims no new work; running attempts go on (an administrator "
                            "undrains it on the Nodes page)")
            else:
                log.info("the portal undrained this node: claiming work again")
        self.server_drain = draining

    def _unreachable(self, err: Unreachable) -> None:
        now = time.monotonic()
        if self.unreachable_since is None:
            self.unreachable_since = self.unreachable_noted = now
            log.warning("heartbeat: cannot reach the portal at %s (%s); jobs keep running and their reports wait on disk. "
                        "Retrying every %.0f s", self.config.server, err, self.config.heartbeat_s)
        elif now - self.unreachable_noted >= UNREACHABLE_NOTICE_S:
            self.unreachable_noted = now
            log.warning("heartbeat: still cannot reach the portal at %s, for %.0f s now (%s); jobs keep running; retrying",
                        self.config.server, now - self.unreachable_since, err)

    def _reachable(self) -> None:
        if self.unreachable_since is not None:
            log.info("the portal at %s answers again after %.0f s; sending the reports kept on disk", self.config.server,
                     time.monotonic() - self.unreachable_since)
            self.unreachable_since = None

    def _claim_loop(self) -> None:
        while not self.stop.is_set():
            pause = self._claim_once()
            if pause:
                self.stop.wait(pause)

    def _claim_once(self) -> float:
        """One long-poll for assignments; returns how long to pause before the next.

        `claiming` is set from before the drain check until what was claimed is in the runner,
        so the main loop never ends a drain while work is on its way to this node.
        """
        self.claiming.set()
        try:
            if self.draining.is_set() or self.server_drain:
                return 1.0
            free = [d["index"] for d in self.registration.devices() if d["index"] not in self.runner.used_devices()]
            if not free:
                return 0.5
            body: protocol.ClaimRequest = {"session": self.registration.session, "wait_s": self.config.claim_wait_s,
                                           "free_devices": free}
            try:
                resp = self.client.request("POST", protocol.API_PREFIX + "claim/", body, retry_for=5.0,
                                           timeout=self.config.claim_wait_s + self.config.request_timeout_s)
            except ApiError as err:
                log.warning("claim refused: %s", err)
                return self.config.heartbeat_s
            except Unreachable as err:
                log.warning("claim: server unreachable (%s)", err)
                return 2.0
            if resp.get("drain") and not resp.get("assignments"):
                self._server_drain_set(True)  # the heartbeat says when it ends
                return 1.0
            for spec in resp.get("assignments", []):
                if self.draining.is_set():
                    # Claimed as the drain began: it runs until the drain deadline like the others.
                    log.warning("claimed attempt %d while draining", spec["attempt_id"])
                log.info("claimed attempt %d of run %d (node %d of %d)", spec["attempt_id"], spec["run_id"], spec["node_rank"],
                         spec.get("nnodes", 1))
                self.runner.submit(spec)
            return 0.0
        finally:
            self.claiming.clear()

    def _say_offline(self) -> None:
        if self.spool.items():
            return  # unsent reports (exits among them) must land first; the server will mark the node lost
        body: protocol.HeartbeatRequest = {"session": self.registration.session, "draining": True, "devices": [],
                                           "running": [], "offline": True}
        try:
            self.client.request("POST", protocol.API_PREFIX + "heartbeat/", body, retry_for=3.0)
            log.info("told the server this node is going offline")
        except (ApiError, Unreachable) as err:
            log.warning("could not tell the server this node is going offline (%s); it will be marked lost", err)

    def _thread(self, name: str, target: object) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        t.start()
        self.threads.append(t)

    def _isolation_ready(self) -> bool:
        config = self.config
        if config.isolation == "users":
            problem = isolation.job_reach_problem(config.job_python, config.repo_root, config.runs_dir)
            if problem:
                log.error("%s. Per-job users need the job's Python (--job-python), the agent's code and --workdir reachable by "
                          "any user; or start the agent with --isolation none (and --single-tenant where teams may share)",
                          problem)
                return False
            log.info("isolation: each job runs as its own Unix user, in private directories")
        elif config.isolation == "docker":
            problem = container.Docker(config.container).problem()
            if problem:
                log.error("--isolation docker: %s", problem)
                return False
            log.info("isolation: each job runs in a container of its template's approved image (network: %s)%s",
                     config.container.network, ", as its own Unix user" if os.geteuid() == 0 else "")
        elif config.single_tenant:
            log.warning("isolation: none, single-tenant: jobs of every team run as uid %d and can read each other's secrets "
                        "and files and this node's credential", os.geteuid())
        else:
            log.info("isolation: none: jobs run as uid %d; this node runs one team's jobs only", os.geteuid())
        return True

    # --- run ----------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        if not self.config.join_token and not self.client.credential:
            log.error("no join token given (--join-token or TRAINYARD_AGENT_JOIN_TOKEN) and no node credential in %s: the first "
                      "start of an agent needs one; %s", self.config.workdir, _join_token_help(self.config))
            return 2
        if not self._isolation_ready():
            return 2
        self.runner.kill_leftovers()
        try:
            for attempt_id in self.registration.register([], self.draining):
                log.info("server asks to kill attempt %d (not running here)", attempt_id)
        except ApiError as err:
            log.error("%s", registration_advice(err, self.config))
            return 2
        except Unreachable:
            log.warning("stopped before registering")
            return 0
        self.registered = True
        self.shipper.start()
        self.monitor.start()
        self._thread("heartbeat", self._heartbeat_loop)
        self._thread("claimer", self._claim_loop)
        while True:
            self.runner.launch_ready()
            self.runner.poll()
            if self.draining.is_set():
                if self.drain_deadline is None:
                    self.drain_deadline = time.monotonic() + self.config.drain_timeout_s
                # A claim in flight may still hand us work (the server ends it once it sees the drain).
                if not self.runner.busy() and not self.claiming.is_set():
                    break
                if time.monotonic() >= self.drain_deadline:
                    self.runner.stop_all("drain", 0 if self.signals > 1 else None)
                    self.drain_deadline = float("inf")
            time.sleep(MAIN_TICK_S)
        log.info("drained; shipping what is left")
        self.shipper.close(flush_timeout=15.0)
        self._say_offline()
        self.stop.set()
        self.beat_now.set()
        self.monitor.close()
        for t in reversed(self.threads):
            t.join(self.config.request_timeout_s + self.config.claim_wait_s)
        log.info("agent stopped")
        return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("TRAINYARD_AGENT_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = parse_args(argv)
    log.info("trainyard agent %s (protocol %d) on %s, python %s, workdir %s", protocol.AGENT_VERSION, protocol.PROTOCOL_VERSION,
             config.name, platform.python_version(), config.workdir)
    return Agent(config).run()
