"""Make (or update) a node pool served by a Slurm cluster.

    manage.py slurm_pool --pool hpc --partition gpu --server-url https://portal.example.com \\
        --workdir /shared/trainyard [--submit-command "ssh trainyard@login1"] [--device-mode cpu] \\
        [--account vision/digits=vision] [--account '*=default'] [--qos urgent=high] [--price 2.5]
"""

from __future__ import annotations

import shlex
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.slurm.models import DeviceMode
from apps.slurm.services import slurm_pool_save


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise CommandError(f"{flag} takes KEY=VALUE (got {item!r})")
        out[key] = value
    return out


class Command(BaseCommand):
    help = "Make or update a node pool whose runs a Slurm cluster runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pool", required=True, help="the pool's name (made if missing)")
        parser.add_argument("--partition", required=True)
        parser.add_argument("--server-url", required=True, help="the portal's URL as the compute nodes reach it")
        parser.add_argument("--workdir", required=True, help="a folder every compute node sees")
        parser.add_argument("--submit-command", default="", help="words before sbatch/scontrol/scancel, e.g. 'ssh login1'")
        parser.add_argument("--device-mode", choices=[m.value for m in DeviceMode], default=DeviceMode.GPU)
        parser.add_argument("--account", action="append", default=[], help="team/project=ACCOUNT, or *=ACCOUNT")
        parser.add_argument("--qos", action="append", default=[], help="priority=QOS (urgent, normal, low)")
        parser.add_argument("--python", default="", help="the Python on the compute nodes (default: this one)")
        parser.add_argument("--repo-root", default="", help="the Trainyard checkout on the compute nodes (default: this one)")
        parser.add_argument("--price", default=None, help="price per device-hour")

    def handle(self, *args: Any, **o: Any) -> None:
        cfg = slurm_pool_save(pool_name=o["pool"], partition=o["partition"], server_url=o["server_url"], workdir=o["workdir"],
                              submit_command=shlex.split(o["submit_command"]), device_mode=o["device_mode"],
                              accounts=_pairs(o["account"], "--account"), qos=_pairs(o["qos"], "--qos"), python=o["python"],
                              repo_root=o["repo_root"], price=Decimal(o["price"]) if o["price"] is not None else None)
        self.stdout.write(f"pool {cfg.pool.name}: Slurm partition {cfg.partition}")
