"""The agent's redaction of secret values from job output (agents/redact.py): every form a job is
likely to print, values split across pipe reads, multi-line values, JSON (lineage) values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agents.redact import Redactor, pump

TOKEN = "hf_Zq9SECRETvalue123"
PEM = "-----BEGIN KEY-----\nAAAABBBBCCCCDDDDEEEE\n-----END KEY-----"


def test_every_form_is_redacted_with_its_name() -> None:
    r = Redactor({"HF_TOKEN": TOKEN, "PEM": PEM, "SHORT_AND_PREFIX": "hf_Zq9SEC"})
    text = f"a {TOKEN} b {TOKEN!r} c https://x/?t=hf_Zq9SECRETvalue123 d {PEM} e hf_Zq9SEC"
    out = r.redact(text)
    assert TOKEN not in out and "AAAABBBBCCCCDDDDEEEE" not in out and "hf_Zq9SEC" not in out
    assert out.count("[redacted:HF_TOKEN]") == 3 and "[redacted:PEM]" in out and out.endswith("[redacted:SHORT_AND_PREFIX]")
    assert r.redact_json({"k": [f"x{TOKEN}"], TOKEN: 1.0}) == {"k": ["x[redacted:HF_TOKEN]"], "[redacted:HF_TOKEN]": 1.0}
    assert Redactor({}).redact(text) == text and not Redactor({})


def test_pump_catches_values_split_across_reads(tmp_path: Path) -> None:
    code = ("import sys, time\n"
            f"for part in ['x {TOKEN[:5]}', '{TOKEN[5:12]}', '{TOKEN[12:]} y\\n', 'AAAABBBB', 'CCCCDDDDEEEE\\n', 'end']:\n"
            "    sys.stdout.write(part); sys.stdout.flush(); time.sleep(0.05)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    dest = tmp_path / "stdout.log"
    thread = pump(proc.stdout, str(dest), Redactor({"HF_TOKEN": TOKEN, "PEM": PEM}))
    proc.wait(10)
    thread.join(10)
    assert dest.read_text() == "x [redacted:HF_TOKEN] y\n[redacted:PEM]\nend"
